#!/usr/bin/env python3
"""The file work of the drop-in migration kit (run it through scripts/migration-kit.sh).

Puts the Rust helpers, built for every platform found in a dist folder, into
an unpacked AgentsServer release so that every caller keeps using the same
files, and so that no host is worse off than before:

- adds each platform's five binaries beside install.sh as
  `<binary>-<platform>` (mode 0755), the build's SHA256SUMS and provenance
  (checked against the binaries first) as rust-helpers.SHA256SUMS and
  rust-helpers.provenance.json, and the manifest rust-helpers.json (each
  binary's sha256, size and mode, the provenance, and what was changed);
- inserts a launcher into each entry point (execution_activation.py,
  execution_manage.py, update_runner.py, execution_uninstall.py right after
  `from __future__ import annotations`; uninstall.sh right after its `#!`
  line). Run as a program, the launcher execs the binary built for this host
  (`uname` system and machine, the binary's size and sha256 as the kit
  recorded them in the launcher, its header, the host's glibc or macOS
  version and the execute bit are checked first, because a failed load after
  exec could not fall back); where no binary fits or exec fails, the original
  code below the launcher runs unchanged. Imported, a module is unchanged;
- appends the staged names to install.sh's RELEASE_FILES list and the
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from release_platforms import BINARIES, BY_TARGET, GLIBC_LOADERS, PLATFORMS, header_platform  # noqa: E402
from release_provenance import PROVENANCE_NAME, SUMS_NAME, ProvenanceError, read_dist  # noqa: E402

PROGRAM = "migration-kit"
HELPERS_RELEASE = "1.0.7-beta.5"
MANIFEST_NAME = "rust-helpers.json"
MANIFEST_FORMAT = 3
# Manifests an earlier kit wrote, which a rerun may replace.
KNOWN_MANIFEST_FORMATS = (2, 3)
# The dist's SHA256SUMS and provenance.json, carried verbatim under these names.
CARRIED = {SUMS_NAME: "rust-helpers.SHA256SUMS", PROVENANCE_NAME: "rust-helpers.provenance.json"}

# sha256 of the 1.0.7-beta.5 sources the binaries are ports of (the
# originals). They elide update_runner.py's npm registry host, so that one
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

# The entry points, and the binary each runs. execution_uninstall.py is not
# among the originals the binaries port: it is recognised by shape only.
LAUNCHERS = {
    "execution_activation.py": "execution-activation",
    "execution_manage.py": "execution-manage",
    "update_runner.py": "update-runner",
    "execution_uninstall.py": "uninstall",
    "uninstall.sh": "uninstall",
}
SHELL_ENTRY_POINTS = ("uninstall.sh",)
# Imported by the server and the other modules, never run: checked, kept as is.
IMPORTED_ONLY = ("update_handoff.py",)
ENTRY_POINTS = {
    "execution_activation.py": b'\nif __name__ == "__main__":\n    raise SystemExit(main())\n',
    "execution_manage.py": b'\nif __name__ == "__main__":\n    main()\n',
    "update_runner.py": b'\nif __name__ == "__main__":\n    raise SystemExit(main())\n',
    "execution_uninstall.py": b'\nif __name__ == "__main__":\n    raise SystemExit(main())\n',
}
FUTURE_LINE = b"from __future__ import annotations\n"
SHEBANG_LINE = b"#!/usr/bin/env bash\n"
START_MARKER = b"# --- rust-helpers launcher (added by scripts/migration-kit.sh) ---\n"
END_MARKER = b"# --- end rust-helpers launcher ---\n"

INSTALL_SCRIPT = "install.sh"
RELEASE_FILES_LINE = re.compile(rb"^RELEASE_FILES=\(([^()\n]*)\)$", re.M)
CHMOD_LINE = re.compile(rb'^chmod 755 ("\$STAGE_DIR/[^\n]*")$', re.M)
# The staging loop body that copies every RELEASE_FILES entry flat into a stage.
STAGE_COPY_LINE = re.compile(rb'^[ \t]*install -m 644 "\$SOURCE_DIR/\$name" "\$STAGE_DIR/\$name"$', re.M)
# Names install.sh must already stage for the migrated release to work.
REQUIRED_RELEASE_FILES = tuple(LAUNCHERS) + IMPORTED_ONLY + (INSTALL_SCRIPT,)
REQUIRED_EXECUTABLES = ("update_runner.py", "uninstall.sh")
CHMOD_ANCHOR = b'"$STAGE_DIR/update_runner.py"'
# Every name the kit may have added to RELEASE_FILES.
KIT_NAMES = ({platform.staged_name(binary) for platform in PLATFORMS for binary in BINARIES}
             | set(CARRIED.values()) | {MANIFEST_NAME})


class Refusal(Exception):
    """The release is not one the kit recognises, or a write could not be verified."""


PYTHON_LAUNCHER = '''
# Run as a program (`python <this file> ...` or `python -m <module> ...`),
# this release hands the whole command to the Rust helper built for this host
# (`@BINARY@-<platform>` beside this file): the same arguments (argv[0] stays
# this file's path), environment, open descriptors and ignored signals. Where
# none fits this host (another system or CPU, an older glibc or macOS, a file
# missing, not executable, or not byte for byte the one the migration kit
# recorded), an argument, environment entry, the working directory or the
# home directory is not UTF-8, or exec fails, the original code below runs
# unchanged. Importing the module is unaffected.
if __name__ == "__main__":
    def _rust_helper_launch(binary, platforms):
        import os
        import sys

        host = os.uname()
        fit = platforms.get((host.sysname, host.machine))
        if fit is None:
            return
        tag, header, minimum, size, sha256 = fit
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), binary + "-" + tag)
        try:
            # Bytes that are not UTF-8 in an argument, the environment, the
            # working directory (relative paths) or the home directory (`~`
            # without HOME) reach Python as surrogate escapes, which the
            # original carries into its journals and the binaries refuse:
            # such a call is the original's.
            for word in sys.argv:
                os.fsencode(word).decode("utf-8")
            for key, value in getattr(os, "environb", {}).items():
                key.decode("utf-8")
                value.decode("utf-8")
            os.getcwdb().decode("utf-8")
            os.fsencode(os.path.expanduser("~")).decode("utf-8")

            import hashlib
            import stat

            digest = hashlib.sha256()
            # Non-blocking, so a FIFO in the binary's place cannot hang the open.
            flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
            with os.fdopen(os.open(path, flags), "rb") as stream:
                info = os.fstat(stream.fileno())
                if not stat.S_ISREG(info.st_mode) or info.st_size != size:
                    return
                head = stream.read(65536)
                block = head
                while block:
                    digest.update(block)
                    block = stream.read(1048576)
            if digest.hexdigest() != sha256 or not os.access(path, os.X_OK):
                return
            if minimum[0] == "glibc":
                if not os.path.exists(minimum[2]):
                    return
                found = os.confstr("CS_GNU_LIBC_VERSION").split()
                if found[0] != "glibc" or tuple(int(part) for part in found[1].split(".")[:2]) < minimum[1]:
                    return
            elif int(host.release.split(".")[0]) < minimum[1]:
                return
        except (OSError, ValueError, AttributeError, IndexError, ImportError):
            return
        if any(head[offset:offset + len(expected)] != expected for offset, expected in header):
            return
        try:
            os.execv(path, sys.argv)
        except OSError:
            return

    _rust_helper_launch("@BINARY@", @PLATFORMS@)
    del _rust_helper_launch
'''

SHELL_LAUNCHER = '''\
# Run as a program, this release hands the whole command to the Rust helper
# `@BINARY@-<platform>` beside this script that is built for this host: the
# same arguments, environment, terminal and exit codes, with this script's
# path as argv[0]. Where none fits this host (another system or CPU, an older
# glibc or macOS, a file missing, not executable, or not byte for byte the
# one the migration kit recorded), an argument, the environment, the working
# directory or the home directory is not UTF-8, or exec fails, the original
# script below runs unchanged.
_rust_helper_launch() {
  local tag sha256 binary head digest version major minor
  # The binaries refuse paths that are not UTF-8, which the original takes as
  # they are; iconv's strict check fails on such bytes (or when it is absent).
  { printf '%s\\0' "$0" "$@" ~; env; pwd -P 2>/dev/null; } \\
    | LC_ALL=C iconv -f UTF-8 -t UTF-8 >/dev/null 2>&1 || return 0
  case "$(uname -s 2>/dev/null)/$(uname -m 2>/dev/null)" in
@SYSTEMS@
    *) return 0 ;;
  esac
  binary="$(cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")" 2>/dev/null && pwd -P)/@BINARY@-$tag" || return 0
  [[ -f "$binary" && -x "$binary" ]] || return 0
  digest="$(sha256sum -- "$binary" 2>/dev/null || shasum -a 256 -- "$binary" 2>/dev/null)" || return 0
  [[ "${digest%% *}" == "$sha256" ]] || return 0
  head="$(od -An -tx1 -N20 -- "$binary" 2>/dev/null | tr -d ' \\n')" || return 0
  case "$tag" in
@HEADERS@
  esac
  case "$tag" in
    linux-*)
      version="$(getconf GNU_LIBC_VERSION 2>/dev/null)" || return 0
      [[ "$version" =~ ^glibc\\ ([0-9]+)\\.([0-9]+) ]] || return 0
      major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
      ;;
    *)
      version="$(uname -r 2>/dev/null)" || return 0
      [[ "$version" =~ ^([0-9]+) ]] || return 0
      major="${BASH_REMATCH[1]}" minor=0
      ;;
  esac
  case "$tag" in
@MINIMUMS@
  esac
  shopt -s execfail
  exec -a "$0" "$binary" "$@"
  shopt -u execfail
}
_rust_helper_launch "$@"
unset -f _rust_helper_launch
'''


def header_checks(platform):
    """(offset, bytes) pairs a binary's first bytes must hold: format, class, byte order, CPU, kind."""
    if platform.binary_format == "elf":
        return ((0, b"\x7fELF\x02\x01"), (18, platform.machine_code.to_bytes(2, "little")))
    return ((0, b"\xcf\xfa\xed\xfe" + platform.machine_code.to_bytes(4, "little")), (12, b"\x02\x00\x00\x00"))


def minimum_check(platform):
    """What the launcher checks: glibc's (major, minor) and the loader, or Darwin's kernel major."""
    if platform.binary_format == "elf":
        return ("glibc", platform.minimum, GLIBC_LOADERS[platform.tag])
    return ("darwin", platform.kernel_major, None)


def python_launcher(binary, platforms, recorded):
    """The launcher of a Python entry point; `recorded` maps a staged name to its (size, sha256)."""
    table = "{\n%s    }" % "".join(
        "        (%r, %r): (%r, %r, %r, %d, %r),\n" % (
            p.system, p.machine, p.tag, header_checks(p), minimum_check(p), *recorded[p.staged_name(binary)])
        for p in platforms)
    body = PYTHON_LAUNCHER.replace("@BINARY@", binary).replace("@PLATFORMS@", table)
    return b"\n" + START_MARKER + body.lstrip("\n").encode("ascii") + END_MARKER


def shell_launcher(binary, platforms, recorded):
    """The launcher of uninstall.sh; `recorded` maps a staged name to its (size, sha256)."""
    systems, headers, minimums = [], [], []
    for p in platforms:
        # The sha256 fixes the size too; bash would need a process to read it.
        systems.append("    %s/%s) tag=%s sha256=%s ;;" % (
            p.system, p.machine, p.tag, recorded[p.staged_name(binary)][1]))
        tests = " && ".join('"${head:%d:%d}" == %s' % (2 * offset, 2 * len(expected), expected.hex())
                            for offset, expected in header_checks(p))
        headers.append("    %s) [[ %s ]] || return 0 ;;" % (p.tag, tests))
        kind, minimum, loader = minimum_check(p)
        if kind == "glibc":
            condition = "[[ -e %s ]] && ((major > %d || (major == %d && minor >= %d)))" % (
                loader, minimum[0], minimum[0], minimum[1])
        else:
            condition = "((major >= %d))" % minimum
        minimums.append("    %s) %s || return 0 ;;" % (p.tag, condition))
    body = (SHELL_LAUNCHER.replace("@BINARY@", binary).replace("@SYSTEMS@", "\n".join(systems))
            .replace("@HEADERS@", "\n".join(headers)).replace("@MINIMUMS@", "\n".join(minimums)))
    return START_MARKER + body.encode("ascii") + END_MARKER


def launcher(name, platforms, recorded):
    """The exact text the kit inserts into entry point `name`."""
    if name in SHELL_ENTRY_POINTS:
        return shell_launcher(LAUNCHERS[name], platforms, recorded)
    return python_launcher(LAUNCHERS[name], platforms, recorded)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def recognised_digest(name, data):
    """The digest compared with PORTED_SOURCES (update_runner.py's registry host masked)."""
    if name == "update_runner.py":
        masked, count = NPM_REGISTRY_LINE.subn(NPM_REGISTRY_MASK, data)
        if count != 1:
            raise Refusal("update_runner.py does not declare exactly one NPM_REGISTRY_BASE")
        data = masked
    return sha256(data)


def read_regular(path, what):
    """Bytes and permission bits of a regular, non-symlink file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise Refusal("%s is missing: %s" % (what, path)) from None
    if not stat.S_ISREG(info.st_mode):
        raise Refusal("%s is not a regular file: %s" % (what, path))
    with open(path, "rb") as stream:
        return stream.read(), stat.S_IMODE(info.st_mode)


def insertion_point(name, data):
    """Where the launcher goes: after the single `from __future__` line, or after the `#!` line."""
    if name in SHELL_ENTRY_POINTS:
        if not data.startswith(SHEBANG_LINE):
            raise Refusal("%s does not start with %r" % (name, SHEBANG_LINE.decode("ascii")))
        return len(SHEBANG_LINE)
    starts = [match.start() for match in re.finditer(re.escape(FUTURE_LINE), data)
              if match.start() == 0 or data[match.start() - 1:match.start()] == b"\n"]
    if len(starts) != 1:
        raise Refusal("%s does not have exactly one `from __future__ import annotations` line" % name)
    return starts[0] + len(FUTURE_LINE)


def without_launcher(name, data):
    """`data` with the kit's launcher removed, and whether it had one."""
    if data.count(START_MARKER) == 0 and data.count(END_MARKER) == 0:
        return data, False
    if data.count(START_MARKER) != 1 or data.count(END_MARKER) != 1:
        raise Refusal("%s carries the launcher more than once, or only in part" % name)
    start = data.index(START_MARKER)
    end = data.index(END_MARKER) + len(END_MARKER)
    if name not in SHELL_ENTRY_POINTS:
        start -= 1  # the blank line the kit puts before the block
    original = data[:start] + data[end:]
    if end < start or insertion_point(name, original) != start:
        raise Refusal("%s carries the launcher in an unexpected place" % name)
    return original, True


def original_entry_point(name, data):
    """The original text of entry point `name` in `data`, and whether `data` is already migrated."""
    original, migrated = without_launcher(name, data)
    insertion_point(name, original)
    if name in ENTRY_POINTS and not original.endswith(ENTRY_POINTS[name]):
        raise Refusal("%s does not end with its expected `__main__` entry point" % name)
    if b"\r" in original:
        raise Refusal("%s has carriage returns; the kit only edits LF sources" % name)
    pinned = PORTED_SOURCES.get(name)
    if pinned is not None and recognised_digest(name, original) != pinned:
        raise Refusal("%s is not the %s source the Rust helper ports" % (name, HELPERS_RELEASE))
    return original, migrated


def migrated_entry_point(name, original, platforms, recorded):
    at = insertion_point(name, original)
    return original[:at] + launcher(name, platforms, recorded) + original[at:]


def split_list(words, kit_word):
    """(the original words, the kit's trailing words) of a RELEASE_FILES or chmod list."""
    end = len(words)
    while end > 0 and kit_word(words[end - 1]):
        end -= 1
    return words[:end], words[end:]


def install_script_plan(data, staged_names, staged_binaries):
    """(original install.sh, migrated install.sh, already migrated?) after checking its shape."""
    release_lines = list(RELEASE_FILES_LINE.finditer(data))
    # install.sh has other `chmod 755 "$STAGE_DIR/..."` lines (directories):
    # the one to extend is the one that makes update_runner.py executable.
    chmod_lines = [line for line in CHMOD_LINE.finditer(data) if CHMOD_ANCHOR in line.group(1).split()]
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
    base_names, kit_names = split_list(names, lambda word: word in KIT_NAMES)
    base_paths, kit_paths = split_list(
        paths, lambda word: word.startswith('"$STAGE_DIR/') and word[12:-1] in KIT_NAMES)
    added_paths = ['"$STAGE_DIR/%s"' % name for name in staged_binaries]
    if bool(kit_names) != bool(kit_paths):
        raise Refusal("install.sh is only partly migrated (RELEASE_FILES and its chmod 755 list disagree)")
    for name in base_names:
        if name in KIT_NAMES:
            raise Refusal("install.sh already lists %s in an unexpected place" % name)
    for name in REQUIRED_RELEASE_FILES:
        if name not in base_names:
            raise Refusal("install.sh's RELEASE_FILES does not list %s" % name)
    for name in REQUIRED_EXECUTABLES:
        if '"$STAGE_DIR/%s"' % name not in base_paths:
            raise Refusal("install.sh does not make %s executable in the stage" % name)
    release_line, chmod_line = release_lines[0], chmod_lines[0]

    def lines(release_words, chmod_words):
        return (b"RELEASE_FILES=(" + " ".join(release_words).encode("ascii") + b")",
                b"chmod 755 " + " ".join(chmod_words).encode("ascii"))

    if (release_line.group(0), chmod_line.group(0)) != lines(names, paths):
        raise Refusal("install.sh's RELEASE_FILES or chmod 755 line is not a plain space-separated list")

    def with_lines(release, chmod):
        first, second = sorted([(release_line, release), (chmod_line, chmod)], key=lambda item: item[0].start())
        return (data[:first[0].start()] + first[1] + data[first[0].end():second[0].start()]
                + second[1] + data[second[0].end():])

    original = with_lines(*lines(base_names, base_paths))
    migrated = with_lines(*lines(base_names + staged_names, base_paths + added_paths))
    return original, migrated, bool(kit_names)


def dist_platforms(dist):
    """The platforms whose folders `dist` holds, in the kit's order."""
    if not os.path.isdir(dist):
        raise Refusal("not a dist directory: %s" % dist)
    folders = sorted(name for name in os.listdir(dist) if name not in (SUMS_NAME, PROVENANCE_NAME))
    unknown = [folder for folder in folders if folder not in BY_TARGET]
    if unknown:
        raise Refusal("%s holds %s, which is not a supported target (supported: %s)"
                      % (dist, ", ".join(unknown), ", ".join(p.target for p in PLATFORMS)))
    platforms = [p for p in PLATFORMS if p.target in folders]
    if not platforms:
        raise Refusal("%s holds no platform folder (%s)" % (dist, ", ".join(p.target for p in PLATFORMS)))
    return platforms


def check_binary(path, binary, platform):
    data, mode = read_regular(path, "the %s binary for %s" % (binary, platform.target))
    if not mode & 0o100:
        raise Refusal("the %s binary for %s is not executable: %s" % (binary, platform.target, path))
    found = header_platform(data[:64])
    if found is not platform:
        raise Refusal("the %s binary for %s is %s: %s" % (
            binary, platform.target, "built for %s" % found.target if found else "not an executable of any "
            "supported platform", path))
    return data


def binary_writes(release, dist, platforms):
    """The binaries to stage and their manifest entries."""
    writes, manifest = [], {}
    for platform in platforms:
        entries = {}
        for binary in BINARIES:
            data = check_binary(os.path.join(dist, platform.target, binary), binary, platform)
            name = platform.staged_name(binary)
            target = os.path.join(release, name)
            if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode):
                raise Refusal("%s exists and is not a regular file" % target)
            digest = sha256(data)
            writes.append((name, data, 0o755, "binary    %s  sha256 %s" % (name, digest)))
            entries[name] = {"built_as": "%s/%s" % (platform.target, binary), "mode": "0755",
                             "sha256": digest, "size": len(data)}
        manifest[platform.tag] = {"target": platform.target, "requires": "%s %s, %s" % (
            platform.system, platform.machine, platform.requirement()), "binaries": entries}
    staged = {name for name, _data, _mode, _summary in writes}
    stale = sorted(name for name in KIT_NAMES - staged - set(CARRIED.values()) - {MANIFEST_NAME}
                   if os.path.lexists(os.path.join(release, name)))
    if stale:
        raise Refusal("%s already carries %s, which this run does not stage; migrate the unpacked release "
                      "again from its archive" % (release, ", ".join(stale)))
    return writes, manifest


def entry_point_writes(release, platforms, recorded):
    writes, files = [], {}
    for name, binary in LAUNCHERS.items():
        data, mode = read_regular(os.path.join(release, name), name)
        original, migrated = original_entry_point(name, data)
        result = migrated_entry_point(name, original, platforms, recorded)
        writes.append((name, result, mode, "launcher  %s -> %s%s" % (
            name, binary, " (already)" if migrated and result == data else "")))
        files[name] = {"change": "launcher", "runs": binary,
                       "original_sha256": sha256(original), "sha256": sha256(result)}
    for name in IMPORTED_ONLY:
        data, _mode = read_regular(os.path.join(release, name), name)
        if recognised_digest(name, data) != PORTED_SOURCES[name]:
            raise Refusal("%s is not the %s source the Rust helper ports" % (name, HELPERS_RELEASE))
        files[name] = {"change": "none", "sha256": sha256(data)}
    return writes, files


def provenance_writes(dist, platforms):
    """The dist's SHA256SUMS and provenance.json to carry, after checking them against its binaries."""
    try:
        _sums, provenance = read_dist(dist)
    except ProvenanceError as error:
        raise Refusal(str(error)) from None
    staged = sorted(platform.target for platform in platforms)
    if sorted(provenance["targets"]) != staged:
        raise Refusal("%s names the targets %s, but %s holds %s" % (
            PROVENANCE_NAME, ", ".join(provenance["targets"]), dist, ", ".join(staged)))
    writes = []
    for name, carried in CARRIED.items():
        data, _mode = read_regular(os.path.join(dist, name), name)
        writes.append((carried, data, 0o644, "carried   %s  sha256 %s" % (carried, sha256(data))))
    return writes, provenance


def manifest_bytes(platforms, files, provenance):
    value = {"format": MANIFEST_FORMAT, "helpers_release": HELPERS_RELEASE, "platforms": platforms, "files": files,
             "provenance": provenance}
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("ascii")


def plan(release, dist):
    """Every write the migration needs, as (name, bytes, mode, summary); writes nothing."""
    if not os.path.isdir(release) or os.path.islink(release):
        raise Refusal("not a release directory: %s" % release)
    if os.path.lexists(os.path.join(release, ".venv")):
        raise Refusal("%s holds a .venv, so it is an installed runtime; migrate the unpacked release "
                      "before install.sh stages it" % release)
    platforms = dist_platforms(dist)
    writes, manifest_platforms = binary_writes(release, dist, platforms)
    staged_binaries = [name for name, _data, _mode, _summary in writes]
    recorded = {name: (entry["size"], entry["sha256"]) for platform in manifest_platforms.values()
                for name, entry in platform["binaries"].items()}
    carried, provenance = provenance_writes(dist, platforms)
    writes += carried
    launcher_writes, files = entry_point_writes(release, platforms, recorded)
    writes += launcher_writes
    data, mode = read_regular(os.path.join(release, INSTALL_SCRIPT), INSTALL_SCRIPT)
    staged_names = staged_binaries + [name for name, _data, _mode, _summary in carried] + [MANIFEST_NAME]
    original, result, migrated = install_script_plan(data, staged_names, staged_binaries)
    writes.append((INSTALL_SCRIPT, result, mode,
                   "staged    install.sh lists the binaries in RELEASE_FILES and chmod 755%s"
                   % (" (already)" if migrated and result == data else "")))
    files[INSTALL_SCRIPT] = {"change": "release-files", "added": staged_names,
                             "original_sha256": sha256(original), "sha256": sha256(result)}
    writes.append((MANIFEST_NAME, manifest_bytes(manifest_platforms, files, provenance), 0o644,
                   "manifest  %s" % MANIFEST_NAME))
    return platforms, writes


def check_manifest_target(release):
    path = os.path.join(release, MANIFEST_NAME)
    if not os.path.lexists(path):
        return
    data, _mode = read_regular(path, MANIFEST_NAME)
    try:
        value = json.loads(data)
    except ValueError:
        value = None
    if not isinstance(value, dict) or value.get("format") not in KNOWN_MANIFEST_FORMATS:
        raise Refusal("%s exists but is not a migration kit manifest" % path)


def atomic_write(path, data, mode):
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


def fsync_directory(path):
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def host_platform():
    """The shipped platform of this machine (the kit's own check of what it built), or None."""
    host = os.uname()
    return next((p for p in PLATFORMS if (p.system, p.machine) == (host.sysname, host.machine)), None)


def verify(release, writes):
    """Re-reads every written file, proves the launchers parse and this host's binaries run."""
    for name, data, mode, _summary in writes:
        written, written_mode = read_regular(os.path.join(release, name), name)
        if written != data or written_mode != mode:
            raise Refusal("%s does not hold what the kit wrote" % name)
    for name in LAUNCHERS:
        path = os.path.join(release, name)
        if name in SHELL_ENTRY_POINTS:
            result = subprocess.run(["bash", "-n", path], stderr=subprocess.PIPE, check=False)
            if result.returncode != 0:
                raise Refusal("%s does not parse after migration: %s" % (name, result.stderr.decode("utf-8", "replace")))
            continue
        try:
            compile(read_regular(path, name)[0], path, "exec", dont_inherit=True)
        except SyntaxError as error:
            raise Refusal("%s does not compile after migration: %s" % (name, error)) from None
    with tempfile.TemporaryDirectory(prefix="migration-kit-home.") as home:
        environment = {"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"}
        platform = host_platform()
        staged = {name for name, _data, _mode, _summary in writes}
        for binary in BINARIES if platform else ():
            path = os.path.join(release, platform.staged_name(binary))
            if os.path.basename(path) not in staged:
                continue
            result = subprocess.run([path, "--help"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, env=environment, cwd=home, check=False)
            if result.returncode != 0:
                raise Refusal("%s --help failed (%d): %s"
                              % (path, result.returncode, result.stderr.decode("utf-8", "replace").strip()))


def migrate(release, dist):
    check_manifest_target(release)
    platforms, writes = plan(release, dist)
    shipped = ", ".join(p.tag for p in platforms)
    print("%s: migrating %s to the Rust helpers of AgentsServer %s" % (PROGRAM, release, HELPERS_RELEASE))
    print("  platforms %s (any other host runs the Python originals)" % shipped)
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
    print("%s: verified %d files; see %s" % (PROGRAM, len(writes), MANIFEST_NAME))


def main(argv):
    if len(argv) != 3 or argv[0] != "--dist":
        sys.stderr.write("usage: migration_kit.py --dist DIR RELEASE_DIR\n")
        return 2
    try:
        migrate(os.path.abspath(argv[2]), argv[1])
    except (Refusal, OSError) as error:
        sys.stderr.write("%s: %s\n" % (PROGRAM, error))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
