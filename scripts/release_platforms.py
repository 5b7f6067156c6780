"""The platforms the Rust helpers ship for, and how a binary is recognised as one of them.

One table serves scripts/build-release.sh's checks of what it built and the
migration kit (which stages each platform's binaries and writes launchers that
pick the binary fitting the host). The launchers themselves carry a copy of
the entries of the platforms a release ships (see migration_kit.py), because
they must not import anything from the release.
"""

import hashlib
import json
import re
import struct
import subprocess
import zlib

BINARIES = ("uninstall", "update-runner", "update-handoff", "execution-activation", "execution-manage")


class Platform:
    """One shipped platform: its Rust target, its staged-name tag and what a host needs to run it."""

    def __init__(self, target, tag, system, machine, binary_format, machine_code, minimum, kernel_major=None):
        self.target = target  # the Rust target triple, and the folder under target/dist
        self.tag = tag  # the suffix of the staged names: <binary>-<tag>
        self.system = system  # os.uname().sysname / `uname -s` on such a host
        self.machine = machine  # os.uname().machine / `uname -m`
        self.binary_format = binary_format  # "elf" or "mach-o"
        self.machine_code = machine_code  # ELF e_machine or Mach-O cputype
        self.minimum = minimum  # (major, minor) of glibc, or of macOS
        # Darwin's kernel major of the minimum macOS (what `uname -r` shows).
        self.kernel_major = kernel_major

    def staged_name(self, binary):
        return "%s-%s" % (binary, self.tag)

    def requirement(self):
        """What a host needs besides the CPU, in words: `glibc 2.17`, `macOS 11.0`."""
        return "%s %d.%d" % ("glibc" if self.binary_format == "elf" else "macOS", *self.minimum)


# glibc 2.17 is the oldest glibc Rust's standard library supports on these
# CPUs; macOS 11.0 and 10.12 are rustc's default deployment targets.
PLATFORMS = (
    Platform("x86_64-unknown-linux-gnu", "linux-x86_64", "Linux", "x86_64", "elf", 62, (2, 17)),
    Platform("aarch64-unknown-linux-gnu", "linux-aarch64", "Linux", "aarch64", "elf", 183, (2, 17)),
    Platform("x86_64-apple-darwin", "darwin-x86_64", "Darwin", "x86_64", "mach-o", 0x01000007, (10, 12), 16),
    Platform("aarch64-apple-darwin", "darwin-arm64", "Darwin", "arm64", "mach-o", 0x0100000C, (11, 0), 20),
)
BY_TARGET = {platform.target: platform for platform in PLATFORMS}
BY_TAG = {platform.tag: platform for platform in PLATFORMS}

ELF_MAGIC = b"\x7fELF"
MACHO_MAGIC_64 = b"\xcf\xfa\xed\xfe"  # MH_MAGIC_64, little-endian
MH_EXECUTE = 2
LC_BUILD_VERSION = 0x32
LC_VERSION_MIN_MACOSX = 0x24
LC_SEGMENT_64 = 0x19
LC_CODE_SIGNATURE = 0x1D
CSMAGIC_EMBEDDED_SIGNATURE = 0xFADE0CC0
CSMAGIC_CODEDIRECTORY = 0xFADE0C02
CS_ADHOC = 0x2
CS_HASHTYPE_SHA256 = 2
# cargo-auditable's section: the zlib-compressed JSON list of the crates inside.
DEPENDENCY_SECTION = b".dep-v0"


def header_platform(data):
    """The platform whose header `data` (a binary's first bytes) carries, or None."""
    if data[:4] == ELF_MAGIC and len(data) >= 20:
        if data[4] != 2 or data[5] != 1:  # ELFCLASS64, ELFDATA2LSB
            return None
        kind, machine = struct.unpack_from("<HH", data, 16)
        if kind not in (2, 3):  # ET_EXEC, ET_DYN
            return None
        return next((p for p in PLATFORMS if p.binary_format == "elf" and p.machine_code == machine), None)
    if data[:4] == MACHO_MAGIC_64 and len(data) >= 16:
        cputype, _subtype, filetype = struct.unpack_from("<iiI", data, 4)
        if filetype != MH_EXECUTE:
            return None
        return next((p for p in PLATFORMS if p.binary_format == "mach-o" and p.machine_code == cputype), None)
    return None


def macho_minimum_os(data):
    """(major, minor) of the macOS a Mach-O executable requires, from its load commands."""
    count, size = struct.unpack_from("<II", data, 16)
    offset = 32
    for _ in range(count):
        command, length = struct.unpack_from("<II", data, offset)
        if command == LC_BUILD_VERSION:
            version = struct.unpack_from("<I", data, offset + 12)[0]
            return version >> 16, (version >> 8) & 0xFF
        if command == LC_VERSION_MIN_MACOSX:
            version = struct.unpack_from("<I", data, offset + 8)[0]
            return version >> 16, (version >> 8) & 0xFF
        offset += length
        if length == 0 or offset > 32 + size:
            break
    return None


def macho_load_commands(data):
    """(command, offset) of each load command of a 64-bit Mach-O image."""
    count = struct.unpack_from("<I", data, 16)[0]
    offset = 32
    for _ in range(count):
        command, length = struct.unpack_from("<II", data, offset)
        yield command, offset
        offset += length


def macho_signature_problem(data):
    """Why a Mach-O image's ad-hoc code signature does not hold, or None when every page hash matches."""
    found = [offset for command, offset in macho_load_commands(data) if command == LC_CODE_SIGNATURE]
    if len(found) != 1:
        return "has no code signature"
    start, size = struct.unpack_from("<II", data, found[0] + 8)
    if start + size != len(data):
        return "has a code signature that does not end the file"
    magic, _length, count = struct.unpack_from(">III", data, start)
    if magic != CSMAGIC_EMBEDDED_SIGNATURE:
        return "has no embedded signature superblob"
    for index in range(count):
        blob = start + struct.unpack_from(">II", data, start + 12 + 8 * index)[1]
        if struct.unpack_from(">I", data, blob)[0] != CSMAGIC_CODEDIRECTORY:
            continue
        (_magic, _length, _version, flags, hash_offset, _ident, _special, slots, limit,
         hash_size, hash_type, _platform, page_shift) = struct.unpack_from(">9I4B", data, blob)
        if not flags & CS_ADHOC or hash_type != CS_HASHTYPE_SHA256 or limit != start:
            return "has a code directory that is not an ad-hoc SHA-256 one over the whole image"
        page = 1 << page_shift
        for slot in range(slots):
            expected = data[blob + hash_offset + slot * hash_size:blob + hash_offset + (slot + 1) * hash_size]
            if hashlib.sha256(data[slot * page:min((slot + 1) * page, limit)]).digest() != expected:
                return "has a code signature whose page %d hash does not match" % slot
        if slots * page < limit:
            return "has a code signature that does not cover every page"
        return None
    return "has no code directory"


def macho_section(data, wanted):
    """The bytes of the Mach-O section named `wanted`, or None."""
    for command, offset in macho_load_commands(data):
        if command != LC_SEGMENT_64:
            continue
        for index in range(struct.unpack_from("<I", data, offset + 64)[0]):
            header = offset + 72 + 80 * index
            if data[header:header + 16].rstrip(b"\0") == wanted:
                size, file_offset = struct.unpack_from("<QI", data, header + 40)
                return data[file_offset:file_offset + size]
    return None


def elf_section(data, wanted):
    """The bytes of the ELF64 section named `wanted`, or None."""
    table, entry_size, count, names_index = struct.unpack_from("<Q10xHHH", data, 40)
    headers = [struct.unpack_from("<II16xQQ", data, table + index * entry_size) for index in range(count)]
    names_offset = headers[names_index][2]
    for name, _kind, offset, size in headers:
        start = names_offset + name
        if data[start:data.index(b"\0", start)] == wanted:
            return data[offset:offset + size]
    return None


def dependency_problem(data, platform, binary):
    """Why a binary does not carry its cargo-auditable dependency list naming itself, or None."""
    find = macho_section if platform.binary_format == "mach-o" else elf_section
    section = find(data, DEPENDENCY_SECTION)
    if section is None:
        return "carries no %s dependency list" % DEPENDENCY_SECTION.decode()
    try:
        packages = json.loads(zlib.decompress(section))["packages"]
    except (zlib.error, ValueError, KeyError, TypeError):
        return "carries a %s section that is not a dependency list" % DEPENDENCY_SECTION.decode()
    roots = [package.get("name") for package in packages if package.get("root")]
    if roots != [binary] or len(packages) < 2:
        return "carries a dependency list of %s, not of %s and its crates" % (roots, binary)
    return None


def elf_glibc_minimum(path):
    """The newest GLIBC_x.y symbol version `path` needs (via binutils' readelf), or None."""
    listing = subprocess.run(["readelf", "--version-info", "--wide", path], check=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout.decode("ascii", "replace")
    versions = {tuple(int(part) for part in found.split("."))
                for found in re.findall(r"Name: GLIBC_([0-9]+(?:\.[0-9]+)+)", listing)}
    return max(versions)[:2] if versions else None


def elf_interpreter(path):
    """The program interpreter (PT_INTERP) of an ELF executable, or None when it is static."""
    listing = subprocess.run(["readelf", "--program-headers", "--wide", path], check=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout.decode("ascii", "replace")
    found = re.search(r"\[Requesting program interpreter: ([^\]]+)\]", listing)
    return found.group(1) if found else None


# The dynamic loader each glibc platform's executables name (PT_INTERP).
GLIBC_LOADERS = {"linux-x86_64": "/lib64/ld-linux-x86-64.so.2", "linux-aarch64": "/lib/ld-linux-aarch64.so.1"}
# One platform's five binaries stay below this (the size budget).
PLATFORM_SIZE_BUDGET = 12 * 1024 * 1024


def check_binary(platform, path, binary):
    """Problems with one built binary, as sentences (empty when it is what `platform` needs)."""
    with open(path, "rb") as stream:
        data = stream.read()
    head = data[:65536]
    found = header_platform(head)
    if found is not platform:
        return ["%s is %s, not %s" % (path, found.tag if found else "no supported executable", platform.tag)]
    problems = []
    dependencies = dependency_problem(data, platform, binary)
    if dependencies:
        problems.append("%s %s" % (path, dependencies))
    if platform.binary_format == "mach-o":
        minimum = macho_minimum_os(head)
        if minimum != platform.minimum:
            problems.append("%s requires macOS %s, not %s" % (path, minimum, platform.requirement()))
        # arm64 macOS runs only signed code; an x86_64 image zig left unsigned
        # stays so, and one that is signed must verify.
        signed = any(command == LC_CODE_SIGNATURE for command, _offset in macho_load_commands(data))
        signature = macho_signature_problem(data) if signed or platform.tag == "darwin-arm64" else None
        if signature:
            problems.append("%s %s" % (path, signature))
        return problems
    needed = elf_glibc_minimum(path)
    if needed is None or needed > platform.minimum:
        problems.append("%s needs glibc %s, more than %s" % (path, needed, platform.requirement()))
    loader = elf_interpreter(path)
    if loader != GLIBC_LOADERS[platform.tag]:
        problems.append("%s names the loader %s, not %s" % (path, loader, GLIBC_LOADERS[platform.tag]))
    return problems


def check_dist(dist, targets):
    """Checks target/dist/<target>/<binary> of each target; prints a size table; returns problems."""
    import os

    problems = []
    for target in targets:
        platform = BY_TARGET[target]
        total = 0
        for binary in BINARIES:
            path = os.path.join(dist, target, binary)
            size = os.stat(path).st_size
            total += size
            problems += check_binary(platform, path, binary)
            print("%-28s %-22s %9d bytes  needs %s" % (target, binary, size, platform.requirement()))
        print("%-28s %-22s %9d bytes (%.1f MiB)" % (target, "all five", total, total / 1048576.0))
        if total > PLATFORM_SIZE_BUDGET:
            problems.append("%s: the five binaries take %d bytes, over the 12 MiB budget" % (target, total))
    return problems


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 3 or sys.argv[1] != "check":
        sys.stderr.write("usage: release_platforms.py check DIST_DIR TARGET...\n")
        raise SystemExit(2)
    unknown = [target for target in sys.argv[3:] if target not in BY_TARGET]
    if unknown:
        sys.stderr.write("release_platforms.py: unknown target %s\n" % ", ".join(unknown))
        raise SystemExit(2)
    found = check_dist(sys.argv[2], sys.argv[3:])
    for problem in found:
        sys.stderr.write("build-release: %s\n" % problem)
    raise SystemExit(1 if found else 0)
