//! A pseudo-terminal for stdin only, so the prompts see a real terminal
//! (`isatty(0)`, canonical line editing, `^D` as end of input) while stdout
//! and stderr stay separate pipes the tests compare.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Stdio;
use std::thread;

/// The master side of a pseudo-terminal whose slave is the child's stdin.
pub(crate) struct Pty {
    master: File,
    slave_path: std::ffi::CString,
}

impl Pty {
    /// Opens a new pseudo-terminal pair and drains its echo in the background.
    pub(crate) fn open() -> Pty {
        // SAFETY: plain libc calls on a descriptor this function owns.
        let master = unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
            assert_eq!(libc::grantpt(fd), 0, "grantpt");
            assert_eq!(libc::unlockpt(fd), 0, "unlockpt");
            File::from(OwnedFd::from_raw_fd(fd))
        };
        let mut name = vec![0 as libc::c_char; 128];
        // SAFETY: the buffer is valid for its length.
        let named = unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
        assert_eq!(named, 0, "ptsname_r");
        // SAFETY: ptsname_r wrote a NUL-terminated string into the buffer.
        let slave_path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_owned();
        // The terminal echoes what is typed; nobody reads it, but it must be
        // drained. The read fails with EIO once every slave is closed.
        let mut echo = master.try_clone().expect("dup the pty master");
        thread::spawn(move || {
            let mut chunk = [0u8; 1024];
            while matches!(echo.read(&mut chunk), Ok(count) if count > 0) {}
        });
        Pty { master, slave_path }
    }

    /// A fresh descriptor of the slave side, to become a child's stdin.
    pub(crate) fn slave_stdio(&self) -> Stdio {
        // SAFETY: opening a path with valid flags; the descriptor is owned below.
        let fd = unsafe {
            libc::open(
                self.slave_path.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        assert!(
            fd >= 0,
            "open pty slave: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Stdio::from(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Types bytes on the terminal (queued until the program reads them).
    pub(crate) fn type_input(&self, bytes: &[u8]) {
        (&self.master).write_all(bytes).expect("type on the pty");
    }
}
