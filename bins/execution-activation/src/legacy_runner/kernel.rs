//! `_process` and `_chain`: a Darwin process as the kernel describes it
//! (`proc_bsdinfo`, `proc_pidpath`, `KERN_PROCARGS2`), read through the
//! probe and judged here, so recorded kernel buffers exercise every check.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::LegacyRunnerProbe;
use agents_common::{Error, Result};
use python_compat::{decode_utf8, os::current_uid};

/// `MAX_ARGUMENT_BYTES`: the largest `KERN_PROCARGS2` buffer accepted.
pub(super) const MAX_ARGUMENT_BYTES: usize = 2 * 1024 * 1024;
/// `MAX_ANCESTORS`: how far the ancestor walk climbs.
const MAX_ANCESTORS: usize = 24;
use super::darwin_abi::{
    PBI_PID, PBI_PPID, PBI_RUID, PBI_START_TVSEC, PBI_START_TVUSEC, PBI_STATUS, PBI_SVUID, PBI_UID,
    PROC_BSDINFO_SIZE as BSD_INFO_SIZE, SZOMB as ZOMBIE,
};

/// The `proc_bsdinfo` fields the proof reads (Darwin SDK `sys/proc_info.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BsdInfo {
    status: u32,
    pid: u32,
    ppid: u32,
    uid: u32,
    ruid: u32,
    svuid: u32,
    start_sec: u64,
    start_usec: u64,
}

impl BsdInfo {
    /// Decodes a full native-endian `proc_bsdinfo`; anything but exactly
    /// [`BSD_INFO_SIZE`] bytes is what `proc_pidinfo` returns on failure.
    fn decode(raw: &[u8]) -> Option<BsdInfo> {
        if raw.len() != BSD_INFO_SIZE {
            return None;
        }
        let u32_at = |offset: usize| {
            u32::from_ne_bytes(raw[offset..offset + 4].try_into().expect("4 bytes"))
        };
        let u64_at = |offset: usize| {
            u64::from_ne_bytes(raw[offset..offset + 8].try_into().expect("8 bytes"))
        };
        Some(BsdInfo {
            status: u32_at(PBI_STATUS),
            pid: u32_at(PBI_PID),
            ppid: u32_at(PBI_PPID),
            uid: u32_at(PBI_UID),
            ruid: u32_at(PBI_RUID),
            svuid: u32_at(PBI_SVUID),
            start_sec: u64_at(PBI_START_TVSEC),
            start_usec: u64_at(PBI_START_TVUSEC),
        })
    }

    /// What must not change while the arguments are read.
    fn incarnation(&self) -> (u32, u32, u32, u32, u64, u64) {
        (
            self.pid,
            self.ppid,
            self.uid,
            self.ruid,
            self.start_sec,
            self.start_usec,
        )
    }
}

/// One process of the proof (`Process`): compared whole when the proof is
/// repeated, so a recycled PID or a re-exec is a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Process {
    /// The process ID.
    pub pid: i128,
    /// Its parent's ID.
    pub ppid: i128,
    /// Effective uid.
    pub uid: u32,
    /// Real uid.
    pub ruid: u32,
    /// Start time (seconds, microseconds): the incarnation of the PID.
    pub started: (u64, u64),
    /// `proc_pidpath`: the executable the kernel runs.
    pub executable: PathBuf,
    /// The kernel's argument vector (never the environment).
    pub argv: Vec<String>,
}

/// `_arguments(raw)`: exactly argc strings of a `KERN_PROCARGS2` buffer
/// (int32 argc, the executable path, NUL padding, the arguments); the
/// environment that follows is never parsed.
pub(super) fn parse_arguments(raw: &[u8]) -> Result<Vec<String>> {
    if !(5..=MAX_ARGUMENT_BYTES).contains(&raw.len()) {
        return Err(Error::runtime("legacy process argument buffer is invalid"));
    }
    let count = i32::from_ne_bytes(raw[..4].try_into().expect("4 bytes"));
    if !(1..=512).contains(&count) {
        return Err(Error::runtime("legacy process argument count is invalid"));
    }
    let nul_from = |start: usize| {
        raw[start..]
            .iter()
            .position(|&b| b == 0)
            .map(|offset| start + offset)
    };
    let Some(end) = nul_from(4).filter(|&end| end >= 5) else {
        return Err(Error::runtime(
            "legacy process executable argument is missing",
        ));
    };
    let mut cursor = end + 1;
    while cursor < raw.len() && raw[cursor] == 0 {
        cursor += 1;
    }
    let mut result = Vec::new();
    for _ in 0..count {
        let Some(end) = nul_from(cursor) else {
            return Err(Error::runtime("legacy process arguments are truncated"));
        };
        let value = decode_utf8(&raw[cursor..end])?;
        if value.chars().any(|c| (c as u32) < 32 || c as u32 == 127) {
            return Err(Error::runtime(
                "legacy process argument contains control characters",
            ));
        }
        result.push(value.to_string());
        cursor = end + 1;
    }
    Ok(result)
}

/// `_process(pid)`: a live, non-zombie process of this uid, its executable
/// and arguments, read between two identical views of its incarnation.
pub(super) fn process(probe: &dyn LegacyRunnerProbe, pid: i128) -> Result<Process> {
    if !probe.host_is_darwin() || pid <= 1 {
        return Err(Error::runtime(
            "legacy runner proof requires a live Darwin process",
        ));
    }
    // ctypes would hand the kernel a wrapped C int; no such PID is live.
    let Ok(native_pid) = i32::try_from(pid) else {
        return Err(Error::runtime("legacy process identity is unavailable"));
    };
    let info = || -> Result<BsdInfo> {
        let Some(value) = BsdInfo::decode(&probe.bsd_info(native_pid)) else {
            return Err(Error::runtime("legacy process identity is unavailable"));
        };
        let uid = current_uid();
        if i128::from(value.pid) != pid
            || value.uid != uid
            || value.ruid != uid
            || value.svuid != uid
            || value.status == ZOMBIE
            || value.start_sec == 0
        {
            return Err(Error::runtime(
                "legacy process owner or incarnation is invalid",
            ));
        }
        Ok(value)
    };
    let first = info()?;
    let Some(path) = probe.executable_path(native_pid).filter(|p| !p.is_empty()) else {
        return Err(Error::runtime("legacy process executable is unavailable"));
    };
    let size = probe
        .arguments_size(native_pid)
        .filter(|size| (1..=MAX_ARGUMENT_BYTES).contains(size));
    let Some(size) = size else {
        return Err(Error::runtime("legacy process arguments are unavailable"));
    };
    let Some(mut buffer) = probe.arguments(native_pid, size) else {
        return Err(Error::runtime(
            "legacy process arguments changed while reading",
        ));
    };
    buffer.truncate(size);
    let argv = parse_arguments(&buffer)?;
    let last = info()?;
    if first.incarnation() != last.incarnation() {
        return Err(Error::runtime(
            "legacy process incarnation changed while reading",
        ));
    }
    Ok(Process {
        pid,
        ppid: i128::from(first.ppid),
        uid: first.uid,
        ruid: first.ruid,
        started: (first.start_sec, first.start_usec),
        executable: PathBuf::from(OsStr::from_bytes(&path)),
        argv,
    })
}

/// `_chain(start)`: `start` and its ancestors (at most 24), stopping below
/// PID 2 and refusing a cycle.
pub(super) fn chain(probe: &dyn LegacyRunnerProbe, start: i128) -> Result<Vec<Process>> {
    let mut result: Vec<Process> = Vec::new();
    let mut next = start;
    for _ in 0..MAX_ANCESTORS {
        if next <= 1 {
            break;
        }
        if result.iter().any(|item| item.pid == next) {
            return Err(Error::runtime("legacy process ancestry contains a cycle"));
        }
        let item = process(probe, next)?;
        next = item.ppid;
        result.push(item);
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `KERN_PROCARGS2` buffer as Darwin lays it out: argc, the exec path,
    /// NUL padding to pointer alignment, argv, the environment, apple strings.
    fn procargs(argc: i32, exec: &str, argv: &[&str], env: &[&str]) -> Vec<u8> {
        let mut raw = argc.to_ne_bytes().to_vec();
        raw.extend_from_slice(exec.as_bytes());
        raw.push(0);
        while raw.len() % 8 != 0 {
            raw.push(0);
        }
        for word in argv.iter().chain(env).chain(&["ptr_munge=", "main_stack="]) {
            raw.extend_from_slice(word.as_bytes());
            raw.push(0);
        }
        raw
    }

    fn message(raw: &[u8]) -> String {
        parse_arguments(raw).unwrap_err().message().to_string()
    }

    #[test]
    fn arguments_stop_at_argc_and_never_read_the_environment() {
        let python = "/Library/Frameworks/Python.framework/Versions/3.11/bin/python3.11";
        let raw = procargs(
            3,
            python,
            &["/r/.venv/bin/python", "/r/update_runner.py", "--track"],
            &["SECRET=\u{7f}not-parsed"],
        );
        assert_eq!(
            parse_arguments(&raw).unwrap(),
            ["/r/.venv/bin/python", "/r/update_runner.py", "--track"]
        );
        // An empty argument is a word; padding only follows the exec path.
        let raw = procargs(2, python, &["python", ""], &[]);
        assert_eq!(parse_arguments(&raw).unwrap(), ["python", ""]);
    }

    #[test]
    fn malformed_buffers_are_refused_with_the_original_messages() {
        assert_eq!(
            message(&[1, 0, 0, 0]),
            "legacy process argument buffer is invalid"
        );
        assert_eq!(
            message(&vec![0u8; MAX_ARGUMENT_BYTES + 1]),
            "legacy process argument buffer is invalid"
        );
        for argc in [0, -1, 513] {
            assert_eq!(
                message(&procargs(argc, "/p", &["a"], &[])),
                "legacy process argument count is invalid"
            );
        }
        // No NUL after the count, or an empty executable path.
        let mut raw = 1i32.to_ne_bytes().to_vec();
        raw.extend_from_slice(b"/bin/sh");
        assert_eq!(
            message(&raw),
            "legacy process executable argument is missing"
        );
        let mut raw = 1i32.to_ne_bytes().to_vec();
        raw.extend_from_slice(b"\0\0\0sh\0");
        assert_eq!(
            message(&raw),
            "legacy process executable argument is missing"
        );
        // argc claims more strings than the buffer holds.
        let raw = procargs(2, "/p", &[], &[]);
        let mut short = raw[..raw.len() - "main_stack=\0".len()].to_vec();
        short.truncate(short.len() - 1);
        assert_eq!(message(&short), "legacy process arguments are truncated");
        let mut trailing = 1i32.to_ne_bytes().to_vec();
        trailing.extend_from_slice(b"/p\0\0\0");
        assert_eq!(message(&trailing), "legacy process arguments are truncated");
        for bad in ["a\tb", "a\u{7f}", "\u{1b}[0m"] {
            assert_eq!(
                message(&procargs(1, "/p", &[bad], &[])),
                "legacy process argument contains control characters"
            );
        }
        let mut raw = 1i32.to_ne_bytes().to_vec();
        raw.extend_from_slice(b"/p\0\0\0\0\0\xff\0");
        assert_eq!(
            parse_arguments(&raw).unwrap_err().python_line(),
            "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"
        );
    }

    #[test]
    fn bsd_info_reads_the_sdk_layout() {
        let mut raw = vec![0u8; BSD_INFO_SIZE];
        let mut put =
            |offset: usize, bytes: &[u8]| raw[offset..offset + bytes.len()].copy_from_slice(bytes);
        put(4, &2u32.to_ne_bytes());
        put(12, &4242u32.to_ne_bytes());
        put(16, &1u32.to_ne_bytes());
        put(20, &501u32.to_ne_bytes());
        put(28, &502u32.to_ne_bytes());
        put(36, &503u32.to_ne_bytes());
        put(48, b"Python\0");
        put(120, &1_700_000_000u64.to_ne_bytes());
        put(128, &123_456u64.to_ne_bytes());
        let info = BsdInfo::decode(&raw).unwrap();
        assert_eq!(
            info,
            BsdInfo {
                status: 2,
                pid: 4242,
                ppid: 1,
                uid: 501,
                ruid: 502,
                svuid: 503,
                start_sec: 1_700_000_000,
                start_usec: 123_456,
            }
        );
        assert!(BsdInfo::decode(&raw[..BSD_INFO_SIZE - 1]).is_none());
        assert!(BsdInfo::decode(&[]).is_none());
    }
}
