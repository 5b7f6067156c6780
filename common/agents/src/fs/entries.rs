//! Directory listing without allocation, for the Ctrl-C release of the
//! install lock, which runs inside a signal handler: `opendir`/`readdir` may
//! allocate, the raw system calls below do not.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;

/// Calls `visit` with each entry name of the open directory `directory`
/// (`.` and `..` included), from its current offset, until `visit` returns
/// false or the listing ends. Uses a 4 KiB stack buffer only.
#[cfg(not(target_os = "macos"))]
pub(crate) fn each_entry_name(
    directory: impl AsFd,
    mut visit: impl FnMut(&[u8]) -> bool,
) -> rustix::io::Result<()> {
    let mut buffer = [MaybeUninit::<u8>::uninit(); 4096];
    let mut entries = rustix::fs::RawDir::new(directory, &mut buffer);
    while let Some(entry) = entries.next() {
        if !visit(entry?.file_name().to_bytes()) {
            break;
        }
    }
    Ok(())
}

/// Calls `visit` with each entry name of the open directory `directory`
/// (`.` and `..` included), from its current offset, until `visit` returns
/// false or the listing ends. Uses a 4 KiB stack buffer only.
///
/// Darwin has no `getdents`; libSystem's `readdir` is built on
/// `__getdirentries64`, which fills the buffer with `struct dirent` records
/// (64-bit inode layout, see [`crate::darwin_abi`]).
#[cfg(target_os = "macos")]
pub(crate) fn each_entry_name(
    directory: impl AsFd,
    mut visit: impl FnMut(&[u8]) -> bool,
) -> rustix::io::Result<()> {
    use crate::darwin_abi::{DIRENT_D_NAME, DIRENT_D_NAMLEN, DIRENT_D_RECLEN};
    use std::os::fd::AsRawFd;

    extern "C" {
        fn __getdirentries64(
            fd: libc::c_int,
            buffer: *mut libc::c_void,
            size: libc::size_t,
            position: *mut libc::off_t,
        ) -> libc::ssize_t;
    }
    let mut buffer = [MaybeUninit::<u8>::uninit(); 4096];
    let mut position: libc::off_t = 0;
    loop {
        // SAFETY: the buffer is ours and its length is passed; the kernel
        // writes at most that many bytes and returns how many it wrote.
        let filled = unsafe {
            __getdirentries64(
                directory.as_fd().as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                &mut position,
            )
        };
        let filled = match usize::try_from(filled) {
            Ok(0) => return Ok(()),
            Ok(filled) => filled.min(buffer.len()),
            Err(_) => return Err(rustix::io::Errno::from_raw_os_error(errno())),
        };
        // SAFETY: the kernel initialised the first `filled` bytes.
        let records: &[u8] = unsafe { std::slice::from_raw_parts(buffer.as_ptr().cast(), filled) };
        let mut offset = 0;
        while offset + DIRENT_D_NAME <= records.len() {
            let field =
                |at: usize| u16::from_ne_bytes([records[offset + at], records[offset + at + 1]]);
            let (length, name_length) = (
                usize::from(field(DIRENT_D_RECLEN)),
                usize::from(field(DIRENT_D_NAMLEN)),
            );
            let name_end = offset + DIRENT_D_NAME + name_length;
            if length == 0 || name_end > records.len() {
                return Err(rustix::io::Errno::IO);
            }
            if !visit(&records[offset + DIRENT_D_NAME..name_end]) {
                return Ok(());
            }
            offset += length;
        }
    }
}

#[cfg(target_os = "macos")]
fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
