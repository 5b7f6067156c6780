//! `--recover-only`'s `recovery_context` (`update_recovery.recovery_context`)
//! over a real split journal and the admitted intent, on both platforms: on
//! Linux directories are bound by device number, on macOS by the volume UUID
//! `fgetattrlist(ATTR_VOL_UUID)` reports (replayed here, as `diskutil info`
//! prints it), and the journal's device numbers are rebased after a remount.

use std::fs;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use agents_common::{
    directory_binding_on, Result, SystemVolumes, VolumeProbe, VOLUME_UUID_REPLY_SIZE,
};
use agents_tests::assert_error;
use agents_tests::journal_writer::{Install, API_CONTRACT};
use python_compat::{
    json::{Json, JsonObject},
    json_object, ErrorClass,
};
use update_runner::recovery::recovery_context_on;

const UPDATE_ID: &str = "0123456789abcdef0123456789abcdef";
const IDENTITY: &str = "server-identity-0123";
/// `diskutil info /` of the data volume, and of another volume.
const DATA_VOLUME: &str = "0A81F3B1-51D9-3335-B3E3-169C3640360D";
const OTHER_VOLUME: &str = "C3D2E1F0-1A2B-4C3D-8E9F-0A1B2C3D4E5F";

/// A macOS host whose every directory is on the volume `diskutil` names.
struct Darwin(&'static str);

impl VolumeProbe for Darwin {
    fn host_is_darwin(&self) -> bool {
        true
    }

    fn volume_attributes(&self, _directory: BorrowedFd<'_>) -> std::result::Result<Vec<u8>, i32> {
        let digits: String = self.0.chars().filter(|c| *c != '-').collect();
        let mut reply = (VOLUME_UUID_REPLY_SIZE as u32).to_ne_bytes().to_vec();
        for index in (0..32).step_by(2) {
            reply.push(u8::from_str_radix(&digits[index..index + 2], 16).unwrap());
        }
        Ok(reply)
    }
}

/// An update to 1.1.0 journaled in `prepared`, and the row the server wrote
/// when it admitted it (the intent captured with `volumes`).
struct Admitted {
    install: Install,
    status: JsonObject,
}

impl Admitted {
    fn new(tag: &str, volumes: &dyn VolumeProbe) -> Admitted {
        let install = Install::new(tag);
        install.begin_update();
        let candidate = install.releases().join(".staging-1.1.0-4242");
        let binding = |path: &Path| directory_binding_on(volumes, path).unwrap();
        let intent = json_object! {
            "format" => 1,
            "root" => install.root().to_str().unwrap(),
            "root_binding" => binding(&install.root()),
            "candidate_binding" => binding(&candidate),
            "version" => "1.1.0",
            "api_contract" => API_CONTRACT,
            "update_id" => UPDATE_ID,
            "server_identity" => IDENTITY,
        };
        let status = json_object! {
            "update_id" => UPDATE_ID,
            "phase" => "installing",
            "target_version" => "1.1.0",
            "_activation_recovery" => intent,
        };
        Admitted { install, status }
    }

    fn device(&self) -> u64 {
        fs::metadata(self.install.root()).unwrap().dev()
    }

    /// The journal as macOS wrote it: bound to the data volume under the
    /// device number `device` every stored coordinate carries.
    fn bind_journal(&self, device: u64) {
        let root = self.install.root();
        self.install.edit_manifest(|value| {
            for name in ["candidate_release", "old_release"] {
                let item = value.get_mut(name).and_then(Json::as_object_mut).unwrap();
                item.insert("device", device);
            }
            let execution = value.get_mut("execution").and_then(Json::as_object_mut);
            let old_worker = execution
                .unwrap()
                .get_mut("old_worker_release")
                .and_then(Json::as_object_mut)
                .unwrap();
            old_worker.insert("device", device);
            value.insert(
                "volume_bindings",
                json_object! {
                    device.to_string() => json_object! {
                        "anchor" => root.to_str().unwrap(),
                        "uuid" => DATA_VOLUME.to_lowercase(),
                    },
                },
            );
        });
    }

    fn candidate_binding(&mut self) -> &mut JsonObject {
        self.status
            .get_mut("_activation_recovery")
            .and_then(Json::as_object_mut)
            .unwrap()
            .get_mut("candidate_binding")
            .and_then(Json::as_object_mut)
            .unwrap()
    }

    fn context(&self, volumes: &dyn VolumeProbe) -> Result<String> {
        let value = recovery_context_on(&self.install.root(), &self.status, IDENTITY, volumes)?;
        Ok(value.expect("a journal").transaction_id().to_string())
    }
}

#[test]
fn linux_binds_the_candidate_by_device_with_no_volume_uuid() {
    let mut admitted = Admitted::new("linux-candidate", &SystemVolumes);
    let transaction = admitted.install.manifest();
    let expected = transaction.get("transaction_id").unwrap().as_str().unwrap();
    assert_eq!(admitted.context(&SystemVolumes).unwrap(), expected);
    let device = admitted.device();
    admitted.candidate_binding().insert("device", device + 1);
    assert_error(
        admitted.context(&SystemVolumes),
        ErrorClass::Runtime,
        "activation candidate filesystem changed",
    );
}

#[test]
fn macos_binds_the_candidate_by_the_root_volume_across_a_remount() {
    let darwin = Darwin(DATA_VOLUME);
    let mut admitted = Admitted::new("darwin-candidate", &darwin);
    let device = admitted.device();
    // Captured before a reboot renumbered the data volume: the journal and
    // the intent carry the old device number, the volume UUID is the same.
    let old = device + 7;
    admitted.bind_journal(old);
    admitted.candidate_binding().insert("device", old);
    let intent = admitted.status.get("_activation_recovery").unwrap();
    let uuid = Json::from(DATA_VOLUME.to_lowercase());
    assert_eq!(
        intent.get("root_binding").unwrap().get("volume_uuid"),
        Some(&uuid)
    );
    let transaction = admitted.install.manifest();
    let expected = transaction.get("transaction_id").unwrap().as_str().unwrap();
    assert_eq!(admitted.context(&darwin).unwrap(), expected);
}

#[test]
fn macos_refuses_a_candidate_on_another_or_no_volume() {
    let darwin = Darwin(DATA_VOLUME);
    for uuid in [
        Json::from(OTHER_VOLUME.to_lowercase()),
        Json::Null,
        Json::from(""),
    ] {
        let mut admitted = Admitted::new("darwin-volume", &darwin);
        admitted.bind_journal(admitted.device());
        admitted
            .candidate_binding()
            .insert("volume_uuid", uuid.clone());
        assert_error(
            admitted.context(&darwin),
            ErrorClass::Runtime,
            "activation candidate volume changed",
        );
    }
    // The inode still binds the exact candidate directory first.
    let mut admitted = Admitted::new("darwin-inode", &darwin);
    admitted.bind_journal(admitted.device());
    admitted.candidate_binding().insert("inode", 1);
    assert_error(
        admitted.context(&darwin),
        ErrorClass::Runtime,
        "activation journal candidate identity changed",
    );
}
