"""What a release build says about itself: target/dist/SHA256SUMS and target/dist/provenance.json.

scripts/build-release.sh writes both after building (provenance only from a
clean git tree); the migration kit checks them against the binaries it stages
and carries them into the release; scripts/verify-release.sh rebuilds the
commit provenance names and compares. SHA256SUMS is `sha256sum -c` format, one
line per `<target>/<helper>`, sorted. provenance.json names the source commit,
the pinned toolchain (scripts/release-toolchain.env), the exact build command,
the targets, and the sha256 of SHA256SUMS, which binds the two. Nothing in
either depends on when or where the build ran, so a rebuild writes the same
bytes.
"""

import hashlib
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from release_platforms import BINARIES, BY_TARGET, PLATFORMS  # noqa: E402

SUMS_NAME = "SHA256SUMS"
PROVENANCE_NAME = "provenance.json"
PROVENANCE_FORMAT = 1
TOOLCHAIN_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "release-toolchain.env")
SUMS_LINE = re.compile(r"^([0-9a-f]{64})  ([a-z0-9_-]+)/([a-z-]+)$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


class ProvenanceError(Exception):
    """A dist folder whose SHA256SUMS or provenance does not hold for its binaries."""


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pinned_toolchain(path=TOOLCHAIN_FILE):
    """The pinned versions, by tool, from release-toolchain.env."""
    values = {}
    with open(path, encoding="ascii") as stream:
        for line in stream:
            if "=" in line and not line.lstrip().startswith("#"):
                name, value = line.strip().split("=", 1)
                values[name] = value
    return {
        "rustc": "%s (%s)" % (values["RELEASE_RUSTC_RELEASE"], values["RELEASE_RUSTC_COMMIT"]),
        "cargo": "%s (%s)" % (values["RELEASE_CARGO_RELEASE"], values["RELEASE_CARGO_COMMIT"]),
        "zig": values["RELEASE_ZIG_VERSION"],
        "cargo-zigbuild": values["RELEASE_CARGO_ZIGBUILD_VERSION"],
        "cargo-auditable": values["RELEASE_CARGO_AUDITABLE_VERSION"],
    }


def sums_bytes(dist, targets):
    lines = ["%s  %s/%s\n" % (sha256_file(os.path.join(dist, target, binary)), target, binary)
             for target in targets for binary in BINARIES]
    return "".join(sorted(lines, key=lambda line: line[66:])).encode("ascii")


def provenance_bytes(commit, command, targets, sums):
    value = {
        "format": PROVENANCE_FORMAT,
        "source_commit": commit,
        "build_command": command,
        "targets": [platform.target for platform in PLATFORMS if platform.target in targets],
        "toolchain": pinned_toolchain(),
        "sha256sums_sha256": hashlib.sha256(sums).hexdigest(),
    }
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("ascii")


def write(dist, commit, command, targets):
    """Writes SHA256SUMS, and provenance.json when `commit` names a clean tree's HEAD."""
    sums = sums_bytes(dist, targets)
    with open(os.path.join(dist, SUMS_NAME), "wb") as stream:
        stream.write(sums)
    if commit:
        with open(os.path.join(dist, PROVENANCE_NAME), "wb") as stream:
            stream.write(provenance_bytes(commit, command, targets, sums))


def parse_sums(data):
    """{"<target>/<binary>": sha256} from SHA256SUMS bytes; raises ProvenanceError on any odd line."""
    sums = {}
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ProvenanceError("%s is not ASCII" % SUMS_NAME) from None
    if not text.endswith("\n"):
        raise ProvenanceError("%s does not end with a line break" % SUMS_NAME)
    for line in text[:-1].split("\n"):
        found = SUMS_LINE.match(line)
        if not found or found.group(2) not in BY_TARGET or found.group(3) not in BINARIES:
            raise ProvenanceError("%s has a line that is not `<sha256>  <target>/<helper>`: %r" % (SUMS_NAME, line))
        name = "%s/%s" % (found.group(2), found.group(3))
        if name in sums:
            raise ProvenanceError("%s lists %s twice" % (SUMS_NAME, name))
        sums[name] = found.group(1)
    return sums


def parse_provenance(data, sums_data):
    """The provenance object, checked for shape and against the SHA256SUMS bytes it binds."""
    try:
        value = json.loads(data)
    except ValueError:
        raise ProvenanceError("%s is not JSON" % PROVENANCE_NAME) from None
    if not isinstance(value, dict) or value.get("format") != PROVENANCE_FORMAT:
        raise ProvenanceError("%s is not format %d provenance" % (PROVENANCE_NAME, PROVENANCE_FORMAT))
    if not isinstance(value.get("source_commit"), str) or not COMMIT.match(value["source_commit"]):
        raise ProvenanceError("%s does not name a source commit" % PROVENANCE_NAME)
    targets = value.get("targets")
    if not isinstance(targets, list) or not targets or any(target not in BY_TARGET for target in targets):
        raise ProvenanceError("%s does not list supported targets" % PROVENANCE_NAME)
    if not isinstance(value.get("build_command"), str) or not isinstance(value.get("toolchain"), dict):
        raise ProvenanceError("%s does not name its build command and toolchain" % PROVENANCE_NAME)
    if value.get("sha256sums_sha256") != hashlib.sha256(sums_data).hexdigest():
        raise ProvenanceError("%s does not belong to this %s" % (PROVENANCE_NAME, SUMS_NAME))
    return value


def read_dist(dist):
    """(sums, provenance) of a dist folder, after checking every binary against SHA256SUMS.

    Every `<target>/<binary>` the folder holds must be listed with its sha256,
    and every listed one must be there; provenance must be present and bind
    this SHA256SUMS, and name exactly the targets it lists.
    """
    try:
        with open(os.path.join(dist, SUMS_NAME), "rb") as stream:
            sums_data = stream.read()
    except FileNotFoundError:
        raise ProvenanceError("%s has no %s (scripts/build-release.sh writes it)" % (dist, SUMS_NAME)) from None
    try:
        with open(os.path.join(dist, PROVENANCE_NAME), "rb") as stream:
            provenance_data = stream.read()
    except FileNotFoundError:
        raise ProvenanceError("%s has no %s: scripts/build-release.sh writes it only when built from a "
                              "clean git tree, and a release is built from a commit" % (dist, PROVENANCE_NAME)) from None
    sums = parse_sums(sums_data)
    provenance = parse_provenance(provenance_data, sums_data)
    listed = sorted({name.split("/")[0] for name in sums})
    if listed != sorted(provenance["targets"]):
        raise ProvenanceError("%s lists the targets %s, but %s names %s" % (
            SUMS_NAME, ", ".join(listed), PROVENANCE_NAME, ", ".join(provenance["targets"])))
    for target in listed:
        for binary in BINARIES:
            name = "%s/%s" % (target, binary)
            if name not in sums:
                raise ProvenanceError("%s does not list %s" % (SUMS_NAME, name))
            path = os.path.join(dist, target, binary)
            if not os.path.isfile(path) or sha256_file(path) != sums[name]:
                raise ProvenanceError("%s is not the binary %s lists" % (path, SUMS_NAME))
    return sums, provenance


def shipped(path):
    """(provenance, [(label, file)]) of a migrated release or a dist folder: what a verifier rebuilds.

    A release (it holds rust-helpers.json) names its binaries by staged name,
    each recorded with the `<target>/<helper>` it was built as; a dist names
    them by that path. Either way the files themselves are compared, not the
    digests recorded beside them.
    """
    manifest_path = os.path.join(path, "rust-helpers.json")
    if os.path.isfile(manifest_path):
        with open(manifest_path, "rb") as stream:
            manifest = json.loads(stream.read())
        provenance = manifest.get("provenance")
        if not isinstance(provenance, dict) or not COMMIT.match(str(provenance.get("source_commit", ""))):
            raise ProvenanceError("%s records no provenance (a release migrated before provenance was "
                                  "recorded cannot be verified)" % manifest_path)
        files = [(entry["built_as"], os.path.join(path, name))
                 for platform in manifest["platforms"].values()
                 for name, entry in platform["binaries"].items()]
        return provenance, sorted(files)
    _sums, provenance = read_dist(path)
    files = [("%s/%s" % (target, binary), os.path.join(path, target, binary))
             for target in provenance["targets"] for binary in BINARIES]
    return provenance, sorted(files)


def main(argv):
    if len(argv) >= 2 and argv[0] == "write":
        dist, rest = argv[1], argv[2:]
        options = {}
        while rest[:1] and rest[0] in ("--commit", "--command"):
            options[rest[0]] = rest[1]
            rest = rest[2:]
        write(dist, options.get("--commit", ""), options.get("--command", ""), rest)
        return 0
    if len(argv) == 2 and argv[0] == "check":
        try:
            read_dist(argv[1])
        except (ProvenanceError, OSError) as error:
            sys.stderr.write("release_provenance: %s\n" % error)
            return 1
        return 0
    if len(argv) == 2 and argv[0] == "shipped":
        try:
            provenance, files = shipped(argv[1])
        except (ProvenanceError, OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            sys.stderr.write("verify-release: %s is not a migrated release or dist folder with provenance: %s\n"
                             % (argv[1], error))
            return 1
        print(provenance["source_commit"])
        print(" ".join(provenance["targets"]))
        for label, path in files:
            print("%s %s %s" % (label, "-" if not os.path.isfile(path) else sha256_file(path), path))
        return 0
    sys.stderr.write("usage: release_provenance.py write DIST [--commit C] [--command CMD] TARGET...\n"
                     "       release_provenance.py check DIST\n"
                     "       release_provenance.py shipped RELEASE_OR_DIST\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
