//! The power-cut campaign's persistence model (issue 24): from what a
//! helper issued before the machine stopped (`crash-tracer --record`), the
//! states a conservative file system may come back in, and their
//! materialisation on disk over the state a SIGKILL left.
//!
//! The model, per file and per directory:
//! - a file's bytes are durable as they were at its last `fsync` or
//!   `fdatasync` (as they were before the operation when it had none; empty
//!   for a file the operation created); anything written or truncated since
//!   may be lost;
//! - a directory's entries are durable as they were at its last `fsync`
//!   (as before the operation when it had none): every create, rename, link,
//!   unlink, mkdir or rmdir in it since may be lost, and a directory whose
//!   own entry was lost takes everything in it along;
//! - an `fsync` of a file makes neither its name nor its directory durable.
//!
//! The states built at a crash point ([`CrashState`]): what a SIGKILL leaves
//! (everything issued reaches the disk), everything not durable lost, and
//! the reordering where every name change reached the disk but no data that
//! was not made durable did (a rename persisted before the renamed file's
//! bytes: it appears under its new name empty or as it was).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// A state the machine may come back in after stopping at a crash point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CrashState {
    /// Everything issued reached the disk (what SIGKILL leaves).
    Kill,
    /// Everything not made durable is lost: file bytes since their last
    /// fsync, directory entries since their directory's last fsync.
    Lost,
    /// Every name change reached the disk, no bytes that were not durable.
    NamesBeforeData,
}

impl CrashState {
    /// Every state, the SIGKILL one first.
    pub const ALL: [CrashState; 3] = [
        CrashState::Kill,
        CrashState::Lost,
        CrashState::NamesBeforeData,
    ];

    /// The name a report gives the state.
    pub fn name(self) -> &'static str {
        match self {
            CrashState::Kill => "sigkill",
            CrashState::Lost => "not-durable-lost",
            CrashState::NamesBeforeData => "names-before-data",
        }
    }
}

/// What a path held before the operation first touched it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Before {
    /// Nothing there.
    Absent,
    /// A regular file.
    File {
        /// Its permission bits.
        mode: u32,
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// A directory (what it held comes as lines of its own).
    Dir {
        /// Its permission bits.
        mode: u32,
    },
    /// A symbolic link to this target.
    Link(String),
}

/// One line of a record: a path's earlier state or a completed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// What a path held before the operation first touched it.
    Before(PathBuf, Before),
    /// An `open` that may write.
    Open {
        /// The file.
        path: PathBuf,
        /// `O_CREAT`: it creates the file when absent.
        create: bool,
        /// `O_TRUNC`: it empties the file.
        truncate: bool,
    },
    /// `write`, `writev` or `pwrite64` that wrote `length` bytes.
    Write {
        /// The file.
        path: PathBuf,
        /// Where the bytes went.
        offset: u64,
        /// How many bytes the call wrote.
        length: u64,
    },
    /// `ftruncate` of this file.
    Ftruncate(PathBuf),
    /// `fsync` or `fdatasync`: the file's bytes then (`None` for a directory).
    Fsync(PathBuf, Option<Vec<u8>>),
    /// `rename(from, to)`.
    Rename(PathBuf, PathBuf),
    /// `link(existing, new)`.
    Link(PathBuf, PathBuf),
    /// `symlink(target, path)`.
    Symlink(String, PathBuf),
    /// `unlink` of a file.
    Unlink(PathBuf),
    /// `rmdir` (or `unlinkat` with `AT_REMOVEDIR`).
    Rmdir(PathBuf),
    /// `mkdir`.
    Mkdir(PathBuf),
    /// `close` of a descriptor of this file.
    Close(PathBuf),
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if text.len() % 2 != 0 {
        return Err(format!("odd hex length {}", text.len()));
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).map_err(|err| err.to_string()))
        .collect()
}

/// Parses `crash-tracer --record` output.
pub fn parse_record(text: &str) -> Result<Vec<Recorded>, String> {
    text.lines().map(parse_line).collect()
}

fn parse_line(line: &str) -> Result<Recorded, String> {
    let fields: Vec<&str> = line.split('\t').collect();
    let number = |text: &str| text.parse::<u64>().map_err(|err| format!("{line}: {err}"));
    let path = |text: &str| PathBuf::from(text);
    Ok(match fields[..] {
        ["pre", at, "absent"] => Recorded::Before(path(at), Before::Absent),
        ["pre", at, "file", mode, bytes] => Recorded::Before(
            path(at),
            Before::File {
                mode: u32::from_str_radix(mode, 8).map_err(|err| err.to_string())?,
                bytes: unhex(bytes)?,
            },
        ),
        ["pre", at, "dir", mode] => Recorded::Before(
            path(at),
            Before::Dir {
                mode: u32::from_str_radix(mode, 8).map_err(|err| err.to_string())?,
            },
        ),
        ["pre", at, "link", target] => Recorded::Before(path(at), Before::Link(target.into())),
        ["open", at, flags, _fd] => {
            let flags = u64::from_str_radix(flags, 16).map_err(|err| err.to_string())?;
            Recorded::Open {
                path: path(at),
                create: flags & libc::O_CREAT as u64 != 0,
                truncate: flags & libc::O_TRUNC as u64 != 0,
            }
        }
        ["write", at, offset, length] => Recorded::Write {
            path: path(at),
            offset: number(offset)?,
            length: number(length)?,
        },
        ["ftruncate", at, _length] => Recorded::Ftruncate(path(at)),
        ["fsync", at, "dir"] => Recorded::Fsync(path(at), None),
        ["fsync", at, bytes] => Recorded::Fsync(path(at), Some(unhex(bytes)?)),
        ["rename", from, to] => Recorded::Rename(path(from), path(to)),
        ["link", from, to] => Recorded::Link(path(from), path(to)),
        ["symlink", target, at] => Recorded::Symlink(target.into(), path(at)),
        ["unlink", at] => Recorded::Unlink(path(at)),
        ["rmdir", at] => Recorded::Rmdir(path(at)),
        ["mkdir", at] => Recorded::Mkdir(path(at)),
        ["close", at] => Recorded::Close(path(at)),
        _ => return Err(format!("not a record line: {line}")),
    })
}

/// An inode of the model.
pub type Id = usize;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    File,
    Dir,
    Link(String),
}

#[derive(Debug, Clone)]
struct Inode {
    body: Body,
    mode: u32,
    /// The bytes before the operation (`None` for a file it created).
    before: Option<Vec<u8>>,
    /// The bytes at the last fsync.
    synced: Option<Vec<u8>>,
    /// Written or truncated since the last fsync (or since the operation began).
    dirty: bool,
    /// It existed before the operation (its identity may be on record).
    existed: bool,
    /// Written by the operation at all (a lock file it only creates is
    /// empty by design).
    written: bool,
    /// A directory's known entries as issued.
    issued: BTreeMap<String, Id>,
    /// ... and as made durable by its last fsync.
    durable: BTreeMap<String, Id>,
}

impl Inode {
    fn new(body: Body, mode: u32) -> Inode {
        Inode {
            body,
            mode,
            before: None,
            synced: None,
            dirty: false,
            existed: false,
            written: false,
            issued: BTreeMap::new(),
            durable: BTreeMap::new(),
        }
    }

    /// The bytes the file has on disk in every state but [`CrashState::Kill`].
    fn durable_bytes(&self) -> Vec<u8> {
        self.synced
            .clone()
            .or(self.before.clone())
            .unwrap_or_default()
    }
}

/// A node of a materialised state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A file: its inode, and its bytes unless they are the issued ones
    /// (which only the disk knows).
    File(Id, Option<Vec<u8>>),
    /// A directory: its inode.
    Dir(Id),
    /// A symbolic link: its inode and target.
    Link(Id, String),
}

impl Node {
    fn id(&self) -> Id {
        match self {
            Node::File(id, _) | Node::Dir(id) | Node::Link(id, _) => *id,
        }
    }
}

/// The model of the part of the tree the operation touched.
#[derive(Debug, Clone)]
pub struct Model {
    inodes: Vec<Inode>,
}

/// The `(directory, name)` components of an absolute path.
fn split(path: &Path) -> Option<(Vec<String>, String)> {
    let mut parts: Vec<String> = path
        .components()
        .filter_map(|part| match part {
            Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let name = parts.pop()?;
    Some((parts, name))
}

impl Model {
    /// Replays `record` over the snapshot its `pre` lines give.
    pub fn replay(record: &[Recorded]) -> Model {
        let mut model = Model {
            inodes: vec![Inode::new(Body::Dir, 0o755)],
        };
        for item in record {
            model.apply(item);
        }
        model
    }

    fn add(&mut self, inode: Inode) -> Id {
        self.inodes.push(inode);
        self.inodes.len() - 1
    }

    /// The directory holding `path` as issued, making directories met on
    /// the way that the record never named (they existed before and were
    /// not changed, so their entries are durable).
    fn parent(&mut self, path: &Path) -> Option<(Id, String)> {
        let (dirs, name) = split(path)?;
        let mut at = 0;
        for part in dirs {
            at = match self.inodes[at].issued.get(&part) {
                Some(&next) => next,
                None => {
                    let next = self.add(Inode {
                        existed: true,
                        ..Inode::new(Body::Dir, 0o755)
                    });
                    self.inodes[at].issued.insert(part.clone(), next);
                    self.inodes[at].durable.insert(part, next);
                    next
                }
            };
        }
        Some((at, name))
    }

    /// The inode `path` names as issued, if the model knows it.
    fn lookup_issued(&self, path: &Path) -> Option<Id> {
        let (dirs, name) = split(path)?;
        let mut at = 0;
        for part in dirs {
            at = *self.inodes[at].issued.get(&part)?;
        }
        self.inodes[at].issued.get(&name).copied()
    }

    fn lookup(&mut self, path: &Path) -> Option<Id> {
        let (dir, name) = self.parent(path)?;
        self.inodes[dir].issued.get(&name).copied()
    }

    fn insert(&mut self, path: &Path, id: Id) {
        if let Some((dir, name)) = self.parent(path) {
            self.inodes[dir].issued.insert(name, id);
        }
    }

    fn remove(&mut self, path: &Path) -> Option<Id> {
        let (dir, name) = self.parent(path)?;
        self.inodes[dir].issued.remove(&name)
    }

    fn record_before(&mut self, path: &Path, before: &Before) {
        let Some((dir, name)) = self.parent(path) else {
            return;
        };
        if self.inodes[dir].issued.contains_key(&name) {
            return; // the model already knows better than a later look
        }
        let inode = match before {
            Before::Absent => return,
            Before::File { mode, bytes } => Inode {
                before: Some(bytes.clone()),
                ..Inode::new(Body::File, *mode)
            },
            Before::Dir { mode } => Inode {
                existed: true,
                ..Inode::new(Body::Dir, *mode)
            },
            Before::Link(target) => Inode::new(Body::Link(target.clone()), 0o777),
        };
        let id = self.add(inode);
        self.inodes[dir].issued.insert(name.clone(), id);
        self.inodes[dir].durable.insert(name, id);
    }

    /// The file's bytes changed.
    fn touch(&mut self, id: Id) {
        self.inodes[id].dirty = true;
        self.inodes[id].written = true;
    }

    fn apply(&mut self, item: &Recorded) {
        match item {
            Recorded::Before(path, before) => self.record_before(path, before),
            Recorded::Open {
                path,
                create,
                truncate,
            } => match self.lookup(path) {
                Some(id) if *truncate => self.inodes[id].dirty = true,
                Some(_) => {}
                None if *create => {
                    let id = self.add(Inode::new(Body::File, 0o600));
                    self.insert(path, id);
                }
                None => {}
            },
            Recorded::Write { path, length, .. } => {
                if let (Some(id), true) = (self.lookup(path), *length > 0) {
                    self.touch(id);
                }
            }
            Recorded::Ftruncate(path) => {
                if let Some(id) = self.lookup(path) {
                    self.inodes[id].dirty = true;
                }
            }
            Recorded::Fsync(path, bytes) => {
                let Some(id) = self.lookup(path) else {
                    return;
                };
                let inode = &mut self.inodes[id];
                match bytes {
                    None => inode.durable = inode.issued.clone(),
                    Some(bytes) => {
                        inode.synced = Some(bytes.clone());
                        inode.dirty = false;
                    }
                }
            }
            Recorded::Rename(from, to) => {
                if let Some(id) = self.remove(from) {
                    self.insert(to, id);
                }
            }
            Recorded::Link(from, to) => {
                if let Some(id) = self.lookup(from) {
                    self.insert(to, id);
                }
            }
            Recorded::Symlink(target, path) => {
                let id = self.add(Inode::new(Body::Link(target.clone()), 0o777));
                self.insert(path, id);
            }
            Recorded::Unlink(path) | Recorded::Rmdir(path) => {
                self.remove(path);
            }
            Recorded::Mkdir(path) => {
                let id = self.add(Inode::new(Body::Dir, 0o700));
                self.insert(path, id);
            }
            Recorded::Close(_) => {}
        }
    }

    /// Every known path of `state` and what it holds.
    pub fn tree(&self, state: CrashState) -> BTreeMap<PathBuf, Node> {
        let mut tree = BTreeMap::new();
        let mut pending = vec![(PathBuf::from("/"), 0)];
        while let Some((path, id)) = pending.pop() {
            let inode = &self.inodes[id];
            let entries = match state {
                CrashState::Lost => &inode.durable,
                CrashState::Kill | CrashState::NamesBeforeData => &inode.issued,
            };
            for (name, &child) in entries {
                let child_path = path.join(name);
                let node = match &self.inodes[child].body {
                    Body::Dir => {
                        pending.push((child_path.clone(), child));
                        Node::Dir(child)
                    }
                    Body::Link(target) => Node::Link(child, target.clone()),
                    Body::File => {
                        let file = &self.inodes[child];
                        let bytes = match state {
                            CrashState::Kill => None,
                            _ if !file.dirty => None,
                            _ => Some(file.durable_bytes()),
                        };
                        Node::File(child, bytes)
                    }
                };
                tree.insert(child_path, node);
            }
        }
        tree
    }

    /// What `state` changes on a disk SIGKILL left: the paths to remove and
    /// those to (re)create, parents first.
    pub fn changes(&self, state: CrashState) -> Changes {
        let killed = self.tree(CrashState::Kill);
        let wanted = self.tree(state);
        let mut remove: Vec<PathBuf> = killed
            .iter()
            .filter(|(path, node)| wanted.get(*path) != Some(node))
            .map(|(path, _)| path.clone())
            .collect();
        // A path under one removed goes with it.
        remove.retain(|path| {
            !path
                .ancestors()
                .skip(1)
                .any(|up| killed.contains_key(up) && wanted.get(up) != killed.get(up))
        });
        let removed: BTreeSet<PathBuf> = remove.iter().cloned().collect();
        let create: Vec<(PathBuf, Node)> = wanted
            .iter()
            .filter(|(path, node)| {
                killed.get(*path) != Some(node)
                    || path.ancestors().skip(1).any(|up| removed.contains(up))
            })
            .map(|(path, node)| (path.clone(), node.clone()))
            .collect();
        let alive: BTreeSet<Id> = killed.values().map(Node::id).collect();
        let resurrected = create
            .iter()
            .filter(|(_, node)| {
                matches!(node, Node::Dir(id) if self.inodes[*id].existed && !alive.contains(id))
            })
            .map(|(path, _)| path.clone())
            .collect();
        Changes {
            remove,
            create,
            resurrected,
            killed,
        }
    }

    fn mode(&self, id: Id) -> u32 {
        self.inodes[id].mode
    }

    fn bytes(&self, id: Id) -> Vec<u8> {
        self.inodes[id].durable_bytes()
    }
}

/// The difference between a crash state and the SIGKILL state.
#[derive(Debug, Clone)]
pub struct Changes {
    /// Paths to remove (with everything under them).
    pub remove: Vec<PathBuf>,
    /// Paths to create, parents first.
    pub create: Vec<(PathBuf, Node)>,
    /// Directories that existed before the operation, which it removed and
    /// the state brings back: on disk they would come back with their own
    /// inode (which helpers record as a directory's identity), and user
    /// space can only make new ones, so the state cannot be built faithfully.
    pub resurrected: Vec<PathBuf>,
    killed: BTreeMap<PathBuf, Node>,
}

impl Changes {
    /// True when the state is the SIGKILL state.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.create.is_empty()
    }

    /// A one-line summary for a report (`-path`, `+path`).
    pub fn summary(&self) -> String {
        let removed = self
            .remove
            .iter()
            .map(|path| format!("-{}", path.display()));
        let created = self
            .create
            .iter()
            .map(|(path, _)| format!("+{}", path.display()));
        removed.chain(created).collect::<Vec<_>>().join(" ")
    }
}

/// Turns the disk a SIGKILL left (the record's end) into `state`: removes
/// what the state lacks and writes what it holds differently. Returns the
/// changes (empty when the state is the SIGKILL state).
pub fn materialise(model: &Model, state: CrashState) -> io::Result<Changes> {
    let changes = model.changes(state);
    // Modes and bytes as the disk has them now, before anything moves.
    let mut on_disk: BTreeMap<Id, (u32, Option<Vec<u8>>)> = BTreeMap::new();
    for (path, node) in &changes.killed {
        if let Ok(info) = fs::symlink_metadata(path) {
            let bytes = matches!(node, Node::File(..))
                .then(|| fs::read(path).ok())
                .flatten();
            on_disk.insert(node.id(), (info.permissions().mode() & 0o7777, bytes));
        }
    }
    let held = hold_moved_files(&changes)?;
    for path in &changes.remove {
        match fs::symlink_metadata(path) {
            Ok(info) if info.is_dir() => fs::remove_dir_all(path)?,
            Ok(_) => fs::remove_file(path)?,
            Err(_) => {}
        }
    }
    // A file inode still on disk under another name gets the name back as a
    // hard link, as the disk would (a lost unlink of one of two links), not
    // as a copy with an identity of its own that helpers would refuse.
    let mut names = surviving_file_names(&changes);
    names.extend(held.iter().map(|(id, hold)| (*id, hold.clone())));
    for (path, node) in &changes.create {
        let known = on_disk.get(&node.id());
        let mode = known.map_or(model.mode(node.id()), |(mode, _)| *mode);
        match node {
            Node::Dir(_) => {
                fs::create_dir(path)?;
                fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
            }
            Node::Link(_, target) => symlink(target, path)?,
            Node::File(id, bytes) if names.contains_key(id) => {
                fs::hard_link(&names[id], path)?;
                if let Some(bytes) = bytes {
                    fs::write(path, bytes)?;
                }
            }
            Node::File(id, bytes) => {
                names.insert(*id, path.clone());
                let bytes = match (bytes, known) {
                    (Some(bytes), _) => bytes.clone(),
                    (None, Some((_, Some(disk)))) => disk.clone(),
                    (None, _) => model.bytes(*id),
                };
                fs::write(path, bytes)?;
                fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
            }
        }
    }
    for hold in held.values() {
        fs::remove_file(hold)?;
    }
    Ok(changes)
}

/// Files the state gives back a name the SIGKILL disk removed or moved (a
/// lost rename): each is hard-linked to a holding name in its nearest
/// directory that stays, so the state can give the very inode its old name
/// back instead of a copy with an identity of its own.
fn hold_moved_files(changes: &Changes) -> io::Result<BTreeMap<Id, PathBuf>> {
    let removed: BTreeSet<&Path> = changes.remove.iter().map(PathBuf::as_path).collect();
    let wanted: BTreeSet<Id> = changes
        .create
        .iter()
        .filter(|(_, node)| matches!(node, Node::File(..)))
        .map(|(_, node)| node.id())
        .collect();
    let mut held = BTreeMap::new();
    for (path, node) in &changes.killed {
        let id = node.id();
        if !matches!(node, Node::File(..)) || !wanted.contains(&id) || held.contains_key(&id) {
            continue;
        }
        if !path.ancestors().any(|up| removed.contains(up)) {
            continue;
        }
        let Some(stays) = path
            .ancestors()
            .skip(1)
            .find(|up| !up.ancestors().any(|above| removed.contains(above)))
        else {
            continue;
        };
        let hold = stays.join(format!(".power-cut-hold-{id}"));
        fs::hard_link(path, &hold)?;
        held.insert(id, hold);
    }
    Ok(held)
}

/// The file inodes the SIGKILL disk keeps under a name the state does not
/// change, each with one such name.
fn surviving_file_names(changes: &Changes) -> BTreeMap<Id, PathBuf> {
    let removed = |path: &Path| {
        path.ancestors()
            .any(|up| changes.remove.iter().any(|gone| gone == up))
    };
    changes
        .killed
        .iter()
        .filter(|(path, node)| matches!(node, Node::File(..)) && !removed(path))
        .map(|(path, node)| (node.id(), path.clone()))
        .collect()
}

#[cfg(test)]
mod tests;

/// `package`'s binary built with the test-only cargo `feature`, in a target
/// directory of its own beside the workspace's (so the workspace's binaries
/// stay as they are). Builds it when needed.
pub fn helper_built_with(package: &str, feature: &str) -> PathBuf {
    let profile = crate::binaries::profile_dir();
    let target = profile
        .parent()
        .expect("the profile directory lies in the target directory")
        .join(format!("{package}-{feature}"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args(["build", "--quiet", "-p", package, "--features", feature])
        .arg("--target-dir")
        .arg(&target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo build -p {package} --features {feature}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    target.join("debug").join(package)
}

/// Set to `all` (what `scripts/crash-points.sh --power-cut` sets) to build
/// the crash states at every kill point; any other value, or none, builds
/// them at the sampled points of [`power_cut_points`].
pub const POWER_CUT_ENV: &str = "AGENTS_POWER_CUT";

/// True under `AGENTS_POWER_CUT=all`: crash states at every kill point.
pub fn everywhere() -> bool {
    std::env::var(POWER_CUT_ENV).is_ok_and(|value| value == "all")
}

/// The kill points of a normal run (of the sampled `points`) where the
/// crash states beyond SIGKILL are built too: the first, the middle and the
/// last, so CI covers every operation within minutes. All of them under
/// `AGENTS_POWER_CUT=all`.
pub fn power_cut_points(points: &[usize]) -> Vec<usize> {
    if everywhere() {
        return points.to_vec();
    }
    let mut chosen: Vec<usize> = [points.first(), points.get(points.len() / 2), points.last()]
        .into_iter()
        .flatten()
        .copied()
        .collect();
    chosen.dedup();
    chosen
}

/// The crash state a campaign point is built in, and what it gave.
#[derive(Debug)]
struct Cut {
    state: CrashState,
    /// The model of the killed run and the changes made to reach the state.
    built: Option<(Model, Changes)>,
}

thread_local! {
    static CUT: std::cell::RefCell<Option<Cut>> = const { std::cell::RefCell::new(None) };
    static IN_SETUP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Starts a campaign point in `state`: the next killed traced run records
/// its calls and is turned into that state.
pub fn begin(state: CrashState) {
    CUT.with(|cut| *cut.borrow_mut() = Some(Cut { state, built: None }));
}

/// Ends the point: the model of its killed run and the changes made (none
/// when no traced run was killed).
pub fn end() -> Option<(Model, Changes)> {
    CUT.with(|cut| cut.borrow_mut().take())
        .and_then(|cut| cut.built)
}

/// Runs `setup` (a kill that only sets a scene up, before the one the
/// campaign point is about) as a plain SIGKILL.
pub fn scene_setup<T>(setup: impl FnOnce() -> T) -> T {
    IN_SETUP.with(|flag| flag.set(true));
    let result = setup();
    IN_SETUP.with(|flag| flag.set(false));
    result
}

/// True when the traced run about to start must record its calls.
pub fn recording() -> bool {
    !IN_SETUP.with(|flag| flag.get())
        && CUT.with(|cut| cut.borrow().as_ref().is_some_and(|cut| cut.built.is_none()))
}

/// After a recorded run was killed: replays its record and turns the disk
/// into the point's crash state.
pub fn after_kill(record: &str) {
    let record = parse_record(record).unwrap_or_else(|err| panic!("crash-tracer record: {err}"));
    let model = Model::replay(&record);
    CUT.with(|cut| {
        let mut cut = cut.borrow_mut();
        let Some(cut) = cut.as_mut() else {
            return;
        };
        let changes = materialise(&model, cut.state)
            .unwrap_or_else(|err| panic!("materialise {}: {err}", cut.state.name()));
        check_crash_state(&model, cut.state);
        cut.built = Some((model, changes));
    });
}

/// True for a name the helpers give a temporary (written, then renamed).
fn is_temporary(name: &str) -> bool {
    name.ends_with(".tmp") || name.starts_with(".execution-draft-")
}

/// The runner's download and extraction directory under `$TMPDIR`: never
/// synced by design (the next runner downloads afresh), referenced by
/// nothing once the runner is gone.
const SCRATCH_PREFIX: &str = "agents-server-update-";

fn in_scratch(path: &Path) -> bool {
    path.components().any(|part| {
        matches!(part, Component::Normal(name) if name.to_string_lossy().starts_with(SCRATCH_PREFIX))
    })
}

/// The files the operation wrote that exist now, with their bytes.
fn written_files(model: &Model, state: CrashState) -> Vec<(PathBuf, Vec<u8>)> {
    model
        .tree(state)
        .into_iter()
        .filter(|(_, node)| matches!(node, Node::File(id, _) if model.inodes[*id].written))
        .filter(|(path, _)| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            !is_temporary(&name) && !in_scratch(path)
        })
        .filter_map(|(path, _)| fs::read(&path).ok().map(|bytes| (path, bytes)))
        .collect()
}

/// Every JSON file of the state that the next reader (Python code among
/// them) opens parses; a status row keeps at least its phase from before
/// the operation.
fn check_crash_state(model: &Model, state: CrashState) {
    for (path, bytes) in written_files(model, state) {
        if path.extension().is_some_and(|ext| ext == "json") {
            if let Err(err) = python_compat::json::parse_json(&bytes) {
                panic!(
                    "{}: {} is unreadable after the power cut: {err}",
                    state.name(),
                    path.display()
                );
            }
        }
        if path
            .file_name()
            .is_some_and(|name| name == "server-update.json")
        {
            check_row_not_backwards(model, &path, &bytes, state);
        }
    }
}

/// A row's place: its update and how far along it is (terminal phases last).
fn row_progress(bytes: &[u8]) -> Option<(String, usize)> {
    let row = python_compat::json::parse_json(bytes).ok()?;
    let update = row.get("update_id")?.as_str()?.to_string();
    let phase = row.get("phase")?.as_str()?;
    let rank = crate::server_status::ACTIVE_PHASES
        .iter()
        .position(|known| *known == phase)
        .unwrap_or(crate::server_status::ACTIVE_PHASES.len());
    Some((update, rank))
}

fn check_row_not_backwards(model: &Model, path: &Path, bytes: &[u8], state: CrashState) {
    let Some(id) = model.lookup_issued(path) else {
        return;
    };
    let Some(before) = model.inodes[id].before.as_deref().and_then(row_progress) else {
        return;
    };
    let Some(now) = row_progress(bytes) else {
        return;
    };
    assert!(
        now.0 != before.0 || now.1 >= before.1,
        "{}: the status row went back from phase #{} to #{} of update {}",
        state.name(),
        before.1,
        now.1,
        now.0
    );
}

/// After the next caller's recovery: no file the operation wrote that is
/// still there is empty, and every JSON one parses.
pub fn check_owned_files(model: &Model) {
    for (path, bytes) in written_files(model, CrashState::Kill) {
        assert!(
            !bytes.is_empty(),
            "{} is empty after the recovery",
            path.display()
        );
        if path.extension().is_some_and(|ext| ext == "json") {
            if let Err(err) = python_compat::json::parse_json(&bytes) {
                panic!("{} is unreadable after the recovery: {err}", path.display());
            }
        }
    }
}
