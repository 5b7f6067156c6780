//! The release archive: streamed to a private file while hashed, verified
//! against the signed manifest before a single entry is read, then extracted
//! with the original's `safe_extract` checks and Python's tarfile `data` filter.
//!
//! The archive is read once: entries are checked and extracted in one pass,
//! and a refusal found later in the stream still wins over an extraction
//! error found earlier, exactly as the original's "check every member, then
//! `extractall`" order decides. Work done before a refusal is discarded with
//! the caller's temporary directory.
//!
//! Deviations from Python, on malformed or hostile archives only:
//! - PAX global headers (`g`) are skipped instead of applied to later members.
//! - Gzip and tar corruption messages name the failure in our words.
//! - Stricter (docs/design/security.md): every archive has an extraction budget a
//!   real release never reaches and a bomb always does: at most
//!   [`MAX_MEMBERS`] members and [`MAX_EXTRACTED_BYTES`] of member data
//!   (apparent sizes), extended headers (GNU long names, PAX records) of at
//!   most [`MAX_EXTENDED_HEADER_BYTES`], no sparse members (tarfile would
//!   expand their holes) and no PAX size override; a refusal's message is at
//!   most [`MAX_MESSAGE_CHARS`] long. The caller removes the partial tree.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use sha2::{Digest, Sha256, Sha512};

use super::download::{download_npm_archive_to, download_to, ARCHIVE_DOWNLOAD_DEADLINE_SECONDS};
use super::manifest::ReleaseManifest;
use super::{MAX_ARCHIVE_BYTES, NPM_PACKAGE_NAME};
use agents_common::{Error, Result};
use python_compat::{
    hex,
    json::{parse_json_str, Json},
    repr, ErrorClass,
};

/// Most members an npm archive may hold.
const NPM_MAX_MEMBERS: usize = 4096;
/// Most bytes an npm archive may expand to.
const NPM_MAX_TOTAL_BYTES: u64 = 1024 * 1024 * 1024;
/// Most members any archive may hold (a release has a few hundred).
pub const MAX_MEMBERS: usize = 50_000;
/// Most member data any archive may expand to, counting apparent sizes
/// (a release is tens of megabytes; npm archives keep their 1 GiB bound).
pub const MAX_EXTRACTED_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// Largest GNU long name or PAX extended header (real ones are a few
/// hundred bytes).
pub const MAX_EXTENDED_HEADER_BYTES: u64 = 64 * 1024;
/// Longest refusal message, in characters (member names can be long).
pub const MAX_MESSAGE_CHARS: usize = 2048;
/// The refusal of an archive past its budget.
const OVER_BUDGET: &str = "release archive exceeds its extraction budget";
/// Copy buffer for entry data.
const COPY_BUFFER_BYTES: usize = 256 * 1024;

/// Download the manifest's archive into `directory` under `archive.name`,
/// hashing while streaming, and refuse it unless it matches the signature:
/// exact size, SHA-256 and `sha512-` integrity for npm releases, SHA-256 for
/// GitHub releases. The file is private (0600) and removed on refusal.
pub fn download_release_archive(manifest: &ReleaseManifest, directory: &Path) -> Result<PathBuf> {
    let path = directory.join(manifest.archive_name());
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc_nofollow())
        .open(&path)
        .map_err(|err| Error::from_io_path(&err, &path))?;
    let mut sink = HashingWriter::new(file, manifest.is_npm());
    let result = fetch_and_check(manifest, &mut sink);
    if result.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    result.map(|()| path)
}

fn fetch_and_check(manifest: &ReleaseManifest, sink: &mut HashingWriter) -> Result<()> {
    let url = manifest.archive_url();
    if manifest.is_npm() {
        let size = manifest
            .archive_size()
            .and_then(|size| u64::try_from(size).ok())
            .unwrap_or(0);
        download_npm_archive_to(&url, size, sink)?;
        sink.flush()?;
        // verify_npm_archive: exact size, SHA-256 and integrity together.
        let matches = sink.size == size
            && manifest
                .archive_sha256()
                .is_some_and(|signed| signed.to_lowercase() == sink.sha256_hex())
            && manifest.npm_integrity() == sink.npm_integrity().as_deref();
        if !matches {
            return Err(Error::runtime(
                "npm archive does not match the signed release descriptor",
            ));
        }
    } else {
        download_to(
            &url,
            MAX_ARCHIVE_BYTES,
            ARCHIVE_DOWNLOAD_DEADLINE_SECONDS,
            sink,
        )?;
        sink.flush()?;
    }
    // run_update compares with the signed text as is, so an uppercase
    // checksum passes verify_manifest and fails here, as in Python.
    if manifest.archive_sha256() != Some(sink.sha256_hex().as_str()) {
        return Err(Error::runtime(
            "release archive checksum does not match the signed manifest",
        ));
    }
    Ok(())
}

fn libc_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// A file sink that hashes what it writes.
struct HashingWriter {
    file: File,
    sha256: Sha256,
    sha512: Option<Sha512>,
    size: u64,
}

impl HashingWriter {
    fn new(file: File, with_sha512: bool) -> Self {
        HashingWriter {
            file,
            sha256: Sha256::new(),
            sha512: with_sha512.then(Sha512::new),
            size: 0,
        }
    }

    fn sha256_hex(&self) -> String {
        hex(&self.sha256.clone().finalize())
    }

    fn npm_integrity(&self) -> Option<String> {
        let digest = self.sha512.clone()?.finalize();
        Some(format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(digest)
        ))
    }
}

impl Write for HashingWriter {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        let written = self.file.write(buffer)?;
        self.sha256.update(&buffer[..written]);
        if let Some(sha512) = self.sha512.as_mut() {
            sha512.update(&buffer[..written]);
        }
        self.size += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// The kind of a tar member, as tarfile classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemberKind {
    File,
    Directory,
    Link,
    Special,
}

/// The original's `safe_extract`: extract `archive_path` into `destination` and
/// return the release source directory (`package/server` for npm releases,
/// identified by their signed `npm_version`; the single top-level directory
/// otherwise).
///
/// Refused before extraction takes effect: names that resolve outside the
/// destination, symlinks and hard links, and for npm any special file, more
/// than 4096 members, over 1 GiB in total or duplicate names. The `data`
/// filter then strips leading slashes, refuses special files, drops
/// setuid/setgid/sticky and group/other write bits, makes files `u+rw`,
/// clears execute bits the owner lacks, leaves directory modes to the umask
/// and ignores archive ownership.
pub fn safe_extract(
    archive_path: &Path,
    destination: &Path,
    npm_version: Option<&str>,
) -> Result<PathBuf> {
    let destination = resolve_lexically(&absolute(destination)?);
    let mut file =
        File::open(archive_path).map_err(|err| Error::from_io_path(&err, archive_path))?;
    let mut magic = Vec::with_capacity(2);
    (&mut file).take(2).read_to_end(&mut magic)?;
    file.seek(io::SeekFrom::Start(0))?;
    let mut decoder =
        TrackedDecoder::new(flate2::read::MultiGzDecoder::new(io::BufReader::new(file)));
    decoder.state.file_start = magic;
    let state = decoder.state.clone();
    let mut archive = tar::Archive::new(decoder);
    let mut pass = ExtractionPass::new(&destination, npm_version.is_some());
    let entries = archive
        .entries()
        .map_err(|_| bounded_message(first_header_error(&state)))?
        .raw(true);
    // What the extended headers before a member say about it.
    let mut pending = Extensions::default();
    let mut raw_members = 0usize;
    for entry in entries {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(_) if state.failed() => return Err(state.stream_error()),
            Err(_) if raw_members == 0 => return Err(bounded_message(first_header_error(&state))),
            // tarfile checks that the previous member's data (with padding)
            // is all there before reading the next header...
            Err(_) if state.produced.get() < pass.next_header => {
                return Err(Error::new(ErrorClass::TarRead, UNEXPECTED_END))
            }
            // ...and ends the archive silently at an unreadable header.
            Err(_) => break,
        };
        raw_members += 1;
        if raw_members > MAX_MEMBERS * 2 {
            return Err(Error::runtime(OVER_BUDGET));
        }
        let entry_type = entry.header().entry_type();
        if entry_type.is_pax_global_extensions()
            || entry_type.is_gnu_longname()
            || entry_type.is_gnu_longlink()
            || entry_type.is_pax_local_extensions()
        {
            pass.next_header = entry
                .raw_file_position()
                .saturating_add(entry.size().div_ceil(512).saturating_mul(512));
            if entry.size() > MAX_EXTENDED_HEADER_BYTES {
                return Err(Error::runtime(OVER_BUDGET));
            }
            let mut data = Vec::new();
            if entry.read_to_end(&mut data).is_err() || data.len() as u64 != entry.size() {
                if state.failed() {
                    return Err(state.stream_error());
                }
                return Err(Error::new(ErrorClass::TarRead, UNEXPECTED_END));
            }
            if entry_type.is_gnu_longname() {
                pending.long_name = Some(until_nul(&data).to_vec());
            } else if entry_type.is_pax_local_extensions() {
                pending.pax = parse_pax_records(&data);
            }
            continue;
        }
        let extensions = std::mem::take(&mut pending);
        pass.visit(&mut entry, &extensions)
            .map_err(bounded_message)?;
        // A member cut short by a gzip stream that ended early is gzip's
        // EOFError in tarfile (its getmembers() reads through first); only
        // a complete stream with a short member is "unexpected end of data".
        if state.failed() {
            return Err(state.stream_error());
        }
        if pass.truncated {
            return Err(Error::new(ErrorClass::TarRead, UNEXPECTED_END));
        }
    }
    if state.failed() {
        return Err(state.stream_error());
    }
    if pass.members == 0 && state.produced.get() < 512 {
        return Err(first_header_error(&state));
    }
    pass.finish().map_err(bounded_message)?;
    match npm_version {
        Some(version) => npm_layout(&destination, version),
        None => legacy_layout(&destination),
    }
}

/// State of the single pass over the members.
struct ExtractionPass<'a> {
    destination: &'a Path,
    npm: bool,
    members: usize,
    total_size: u64,
    names: HashSet<Vec<u8>>,
    duplicate_name: bool,
    refusal: Option<Error>,
    extraction_error: Option<Error>,
    directories: Vec<(Vec<u8>, PathBuf, Option<rustix::fs::Timestamps>)>,
    /// Stream offset of the header after the current member.
    next_header: u64,
    /// A member's data ended early: tarfile's fatal "unexpected end of data".
    truncated: bool,
}

impl<'a> ExtractionPass<'a> {
    fn new(destination: &'a Path, npm: bool) -> Self {
        ExtractionPass {
            destination,
            npm,
            members: 0,
            total_size: 0,
            names: HashSet::new(),
            duplicate_name: false,
            refusal: None,
            extraction_error: None,
            directories: Vec::new(),
            next_header: 0,
            truncated: false,
        }
    }

    fn exceeds_npm_bounds(&self) -> bool {
        self.npm
            && (self.members > NPM_MAX_MEMBERS
                || self.total_size > NPM_MAX_TOTAL_BYTES
                || self.duplicate_name)
    }

    fn visit<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        extensions: &Extensions,
    ) -> Result<()> {
        let raw_type = entry.header().as_bytes()[156];
        let (name, kind) = member_name(entry.header(), extensions);
        // tarfile would expand a sparse member's holes (GNU `S`, or PAX
        // `GNU.sparse.*` records), and a PAX size overrides the header's:
        // neither occurs in a release, both are refused.
        let sparse = raw_type == b'S' || extensions.has_pax_prefix(b"GNU.sparse.");
        let resized = extensions
            .pax_value(b"size")
            .is_some_and(|size| size != entry.size().to_string().as_bytes());
        if sparse || resized {
            return Err(Error::runtime(OVER_BUDGET));
        }
        self.next_header = entry
            .raw_file_position()
            .saturating_add(entry.size().div_ceil(512).saturating_mul(512));
        self.members += 1;
        self.total_size = self.total_size.saturating_add(entry.size());
        if self.members > MAX_MEMBERS || self.total_size > MAX_EXTRACTED_BYTES {
            return Err(Error::runtime(OVER_BUDGET));
        }
        if self.npm && !self.names.insert(name.clone()) {
            self.duplicate_name = true;
        }
        if self.refusal.is_none() {
            self.refusal = self.precheck(&name, kind).err();
        }
        if self.refusal.is_some() || self.extraction_error.is_some() || self.exceeds_npm_bounds() {
            return Ok(()); // tar skips the unread data
        }
        if let Err(err) = self.extract(entry, &name, kind, extensions) {
            // A short member or a decompression failure is reported by the
            // caller; anything else is this member's extraction failure.
            if err.class() == ErrorClass::TarRead {
                self.truncated = true;
            }
            self.extraction_error = Some(err);
        }
        Ok(())
    }

    /// The original's per-member checks, before any extraction in Python.
    fn precheck(&self, name: &[u8], kind: MemberKind) -> Result<()> {
        if !stays_inside(self.destination, name) {
            return Err(Error::runtime("release archive contains an unsafe path"));
        }
        if kind == MemberKind::Link {
            return Err(Error::runtime("release archive must not contain links"));
        }
        if self.npm && kind == MemberKind::Special {
            return Err(Error::runtime(
                "npm release archive contains a special file",
            ));
        }
        Ok(())
    }

    /// One member through the `data` filter and `_extract_member`.
    fn extract<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        name: &[u8],
        kind: MemberKind,
        extensions: &Extensions,
    ) -> Result<()> {
        if kind != MemberKind::File && kind != MemberKind::Directory {
            return Err(Error::runtime(format!(
                "{} is a special file",
                repr(&String::from_utf8_lossy(name))
            )));
        }
        // tarfile joins the filtered name to the destination without
        // normalising it and lets the kernel resolve `.` and `..`.
        let stripped = strip_leading_slashes(name);
        let mut raw = self.destination.as_os_str().as_bytes().to_vec();
        raw.push(b'/');
        raw.extend_from_slice(stripped);
        while raw.len() > 1 && raw.ends_with(b"/") {
            raw.pop();
        }
        let target = PathBuf::from(OsStr::from_bytes(&raw));
        let mtime = member_mtime(entry, extensions);
        let upper = python_compat::path::dirname(&raw);
        if !upper.is_empty() {
            let upper = Path::new(OsStr::from_bytes(upper));
            if !upper.exists() {
                python_compat::path::makedirs(upper)?;
            }
        }
        if kind == MemberKind::Directory {
            match std::fs::create_dir(&target) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(Error::from_io_path(&err, &target)),
            }
            self.directories.push((name.to_vec(), target, mtime));
            return Ok(());
        }
        let mut mode = entry.header().mode().unwrap_or(0) & 0o755;
        if mode & 0o100 == 0 {
            mode &= !0o111;
        }
        mode |= 0o600;
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&target)
            .map_err(|err| Error::from_io_path(&err, &target))?;
        let size = entry.size();
        copy_exact(entry, &mut file, size)?;
        drop(file);
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
            .map_err(|err| Error::from_io_path(&err, &target))?;
        set_mtime(&target, mtime)?;
        Ok(())
    }

    /// Decide the outcome in the original's order, then set directory times
    /// deepest name first as `extractall` does.
    fn finish(mut self) -> Result<()> {
        if let Some(refusal) = self.refusal.take() {
            return Err(refusal);
        }
        if self.exceeds_npm_bounds() {
            return Err(Error::runtime(
                "npm release archive exceeds its extraction bounds",
            ));
        }
        if let Some(error) = self.extraction_error.take() {
            return Err(error);
        }
        self.directories.sort_by(|left, right| right.0.cmp(&left.0));
        for (_, path, mtime) in &self.directories {
            set_mtime(path, mtime.clone())?;
        }
        Ok(())
    }
}

/// Copy exactly `size` bytes of entry data (tarfile's `copyfileobj` raises
/// `ReadError("unexpected end of data")` on a short member).
fn copy_exact(source: &mut dyn Read, target: &mut File, size: u64) -> Result<()> {
    let mut buffer = vec![
        0u8;
        COPY_BUFFER_BYTES
            .min(usize::try_from(size).unwrap_or(usize::MAX))
            .max(1)
    ];
    let mut remaining = size;
    while remaining > 0 {
        let wanted = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(buffer.len());
        let read = match source.read(&mut buffer[..wanted]) {
            Ok(0) => return Err(Error::new(ErrorClass::TarRead, UNEXPECTED_END)),
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(Error::new(ErrorClass::TarRead, UNEXPECTED_END))
            }
            Err(err) => return Err(Error::from(err)),
        };
        target.write_all(&buffer[..read])?;
        remaining -= read as u64;
    }
    Ok(())
}

/// tarfile's `ReadError` for member data cut short.
const UNEXPECTED_END: &str = "unexpected end of data";

/// What the extended headers before a member say about it.
#[derive(Default)]
struct Extensions {
    /// A GNU long name (`L`), up to its first NUL.
    long_name: Option<Vec<u8>>,
    /// PAX records (`x`), in order; a later key overrides an earlier one.
    pax: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Extensions {
    fn pax_value(&self, key: &[u8]) -> Option<&[u8]> {
        self.pax
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_slice())
    }

    fn has_pax_prefix(&self, prefix: &[u8]) -> bool {
        self.pax.iter().any(|(name, _)| name.starts_with(prefix))
    }
}

/// PAX extended header records: `<length> <key>=<value>\n`, each length
/// counting the whole record; parsing stops at the first malformed one.
fn parse_pax_records(mut data: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut records = Vec::new();
    while let Some(space) = data.iter().position(|byte| *byte == b' ') {
        let Some(length) = std::str::from_utf8(&data[..space])
            .ok()
            .and_then(|text| text.parse::<usize>().ok())
            .filter(|length| *length > space + 1 && *length <= data.len())
        else {
            break;
        };
        let record = &data[space + 1..length];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(equals) = record.iter().position(|byte| *byte == b'=') {
            records.push((record[..equals].to_vec(), record[equals + 1..].to_vec()));
        }
        data = &data[length..];
    }
    records
}

/// tarfile's `nts`: the bytes up to the first NUL.
fn until_nul(data: &[u8]) -> &[u8] {
    let end = data
        .iter()
        .position(|byte| *byte == 0)
        .unwrap_or(data.len());
    &data[..end]
}

/// `error` with its message cut to [`MAX_MESSAGE_CHARS`] characters, since
/// messages may carry member names of any length.
fn bounded_message(error: Error) -> Error {
    if error.message().chars().count() <= MAX_MESSAGE_CHARS {
        return error;
    }
    let cut: String = error.message().chars().take(MAX_MESSAGE_CHARS).collect();
    Error::new(error.class(), format!("{cut}..."))
}

fn member_kind(raw_type: u8, name: &[u8]) -> MemberKind {
    match raw_type {
        b'0' | b'7' | b'S' => MemberKind::File,
        // Old-style regular file; a trailing slash made it a directory.
        b'\0' if name.ends_with(b"/") => MemberKind::Directory,
        b'\0' => MemberKind::File,
        b'5' => MemberKind::Directory,
        b'1' | b'2' => MemberKind::Link,
        _ => MemberKind::Special,
    }
}

/// A member's name and kind exactly as tarfile derives them: the kind from
/// the header's own name (`frombuf`), a directory's trailing slashes all
/// dropped before a ustar prefix is joined, one dropped from a GNU long
/// name (`_proc_gnulong`), and all dropped from a PAX path whatever the
/// type (`_apply_pax_info`).
fn member_name(header: &tar::Header, extensions: &Extensions) -> (Vec<u8>, MemberKind) {
    let block = header.as_bytes();
    let raw_type = block[156];
    let short = until_nul(&block[..100]);
    let kind = member_kind(raw_type, short);
    let mut name = short.to_vec();
    if kind == MemberKind::Directory {
        trim_slashes(&mut name);
    }
    let prefix = until_nul(&block[345..500]);
    let gnu_type = matches!(raw_type, b'L' | b'K' | b'S');
    if &block[257..265] == b"ustar\x0000" && !prefix.is_empty() && !gnu_type {
        name = [prefix, b"/", &name].concat();
    }
    if let Some(long_name) = &extensions.long_name {
        name = long_name.clone();
        if kind == MemberKind::Directory && name.ends_with(b"/") {
            name.pop();
        }
    }
    if let Some(path) = extensions.pax_value(b"path") {
        name = path.to_vec();
        trim_slashes(&mut name);
    }
    (name, kind)
}

/// `str.rstrip("/")`.
fn trim_slashes(name: &mut Vec<u8>) {
    while name.ends_with(b"/") {
        name.pop();
    }
}

/// The member's mtime (PAX `mtime` first, else the header), as tarfile sets it.
fn member_mtime<R: Read>(
    entry: &tar::Entry<'_, R>,
    extensions: &Extensions,
) -> Option<rustix::fs::Timestamps> {
    let mut seconds = entry.header().mtime().ok().map(|value| value as f64);
    if let Some(value) = extensions
        .pax_value(b"mtime")
        .and_then(|value| std::str::from_utf8(value).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
    {
        seconds = Some(value);
    }
    let seconds = seconds.filter(|value| value.is_finite())?;
    let whole = seconds.floor();
    let time = rustix::fs::Timespec {
        tv_sec: whole as i64,
        tv_nsec: ((seconds - whole) * 1e9) as _,
    };
    Some(rustix::fs::Timestamps {
        last_access: time,
        last_modification: time,
    })
}

fn set_mtime(path: &Path, times: Option<rustix::fs::Timestamps>) -> Result<()> {
    let Some(times) = times else {
        return Ok(());
    };
    rustix::fs::utimensat(rustix::fs::CWD, path, &times, rustix::fs::AtFlags::empty())
        .map_err(|errno| Error::from_errno(errno, path))
}

fn strip_leading_slashes(name: &[u8]) -> &[u8] {
    let start = name
        .iter()
        .position(|byte| *byte != b'/')
        .unwrap_or(name.len());
    &name[start..]
}

/// `(destination / name).resolve()` stays within `destination` (no symlinks
/// exist in a fresh extraction, so resolution is lexical). Like pathlib, an
/// absolute name replaces the destination and exactly two leading slashes
/// form a distinct root that no destination is under.
fn stays_inside(destination: &Path, name: &[u8]) -> bool {
    if name.starts_with(b"//") && !name.starts_with(b"///") {
        return false;
    }
    let joined = destination.join(OsStr::from_bytes(name));
    let target = resolve_lexically(&joined);
    target.starts_with(destination)
}

/// Normalise `.` and `..` without touching the filesystem.
fn resolve_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// `destination.resolve()`: absolute, with its existing prefix's symlinks
/// resolved (the temporary directory may live under a symlinked `$TMPDIR`).
fn absolute(path: &Path) -> Result<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut existing = absolute.clone();
    let mut missing = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(resolved) => {
                let mut out = resolved;
                for part in missing.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(_) => match (existing.file_name(), existing.parent()) {
                (Some(name), Some(parent)) => {
                    missing.push(name.to_os_string());
                    existing = parent.to_path_buf();
                }
                _ => return Ok(absolute),
            },
        }
    }
}

/// Python's npm layout checks: only `package/` at the top, a matching
/// `package.json`, `server/install.sh` and `server/VERSION`.
fn npm_layout(destination: &Path, version: &str) -> Result<PathBuf> {
    let top: Vec<_> = list_directory(destination)?;
    if top.len() != 1 || top[0] != "package" {
        return Err(Error::runtime("npm release archive has an invalid layout"));
    }
    let package = destination.join("package");
    let metadata_path = package.join("package.json");
    let metadata_text = read_text(&metadata_path)?;
    let metadata = parse_json_str(&metadata_text)?;
    let source = package.join("server");
    let identity_matches = metadata.get("name").and_then(Json::as_str) == Some(NPM_PACKAGE_NAME)
        && metadata.get("version").and_then(Json::as_str) == Some(version)
        && source.join("install.sh").is_file()
        && read_version_file(&source.join("VERSION"))? == version;
    if !identity_matches {
        return Err(Error::runtime(
            "npm release archive payload identity does not match",
        ));
    }
    Ok(source)
}

fn read_version_file(path: &Path) -> Result<String> {
    Ok(python_compat::strip(&read_text(path)?).to_string())
}

/// `Path.read_text()`: strict UTF-8, failing with Python's decode message.
fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|err| Error::from_io_path(&err, path))?;
    Ok(python_compat::decode_utf8(&bytes)?.to_string())
}

/// Python's legacy layout: exactly one top-level directory holding `install.sh`.
fn legacy_layout(destination: &Path) -> Result<PathBuf> {
    let mut roots = Vec::new();
    for name in list_directory(destination)? {
        let path = destination.join(&name);
        if path.is_dir() {
            roots.push(path);
        }
    }
    if roots.len() != 1 || !roots[0].join("install.sh").is_file() {
        return Err(Error::runtime("release archive has an invalid layout"));
    }
    Ok(roots.remove(0))
}

fn list_directory(path: &Path) -> Result<Vec<std::ffi::OsString>> {
    let entries = std::fs::read_dir(path).map_err(|err| Error::from_io_path(&err, path))?;
    entries
        .map(|entry| {
            entry
                .map(|entry| entry.file_name())
                .map_err(|err| Error::from_io_path(&err, path))
        })
        .collect()
}

/// What the decompressor has done so far: how much it produced and whether
/// it failed, so tar-format errors (which end the archive after its first
/// member, like tarfile) are told apart from gzip failures.
#[derive(Clone, Default)]
struct DecoderState {
    produced: std::rc::Rc<std::cell::Cell<u64>>,
    failure: std::rc::Rc<std::cell::Cell<Option<io::ErrorKind>>>,
    /// The archive's first 512 bytes, to judge its first header as tarfile
    /// does when the tar reader refuses it.
    first_block: std::rc::Rc<std::cell::RefCell<Vec<u8>>>,
    /// The file's first two bytes. An empty file is tarfile's "empty file";
    /// without gzip's magic Python's gzip raises `BadGzipFile` (tarfile's
    /// "not a gzip file"); with it a cut stream is `EOFError`, however
    /// little it produced.
    file_start: Vec<u8>,
}

impl DecoderState {
    fn failed(&self) -> bool {
        self.failure.get().is_some()
    }

    /// The gzip failure in tarfile's words where it has fixed ones.
    fn stream_error(&self) -> Error {
        match self.failure.get() {
            _ if self.file_start.is_empty() => Error::runtime("empty file"),
            _ if self.file_start != [0x1f, 0x8b] => Error::runtime("not a gzip file"),
            Some(io::ErrorKind::UnexpectedEof) => {
                Error::runtime("Compressed file ended before the end-of-stream marker was reached")
            }
            _ if self.produced.get() == 0 => Error::runtime("not a gzip file"),
            _ => Error::runtime("release archive is not a valid gzip stream"),
        }
    }
}

/// tarfile's refusal of an archive whose first header is unusable.
/// (Judged from the block itself, never from the tar reader's wording.)
fn first_header_error(state: &DecoderState) -> Error {
    if state.failed() {
        return state.stream_error();
    }
    let message = match state.produced.get() {
        0 => "empty file",
        1..=511 => "truncated header",
        _ => match stored_checksum(&state.first_block.borrow()) {
            Some(stored) if !header_checksums(&state.first_block.borrow()).contains(&stored) => {
                "bad checksum"
            }
            _ => "invalid header",
        },
    };
    Error::runtime(message)
}

/// tarfile's `nti` of the checksum field: octal digits up to the first NUL,
/// surrounding whitespace ignored, or GNU base-256; `None` where tarfile
/// calls the header invalid.
fn stored_checksum(block: &[u8]) -> Option<i64> {
    let field = block.get(148..156)?;
    if field[0] == 0o200 || field[0] == 0o377 {
        let mut value: i64 = 0;
        for byte in &field[1..] {
            value = (value << 8) | i64::from(*byte);
        }
        return Some(if field[0] == 0o377 {
            value - (1 << 56)
        } else {
            value
        });
    }
    let digits = std::str::from_utf8(until_nul(field)).ok()?.trim();
    if digits.is_empty() {
        return Some(0);
    }
    i64::from_str_radix(digits, 8).ok()
}

/// tarfile's `calc_chksums`: the header's bytes summed unsigned and signed,
/// with the checksum field counted as eight spaces.
fn header_checksums(block: &[u8]) -> [i64; 2] {
    let others = block[..148].iter().chain(&block[156..512]);
    let unsigned = 256 + others.clone().map(|byte| i64::from(*byte)).sum::<i64>();
    let signed = 256 + others.map(|byte| i64::from(*byte as i8)).sum::<i64>();
    [unsigned, signed]
}

struct TrackedDecoder<R> {
    inner: R,
    state: DecoderState,
}

impl<R> TrackedDecoder<R> {
    fn new(inner: R) -> Self {
        TrackedDecoder {
            inner,
            state: DecoderState::default(),
        }
    }
}

impl<R: Read> Read for TrackedDecoder<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buffer) {
            Ok(read) => {
                let mut first_block = self.state.first_block.borrow_mut();
                if first_block.len() < 512 {
                    let wanted = (512 - first_block.len()).min(read);
                    first_block.extend_from_slice(&buffer[..wanted]);
                }
                drop(first_block);
                self.state
                    .produced
                    .set(self.state.produced.get() + read as u64);
                Ok(read)
            }
            Err(err) => {
                if err.kind() != io::ErrorKind::Interrupted {
                    self.state.failure.set(Some(err.kind()));
                }
                Err(err)
            }
        }
    }
}
