//! The staged tree of a prepared release as `execution_preparation` records
//! it (`_file`, `_source_inventory`, `_inventory_tree`): every file's mode,
//! size and SHA-256, every directory's mode, and every dependency link with
//! what it resolves to, read without following links and refused when
//! anything changes while read.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::Metadata;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use agents_common::{Error, Result};
use python_compat::{
    hex,
    json::{Json, JsonObject},
    json_object,
};
use sha2::{Digest, Sha256};

use super::MAX_RECEIPT_BYTES;

/// `MAX_FILE_BYTES`: largest staged file.
const MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;
/// `MAX_TREE_BYTES`: largest staged tree.
const MAX_TREE_BYTES: u64 = 8 * 1024 * 1024 * 1024;
/// `MAX_ENTRIES`: most members of an inventory.
const MAX_ENTRIES: usize = 250_000;
/// `_REQUIRED`: files every release's source inventory names.
const REQUIRED: [&str; 5] = [
    "VERSION",
    "agent_server.py",
    "execution_service.py",
    "pyproject.toml",
    "uv.lock",
];

/// Which of `_file`'s rules apply to one file.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FileRules {
    /// Exactly 0600 and at most `MAX_RECEIPT_BYTES` (receipts, inventories).
    private: bool,
    /// A `.venv` member: more than one link is allowed.
    dependency: bool,
    /// A link target outside the candidate: root may own it.
    external: bool,
    /// Keep the bytes, not only their digest.
    contents: bool,
    /// uv's empty advisory `.venv/.lock`, which uv creates 0666.
    uv_lock: bool,
}

impl FileRules {
    /// A receipt or inventory of the preparation.
    pub(super) fn receipt() -> Self {
        FileRules {
            private: true,
            ..FileRules::default()
        }
    }

    /// A release source file.
    pub(super) fn source() -> Self {
        FileRules::default()
    }

    /// The same rules, keeping the file's bytes.
    pub(super) fn with_contents(self) -> Self {
        FileRules {
            contents: true,
            ..self
        }
    }
}

/// One checked file: its inventory facts and, when asked, its bytes.
pub(super) struct CheckedFile {
    pub mode: u32,
    pub size: u64,
    pub sha256: String,
    pub contents: Vec<u8>,
}

impl CheckedFile {
    fn entry(&self) -> JsonObject {
        json_object! {
            "kind" => "file",
            "mode" => self.mode,
            "size" => self.size,
            "sha256" => self.sha256.as_str(),
        }
    }
}

/// `_stable(info)`: what must not change while a file or directory is read.
fn stable(info: &Metadata) -> [i128; 10] {
    [
        i128::from(info.dev()),
        i128::from(info.ino()),
        i128::from(info.mode()),
        i128::from(info.uid()),
        i128::from(info.size()),
        i128::from(info.mtime()),
        i128::from(info.mtime_nsec()),
        i128::from(info.ctime()),
        i128::from(info.ctime_nsec()),
        i128::from(info.nlink()),
    ]
}

fn lstat(path: &Path) -> Result<Metadata> {
    std::fs::symlink_metadata(path).map_err(|err| Error::from_io_path(&err, path))
}

/// Why `_file` refused a preparation file. The receipt's reader words each
/// refusal for the receipt; every other caller raises `_file`'s own error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FileRefusal {
    /// Not a regular file we own with safe, expected modes and links, or
    /// larger than its limit before reading.
    Unsafe,
    /// Grew past its limit while read.
    TooLarge,
    /// Changed (identity, size, times, links) while read.
    Changed,
}

impl FileRefusal {
    /// `_file`'s own exception for this refusal.
    pub(super) fn error(self) -> Error {
        match self {
            FileRefusal::Unsafe => Error::permission("preparation file is unsafe or too large"),
            FileRefusal::TooLarge => Error::value("preparation file exceeds size limit"),
            FileRefusal::Changed => Error::runtime("preparation file changed while reading"),
        }
    }
}

/// How [`check_file`] failed: a refusal of the file, or an OS error.
#[derive(Debug)]
pub(super) enum CheckFailure {
    /// The file broke one of `_file`'s rules.
    Refused(FileRefusal),
    /// Opening, reading or `stat`ing it failed.
    Failed(Error),
}

impl From<Error> for CheckFailure {
    fn from(error: Error) -> Self {
        CheckFailure::Failed(error)
    }
}

impl From<std::io::Error> for CheckFailure {
    fn from(error: std::io::Error) -> Self {
        CheckFailure::Failed(Error::from(error))
    }
}

/// `_file(path, ...)`: a regular file (never through a link) that passes
/// `rules`, hashed while read and unchanged by the end.
pub(super) fn read_checked(path: &Path, rules: &FileRules) -> Result<CheckedFile> {
    check_file(path, rules).map_err(|failure| match failure {
        CheckFailure::Refused(refusal) => refusal.error(),
        CheckFailure::Failed(error) => error,
    })
}

/// [`read_checked`], telling a refusal of the file apart from an OS error.
pub(super) fn check_file(
    path: &Path,
    rules: &FileRules,
) -> std::result::Result<CheckedFile, CheckFailure> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32,
        )
        .open(path)
        .map_err(|err| Error::from_io_path(&err, path))?;
    let before = file.metadata()?;
    let mode = before.mode() & 0o7777;
    let maximum = if rules.private {
        MAX_RECEIPT_BYTES
    } else {
        MAX_FILE_BYTES
    };
    let uid = rustix::process::getuid().as_raw();
    let owned = before.uid() == uid || (rules.external && before.uid() == 0);
    let unsafe_file = !before.file_type().is_file()
        || !owned
        || (mode & 0o022 != 0 && !rules.uv_lock)
        || mode & 0o7000 != 0
        || (rules.private && mode != 0o600)
        || (rules.uv_lock && (before.size() != 0 || before.nlink() != 1))
        || (!rules.dependency && before.nlink() != 1)
        || before.size() > maximum;
    if unsafe_file {
        return Err(CheckFailure::Refused(FileRefusal::Unsafe));
    }
    let mut digest = Sha256::new();
    let mut contents = Vec::new();
    let mut size: u64 = 0;
    let mut chunk = vec![0u8; 1024 * 1024];
    loop {
        let count = match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(count) => count,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err.into()),
        };
        size += count as u64;
        if size > maximum {
            return Err(CheckFailure::Refused(FileRefusal::TooLarge));
        }
        digest.update(&chunk[..count]);
        if rules.contents {
            contents.extend_from_slice(&chunk[..count]);
        }
    }
    let after = file.metadata()?;
    if stable(&before) != stable(&after)
        || stable(&before) != stable(&lstat(path)?)
        || size != before.size()
    {
        return Err(CheckFailure::Refused(FileRefusal::Changed));
    }
    Ok(CheckedFile {
        mode,
        size,
        sha256: hex(&digest.finalize()),
        contents,
    })
}

/// `[0-9a-f]{64}`.
pub(super) fn is_sha256(text: &str) -> bool {
    python_compat::is_lower_hex(text, 64)
}

/// A validated source inventory: name to `(sha256, size)`.
pub(super) struct SourceInventory {
    files: Vec<(String, String, i128)>,
    /// Every ancestor directory of a listed file (never `.`).
    parents: BTreeSet<String>,
}

impl SourceInventory {
    fn contains(&self, name: &str) -> bool {
        self.files.iter().any(|(file, _, _)| file == name)
    }
}

/// `_source_inventory`: `{"format": 1, "files": {name: {"sha256", "size"}}}`
/// naming at least the required files, with normalised relative names
/// outside `.venv` and `__pycache__`.
pub(super) fn source_inventory(value: &Json) -> Result<SourceInventory> {
    let format_ok = value.as_object().is_some_and(|object| {
        object.len() == 2
            && object.contains_key("format")
            && object.contains_key("files")
            && object.get("format").and_then(Json::as_int) == Some(1)
    });
    if !format_ok {
        return Err(Error::value("invalid source inventory format"));
    }
    let files = value
        .get("files")
        .and_then(Json::as_object)
        .filter(|files| {
            REQUIRED.iter().all(|name| files.contains_key(name)) && files.len() <= MAX_ENTRIES
        });
    let Some(files) = files else {
        return Err(Error::value("source inventory is incomplete"));
    };
    let mut inventory = SourceInventory {
        files: Vec::new(),
        parents: BTreeSet::new(),
    };
    for (name, entry) in files.iter() {
        if !is_safe_member(name) {
            return Err(Error::value("unsafe source inventory member"));
        }
        let sha256 = entry
            .get("sha256")
            .and_then(Json::as_str)
            .filter(|text| is_sha256(text));
        let size = entry
            .get("size")
            .and_then(Json::as_int)
            .filter(|size| (0..=i128::from(MAX_FILE_BYTES)).contains(size));
        let exact_keys = entry.as_object().is_some_and(|entry| {
            entry.len() == 2 && entry.contains_key("sha256") && entry.contains_key("size")
        });
        let (Some(sha256), Some(size), true) = (sha256, size, exact_keys) else {
            return Err(Error::value("invalid source inventory entry"));
        };
        let mut ancestor = name.as_str();
        while let Some((parent, _)) = ancestor.rsplit_once('/') {
            inventory.parents.insert(parent.to_string());
            ancestor = parent;
        }
        inventory
            .files
            .push((name.clone(), sha256.to_string(), size));
    }
    Ok(inventory)
}

/// A source member name as `_source_inventory` accepts it: non-empty,
/// relative, already normalised (`str(PurePosixPath(name)) == name`), no
/// `..`, `.venv` or `__pycache__` part, no control character or backslash.
fn is_safe_member(name: &str) -> bool {
    if name.is_empty()
        || name.starts_with('/')
        || name.contains('\\')
        || name.chars().any(|c| (c as u32) < 32)
    {
        return false;
    }
    if name == "." {
        return true;
    }
    name.split('/')
        .all(|part| !part.is_empty() && !matches!(part, "." | ".." | ".venv" | "__pycache__"))
}

/// `python(?:[0-9]+(?:\.[0-9]+)*)?`: an interpreter's file name.
fn is_interpreter_name(name: &[u8]) -> bool {
    let Some(version) = name.strip_prefix(b"python") else {
        return false;
    };
    version.is_empty()
        || version
            .split(|byte| *byte == b'.')
            .all(|part| !part.is_empty() && part.iter().all(u8::is_ascii_digit))
}

/// `_inventory_tree(candidate, source)`: the complete staged tree, keyed by
/// relative POSIX name; the source files must match the verified archive
/// and the runtime interpreter must be there.
pub(super) fn inventory_tree(candidate: &Path, source: &SourceInventory) -> Result<JsonObject> {
    let mut walk = TreeWalk {
        candidate,
        source,
        result: JsonObject::new(),
        total: 0,
    };
    walk.visit(candidate)?;
    for (name, sha256, size) in &source.files {
        let actual = walk.result.get(name).and_then(Json::as_object);
        let matches = actual.is_some_and(|actual| {
            actual.get("kind") == Some(&Json::from("file"))
                && actual.get("sha256") == Some(&Json::from(sha256.as_str()))
                && actual.get("size") == Some(&Json::Int(*size))
        });
        if !matches {
            return Err(Error::runtime(
                "prepared source differs from verified archive",
            ));
        }
    }
    let python = candidate.join(".venv/bin/python");
    let runnable = std::fs::metadata(&python).is_ok_and(|info| info.is_file())
        && rustix::fs::access(&python, rustix::fs::Access::EXEC_OK).is_ok();
    if !runnable {
        return Err(Error::value("prepared runtime interpreter is missing"));
    }
    Ok(walk.result)
}

struct TreeWalk<'a> {
    candidate: &'a Path,
    source: &'a SourceInventory,
    result: JsonObject,
    total: u64,
}

impl TreeWalk<'_> {
    fn visit(&mut self, directory: &Path) -> Result<()> {
        let before = owned_directory(directory)?;
        let mut children: Vec<OsString> = std::fs::read_dir(directory)
            .map_err(|err| Error::from_io_path(&err, directory))?
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect::<std::io::Result<_>>()
            .map_err(|err| Error::from_io_path(&err, directory))?;
        children.sort_by(|left, right| left.as_bytes().cmp(right.as_bytes()));
        for name in children {
            let child = directory.join(&name);
            self.member(&child)?;
        }
        if stable(&before) != stable(&lstat(directory)?) {
            return Err(Error::runtime("prepared directory changed while reading"));
        }
        Ok(())
    }

    fn member(&mut self, child: &Path) -> Result<()> {
        let relative_path = child.strip_prefix(self.candidate).unwrap_or(child);
        let relative = relative_path.to_string_lossy().into_owned();
        if relative.chars().any(|c| (c as u32) < 32) {
            return Err(Error::value(
                "prepared runtime member contains control characters",
            ));
        }
        let parts: Vec<&str> = relative.split('/').collect();
        let last = parts[parts.len() - 1];
        let parent_of = |levels: usize| parts[..parts.len() - levels].join("/");
        let dependency = parts[0] == ".venv";
        let cache = (last == "__pycache__"
            && (parts.len() == 1 || self.source.parents.contains(&parent_of(1))))
            || (parts.len() >= 2
                && parts[parts.len() - 2] == "__pycache__"
                && matches!(suffix(last), ".pyc" | ".pyo")
                && (parts.len() == 2 || self.source.parents.contains(&parent_of(2))));
        if !dependency
            && !cache
            && !self.source.contains(&relative)
            && !self.source.parents.contains(&relative)
        {
            return Err(Error::value("unexpected prepared runtime member"));
        }
        let info = lstat(child)?;
        let uid = rustix::process::getuid().as_raw();
        let entry = if info.file_type().is_symlink() {
            if !dependency || info.uid() != uid {
                return Err(Error::permission("prepared source links are forbidden"));
            }
            let target =
                std::fs::read_link(child).map_err(|err| Error::from_io_path(&err, child))?;
            let resolved = python_compat::path::resolve_strict(child)?;
            let inside = resolved.starts_with(self.candidate) && resolved != self.candidate;
            let content = if resolved.is_dir() {
                if !inside {
                    return Err(Error::value("external prepared dependency directory link"));
                }
                owned_directory(&resolved)?;
                json_object! {"kind" => "directory"}
            } else {
                if !inside && !self.external_interpreter(&parts, &resolved) {
                    return Err(Error::value(
                        "external prepared dependency link is not an interpreter",
                    ));
                }
                let rules = FileRules {
                    dependency: true,
                    external: true,
                    ..FileRules::default()
                };
                let file = read_checked(&resolved, &rules)?;
                self.total += file.size;
                file.entry()
            };
            let unchanged = stable(&info) == stable(&lstat(child)?)
                && std::fs::read_link(child).ok().as_deref() == Some(target.as_path());
            if !unchanged {
                return Err(Error::runtime("prepared dependency link changed"));
            }
            json_object! {
                "kind" => "symlink",
                "target" => target.to_string_lossy().into_owned(),
                "resolved" => resolved.to_string_lossy().into_owned(),
                "content" => content,
            }
        } else if info.is_dir() {
            owned_directory(child)?;
            json_object! {"kind" => "directory", "mode" => info.mode() & 0o7777}
        } else {
            let rules = FileRules {
                dependency,
                uv_lock: relative == ".venv/.lock",
                ..FileRules::default()
            };
            let file = read_checked(child, &rules)?;
            self.total += file.size;
            file.entry()
        };
        self.result.insert(relative, entry);
        if self.result.len() > MAX_ENTRIES || self.total > MAX_TREE_BYTES {
            return Err(Error::value("prepared runtime inventory exceeds limit"));
        }
        if info.is_dir() {
            self.visit(child)?;
        }
        Ok(())
    }

    /// uv links only the interpreter out of a virtual environment:
    /// `.venv/bin/python*` to an executable `python*`.
    fn external_interpreter(&self, parts: &[&str], resolved: &Path) -> bool {
        parts.len() == 3
            && parts[0] == ".venv"
            && parts[1] == "bin"
            && is_interpreter_name(parts[2].as_bytes())
            && resolved
                .file_name()
                .is_some_and(|name| is_interpreter_name(name.as_bytes()))
            && rustix::fs::access(resolved, rustix::fs::Access::EXEC_OK).is_ok()
    }
}

/// `Path.suffix`: the last `.ext` of a name that is not only a leading dot.
fn suffix(name: &str) -> &str {
    match name.rfind('.') {
        Some(index) if index > 0 && index < name.len() - 1 => &name[index..],
        _ => "",
    }
}

/// `execution_preparation._owned_directory`: a real directory we own,
/// without group/other write, that we can read and enter.
fn owned_directory(path: &Path) -> Result<Metadata> {
    let info = lstat(path)?;
    let mode = info.mode() & 0o7777;
    if !info.is_dir()
        || info.uid() != rustix::process::getuid().as_raw()
        || mode & 0o022 != 0
        || mode & 0o500 != 0o500
    {
        return Err(Error::permission(
            "preparation directory is not safely owned",
        ));
    }
    Ok(info)
}

/// The digits of every `^API_CONTRACT_VERSION\s*=\s*([0-9]+)\s*$` match
/// (`re.MULTILINE` over bytes, where `\s` also crosses line ends).
pub(super) fn api_contract_declarations(data: &[u8]) -> Vec<String> {
    const NAME: &[u8] = b"API_CONTRACT_VERSION";
    let space = |byte: u8| matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let mut found = Vec::new();
    let line_starts = std::iter::once(0).chain(
        data.iter()
            .enumerate()
            .filter(|(_, byte)| **byte == b'\n')
            .map(|(index, _)| index + 1),
    );
    for start in line_starts {
        let Some(rest) = data.get(start..).filter(|rest| rest.starts_with(NAME)) else {
            continue;
        };
        let mut position = NAME.len();
        while rest.get(position).copied().is_some_and(space) {
            position += 1;
        }
        if rest.get(position) != Some(&b'=') {
            continue;
        }
        position += 1;
        while rest.get(position).copied().is_some_and(space) {
            position += 1;
        }
        let digits_start = position;
        while rest.get(position).is_some_and(u8::is_ascii_digit) {
            position += 1;
        }
        if position == digits_start {
            continue;
        }
        let digits = &rest[digits_start..position];
        // `\s*$`: the whitespace after the digits reaches the end or a line end.
        let mut tail = position;
        let mut ends = tail == rest.len();
        while !ends && rest.get(tail).copied().is_some_and(space) {
            ends = rest[tail] == b'\n';
            tail += 1;
            ends |= tail == rest.len();
        }
        if ends {
            found.push(String::from_utf8_lossy(digits).into_owned());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_contract_lines_match_the_multiline_pattern() {
        assert_eq!(
            api_contract_declarations(b"API_CONTRACT_VERSION = 28\n"),
            ["28"]
        );
        assert_eq!(
            api_contract_declarations(b"x = 1\nAPI_CONTRACT_VERSION=28"),
            ["28"]
        );
        assert_eq!(
            api_contract_declarations(b"API_CONTRACT_VERSION =\n 28  \nnext"),
            ["28"]
        );
        assert!(api_contract_declarations(b"API_CONTRACT_VERSION = 28 # note\n").is_empty());
        assert!(api_contract_declarations(b" API_CONTRACT_VERSION = 28\n").is_empty());
        assert!(api_contract_declarations(b"API_CONTRACT_VERSION = 2.8\n").is_empty());
        assert_eq!(
            api_contract_declarations(b"API_CONTRACT_VERSION = 1\nAPI_CONTRACT_VERSION = 2\n")
                .len(),
            2
        );
    }

    #[test]
    fn member_names_and_interpreters() {
        assert!(is_safe_member("a/b.py"));
        assert!(is_safe_member("."));
        for bad in [
            "",
            "/a",
            "a//b",
            "a/./b",
            "a/",
            "../a",
            ".venv/x",
            "a/__pycache__/b",
            "a\\b",
            "a\nb",
        ] {
            assert!(!is_safe_member(bad), "{bad:?}");
        }
        assert!(is_interpreter_name(b"python"));
        assert!(is_interpreter_name(b"python3.11"));
        assert!(!is_interpreter_name(b"python3."));
        assert!(!is_interpreter_name(b"pythonw"));
        assert_eq!(suffix("x.pyc"), ".pyc");
        assert_eq!(suffix(".pyc"), "");
        assert_eq!(suffix("x."), "");
    }
}
