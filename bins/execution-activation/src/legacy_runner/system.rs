//! The production [`LegacyRunnerProbe`]: libproc and `sysctl` on macOS, the
//! default tmux socket, `tmux` on `PATH`, and a clean-environment command.
//! On any other host it reports "not Darwin", which refuses the proof
//! before anything else is read (the original's `sys.platform` check).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::LegacyRunnerProbe;
use agents_common::{CommandCapture, CommandRunner, Result, SystemCommandRunner};
use python_compat::{os::current_uid, path::resolve};

/// Reads the live kernel, tmux and `PATH` of this host.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLegacyProbe;

impl LegacyRunnerProbe for SystemLegacyProbe {
    fn host_is_darwin(&self) -> bool {
        cfg!(target_os = "macos")
    }

    fn bsd_info(&self, pid: i32) -> Vec<u8> {
        darwin::bsd_info(pid)
    }

    fn executable_path(&self, pid: i32) -> Option<Vec<u8>> {
        darwin::executable_path(pid)
    }

    fn arguments_size(&self, pid: i32) -> Option<usize> {
        darwin::arguments_size(pid)
    }

    fn arguments(&self, pid: i32, capacity: usize) -> Option<Vec<u8>> {
        darwin::arguments(pid, capacity)
    }

    fn tmux_socket(&self) -> Result<PathBuf> {
        Ok(resolve(Path::new("/tmp"))?
            .join(format!("tmux-{}", current_uid()))
            .join("default"))
    }

    fn tmux_program(&self) -> Option<PathBuf> {
        which("tmux")
    }

    fn run(
        &self,
        argv: &[String],
        environment: &[(&str, String)],
        timeout: Duration,
    ) -> Result<CommandCapture> {
        SystemCommandRunner::default()
            .with_clean_environment()
            .with_environment(
                environment
                    .iter()
                    .map(|(key, value)| (*key, value.as_str())),
            )
            .run(argv, timeout)
    }
}

/// `shutil.which(name)`: the first `PATH` entry holding an executable
/// non-directory `name` (macOS's `CS_PATH` when `PATH` is unset).
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin:/usr/sbin:/sbin".into());
    let mut seen: Vec<PathBuf> = Vec::new();
    for directory in std::env::split_paths(&path) {
        if seen.contains(&directory) {
            continue;
        }
        seen.push(directory.clone());
        let candidate = directory.join(name);
        let executable = rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_ok();
        if executable && candidate.exists() && !candidate.is_dir() {
            return Some(candidate);
        }
    }
    None
}

#[cfg(target_os = "macos")]
mod darwin {
    //! libproc and `sysctl(KERN_PROCARGS2)`, as the original calls them with
    //! ctypes.

    use std::ffi::{c_int, c_uint, c_void};

    use super::super::darwin_abi::{
        CTL_KERN, KERN_PROCARGS2, PROC_BSDINFO_SIZE as BSD_INFO_SIZE,
        PROC_PIDPATHINFO_MAXSIZE as PATH_BUFFER, PROC_PIDTBSDINFO,
    };

    extern "C" {
        fn proc_pidinfo(
            pid: c_int,
            flavor: c_int,
            arg: u64,
            buffer: *mut c_void,
            buffersize: c_int,
        ) -> c_int;
        fn proc_pidpath(pid: c_int, buffer: *mut c_void, buffersize: u32) -> c_int;
        fn sysctl(
            name: *mut c_int,
            namelen: c_uint,
            oldp: *mut c_void,
            oldlenp: *mut usize,
            newp: *mut c_void,
            newlen: usize,
        ) -> c_int;
    }

    pub(crate) fn bsd_info(pid: i32) -> Vec<u8> {
        let mut buffer = vec![0u8; BSD_INFO_SIZE];
        // SAFETY: the buffer holds BSD_INFO_SIZE bytes, the size passed.
        let filled = unsafe {
            proc_pidinfo(
                pid,
                PROC_PIDTBSDINFO,
                0,
                buffer.as_mut_ptr().cast(),
                BSD_INFO_SIZE as c_int,
            )
        };
        buffer.truncate(usize::try_from(filled).unwrap_or(0));
        buffer
    }

    pub(crate) fn executable_path(pid: i32) -> Option<Vec<u8>> {
        let mut buffer = vec![0u8; PATH_BUFFER];
        // SAFETY: the buffer holds PATH_BUFFER bytes, the size passed.
        let length = unsafe { proc_pidpath(pid, buffer.as_mut_ptr().cast(), PATH_BUFFER as u32) };
        if length <= 0 {
            return None;
        }
        // `path.value`: the bytes before the first NUL.
        let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
        buffer.truncate(end);
        Some(buffer)
    }

    /// `sysctl(mib, 3, NULL, &size, NULL, 0)`: the buffer size needed.
    pub(crate) fn arguments_size(pid: i32) -> Option<usize> {
        let mut mib = [CTL_KERN, KERN_PROCARGS2, pid];
        let mut size: usize = 0;
        // SAFETY: a null old-value buffer asks only for the size.
        let status = unsafe {
            sysctl(
                mib.as_mut_ptr(),
                3,
                std::ptr::null_mut(),
                &mut size,
                std::ptr::null_mut(),
                0,
            )
        };
        (status == 0).then_some(size)
    }

    /// The arguments read into a buffer of `capacity` bytes.
    pub(crate) fn arguments(pid: i32, capacity: usize) -> Option<Vec<u8>> {
        let mut mib = [CTL_KERN, KERN_PROCARGS2, pid];
        let mut buffer = vec![0u8; capacity];
        let mut size = capacity;
        // SAFETY: the buffer holds `size` bytes; the kernel updates `size`.
        let status = unsafe {
            sysctl(
                mib.as_mut_ptr(),
                3,
                buffer.as_mut_ptr().cast(),
                &mut size,
                std::ptr::null_mut(),
                0,
            )
        };
        if status != 0 {
            return None;
        }
        buffer.truncate(size.min(capacity));
        Some(buffer)
    }
}

#[cfg(not(target_os = "macos"))]
mod darwin {
    //! Hosts without libproc: never reached, because the probe reports that
    //! the host is not Darwin and the proof refuses first.

    pub(super) fn bsd_info(_pid: i32) -> Vec<u8> {
        Vec::new()
    }

    pub(super) fn executable_path(_pid: i32) -> Option<Vec<u8>> {
        None
    }

    pub(super) fn arguments_size(_pid: i32) -> Option<usize> {
        None
    }

    pub(super) fn arguments(_pid: i32, _capacity: usize) -> Option<Vec<u8>> {
        None
    }
}
