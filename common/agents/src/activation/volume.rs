//! Darwin volume identities: `activation_transaction._volume_uuid`,
//! `_volume_anchor`, `_capture_volume`, `_rebase_volume_bindings`, and the
//! directory bindings of `execution_preparation` (`_binding`,
//! `_check_binding`).
//!
//! macOS renumbers `st_dev` across reboots and remounts, so journals and
//! intents written there name filesystems by their persistent volume UUID
//! (`fgetattrlist(ATTR_VOL_UUID)` on an anchor directory). Reading a journal
//! re-resolves each anchor and translates every stored device number to the
//! current one; inodes are never relaxed. On Linux device numbers are
//! stable, bindings must be absent and `volume_uuid` is `null`.
//!
//! The host and the attribute call are reached through [`VolumeProbe`], so
//! the macOS rules are tested on every platform with recorded attribute
//! buffers; [`SystemVolumes`] is the real one.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, Stat};

use super::io::is_owned_safe_directory;
use super::text::{has_exact_keys, safe_text};
use crate::error::{Error, Result};
use python_compat::{
    json::{Json, JsonObject},
    os::{current_uid, is_type, lstat, open, permission_bits},
    path::{absolute_path, pure_path_text},
    uuid::{is_canonical_uuid, uuid_text},
};

pub use crate::darwin_abi::VOLUME_UUID_REPLY_SIZE;

/// How the journal learns which volume a directory lives on.
pub trait VolumeProbe {
    /// `sys.platform == "darwin"`: bindings are captured, required and
    /// checked only there.
    fn host_is_darwin(&self) -> bool;
    /// `fgetattrlist(directory, {5, volattr = ATTR_VOL_INFO|ATTR_VOL_UUID},
    /// buffer, 20, 0)`: the reply buffer, or the call's errno.
    fn volume_attributes(&self, directory: BorrowedFd<'_>) -> std::result::Result<Vec<u8>, i32>;
}

/// The host's own volumes: `fgetattrlist` on macOS; elsewhere the host is
/// not Darwin and nothing is read.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemVolumes;

impl VolumeProbe for SystemVolumes {
    fn host_is_darwin(&self) -> bool {
        cfg!(target_os = "macos")
    }

    fn volume_attributes(&self, directory: BorrowedFd<'_>) -> std::result::Result<Vec<u8>, i32> {
        darwin::volume_attributes(directory)
    }
}

/// `_volume_anchor(path)`: an owned directory without group/other write
/// (PermissionError `activation volume anchor is unsafe`).
fn volume_anchor(path: &Path) -> Result<Stat> {
    let identity = lstat(path)?;
    if !is_owned_safe_directory(&identity) {
        return Err(Error::permission("activation volume anchor is unsafe"));
    }
    Ok(identity)
}

/// `_volume_uuid(path, identity)`: the persistent UUID of the volume holding
/// exactly the inspected directory (it must not be replaced meanwhile),
/// as lowercase canonical text.
pub fn volume_uuid(volumes: &dyn VolumeProbe, path: &Path, identity: &Stat) -> Result<String> {
    let descriptor = open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::DIRECTORY,
        Mode::empty(),
    )?;
    let opened = rustix::fs::fstat(&descriptor)?;
    if (opened.st_dev, opened.st_ino) != (identity.st_dev, identity.st_ino) {
        return Err(Error::runtime("activation volume anchor changed"));
    }
    let reply = volumes
        .volume_attributes(std::os::fd::AsFd::as_fd(&descriptor))
        .map_err(|errno| {
            let class = Error::from(io::Error::from_raw_os_error(errno)).class();
            Error::new(
                class,
                format!("[Errno {errno}] cannot read activation volume UUID"),
            )
        })?;
    let length = reply
        .get(..4)
        .map(|head| u32::from_ne_bytes(head.try_into().expect("4 bytes")));
    if reply.len() != VOLUME_UUID_REPLY_SIZE || length != Some(VOLUME_UUID_REPLY_SIZE as u32) {
        return Err(Error::runtime("activation volume UUID response is invalid"));
    }
    let uuid = &reply[4..];
    if uuid.iter().all(|&b| b == 0) {
        return Err(Error::runtime(
            "activation filesystem has no persistent volume UUID",
        ));
    }
    let linked = lstat(path)?;
    if (linked.st_dev, linked.st_ino) != (opened.st_dev, opened.st_ino) {
        return Err(Error::runtime("activation volume anchor changed"));
    }
    Ok(uuid_text(
        uuid.try_into().expect("a 16-byte UUID after the length"),
    ))
}

/// `_capture_volume(value, path)`: on macOS (format 2 and 3 journals) bind
/// the volume of `path` under its current device number, refusing a device
/// number already bound to another volume.
pub fn capture_volume(
    volumes: &dyn VolumeProbe,
    value: &mut JsonObject,
    path: &Path,
) -> Result<()> {
    if !volumes.host_is_darwin() || value.get("format") == Some(&Json::from(1)) {
        return Ok(());
    }
    let identity = volume_anchor(path)?;
    let uuid = volume_uuid(volumes, path, &identity)?;
    #[allow(clippy::unnecessary_cast)]
    let key = (identity.st_dev as u64).to_string();
    let Some(bindings) = value
        .get_mut("volume_bindings")
        .and_then(Json::as_object_mut)
    else {
        return Err(Error::runtime("activation volume bindings are invalid"));
    };
    if let Some(bound) = bindings.get(&key) {
        if bound.get("uuid") != Some(&Json::from(uuid.as_str())) {
            return Err(Error::runtime("activation filesystem identity changed"));
        }
        return Ok(());
    }
    let mut binding = JsonObject::new();
    binding.insert("anchor", pure_path_text(path));
    binding.insert("uuid", uuid);
    bindings.insert(key, binding);
    Ok(())
}

/// `_rebase_volume_bindings(value)`: re-resolve every bound anchor and map
/// each stored device number (releases, guard, desired configurations, the
/// prior worker, the Hub fence) to the anchor's current one; the bindings
/// are re-keyed by the current numbers. A journal that names a device
/// without a binding, two bindings that collapsed onto one device, or a Hub
/// reactivation that crossed a remount is refused.
pub(crate) fn rebase_volume_bindings(
    volumes: &dyn VolumeProbe,
    value: &mut JsonObject,
    legacy_format: bool,
) -> Result<()> {
    if legacy_format {
        return Ok(());
    }
    let bindings = match value.get("volume_bindings").and_then(Json::as_object) {
        Some(bindings) if bindings.len() <= 8 => bindings.clone(),
        _ => return Err(Error::runtime("activation volume bindings are invalid")),
    };
    if volumes.host_is_darwin() && bindings.is_empty() {
        return Err(Error::runtime("activation volume bindings are missing"));
    }
    let (mapping, rebound) = rebind(volumes, &bindings)?;
    if mapping.is_empty() {
        return Ok(());
    }
    let reactivation = value
        .get("intent")
        .and_then(Json::as_str)
        .is_some_and(|intent| ["host-reactivation", "failed-host-repair"].contains(&intent));
    if reactivation && mapping.iter().any(|(old, new)| old != new) {
        return Err(Error::runtime(
            "interrupted Team Hub reactivation crossed a filesystem remount; \
             its separate recovery journal requires support-assisted recovery",
        ));
    }
    let coordinates = device_coordinates(value);
    // Map once from each original value: volumes may exchange numbers.
    let mut updates = Vec::new();
    for (path, field) in &coordinates {
        let item = member(value, path);
        let number = item.and_then(|item| python_compat::loose_int(item.get(field)));
        match number.and_then(|n| mapping.iter().find(|(old, _)| *old == n)) {
            Some((_, new)) => updates.push((path.clone(), *field, *new)),
            None => {
                return Err(Error::runtime(
                    "activation filesystem coordinate lacks a volume binding",
                ))
            }
        }
    }
    for (path, field, new) in updates {
        if let Some(item) = member_mut(value, &path) {
            item.insert(field, new);
        }
    }
    value.insert("volume_bindings", rebound);
    Ok(())
}

/// The device number each binding's anchor has now, from the one stored:
/// each anchor re-resolved, on its recorded volume, onto distinct devices.
/// Returns the (stored, current) pairs and the bindings keyed by current
/// device.
fn rebind(
    volumes: &dyn VolumeProbe,
    bindings: &JsonObject,
) -> Result<(Vec<(i128, i128)>, JsonObject)> {
    let mut mapping: Vec<(i128, i128)> = Vec::new();
    let mut rebound = JsonObject::new();
    for (device, binding) in bindings.iter() {
        let device_ok = device
            .as_bytes()
            .first()
            .is_some_and(|b| (b'1'..=b'9').contains(b))
            && device.bytes().all(|b| b.is_ascii_digit());
        let uuid = binding.get("uuid").and_then(Json::as_str);
        if !device_ok
            || !has_exact_keys(Some(binding), &["anchor", "uuid"])
            || binding.get("anchor").and_then(Json::as_str).is_none()
            || !uuid.is_some_and(is_canonical_uuid)
        {
            return Err(Error::runtime("activation volume binding is invalid"));
        }
        let anchor = safe_text(
            binding.get("anchor").unwrap_or(&Json::Null),
            "volume anchor",
            4096,
        )?;
        let path = absolute_path(anchor);
        if pure_path_text(&path) != anchor || !volumes.host_is_darwin() {
            return Err(Error::runtime("activation volume binding is unsupported"));
        }
        let identity = volume_anchor(&path)?;
        if Some(volume_uuid(volumes, &path, &identity)?.as_str()) != uuid {
            return Err(Error::runtime("activation filesystem identity changed"));
        }
        #[allow(clippy::unnecessary_cast)]
        let current = identity.st_dev as u64;
        if rebound.contains_key(&current.to_string()) {
            return Err(Error::runtime(
                "activation filesystems no longer have distinct identities",
            ));
        }
        // Python ints: a stored number beyond i128 can never be current.
        let stored = device.parse::<i128>().unwrap_or(i128::MAX);
        match mapping.iter_mut().find(|(old, _)| *old == stored) {
            Some(entry) => entry.1 = i128::from(current),
            None => mapping.push((stored, i128::from(current))),
        }
        rebound.insert(current.to_string(), binding.clone());
    }
    Ok((mapping, rebound))
}

/// Where a journal stores device numbers, as (path to the object, field):
/// the releases, the guard and the desired configurations, the prior
/// worker release, then the Hub fence.
fn device_coordinates(value: &JsonObject) -> Vec<(Vec<String>, &'static str)> {
    let kinds: &[&str] = if value.get("format") == Some(&Json::from(3)) {
        &["env", "service", "gateway", "execution_layout"]
    } else {
        &["env", "service"]
    };
    // (path to the object, field): top-level members, then nested ones.
    let mut coordinates: Vec<(Vec<String>, &str)> = Vec::new();
    let desired: Vec<String> = kinds.iter().map(|kind| format!("desired_{kind}")).collect();
    for name in [
        "candidate_release",
        "old_release",
        "previous_release",
        "guard",
    ]
    .into_iter()
    .chain(desired.iter().map(String::as_str))
    {
        if python_compat::member_truthy(value.get(name)) {
            coordinates.push((vec![name.to_string()], "device"));
        }
    }
    let old_worker = value
        .get("execution")
        .and_then(|execution| execution.get("old_worker_release"));
    if python_compat::member_truthy(old_worker) {
        coordinates.push((
            vec!["execution".to_string(), "old_worker_release".to_string()],
            "device",
        ));
    }
    if python_compat::member_truthy(value.get("hub")) {
        coordinates.push((vec!["hub".to_string()], "fence_device"));
    }
    coordinates
}

fn member<'a>(value: &'a JsonObject, path: &[String]) -> Option<&'a JsonObject> {
    let mut object = value;
    for key in path {
        object = object.get(key)?.as_object()?;
    }
    Some(object)
}

fn member_mut<'a>(value: &'a mut JsonObject, path: &[String]) -> Option<&'a mut JsonObject> {
    let mut object = value;
    for key in path {
        object = object.get_mut(key)?.as_object_mut()?;
    }
    Some(object)
}

/// `execution_preparation._binding(path)`: the identity (`device`, `inode`,
/// `volume_uuid`) of an owned directory without group/other write that its
/// owner can read and enter; `volume_uuid` is the volume's UUID on macOS
/// and `null` elsewhere.
pub fn directory_binding_on(volumes: &dyn VolumeProbe, path: &Path) -> Result<Json> {
    let info = lstat(path)?;
    let mode = permission_bits(&info);
    if !is_type(&info, FileType::Directory)
        || info.st_uid != current_uid()
        || mode & 0o022 != 0
        || mode & 0o500 != 0o500
    {
        return Err(Error::permission(
            "preparation directory is not safely owned",
        ));
    }
    let volume_uuid = if volumes.host_is_darwin() {
        Json::from(volume_uuid(volumes, path, &info)?)
    } else {
        Json::Null
    };
    let mut binding = JsonObject::new();
    #[allow(clippy::unnecessary_cast)]
    {
        binding.insert("device", Json::Int(i128::from(info.st_dev as u64)));
        binding.insert("inode", Json::Int(i128::from(info.st_ino as u64)));
    }
    binding.insert("volume_uuid", volume_uuid);
    Ok(Json::Object(binding))
}

/// `execution_preparation._check_binding(path, saved)`: `path` must still be
/// the directory `saved` identified: the same inode, and the same volume
/// UUID on macOS (where device numbers change across remounts) or the same
/// device with a `null` UUID elsewhere.
pub fn check_binding_on(volumes: &dyn VolumeProbe, path: &Path, saved: &Json) -> Result<()> {
    let positive = |key: &str| {
        saved
            .get(key)
            .and_then(Json::as_int)
            .is_some_and(|number| number >= 1)
    };
    if !has_exact_keys(Some(saved), &["device", "inode", "volume_uuid"])
        || !positive("device")
        || !positive("inode")
    {
        return Err(Error::value("invalid preparation directory identity"));
    }
    let current = directory_binding_on(volumes, path)?;
    if current.get("inode") != saved.get("inode") {
        return Err(Error::runtime("prepared directory identity changed"));
    }
    let same_filesystem = if volumes.host_is_darwin() {
        python_compat::member_truthy(saved.get("volume_uuid"))
            && saved.get("volume_uuid") == current.get("volume_uuid")
    } else {
        saved.get("volume_uuid") == Some(&Json::Null)
            && saved.get("device") == current.get("device")
    };
    if !same_filesystem {
        return Err(Error::runtime("prepared filesystem identity changed"));
    }
    Ok(())
}

/// `execution_preparation._binding`: the identity (`device`, `inode`,
/// `volume_uuid`) of an owned directory without group/other write that its
/// owner can read and enter; it proves later that the same directory, not a
/// replacement at the same path, is meant.
pub fn directory_binding(path: &Path) -> Result<Json> {
    directory_binding_on(&SystemVolumes, path)
}

/// `execution_preparation._check_binding`: `path` must still be the directory
/// `saved` identified (same inode, and the same device on Linux or the same
/// volume UUID on macOS).
pub fn check_binding(path: &Path, saved: &Json) -> Result<()> {
    check_binding_on(&SystemVolumes, path, saved)
}

#[cfg(target_os = "macos")]
mod darwin {
    //! `fgetattrlist` from libSystem, as the original calls it with ctypes.

    use std::ffi::{c_int, c_uint, c_void};
    use std::os::fd::{AsRawFd, BorrowedFd};

    use crate::darwin_abi::{
        AttrList, ATTR_BIT_MAP_COUNT, ATTR_VOL_INFO_UUID, VOLUME_UUID_REPLY_SIZE,
    };

    extern "C" {
        fn fgetattrlist(
            fd: c_int,
            attr_list: *mut AttrList,
            attr_buf: *mut c_void,
            attr_buf_size: usize,
            options: c_uint,
        ) -> c_int;
    }

    pub(crate) fn volume_attributes(directory: BorrowedFd<'_>) -> Result<Vec<u8>, i32> {
        let mut request = AttrList {
            bitmapcount: ATTR_BIT_MAP_COUNT,
            reserved: 0,
            commonattr: 0,
            volattr: ATTR_VOL_INFO_UUID,
            dirattr: 0,
            fileattr: 0,
            forkattr: 0,
        };
        let mut reply = vec![0u8; VOLUME_UUID_REPLY_SIZE];
        // SAFETY: the request is a valid attrlist and the reply buffer holds
        // exactly the size passed.
        let status = unsafe {
            fgetattrlist(
                directory.as_raw_fd(),
                &mut request,
                reply.as_mut_ptr().cast(),
                VOLUME_UUID_REPLY_SIZE,
                0,
            )
        };
        if status != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        Ok(reply)
    }
}

#[cfg(not(target_os = "macos"))]
mod darwin {
    //! Hosts without volume UUIDs: never asked, because the probe reports
    //! that the host is not Darwin.

    use std::os::fd::BorrowedFd;

    pub(crate) fn volume_attributes(_directory: BorrowedFd<'_>) -> Result<Vec<u8>, i32> {
        Err(rustix::io::Errno::NOSYS.raw_os_error())
    }
}
