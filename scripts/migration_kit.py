#!/usr/bin/env python3
"""The file work of the drop-in migration kit (run it through scripts/migration-kit.sh).

Puts the five Rust helpers into an unpacked AgentsServer release so that every
caller keeps using the same files:

- adds the binaries beside install.sh (mode 0755) and the manifest
  rust-helpers.json (their sha256, and what was changed);
- inserts a launcher into each Python entry point (execution_activation.py,
  execution_manage.py, update_runner.py, execution_uninstall.py): run as a
  program, the module execs the binary beside it; imported, it is unchanged;
- replaces uninstall.sh with a wrapper that execs the `uninstall` binary;
- appends the six new names to install.sh's RELEASE_FILES list and the five
  binaries to its `chmod 755` list, so every runtime install.sh stages gets
  them, executable.

Only releases whose helper sources are exactly the 1.0.7-beta.5 sources the
binaries port are accepted. Every check runs before the first write, so a
refused release is left untouched; each file is either still original or
already migrated, so an interrupted run is finished by running the kit again,
and a second run with the same binaries leaves every byte as it was.
"""

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import tempfile

PROGRAM = "migration-kit"
HELPERS_RELEASE = "1.0.7-beta.5"
MANIFEST_NAME = "rust-helpers.json"
MANIFEST_FORMAT = 1
BINARIES = ("uninstall", "update-runner", "update-handoff", "execution-activation", "execution-manage")
# Appended to install.sh's RELEASE_FILES, in this order.
ADDED_RELEASE_FILES = BINARIES + (MANIFEST_NAME,)

# sha256 of the 1.0.7-beta.5 sources the binaries are ports of (the project's
# seeds). The seeds elide update_runner.py's npm registry host, so that one
# line is compared with its host masked (see recognised_digest).
PORTED_SOURCES = {
    "execution_activation.py": "487d25adf33dd5d0b55a2a8bf27bdf9d6c80e8a1070a0ab6f810e9ef2de73388",
    "execution_manage.py": "dd6491fe8fec55fc0c91df37307d0dfb63c691801eab2846a9ab16b148c0cb74",
    "update_runner.py": "5f4803052ec68b8f0b2441835e6f10b7f1ce63e5bd42744ed056b27720dec4e1",
    "update_handoff.py": "84113d50ad2aa627b16e9a05ac8d88982f5724e870db90b4f45e109700b248a8",
    "uninstall.sh": "58d5894e5af79f4bcf95f1a85364205ba013e1cd3ecfc90d1bc6f689d825af6c",
}
NPM_REGISTRY_LINE = re.compile(rb'^(NPM_REGISTRY_BASE = "https://)[^/"\n]+(/@agentsdock/server/-/")$', re.M)
NPM_REGISTRY_MASK = rb"\1<npm-registry-host>\2"

# The Python modules that are program entry points, and the binary each runs.
# execution_uninstall.py is not among the seeds: it is recognised by shape only.
LAUNCHERS = {
    "execution_activation.py": "execution-activation",
    "execution_manage.py": "execution-manage",
    "update_runner.py": "update-runner",
    "execution_uninstall.py": "uninstall",
}
# Imported by the server and the other modules, never run: checked, kept as is.
IMPORTED_ONLY = ("update_handoff.py",)
ENTRY_POINTS = {
    "execution_activation.py": b'\nif __name__ == "__main__":\n    raise SystemExit(main())\n',
    "execution_manage.py": b'\nif __name__ == "__main__":\n    main()\n',
    "update_runner.py": b'\nif __name__ == "__main__":\n    raise SystemExit(main())\n',
    "execution_uninstall.py": b'\nif __name__ == "__main__":\n    raise SystemExit(main())\n',
}
FUTURE_LINE = b"from __future__ import annotations\n"

INSTALL_SCRIPT = "install.sh"
UNINSTALL_SCRIPT = "uninstall.sh"
RELEASE_FILES_LINE = re.compile(rb"^RELEASE_FILES=\(([^()\n]*)\)$", re.M)
CHMOD_LINE = re.compile(rb'^chmod 755 ("\$STAGE_DIR/[^\n]*")$', re.M)
# The staging loop body that copies every RELEASE_FILES entry flat into a stage.
STAGE_COPY_LINE = re.compile(rb'^[ \t]*install -m 644 "\$SOURCE_DIR/\$name" "\$STAGE_DIR/\$name"$', re.M)
# Names install.sh must already stage for the migrated release to work.
REQUIRED_RELEASE_FILES = tuple(LAUNCHERS) + IMPORTED_ONLY + (INSTALL_SCRIPT, UNINSTALL_SCRIPT)
REQUIRED_EXECUTABLES = ("update_runner.py", UNINSTALL_SCRIPT)
CHMOD_ANCHOR = b'"$STAGE_DIR/update_runner.py"'


class Refusal(Exception):
    """The release is not one the kit recognises, or a write could not be verified."""


def launcher(binary: str) -> bytes:
    """The block inserted right after the module's `from __future__` line."""
    return (
        "\n"
        "# --- rust-helpers launcher (added by scripts/migration-kit.sh) ---\n"
        "# Run as a program (`python <this file> ...` or `python -m <module> ...`),\n"
        "# this release hands the whole command to the Rust helper `@BINARY@`\n"
        "# beside this file: the same arguments (argv[0] stays this file's path),\n"
        "# environment, open descriptors and ignored signals. Importing the module\n"
        "# is unaffected; the Python entry point at the end is no longer reached.\n"
        'if __name__ == "__main__":\n'
        "    import os\n"
        "    import sys\n"
        "\n"
        '    _helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "@BINARY@")\n'
        "    try:\n"
        "        os.execv(_helper, sys.argv)\n"
        "    except OSError as _error:\n"
        '        sys.stderr.write("%s: cannot run %s: %s\\n" % (os.path.basename(sys.argv[0]), _helper, _error))\n'
        "        raise SystemExit(1)\n"
        "# --- end rust-helpers launcher ---\n"
    ).replace("@BINARY@", binary).encode("ascii")


def uninstall_wrapper() -> bytes:
    """The uninstall.sh that replaces the script: same options, environment and exit codes."""
    return (
        "#!/usr/bin/env bash\n"
        "# AgentsServer uninstaller (added by scripts/migration-kit.sh).\n"
        "#\n"
        "# The `uninstall` binary beside this script is the port of the original\n"
        "# uninstall.sh and of execution_uninstall.py: the same options (--yes,\n"
        "# --purge-state, -h/--help), the same environment (HOME,\n"
        "# AGENTS_SERVER_INSTALL_DIR, AGENTS_SERVER_CONFIG_DIR, AGENTSDOCK_STATE_DIR,\n"
        "# AGENTS_SERVER_STATE_DIR, ZENITHBOT_AGENT_DIR), prompts on this terminal,\n"
        "# output and exit codes. exec keeps stdin, the environment and this\n"
        "# script's path as argv[0].\n"
        "set -euo pipefail\n"
        'uninstall_binary="$(cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)/uninstall"\n'
        'if [[ ! -f "$uninstall_binary" || ! -x "$uninstall_binary" ]]; then\n'
        '  echo "The AgentsServer uninstall helper $uninstall_binary is unavailable; nothing was changed." >&2\n'
        "  exit 1\n"
        "fi\n"
        'exec -a "$0" "$uninstall_binary" "$@"\n'
    ).encode("ascii")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def recognised_digest(name: str, data: bytes) -> str:
    """The digest compared with PORTED_SOURCES (update_runner.py's registry host masked)."""
    if name == "update_runner.py":
        masked, count = NPM_REGISTRY_LINE.subn(NPM_REGISTRY_MASK, data)
        if count != 1:
            raise Refusal("update_runner.py does not declare exactly one NPM_REGISTRY_BASE")
        data = masked
    return sha256(data)


def read_regular(path: str, what: str) -> tuple:
    """Bytes and permission bits of a regular, non-symlink file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise Refusal("%s is missing: %s" % (what, path)) from None
    if not stat.S_ISREG(info.st_mode):
        raise Refusal("%s is not a regular file: %s" % (what, path))
    with open(path, "rb") as stream:
        return stream.read(), stat.S_IMODE(info.st_mode)


def future_line_end(name: str, data: bytes) -> int:
    """Where the launcher goes: right after the single `from __future__` line."""
    starts = [match.start() for match in re.finditer(re.escape(FUTURE_LINE), data)
              if match.start() == 0 or data[match.start() - 1:match.start()] == b"\n"]
    if len(starts) != 1:
        raise Refusal("%s does not have exactly one `from __future__ import annotations` line" % name)
    return starts[0] + len(FUTURE_LINE)


def original_module(name: str, data: bytes):
    """The original module text of `data`, and whether `data` already carries the launcher."""
    block = launcher(LAUNCHERS[name])
    if data.count(block) == 0:
        original, migrated = data, False
    elif data.count(block) == 1:
        at = data.index(block)
        original, migrated = data[:at] + data[at + len(block):], True
        if future_line_end(name, original) != at:
            raise Refusal("%s carries the launcher in an unexpected place" % name)
    else:
        raise Refusal("%s carries the launcher more than once" % name)
    future_line_end(name, original)
    if not original.endswith(ENTRY_POINTS[name]):
        raise Refusal("%s does not end with its expected `__main__` entry point" % name)
    if b"\r" in original:
        raise Refusal("%s has carriage returns; the kit only edits LF sources" % name)
    pinned = PORTED_SOURCES.get(name)
    if pinned is not None and recognised_digest(name, original) != pinned:
        raise Refusal("%s is not the %s source the Rust helper ports" % (name, HELPERS_RELEASE))
    return original, migrated


def migrated_module(name: str, original: bytes) -> bytes:
    at = future_line_end(name, original)
    return original[:at] + launcher(LAUNCHERS[name]) + original[at:]


def install_script_plan(data: bytes):
    """(original install.sh, migrated install.sh, already migrated?) after checking its shape."""
    release_lines = list(RELEASE_FILES_LINE.finditer(data))
    # install.sh has other `chmod 755 "$STAGE_DIR/..."` lines (directories):
    # the one to extend is the one that makes update_runner.py executable.
    chmod_lines = [line for line in CHMOD_LINE.finditer(data)
                   if CHMOD_ANCHOR in line.group(1).split()]
    if len(release_lines) != 1:
        raise Refusal("install.sh does not have exactly one `RELEASE_FILES=(...)` line (found %d)"
                      % len(release_lines))
    if len(chmod_lines) != 1:
        raise Refusal('install.sh does not have exactly one `chmod 755` line making %s executable (found %d)'
                      % (CHMOD_ANCHOR.decode("ascii"), len(chmod_lines)))
    if len(STAGE_COPY_LINE.findall(data)) != 1:
        raise Refusal("install.sh does not copy each RELEASE_FILES entry into the stage with mode 644")
    names = [word.decode("ascii", "replace") for word in release_lines[0].group(1).split()]
    paths = [word.decode("ascii", "replace") for word in chmod_lines[0].group(1).split()]
    added_paths = ['"$STAGE_DIR/%s"' % name for name in BINARIES]
    names_migrated = names[-len(ADDED_RELEASE_FILES):] == list(ADDED_RELEASE_FILES)
    paths_migrated = paths[-len(BINARIES):] == added_paths
    if names_migrated != paths_migrated:
        raise Refusal("install.sh is only partly migrated (RELEASE_FILES and its chmod 755 list disagree)")
    base_names = names[:-len(ADDED_RELEASE_FILES)] if names_migrated else names
    base_paths = paths[:-len(BINARIES)] if paths_migrated else paths
    for name in ADDED_RELEASE_FILES:
        if name in base_names:
            raise Refusal("install.sh already lists %s in an unexpected place" % name)
    for name in REQUIRED_RELEASE_FILES:
        if name not in base_names:
            raise Refusal("install.sh's RELEASE_FILES does not list %s" % name)
    for name in REQUIRED_EXECUTABLES:
        if '"$STAGE_DIR/%s"' % name not in base_paths:
            raise Refusal("install.sh does not make %s executable in the stage" % name)
    release_line = release_lines[0]
    chmod_line = chmod_lines[0]
    original_release = b"RELEASE_FILES=(" + " ".join(base_names).encode("ascii") + b")"
    original_chmod = b"chmod 755 " + " ".join(base_paths).encode("ascii")
    migrated_release = b"RELEASE_FILES=(" + " ".join(base_names + list(ADDED_RELEASE_FILES)).encode("ascii") + b")"
    migrated_chmod = b"chmod 755 " + " ".join(base_paths + added_paths).encode("ascii")
    if (release_line.group(0) != (migrated_release if names_migrated else original_release)
            or chmod_line.group(0) != (migrated_chmod if paths_migrated else original_chmod)):
        raise Refusal("install.sh's RELEASE_FILES or chmod 755 line is not a plain space-separated list")

    def with_lines(release: bytes, chmod: bytes) -> bytes:
        first, second = sorted([(release_line, release), (chmod_line, chmod)], key=lambda item: item[0].start())
        return (data[:first[0].start()] + first[1] + data[first[0].end():second[0].start()]
                + second[1] + data[second[0].end():])

    original = with_lines(original_release, original_chmod)
    migrated = with_lines(migrated_release, migrated_chmod)
    return original, migrated, names_migrated


def check_binary(path: str, name: str) -> bytes:
    data, mode = read_regular(path, "the %s binary" % name)
    if not data.startswith(b"\x7fELF"):
        raise Refusal("the %s binary is not an ELF executable: %s" % (name, path))
    if not mode & 0o100:
        raise Refusal("the %s binary is not executable: %s" % (name, path))
    return data


def atomic_write(path: str, data: bytes, mode: int) -> None:
    """Writes a sibling temporary file, fsyncs it and renames it over `path`."""
    directory, name = os.path.split(path)
    descriptor, temporary = tempfile.mkstemp(prefix=".%s." % name, suffix=".rust-helpers.tmp", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fchmod(stream.fileno(), mode)
            os.fsync(stream.fileno())
        os.rename(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


def fsync_directory(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def manifest_bytes(binaries: dict, files: dict) -> bytes:
    value = {
        "format": MANIFEST_FORMAT,
        "helpers_release": HELPERS_RELEASE,
        "binaries": binaries,
        "files": files,
    }
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("ascii")


def plan(release: str, binaries_dir: str) -> list:
    """Every write the migration needs, as (name, bytes, mode, summary); writes nothing."""
    if not os.path.isdir(release) or os.path.islink(release):
        raise Refusal("not a release directory: %s" % release)
    if os.path.lexists(os.path.join(release, ".venv")):
        raise Refusal("%s holds a .venv, so it is an installed runtime; migrate the unpacked release "
                      "before install.sh stages it" % release)
    writes = []
    manifest_binaries = {}
    manifest_files = {}
    for name in BINARIES:
        data = check_binary(os.path.join(binaries_dir, name), name)
        target = os.path.join(release, name)
        if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode):
            raise Refusal("%s exists and is not a regular file" % target)
        writes.append((name, data, 0o755, "binary    %s  sha256 %s" % (name, sha256(data))))
        manifest_binaries[name] = {"mode": "0755", "sha256": sha256(data), "size": len(data)}
    for name, binary in LAUNCHERS.items():
        data, mode = read_regular(os.path.join(release, name), name)
        original, migrated = original_module(name, data)
        result = migrated_module(name, original)
        if migrated and result != data:
            raise Refusal("%s is not exactly its migrated form" % name)
        writes.append((name, result, mode, "launcher  %s -> %s%s" % (name, binary, " (already)" if migrated else "")))
        manifest_files[name] = {"change": "launcher", "runs": binary,
                                "original_sha256": sha256(original), "sha256": sha256(result)}
    for name in IMPORTED_ONLY:
        data, _mode = read_regular(os.path.join(release, name), name)
        if recognised_digest(name, data) != PORTED_SOURCES[name]:
            raise Refusal("%s is not the %s source the Rust helper ports" % (name, HELPERS_RELEASE))
        manifest_files[name] = {"change": "none", "sha256": sha256(data)}
    data, mode = read_regular(os.path.join(release, UNINSTALL_SCRIPT), UNINSTALL_SCRIPT)
    wrapper = uninstall_wrapper()
    # The only original accepted is the pinned script, so its digest is known
    # even when an interrupted run already replaced it.
    if data == wrapper:
        summary = "wrapper   uninstall.sh -> uninstall (already)"
    elif recognised_digest(UNINSTALL_SCRIPT, data) == PORTED_SOURCES[UNINSTALL_SCRIPT]:
        summary = "wrapper   uninstall.sh -> uninstall"
    else:
        raise Refusal("uninstall.sh is neither the %s script nor the kit's wrapper" % HELPERS_RELEASE)
    writes.append((UNINSTALL_SCRIPT, wrapper, mode, summary))
    manifest_files[UNINSTALL_SCRIPT] = {"change": "wrapper", "runs": "uninstall",
                                        "original_sha256": PORTED_SOURCES[UNINSTALL_SCRIPT],
                                        "sha256": sha256(wrapper)}
    data, mode = read_regular(os.path.join(release, INSTALL_SCRIPT), INSTALL_SCRIPT)
    original, result, migrated = install_script_plan(data)
    writes.append((INSTALL_SCRIPT, result, mode,
                   "staged    install.sh lists the binaries in RELEASE_FILES and chmod 755%s"
                   % (" (already)" if migrated else "")))
    manifest_files[INSTALL_SCRIPT] = {"change": "release-files", "added": list(ADDED_RELEASE_FILES),
                                      "original_sha256": sha256(original), "sha256": sha256(result)}
    writes.append((MANIFEST_NAME, manifest_bytes(manifest_binaries, manifest_files), 0o644,
                   "manifest  %s" % MANIFEST_NAME))
    return writes


def check_manifest_target(release: str) -> None:
    path = os.path.join(release, MANIFEST_NAME)
    if not os.path.lexists(path):
        return
    data, _mode = read_regular(path, MANIFEST_NAME)
    try:
        value = json.loads(data)
    except ValueError:
        value = None
    if not isinstance(value, dict) or value.get("format") != MANIFEST_FORMAT:
        raise Refusal("%s exists but is not a migration kit manifest" % path)


def verify(release: str, writes: list) -> None:
    """Re-reads every written file and proves the launchers compile and the binaries run."""
    for name, data, mode, _summary in writes:
        written, written_mode = read_regular(os.path.join(release, name), name)
        if written != data or written_mode != mode:
            raise Refusal("%s does not hold what the kit wrote" % name)
    for name in LAUNCHERS:
        data, _mode = read_regular(os.path.join(release, name), name)
        try:
            compile(data, os.path.join(release, name), "exec", dont_inherit=True)
        except SyntaxError as error:
            raise Refusal("%s does not compile after migration: %s" % (name, error)) from None
    with tempfile.TemporaryDirectory(prefix="migration-kit-home.") as home:
        environment = {"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"}
        for name in BINARIES:
            result = subprocess.run([os.path.join(release, name), "--help"], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environment,
                                    cwd=home, check=False)
            if result.returncode != 0:
                raise Refusal("%s --help failed (%d): %s"
                              % (name, result.returncode, result.stderr.decode("utf-8", "replace").strip()))


def main(argv: list) -> int:
    if len(argv) != 3 or argv[0] != "--binaries":
        sys.stderr.write("usage: migration_kit.py --binaries DIR RELEASE_DIR\n")
        return 2
    binaries_dir, release = argv[1], os.path.abspath(argv[2])
    try:
        check_manifest_target(release)
        writes = plan(release, binaries_dir)
        print("%s: migrating %s to the Rust helpers of AgentsServer %s" % (PROGRAM, release, HELPERS_RELEASE))
        # Binaries first and the manifest last: install.sh only lists the
        # binaries once they exist, and the manifest describes a finished run.
        for name, data, mode, summary in writes:
            path = os.path.join(release, name)
            try:
                unchanged = read_regular(path, name) == (data, mode)
            except Refusal:
                unchanged = False
            if not unchanged:
                atomic_write(path, data, mode)
            print("  %s" % summary)
        fsync_directory(release)
        verify(release, writes)
    except Refusal as refusal:
        sys.stderr.write("%s: %s\n" % (PROGRAM, refusal))
        return 1
    except OSError as error:
        sys.stderr.write("%s: %s\n" % (PROGRAM, error))
        return 1
    print("%s: verified %d files; see %s" % (PROGRAM, len(writes), MANIFEST_NAME))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
