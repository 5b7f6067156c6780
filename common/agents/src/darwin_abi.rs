//! Facts of the Darwin ABI that the macOS code relies on, written down from
//! Apple's SDK headers.
//!
//! Each constant's doc comment starts with `C:` and names the C expression it
//! equals and the header that defines it. The tests compile every fact as a
//! `_Static_assert` against the Darwin headers (for arm64 and x86_64 macOS,
//! `tests/tests/darwin_abi_facts.rs`), and the Rust declarations that use them
//! are checked against them below at compile time, so a mismatch cannot
//! build.

/// C: `sizeof(struct dirent)` in `sys/dirent.h` (the 64-bit inode layout).
pub(crate) const DIRENT_SIZE: usize = 1048;
/// C: `offsetof(struct dirent, d_reclen)` in `sys/dirent.h`.
pub(crate) const DIRENT_D_RECLEN: usize = 16;
/// C: `offsetof(struct dirent, d_namlen)` in `sys/dirent.h`.
pub(crate) const DIRENT_D_NAMLEN: usize = 18;
/// C: `offsetof(struct dirent, d_name)` in `sys/dirent.h`.
pub(crate) const DIRENT_D_NAME: usize = 21;
/// C: `sizeof(struct attrlist)` in `sys/attr.h`.
pub(crate) const ATTRLIST_SIZE: usize = 24;
/// C: `ATTR_BIT_MAP_COUNT` in `sys/attr.h`.
pub(crate) const ATTR_BIT_MAP_COUNT: u16 = 5;
/// C: `ATTR_VOL_INFO | ATTR_VOL_UUID` in `sys/attr.h`.
pub(crate) const ATTR_VOL_INFO_UUID: u32 = 0x8004_0000;
/// C: `sizeof(u_int32_t) + sizeof(uuid_t)` in `sys/attr.h` (the reply length word, then the UUID).
pub const VOLUME_UUID_REPLY_SIZE: usize = 20;

/// `struct attrlist` of `sys/attr.h`, the request `fgetattrlist` reads.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct AttrList {
    /// `ATTR_BIT_MAP_COUNT`.
    pub(crate) bitmapcount: u16,
    /// Zero.
    pub(crate) reserved: u16,
    /// `attrgroup_t commonattr`.
    pub(crate) commonattr: u32,
    /// `attrgroup_t volattr`.
    pub(crate) volattr: u32,
    /// `attrgroup_t dirattr`.
    pub(crate) dirattr: u32,
    /// `attrgroup_t fileattr`.
    pub(crate) fileattr: u32,
    /// `attrgroup_t forkattr`.
    pub(crate) forkattr: u32,
}

const _: () = assert!(std::mem::size_of::<AttrList>() == ATTRLIST_SIZE);

#[cfg(target_os = "macos")]
const _: () = {
    assert!(std::mem::size_of::<libc::dirent>() == DIRENT_SIZE);
    assert!(std::mem::offset_of!(libc::dirent, d_reclen) == DIRENT_D_RECLEN);
    assert!(std::mem::offset_of!(libc::dirent, d_namlen) == DIRENT_D_NAMLEN);
    assert!(std::mem::offset_of!(libc::dirent, d_name) == DIRENT_D_NAME);
};
