//! Facts of the Darwin ABI the legacy-runner proof reads, written down from
//! Apple's SDK headers.
//!
//! Each constant's doc comment starts with `C:` and names the C expression it
//! equals and the header that defines it; the tests compile every fact as a
//! `_Static_assert` against the Darwin headers for arm64 and x86_64 macOS
//! (`tests/tests/it/darwin_abi_facts.rs`). [`ProcBsdInfo`] mirrors the header's
//! struct field by field and is checked against the facts at compile time on
//! every target (its fields have one layout everywhere), so the offsets the
//! decoder reads cannot drift from the struct the kernel fills.

/// C: `sizeof(struct proc_bsdinfo)` in `sys/proc_info.h`.
pub const PROC_BSDINFO_SIZE: usize = 136;
/// C: `offsetof(struct proc_bsdinfo, pbi_status)` in `sys/proc_info.h`.
pub(super) const PBI_STATUS: usize = 4;
/// C: `offsetof(struct proc_bsdinfo, pbi_pid)` in `sys/proc_info.h`.
pub(super) const PBI_PID: usize = 12;
/// C: `offsetof(struct proc_bsdinfo, pbi_ppid)` in `sys/proc_info.h`.
pub(super) const PBI_PPID: usize = 16;
/// C: `offsetof(struct proc_bsdinfo, pbi_uid)` in `sys/proc_info.h`.
pub(super) const PBI_UID: usize = 20;
/// C: `offsetof(struct proc_bsdinfo, pbi_ruid)` in `sys/proc_info.h`.
pub(super) const PBI_RUID: usize = 28;
/// C: `offsetof(struct proc_bsdinfo, pbi_svuid)` in `sys/proc_info.h`.
pub(super) const PBI_SVUID: usize = 36;
/// C: `offsetof(struct proc_bsdinfo, pbi_start_tvsec)` in `sys/proc_info.h`.
pub(super) const PBI_START_TVSEC: usize = 120;
/// C: `offsetof(struct proc_bsdinfo, pbi_start_tvusec)` in `sys/proc_info.h`.
pub(super) const PBI_START_TVUSEC: usize = 128;
/// C: `PROC_PIDTBSDINFO` in `sys/proc_info.h`.
pub(super) const PROC_PIDTBSDINFO: i32 = 3;
/// C: `PROC_PIDPATHINFO_MAXSIZE` in `libproc.h` (the original's `proc_pidpath` buffer).
pub(super) const PROC_PIDPATHINFO_MAXSIZE: usize = 4096;
/// C: `SZOMB` in `sys/proc.h` (a zombie's `pbi_status`).
pub(super) const SZOMB: u32 = 5;
/// C: `CTL_KERN` in `sys/sysctl.h`.
pub(super) const CTL_KERN: i32 = 1;
/// C: `KERN_PROCARGS2` in `sys/sysctl.h`.
pub(super) const KERN_PROCARGS2: i32 = 49;

/// `struct proc_bsdinfo` of `sys/proc_info.h`, field by field.
#[repr(C)]
// The layout is the point; the decoder reads bytes.
pub(super) struct ProcBsdInfo {
    pbi_flags: u32,
    pbi_status: u32,
    pbi_xstatus: u32,
    pbi_pid: u32,
    pbi_ppid: u32,
    pbi_uid: u32,
    pbi_gid: u32,
    pbi_ruid: u32,
    pbi_rgid: u32,
    pbi_svuid: u32,
    pbi_svgid: u32,
    rfu_1: u32,
    pbi_comm: [u8; 16],
    pbi_name: [u8; 32],
    pbi_nfiles: u32,
    pbi_pgid: u32,
    pbi_pjobc: u32,
    e_tdev: u32,
    e_tpgid: u32,
    pbi_nice: i32,
    pbi_start_tvsec: u64,
    pbi_start_tvusec: u64,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ProcBsdInfo>() == PROC_BSDINFO_SIZE);
    assert!(offset_of!(ProcBsdInfo, pbi_status) == PBI_STATUS);
    assert!(offset_of!(ProcBsdInfo, pbi_pid) == PBI_PID);
    assert!(offset_of!(ProcBsdInfo, pbi_ppid) == PBI_PPID);
    assert!(offset_of!(ProcBsdInfo, pbi_uid) == PBI_UID);
    assert!(offset_of!(ProcBsdInfo, pbi_ruid) == PBI_RUID);
    assert!(offset_of!(ProcBsdInfo, pbi_svuid) == PBI_SVUID);
    assert!(offset_of!(ProcBsdInfo, pbi_start_tvsec) == PBI_START_TVSEC);
    assert!(offset_of!(ProcBsdInfo, pbi_start_tvusec) == PBI_START_TVUSEC);
};
