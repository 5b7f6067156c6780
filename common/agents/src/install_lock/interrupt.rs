//! Ctrl-C while the installation lock is held, as the originals meet it.
//!
//! In Python, SIGINT raises `KeyboardInterrupt`: the controller's `except
//! Exception` failure handling is skipped (a pending journal stays for
//! `recover`), but `with InstallationLock(...)` still runs `__exit__`, which
//! releases the lock after its identity checks, and the interpreter then dies
//! by SIGINT. A release that finds the lock changed raises RuntimeError
//! instead (exit 1) and leaves the lock as found.
//!
//! The port does the same from a signal handler, so the release uses only
//! system calls on descriptors and bytes prepared when the lock was taken: no
//! allocation, no locks. Where a system call itself fails (the owner file
//! vanished, say), the handler leaves the lock as a crash would; the next
//! installer reaps it once this process is gone.
//!
//! A SIGINT the parent ignored stays ignored, as in Python, which installs its
//! handler only over the default disposition. One lock per process is armed at
//! a time (the helpers take one).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::identity;

/// What the handler needs, prepared while it was still safe to allocate.
struct Armed {
    root: OwnedFd,
    identity: (u64, u64),
    uid: u32,
    /// `"<pid>\n"`, the owner file this process wrote.
    owner: Vec<u8>,
    /// The original's `_owned_directory` and `_read_file` refusals, which name paths.
    directory_not_owned: Vec<u8>,
    directory_unsafe: Vec<u8>,
    owner_unsafe: Vec<u8>,
}

/// The armed lock, owned by whoever swaps it out: `disarm` (which frees it)
/// or the handler (which keeps it until the process ends).
static ARMED: AtomicPtr<Armed> = AtomicPtr::new(null_mut());

/// Proof that one lock armed the handler; [`disarm`] takes it back. Only the
/// address is kept, never dereferenced by its holder.
#[derive(Debug)]
pub(super) struct Armament(usize);

const IDENTITY_CHANGED: &[u8] = b"RuntimeError: installation lock identity changed\n";
const OWNER_CHANGED: &[u8] = b"RuntimeError: installation lock owner changed\n";
const PATH_CHANGED: &[u8] = b"RuntimeError: installation lock path changed\n";
const CHANGED_WHILE_READING: &[u8] =
    b"RuntimeError: execution configuration changed while reading\n";
const INTERRUPTED: &[u8] = b"KeyboardInterrupt\n";
/// `files.MAX_CONFIG_BYTES`, the bound of `_read_file`.
const OWNER_SIZE_LIMIT: i64 = 1_048_576;

/// Arms the release of the lock directory `lock` (identity `identity`, under
/// `root`) for SIGINT. Best effort: where SIGINT is not at its default
/// disposition, another lock is armed, or a descriptor cannot be opened, the
/// process keeps its current SIGINT behaviour and `None` is returned.
pub(super) fn arm(root: &Path, lock: &Path, identity: (u64, u64)) -> Option<Armament> {
    // SAFETY: querying the disposition into a struct we own.
    let default_disposition = unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGINT, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_DFL
    };
    if !default_disposition {
        return None;
    }
    let directory = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let root_fd = rustix::fs::open(root, directory, Mode::empty()).ok()?;
    let line = |text: String| format!("{text}\n").into_bytes();
    let armed = Box::into_raw(Box::new(Armed {
        root: root_fd,
        identity,
        uid: python_compat::os::current_uid(),
        owner: format!("{}\n", std::process::id()).into_bytes(),
        directory_not_owned: line(format!(
            "PermissionError: execution directory is not an owned directory: {}",
            python_compat::path::shown(lock)
        )),
        directory_unsafe: line(format!(
            "PermissionError: execution directory permissions are unsafe: {}",
            python_compat::path::shown(lock)
        )),
        owner_unsafe: line(format!(
            "PermissionError: execution configuration is unsafe: {}",
            python_compat::path::shown(&lock.join("pid"))
        )),
    }));
    if ARMED
        .compare_exchange(null_mut(), armed, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        // SAFETY: `armed` came from Box::into_raw above and was never shared.
        drop(unsafe { Box::from_raw(armed) });
        return None;
    }
    let armament = Armament(armed as usize);
    // SAFETY: installing a valid handler from a fully initialised struct.
    let installed = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut()) == 0
    };
    if !installed {
        disarm(armament);
        return None;
    }
    Some(armament)
}

/// Takes `armament` back before the lock's ordinary release and restores
/// SIG_DFL, the only disposition `arm` replaces. Nothing happens when the
/// handler already took it (the process is ending then).
pub(super) fn disarm(armament: Armament) {
    let armed = armament.0 as *mut Armed;
    if ARMED
        .compare_exchange(armed, null_mut(), Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return;
    }
    // SAFETY: swapping it out made it ours; it came from Box::into_raw.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        drop(Box::from_raw(armed));
    }
}

/// Why the handler's release stopped.
enum Stop {
    /// The original's refusal (one stderr line): report it and exit 1, the lock
    /// left as found.
    Refused(&'static [u8]),
    /// A system call failed: leave the lock as a crash would.
    Failed,
}

extern "C" fn on_interrupt(_signal: libc::c_int) {
    let armed = ARMED.swap(null_mut(), Ordering::SeqCst);
    if !armed.is_null() {
        // SAFETY: swapping it out made the handler its only user; it is never
        // freed, as the process ends here.
        let armed: &'static Armed = unsafe { &*armed };
        if let Err(Stop::Refused(message)) = release(armed) {
            write_stderr(message);
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(1) };
        }
    }
    write_stderr(INTERRUPTED);
    // Die by SIGINT as Python does: the default disposition, delivered again
    // once this handler returns and the signal is unblocked.
    // SAFETY: signal and raise are async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::raise(libc::SIGINT);
    }
}

/// The original's `__exit__`, step for step, with system calls only.
fn release(armed: &'static Armed) -> Result<(), Stop> {
    let failed = |_| Stop::Failed;
    // _owned_directory(path, private=True) on the path's lstat.
    let linked = rustix::fs::statat(&armed.root, c".install-lock", AtFlags::SYMLINK_NOFOLLOW)
        .map_err(failed)?;
    if FileType::from_raw_mode(linked.st_mode) != FileType::Directory || linked.st_uid != armed.uid
    {
        return Err(Stop::Refused(&armed.directory_not_owned));
    }
    if linked.st_mode & 0o7777 != 0o700 {
        return Err(Stop::Refused(&armed.directory_unsafe));
    }
    // Opened afresh, as `__exit__` opens the path: a replaced directory is
    // a changed identity, never released.
    let lock = rustix::fs::openat(
        &armed.root,
        c".install-lock",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(failed)?;
    let lock = lock.as_fd();
    if identity(&rustix::fs::fstat(lock).map_err(failed)?) != armed.identity {
        return Err(Stop::Refused(IDENTITY_CHANGED));
    }
    if !owner_is_ours(armed, lock)? || !only_owner_file(lock)? {
        return Err(Stop::Refused(OWNER_CHANGED));
    }
    rustix::fs::unlinkat(lock, c"pid", AtFlags::empty()).map_err(failed)?;
    rustix::fs::fsync(lock).map_err(failed)?;
    let linked = rustix::fs::statat(&armed.root, c".install-lock", AtFlags::SYMLINK_NOFOLLOW)
        .map_err(failed)?;
    if identity(&linked) != armed.identity {
        return Err(Stop::Refused(PATH_CHANGED));
    }
    rustix::fs::unlinkat(&armed.root, c".install-lock", AtFlags::REMOVEDIR).map_err(failed)?;
    rustix::fs::fsync(&armed.root).map_err(failed)?;
    Ok(())
}

/// `_read_file(path / "pid", private=True)` into a stack buffer, and whether
/// it holds exactly this process's owner text.
fn owner_is_ours(armed: &'static Armed, lock: BorrowedFd<'_>) -> Result<bool, Stop> {
    let failed = |_| Stop::Failed;
    let owner = rustix::fs::openat(
        lock,
        c"pid",
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(failed)?;
    let info = rustix::fs::fstat(&owner).map_err(failed)?;
    if FileType::from_raw_mode(info.st_mode) != FileType::RegularFile
        || info.st_uid != armed.uid
        || info.st_nlink != 1
        || info.st_mode & 0o7777 != 0o600
        || info.st_size > OWNER_SIZE_LIMIT
    {
        return Err(Stop::Refused(&armed.owner_unsafe));
    }
    // Longer than any PID text: a full buffer cannot be ours.
    let mut bytes = [0u8; 64];
    let count = rustix::io::read(&owner, &mut bytes).map_err(failed)?;
    let linked = rustix::fs::statat(lock, c"pid", AtFlags::SYMLINK_NOFOLLOW).map_err(failed)?;
    if identity(&linked) != identity(&info) {
        return Err(Stop::Refused(CHANGED_WHILE_READING));
    }
    Ok(&bytes[..count] == armed.owner.as_slice())
}

/// `set(os.listdir(fd)) == {"pid"}`, read with a stack buffer.
fn only_owner_file(lock: BorrowedFd<'_>) -> Result<bool, Stop> {
    let listing = rustix::fs::openat(
        lock,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| Stop::Failed)?;
    let mut owner_seen = false;
    let mut only_owner = true;
    crate::fs::each_entry_name(&listing, |name| match name {
        b"." | b".." => true,
        b"pid" => {
            owner_seen = true;
            true
        }
        _ => {
            only_owner = false;
            false
        }
    })
    .map_err(|_| Stop::Failed)?;
    Ok(owner_seen && only_owner)
}

fn write_stderr(message: &[u8]) {
    // SAFETY: descriptor 2 stays open for the life of the process.
    let stderr = unsafe { BorrowedFd::borrow_raw(2) };
    let _ = rustix::io::write(stderr, message);
}
