#!/usr/bin/env python3
"""Builds one comparison release from the upstream scratch tree (docs/design/upstream-comparison.md, "install.sh comparison").

    installsh_release.py SCRATCH OUTPUT --test-worker PATH --version V --lock-dir DIR
                         [--health-status N]

Copies the upstream release tree SCRATCH to OUTPUT (which must not exist) and
stands in the AgentsServer server, the same way for the originals and the
binaries:

- execution_service.py (what the split units run) execs the project's test
  worker with the unit's arguments, after writing what the server writes at
  startup: STATE/server-identity and the test worker's switches (the identity,
  the health capabilities install.sh checks, optionally a failing health
  status);
- agent_server.py holds only API_CONTRACT_VERSION, which install.sh's
  candidate-api-contract and the preparation receipt read;
- every other module of install.sh's RELEASE_FILES that only the server imports,
  and agentsdock_team_hub/ (Team Hub paths only), become one-line placeholders,
  so install.sh's compile and import checks need none of the server's
  dependencies;
- pyproject.toml and uv.lock pin what install.sh's runtime check imports; the
  lock is resolved once (uv lock, from PyPI) into DIR and copied.

Everything else keeps upstream's bytes. VERSION is replaced by V. Never writes
inside the project.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

API_CONTRACT_VERSION = 1
SERVER_IDENTITY = "5e7e5e7e5e7e5e7e5e7e5e7e"
# The upstream files this comparison runs: the installer, the uninstaller, the
# five helpers and every module install.sh or a helper executes.
UPSTREAM = {
    "install.sh", "uninstall.sh", "update_runner.py", "execution_activation.py",
    "execution_manage.py", "update_handoff.py", "activation_transaction.py",
    "execution_install.py", "execution_preparation.py", "update_preparation.py",
    "update_recovery.py", "execution_uninstall.py", "execution_recovery.py",
    "execution_recovery_status.py", "execution_http.py", "execution_durability.py",
    "execution_transport.py", "execution_update_status.py", "VERSION",
    "release-public-key.pem", "LICENSE", "NOTICE",
}
GENERATED = {"execution_service.py", "agent_server.py", "pyproject.toml", "uv.lock"}
PYPROJECT = """[project]
name = "agents-server-stand-in"
version = "0.0.0"
requires-python = ">=3.10"
dependencies = [
    "claude-agent-sdk==0.2.130",
    "croniter",
    "cryptography",
    "python-dateutil",
    "websockets",
]
"""
CAPABILITIES = {
    "team_hub_v1": {"available": False, "designated_host": False, "version": 1, "base_path": None,
                    "hub_id": None, "host_server_identity": None, "transport": None, "hub_url": None},
    "secure_peer_v1": {"available": True, "state_available": True, "state_error_code": None,
                       "required": False, "version": 1,
                       "control_path": "/api/admin/secure-peers/v1/status",
                       "proxy_prefix": "/api/team-hub-secure"},
}
SERVICE = '''"""Stand-in for the AgentsServer execution service (install.sh comparison).

Runs the project's test worker in place of the server, with the arguments the
unit passes, after writing what the server writes when it starts.
"""
import json
import os
import sys

TEST_WORKER = @TEST_WORKER@
SWITCHES = json.loads(@SWITCHES@)


def _private_write(path, data):
    descriptor = os.open(path + ".stand-in", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        stream.write(data)
    os.replace(path + ".stand-in", path)


def main():
    arguments = sys.argv[1:]
    state = os.path.dirname(arguments[arguments.index("--runtime-dir") + 1])
    identity = os.path.join(state, "server-identity")
    if not os.path.exists(identity):
        _private_write(identity, SWITCHES["server_identity"])
    switches = os.path.join(state, "test-worker")
    os.makedirs(switches, mode=0o700, exist_ok=True)
    _private_write(os.path.join(switches, arguments[0] + ".json"), json.dumps(SWITCHES))
    os.execv(TEST_WORKER, [TEST_WORKER, os.path.abspath(__file__)] + arguments)


if __name__ == "__main__":
    main()
'''


def release_names(install_script):
    text = open(install_script, encoding="utf-8").read()
    files = re.search(r"^RELEASE_FILES=\(([^()\n]*)\)$", text, re.M)
    hub = re.search(r"^TEAM_HUB_RELEASE_FILES=\(\n(.*?)\n\)$", text, re.M | re.S)
    if files is None or hub is None:
        raise SystemExit("installsh_release: install.sh has no RELEASE_FILES / TEAM_HUB_RELEASE_FILES list")
    return files.group(1).split(), [line.strip() for line in hub.group(1).splitlines()]


def placeholder(name):
    if name.endswith(".sql"):
        return "-- Stand-in: the Team Hub schema is only read on Team Hub paths.\n"
    return '"""Stand-in: only the AgentsServer server imports this module."""\n'


def lock(lock_dir):
    target = os.path.join(lock_dir, "uv.lock")
    if not os.path.exists(target):
        os.makedirs(lock_dir, exist_ok=True)
        with open(os.path.join(lock_dir, "pyproject.toml"), "w") as stream:
            stream.write(PYPROJECT)
        subprocess.run(["uv", "lock", "--quiet", "--directory", lock_dir], check=True)
    return target


def build(arguments):
    names, hub_names = release_names(os.path.join(arguments.scratch, "install.sh"))
    missing = [name for name in sorted(UPSTREAM) if not os.path.isfile(os.path.join(arguments.scratch, name))]
    if missing:
        raise SystemExit("installsh_release: the scratch folder lacks " + ", ".join(missing))
    os.makedirs(arguments.output, mode=0o755)
    for name in names:
        target = os.path.join(arguments.output, name)
        if name in UPSTREAM:
            shutil.copyfile(os.path.join(arguments.scratch, name), target)
        elif name not in GENERATED:
            with open(target, "w") as stream:
                stream.write(placeholder(name))
    os.makedirs(os.path.join(arguments.output, "agentsdock_team_hub", "migrations"))
    for name in hub_names:
        with open(os.path.join(arguments.output, "agentsdock_team_hub", name), "w") as stream:
            stream.write(placeholder(name))
    switches = {"server_identity": SERVER_IDENTITY, "health_extra": {"capabilities": CAPABILITIES}}
    if arguments.health_status is not None:
        switches["health_status"] = arguments.health_status
    service = (SERVICE.replace("@TEST_WORKER@", json.dumps(arguments.test_worker))
               .replace("@SWITCHES@", json.dumps(json.dumps(switches, sort_keys=True))))
    files = {
        "execution_service.py": service,
        "agent_server.py": ('"""Stand-in for the AgentsServer server: its API contract only."""\n'
                            "API_CONTRACT_VERSION = %d\n" % API_CONTRACT_VERSION),
        "pyproject.toml": PYPROJECT,
        "VERSION": arguments.version + "\n",
    }
    for name, text in files.items():
        with open(os.path.join(arguments.output, name), "w") as stream:
            stream.write(text)
    shutil.copyfile(lock(arguments.lock_dir), os.path.join(arguments.output, "uv.lock"))
    os.chmod(os.path.join(arguments.output, "install.sh"), 0o755)
    os.chmod(os.path.join(arguments.output, "uninstall.sh"), 0o755)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scratch")
    parser.add_argument("output")
    parser.add_argument("--test-worker", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--lock-dir", required=True)
    parser.add_argument("--health-status", type=int)
    build(parser.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
