//! Damages: what a hand edit, a crash, a full disk or another program can
//! do to one file or folder of an installation, as data; applied to a built
//! state by [`Damage::apply`].

use std::fmt;
use std::fs;
use std::os::unix::fs::{symlink, DirBuilderExt, PermissionsExt};
use std::path::Path;

use serde_json::Value;

use super::random::Random;
use super::scenario::{Program, Start};
use super::state::{sign_served_manifest, HANDOFF_FILE, HANDOFF_FOLDER, STATUS_FILE, TOKEN_FILE};
use crate::files::{make_dirs, make_fifo, write_file};

/// What a target is, which decides the damages that fit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nature {
    Json,
    Text,
    Contract,
    Folder,
    Link,
    Lock,
    Absent,
    Layout,
    Signature,
}

/// A file or folder (relative to the scenario's base) and how to damage it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The path relative to the scenario's base.
    pub target: String,
    /// What is done to it.
    pub kind: DamageKind,
}

/// A JSON value put where another was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// `null`.
    Null,
    /// `true`.
    True,
    /// `7`.
    Int,
    /// `1.5`.
    Float,
    /// `"x"`.
    Text,
    /// `[]`.
    List,
    /// `{}`.
    Object,
    /// `-1`.
    Negative,
    /// `123456789012345678901234567890`.
    Huge,
}

impl Sample {
    const ALL: [Sample; 9] = [
        Sample::Null,
        Sample::True,
        Sample::Int,
        Sample::Float,
        Sample::Text,
        Sample::List,
        Sample::Object,
        Sample::Negative,
        Sample::Huge,
    ];

    fn json(self) -> &'static str {
        match self {
            Sample::Null => "null",
            Sample::True => "true",
            Sample::Int => "7",
            Sample::Float => "1.5",
            Sample::Text => "\"x\"",
            Sample::List => "[]",
            Sample::Object => "{}",
            Sample::Negative => "-1",
            Sample::Huge => "123456789012345678901234567890",
        }
    }
}

/// Who a generated `.install-lock/pid` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOwner {
    /// A PID no process has.
    Dead,
    /// The test process itself: alive.
    Live,
    /// Not a number.
    Garbage,
    /// Nothing.
    Empty,
    /// PID 1.
    Init,
}

/// One damage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DamageKind {
    /// Deleted (a folder with its contents).
    Remove,
    /// Cut to this many thousandths of its length.
    Truncate(u16),
    /// Emptied (a folder: replaced by an empty file).
    Empty,
    /// Replaced by an empty folder.
    Folder,
    /// Replaced by a symlink to a path that does not exist.
    DanglingLink,
    /// Replaced by a FIFO.
    Fifo,
    /// Its mode set.
    Mode(u32),
    /// The JSON key chosen by the number (over the sorted key paths) removed.
    DropKey(u8),
    /// The JSON key chosen by the number given another type of value.
    SetKey(u8, Sample),
    /// The JSON key chosen by the number written twice.
    DuplicateKey(u8),
    /// A byte that is not UTF-8 inside the first string.
    InvalidUtf8,
    /// A UTF-8 byte order mark in front.
    ByteOrderMark,
    /// `x` appended.
    TrailingGarbage,
    /// Grown past a mebibyte with trailing spaces.
    Oversize,
    /// `.install-lock/pid` naming this owner.
    LockPid(LockOwner),
    /// `agent_server.py` declaring the contract this way.
    ApiContract(&'static str),
    /// A file created with `{}` (an absent journal or marker appearing).
    CreateFile,
    /// A symlink pointed at another path under the base.
    Retarget(&'static str),
    /// The layout's key naming a copy of the release as 0.9.0 (semantic:
    /// still a valid layout, of another release).
    OtherRelease(&'static str),
    /// The served manifest signed again as it now is (semantic: a damaged
    /// manifest that still verifies).
    Resign,
}

/// The forms of `API_CONTRACT_VERSION` a damaged release may declare.
const CONTRACT_FORMS: [&str; 10] = [
    "API_CONTRACT_VERSION = 0x10\n",
    "API_CONTRACT_VERSION: int = 3\n",
    "API_CONTRACT_VERSION = -1\n",
    "API_CONTRACT_VERSION = True\n",
    "API_CONTRACT_VERSION = 1_000\n",
    "API_CONTRACT_VERSION = '7'\n",
    "API_CONTRACT_VERSION = 7\nAPI_CONTRACT_VERSION = 8\n",
    "API_CONTRACT_VERSION = (7)\n",
    "def f(:\n",
    "API_CONTRACT_VERSION = 99999999999999999999999\n",
];

impl fmt::Display for Damage {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} {:?}", self.target, self.kind)
    }
}

fn targets(program: Program, start: Start) -> Vec<(String, Nature)> {
    let mut targets: Vec<(&str, Nature)> = vec![
        ("install/.install-lock/pid", Nature::Lock),
        ("install/current", Nature::Link),
        ("install/releases/1.0.0", Nature::Folder),
        ("install/releases/1.0.0/VERSION", Nature::Text),
        ("install/releases/1.0.0/agent_server.py", Nature::Contract),
        (
            "home/.config/systemd/user/agents-server.service",
            Nature::Text,
        ),
        ("config/env", Nature::Text),
        ("install", Nature::Folder),
        ("state", Nature::Folder),
    ];
    match start {
        Start::Split | Start::Journal(_) => targets.extend([
            ("install/execution-layout.json", Nature::Json),
            ("install/execution-layout.json", Nature::Layout),
            (
                "home/.config/systemd/user/agents-server-gateway.service",
                Nature::Text,
            ),
            ("state/execution", Nature::Folder),
            ("install/.execution-transaction", Nature::Absent),
            ("install/.execution-uninstall.json", Nature::Absent),
        ]),
        Start::Legacy | Start::Bare => targets.extend([
            ("install/execution-layout.json", Nature::Absent),
            ("install/.activation-transaction", Nature::Absent),
        ]),
    }
    if let Start::Journal(_) = start {
        targets.extend([
            (
                "install/.activation-transaction/manifest.json",
                Nature::Json,
            ),
            (
                "install/.activation-transaction/manifest.json",
                Nature::Json,
            ),
            ("install/.activation-transaction", Nature::Folder),
            ("install/releases/.staging-1.1.0-4242", Nature::Folder),
        ]);
    }
    let mut targets: Vec<(String, Nature)> = targets
        .into_iter()
        .map(|(path, nature)| (path.to_string(), nature))
        .collect();
    match program {
        Program::Handoff | Program::Runner => {
            targets.push((HANDOFF_FILE.to_string(), Nature::Json));
            targets.push((HANDOFF_FOLDER.to_string(), Nature::Folder));
            targets.push((STATUS_FILE.to_string(), Nature::Json));
            targets.push((STATUS_FILE.to_string(), Nature::Json));
            if program == Program::Runner {
                targets.push((TOKEN_FILE.to_string(), Nature::Json));
                targets.push(("release-public-key.pem".to_string(), Nature::Text));
                targets.push(("state/admin".to_string(), Nature::Folder));
                for (path, nature) in [
                    (MANIFEST, Nature::Json),
                    (MANIFEST, Nature::Json),
                    (MANIFEST, Nature::Json),
                    ("served/manifest.sig", Nature::Signature),
                    ("served/archive.tar.gz", Nature::Text),
                    ("served/health.json", Nature::Json),
                ] {
                    targets.push((path.to_string(), nature));
                }
            }
        }
        Program::Manage => targets.push(("layout.json".to_string(), Nature::Json)),
        _ => {}
    }
    targets
}

/// The served manifest, relative to the base.
const MANIFEST: &str = "served/manifest.json";

/// One damage that fits `program` started from `start`; a damaged served
/// manifest is, one time in two, signed again after it.
pub(super) fn generate(random: &mut Random, program: Program, start: Start) -> Vec<Damage> {
    let (target, nature) = random.pick(&targets(program, start));
    let kind = kind_for(random, nature);
    let resign = target == MANIFEST && random.chance(1, 2);
    let mut damages = vec![Damage { target, kind }];
    if resign {
        damages.push(Damage {
            target: "served/manifest.sig".to_string(),
            kind: DamageKind::Resign,
        });
    }
    damages
}

fn file_kind(random: &mut Random) -> DamageKind {
    match random.below(12) {
        0 => DamageKind::Remove,
        1 => DamageKind::Truncate(random.between(0, 999) as u16),
        2 => DamageKind::Empty,
        3 => DamageKind::Folder,
        4 => DamageKind::DanglingLink,
        5 if random.chance(1, 3) => DamageKind::Fifo,
        6 => DamageKind::Mode(random.pick(&[0o000, 0o644, 0o666, 0o604, 0o755])),
        7 => DamageKind::InvalidUtf8,
        8 => DamageKind::TrailingGarbage,
        _ => DamageKind::Truncate(random.between(0, 999) as u16),
    }
}

fn kind_for(random: &mut Random, nature: Nature) -> DamageKind {
    let pick = random.below(256) as u8;
    match nature {
        Nature::Json => match random.below(12) {
            0..=2 => DamageKind::DropKey(pick),
            3..=5 => DamageKind::SetKey(pick, random.pick(&Sample::ALL)),
            6 => DamageKind::DuplicateKey(pick),
            7 => DamageKind::ByteOrderMark,
            8 if random.chance(1, 4) => DamageKind::Oversize,
            _ => file_kind(random),
        },
        Nature::Text => file_kind(random),
        Nature::Contract if random.chance(2, 3) => {
            DamageKind::ApiContract(random.pick(&CONTRACT_FORMS))
        }
        Nature::Contract => file_kind(random),
        Nature::Folder => random.pick(&[
            DamageKind::Remove,
            DamageKind::Empty,
            DamageKind::Mode(0o777),
            DamageKind::Mode(0o700),
            DamageKind::Mode(0o000),
            DamageKind::DanglingLink,
        ]),
        Nature::Link => random.pick(&[
            DamageKind::Remove,
            DamageKind::DanglingLink,
            DamageKind::Folder,
            DamageKind::Retarget("install/releases"),
            DamageKind::Retarget("install/releases/.staging-1.1.0-4242"),
            DamageKind::Retarget("install/releases/1.0.0/VERSION"),
        ]),
        Nature::Lock => DamageKind::LockPid(random.pick(&[
            LockOwner::Dead,
            LockOwner::Live,
            LockOwner::Garbage,
            LockOwner::Empty,
            LockOwner::Init,
        ])),
        Nature::Absent => random.pick(&[
            DamageKind::CreateFile,
            DamageKind::Folder,
            DamageKind::DanglingLink,
        ]),
        Nature::Layout => {
            DamageKind::OtherRelease(random.pick(&["worker_release", "gateway_release"]))
        }
        Nature::Signature if random.chance(1, 3) => DamageKind::Resign,
        Nature::Signature => file_kind(random),
    }
}

impl Damage {
    /// Applies the damage under `base`; a damage that does not fit what it
    /// finds (a key of a file that is not JSON) changes nothing.
    pub fn apply(&self, base: &Path) {
        let path = base.join(&self.target);
        if let Some(parent) = path.parent() {
            if !parent.exists() && self.creates() {
                // Not where an earlier damage left a file in the way.
                let _ = fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent);
            }
        }
        match &self.kind {
            DamageKind::Remove => remove(&path),
            DamageKind::Truncate(permille) => rewrite(&path, |data| {
                data.truncate(cut_at(data, *permille));
            }),
            DamageKind::Empty => replace_with_file(&path, b""),
            DamageKind::Folder => {
                remove(&path);
                let _ = fs::create_dir(&path);
            }
            DamageKind::DanglingLink => {
                remove(&path);
                let _ = symlink(base.join("nowhere"), &path);
            }
            DamageKind::Fifo => {
                remove(&path);
                if path.parent().is_some_and(Path::is_dir) {
                    make_fifo(&path);
                }
            }
            DamageKind::Mode(mode) => set_mode(&path, *mode),
            DamageKind::LockPid(owner) => lock(&path, *owner),
            DamageKind::ApiContract(form) => replace_with_file(&path, form.as_bytes()),
            DamageKind::CreateFile => replace_with_file(&path, b"{}\n"),
            DamageKind::Retarget(other) => {
                remove(&path);
                let _ = symlink(base.join(other), &path);
            }
            DamageKind::OtherRelease(key) => other_release(base, &path, key),
            DamageKind::Resign => sign_served_manifest(base),
            kind => rewrite(&path, |data| edit_bytes(kind, data)),
        }
    }

    /// Whether the damage makes its target where none was.
    fn creates(&self) -> bool {
        matches!(
            self.kind,
            DamageKind::LockPid(_) | DamageKind::CreateFile | DamageKind::Folder
        )
    }
}

/// Where a truncation to `permille` of a file cuts: just before the
/// separator (`,` or a line break) at that fraction of the file's
/// separators, so the cut does not move with the digits of the inodes and
/// devices a journal records (which differ from build to build); a file
/// without separators is cut at that fraction of its bytes.
fn cut_at(data: &[u8], permille: u16) -> usize {
    let separators: Vec<usize> = (0..data.len())
        .filter(|&at| data[at] == b',' || data[at] == b'\n')
        .collect();
    if separators.is_empty() {
        return data.len() * usize::from(permille) / 1000;
    }
    separators[separators.len() * usize::from(permille) / 1000]
}

fn edit_bytes(kind: &DamageKind, data: &mut Vec<u8>) {
    match kind {
        DamageKind::InvalidUtf8 => {
            let at = data
                .iter()
                .position(|&byte| byte == b'"')
                .map_or(0, |at| at + 1);
            data.insert(at, 0xff);
        }
        DamageKind::ByteOrderMark => {
            data.splice(0..0, [0xef, 0xbb, 0xbf]);
        }
        DamageKind::TrailingGarbage => data.push(b'x'),
        DamageKind::Oversize => {
            let at = data.len().saturating_sub(1);
            data.splice(at..at, std::iter::repeat_n(b' ', 1_100_000));
        }
        DamageKind::DropKey(pick)
        | DamageKind::SetKey(pick, _)
        | DamageKind::DuplicateKey(pick) => {
            if let Some(edited) = edit_json(kind, *pick, data) {
                *data = edited;
            }
        }
        _ => unreachable!("{kind:?} is not a byte edit"),
    }
}

/// Every key path (`a` or `a.b`) of a JSON object, sorted.
fn key_paths(value: &Value) -> Vec<(String, Option<String>)> {
    let Value::Object(object) = value else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    for (key, item) in object {
        paths.push((key.clone(), None));
        if let Value::Object(inner) = item {
            paths.extend(inner.keys().map(|name| (key.clone(), Some(name.clone()))));
        }
    }
    paths.sort();
    paths
}

fn edit_json(kind: &DamageKind, pick: u8, data: &[u8]) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(data).ok()?;
    let paths = key_paths(&value);
    let (outer, inner) = paths.get(usize::from(pick) % paths.len().max(1))?.clone();
    let object = match &inner {
        None => value.as_object_mut()?,
        Some(_) => value.get_mut(&outer)?.as_object_mut()?,
    };
    if std::env::var_os(crate::upstream::VERBOSE_ENV).is_some() {
        eprintln!(
            "=== damage {kind:?} at key {outer}{}",
            inner
                .as_deref()
                .map(|name| format!(".{name}"))
                .unwrap_or_default()
        );
    }
    let key = inner.unwrap_or(outer);
    match kind {
        DamageKind::DropKey(_) => {
            object.remove(&key);
        }
        DamageKind::SetKey(_, sample) => {
            let replacement = serde_json::from_str(sample.json()).unwrap_or(Value::Null);
            object.insert(key.clone(), replacement);
            if *sample == Sample::Huge {
                let text = serde_json::to_string_pretty(&value).ok()?;
                let marker = format!("\"{key}\": 1.2345678901234568e29");
                return Some(
                    format!(
                        "{}\n",
                        text.replace(&marker, &format!("\"{key}\": {}", sample.json()))
                    )
                    .into_bytes(),
                );
            }
        }
        DamageKind::DuplicateKey(_) => {
            let item = serde_json::to_string(object.get(&key)?).ok()?;
            let text = serde_json::to_string_pretty(&value).ok()?;
            let needle = format!("\"{key}\": ");
            let at = text.find(&needle)?;
            let duplicate = format!("\"{key}\": {item},\n  ");
            return Some(format!("{}{duplicate}{}\n", &text[..at], &text[at..]).into_bytes());
        }
        _ => return None,
    }
    let mut text = serde_json::to_vec_pretty(&value).ok()?;
    text.push(b'\n');
    Some(text)
}

fn remove(path: &Path) {
    match fs::symlink_metadata(path) {
        Ok(info) if info.is_dir() => {
            let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o700));
            let _ = fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = fs::remove_file(path);
        }
        Err(_) => {}
    }
}

fn replace_with_file(path: &Path, data: &[u8]) {
    let mode = fs::symlink_metadata(path)
        .ok()
        .filter(|info| info.is_file())
        .map_or(0o600, |info| info.permissions().mode() & 0o7777);
    remove(path);
    if path.parent().is_some_and(Path::is_dir) {
        write_file(path, data, mode);
    }
}

/// Rewrites a regular file's bytes, keeping its mode; anything else stays.
fn rewrite(path: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let Ok(info) = fs::symlink_metadata(path) else {
        return;
    };
    if !info.is_file() {
        return;
    }
    let mut data = fs::read(path).unwrap_or_default();
    edit(&mut data);
    write_file(path, &data, info.permissions().mode() & 0o7777);
}

fn set_mode(path: &Path, mode: u32) {
    if fs::symlink_metadata(path).is_ok_and(|info| !info.file_type().is_symlink()) {
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode));
    }
}

fn lock(path: &Path, owner: LockOwner) {
    let text = match owner {
        LockOwner::Dead => "4194304\n".to_string(),
        LockOwner::Live => format!("{}\n", std::process::id()),
        LockOwner::Garbage => "not-a-pid\n".to_string(),
        LockOwner::Empty => String::new(),
        LockOwner::Init => "1\n".to_string(),
    };
    if let Some(folder) = path.parent() {
        set_mode(folder, 0o700);
    }
    replace_with_file(path, text.as_bytes());
}

/// Copies release 1.0.0 as `releases/0.9.0` and names it in the layout.
fn other_release(base: &Path, layout: &Path, key: &str) {
    let source = base.join("install/releases/1.0.0");
    let copy = base.join("install/releases/0.9.0");
    if source.is_dir() && !copy.exists() {
        copy_tree(&source, &copy);
        // Whatever an earlier damage made of VERSION, a file says 0.9.0.
        replace_with_file(&copy.join("VERSION"), b"0.9.0\n");
    }
    rewrite(layout, |data| {
        let Ok(mut value) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        let Some(inner) = value.get_mut("layout").and_then(Value::as_object_mut) else {
            return;
        };
        inner.insert(
            key.to_string(),
            Value::from(copy.to_string_lossy().into_owned()),
        );
        if let Ok(mut text) = serde_json::to_vec_pretty(&value) {
            text.push(b'\n');
            *data = text;
        }
    });
}

fn copy_tree(source: &Path, target: &Path) {
    make_dirs(target, 0o755);
    for entry in fs::read_dir(source).into_iter().flatten().flatten() {
        let (from, to) = (entry.path(), target.join(entry.file_name()));
        let Ok(info) = fs::symlink_metadata(&from) else {
            continue;
        };
        if info.file_type().is_symlink() {
            let _ = symlink(fs::read_link(&from).unwrap_or_default(), &to);
        } else if info.is_dir() {
            copy_tree(&from, &to);
        } else if info.is_file() {
            let _ = fs::copy(&from, &to);
        } else {
            // A FIFO a damage left stays one: copying it would wait for ever.
            make_fifo(&to);
        }
    }
}
