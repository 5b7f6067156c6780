//! macOS volume bindings of the activation journal and of prepared
//! directories, over real journals and directories, with the volume UUIDs
//! replayed as `fgetattrlist(ATTR_VOL_UUID)` returns them. The UUIDs are
//! written as `diskutil info` prints them ("Volume UUID: 0A81F3B1-...").
//!
//! Two real filesystems stand for two volumes: the install tree on /tmp and
//! the unit directory on the /dev/shm tmpfs, so device numbers, capture and
//! rebasing are the kernel's own.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use agents_common::{
    check_binding_on, config_staging_paths, directory_binding_on, validate_invocation, volume_uuid,
    ActivationInvocation, ActivationManifest, SystemVolumes, VolumeProbe, VOLUME_UUID_REPLY_SIZE,
};
use agents_tests::journal_writer::{Install, Roots};
use agents_tests::{assert_error, make_dir, write_file};
use execution_activation::replace_config::replace_config_on;
use python_compat::{
    json::{Json, JsonObject},
    json_object, ErrorClass,
};

/// `diskutil info /` of the data volume, and of a second APFS volume.
const DATA_VOLUME: &str = "0A81F3B1-51D9-3335-B3E3-169C3640360D";
const UNIT_VOLUME: &str = "5F2C4E1B-8D3A-4B6E-9C1F-2A7B3D9E0F41";
const OTHER_VOLUME: &str = "C3D2E1F0-1A2B-4C3D-8E9F-0A1B2C3D4E5F";
const UNIT: &str = "[Unit]\nDescription=candidate worker\n";

/// What `fgetattrlist` gives: the attribute buffer or the errno.
type Reply = Result<Vec<u8>, i32>;

/// The `fgetattrlist` reply for a volume UUID as `diskutil` prints it: the
/// u32 length (20) and the 16 UUID bytes.
fn attributes(diskutil: &str) -> Reply {
    let digits: String = diskutil.chars().filter(|c| *c != '-').collect();
    let mut reply = (VOLUME_UUID_REPLY_SIZE as u32).to_ne_bytes().to_vec();
    for index in (0..32).step_by(2) {
        reply.push(u8::from_str_radix(&digits[index..index + 2], 16).unwrap());
    }
    Ok(reply)
}

/// The journal's spelling of a `diskutil` UUID (`str(uuid.UUID(...))`).
fn journal_uuid(diskutil: &str) -> String {
    diskutil.to_lowercase()
}

/// Recorded volumes: a reply per device, overridden per directory inode.
struct Volumes {
    darwin: bool,
    by_device: RefCell<HashMap<u64, Reply>>,
    by_inode: RefCell<HashMap<u64, Reply>>,
}

impl Volumes {
    fn darwin() -> Volumes {
        Volumes {
            darwin: true,
            by_device: RefCell::new(HashMap::new()),
            by_inode: RefCell::new(HashMap::new()),
        }
    }

    fn volume(self, path: &Path, diskutil: &str) -> Volumes {
        let device = fs::metadata(path).unwrap().dev();
        self.by_device
            .borrow_mut()
            .insert(device, attributes(diskutil));
        self
    }

    fn directory(&self, path: &Path, reply: Reply) {
        let inode = fs::metadata(path).unwrap().ino();
        self.by_inode.borrow_mut().insert(inode, reply);
    }
}

impl VolumeProbe for Volumes {
    fn host_is_darwin(&self) -> bool {
        self.darwin
    }
    fn volume_attributes(&self, directory: BorrowedFd<'_>) -> Result<Vec<u8>, i32> {
        let info = rustix::fs::fstat(directory).unwrap();
        if let Some(reply) = self.by_inode.borrow().get(&info.st_ino) {
            return reply.clone();
        }
        self.by_device
            .borrow()
            .get(&info.st_dev)
            .cloned()
            .unwrap_or(Err(22))
    }
}

/// An update in `linked` whose unit directory lives on a second filesystem.
struct TwoVolumes {
    install: Install,
    shm: PathBuf,
}

impl Drop for TwoVolumes {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.shm);
    }
}

impl std::ops::Deref for TwoVolumes {
    type Target = Roots;
    fn deref(&self) -> &Roots {
        &self.install.roots
    }
}

impl TwoVolumes {
    fn linked(tag: &str) -> TwoVolumes {
        let mut install = Install::new(tag);
        let shm = PathBuf::from(format!(
            "/dev/shm/agents-volume-{tag}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&shm);
        make_dir(&shm, 0o755);
        make_dir(&shm.join("home"), 0o755);
        install.roots.home = shm.join("home");
        install.begin_update();
        install.advance_to_linked();
        assert_ne!(
            fs::metadata(install.root()).unwrap().dev(),
            fs::metadata(install.unit_dir()).unwrap().dev(),
            "the unit directory must be on another filesystem"
        );
        TwoVolumes { install, shm }
    }

    fn device(&self, path: &Path) -> u64 {
        fs::metadata(path).unwrap().dev()
    }

    /// The journal as macOS wrote it before a reboot renumbered the data
    /// volume from `old` to its current device: every stored device is
    /// `old`, bound to the volume of the install root.
    fn written_before_remount(&self, old: u64) {
        self.install.edit_manifest(|value| {
            renumber(value, old);
            value.insert(
                "volume_bindings",
                json_object! {
                    old.to_string() => json_object! {
                        "anchor" => self.root().to_str().unwrap(),
                        "uuid" => journal_uuid(DATA_VOLUME),
                    },
                },
            );
        });
    }

    fn read(&self, volumes: &dyn VolumeProbe) -> agents_common::Result<ActivationManifest> {
        ActivationManifest::read_on(&self.root(), false, volumes).map(|(_directory, value)| value)
    }

    fn stage_unit(&self) -> PathBuf {
        let manifest = self.install.manifest();
        let (source, _publication) = config_staging_paths(
            &self.service_path(),
            manifest.get("transaction_id").unwrap().as_str().unwrap(),
            "service",
        );
        write_file(&source, UNIT.as_bytes(), 0o600);
        source
    }

    fn publish_unit(&self, volumes: &dyn VolumeProbe) -> agents_common::Result<()> {
        let manifest = self.read(volumes)?;
        let args = ActivationInvocation::owned(&manifest, &self.root());
        let source = self.stage_unit();
        replace_config_on(volumes, &args, "service", &source, 0o644, &mut |_| Ok(()))
    }
}

/// Set every device coordinate of a stored journal to `device`.
fn renumber(value: &mut JsonObject, device: u64) {
    for name in [
        "candidate_release",
        "old_release",
        "previous_release",
        "desired_env",
        "desired_service",
        "desired_gateway",
        "desired_execution_layout",
    ] {
        if let Some(item) = value.get_mut(name).and_then(Json::as_object_mut) {
            if !item.is_empty() {
                item.insert("device", device);
            }
        }
    }
    let execution = value.get_mut("execution").unwrap().as_object_mut().unwrap();
    let old_worker = execution
        .get_mut("old_worker_release")
        .unwrap()
        .as_object_mut()
        .unwrap();
    if !old_worker.is_empty() {
        old_worker.insert("device", device);
    }
}

fn device_of(value: &JsonObject, path: &[&str]) -> Json {
    let mut item = value;
    for key in path {
        item = item.get(key).unwrap().as_object().unwrap();
    }
    item.get("device").cloned().unwrap()
}

#[test]
fn linux_journals_carry_no_bindings_and_refuse_any() {
    let journal = TwoVolumes::linked("linux");
    journal.read(&SystemVolumes).unwrap();
    journal.publish_unit(&SystemVolumes).unwrap();
    assert_eq!(
        journal.install.manifest().get("volume_bindings"),
        Some(&Json::Object(JsonObject::new())),
        "Linux never captures a binding"
    );
    journal.written_before_remount(journal.device(&journal.root()) + 7);
    assert_error(
        journal.read(&SystemVolumes),
        ErrorClass::Runtime,
        "activation volume binding is unsupported",
    );
}

#[test]
fn a_remount_rebases_every_device_number_and_the_next_write_persists_it() {
    let journal = TwoVolumes::linked("remount");
    let data = journal.device(&journal.root());
    let old = data + 7;
    journal.written_before_remount(old);
    let volumes = Volumes::darwin()
        .volume(&journal.root(), DATA_VOLUME)
        .volume(&journal.unit_dir(), UNIT_VOLUME);
    let manifest = journal.read(&volumes).unwrap();
    let value = manifest.as_json();
    let value = value.as_object().unwrap();
    for path in [
        &["candidate_release"][..],
        &["old_release"],
        &["execution", "old_worker_release"],
    ] {
        assert_eq!(device_of(value, path), Json::from(data), "{path:?}");
    }
    let root_binding = json_object! {
        "anchor" => journal.root().to_str().unwrap(),
        "uuid" => journal_uuid(DATA_VOLUME),
    };
    assert_eq!(
        value.get("volume_bindings"),
        Some(&Json::from(
            json_object! { data.to_string() => root_binding.clone() }
        ))
    );
    // The rebased journal validates against the live releases.
    let args = ActivationInvocation::owned(&manifest, &journal.root());
    validate_invocation(&args, &manifest, false, None).unwrap();
    // Publishing binds the unit directory's volume before naming its inode,
    // and persists the rebased numbers.
    journal.publish_unit(&volumes).unwrap();
    let stored = journal.install.manifest();
    let unit_device = journal.device(&journal.unit_dir());
    assert_eq!(
        stored.get("volume_bindings"),
        Some(&Json::from(json_object! {
            data.to_string() => root_binding,
            unit_device.to_string() => json_object! {
                "anchor" => journal.unit_dir().to_str().unwrap(),
                "uuid" => journal_uuid(UNIT_VOLUME),
            },
        }))
    );
    assert_eq!(device_of(&stored, &["candidate_release"]), Json::from(data));
    assert_eq!(
        device_of(&stored, &["desired_service"]),
        Json::from(unit_device)
    );
    assert_eq!(fs::read_to_string(journal.service_path()).unwrap(), UNIT);
    // The same journal still reads on the next boot.
    journal.read(&volumes).unwrap();
}

#[test]
fn a_darwin_journal_needs_a_binding_for_every_stored_device() {
    let journal = TwoVolumes::linked("missing");
    let volumes = Volumes::darwin().volume(&journal.root(), DATA_VOLUME);
    assert_error(
        journal.read(&volumes),
        ErrorClass::Runtime,
        "activation volume bindings are missing",
    );
    // Bound under the current number, but the journal names the old one.
    let data = journal.device(&journal.root());
    journal.written_before_remount(data + 7);
    journal.install.edit_manifest(|value| {
        let bindings = value.remove("volume_bindings").unwrap();
        let binding = bindings
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .clone();
        value.insert(
            "volume_bindings",
            json_object! { data.to_string() => binding },
        );
    });
    assert_error(
        journal.read(&volumes),
        ErrorClass::Runtime,
        "activation filesystem coordinate lacks a volume binding",
    );
}

#[test]
fn bindings_are_closed_canonical_and_at_most_eight() {
    let journal = TwoVolumes::linked("shape");
    let volumes = Volumes::darwin().volume(&journal.root(), DATA_VOLUME);
    let root = journal.root().to_str().unwrap().to_string();
    let good = || {
        json_object! { "anchor" => root.as_str(), "uuid" => journal_uuid(DATA_VOLUME) }
    };
    let mut extra = good();
    extra.insert("label", "Macintosh HD");
    let cases: Vec<(Json, ErrorClass, &str)> = vec![
        (
            Json::from(json_object! { "0" => good() }),
            ErrorClass::Runtime,
            "activation volume binding is invalid",
        ),
        (
            Json::from(json_object! { "012" => good() }),
            ErrorClass::Runtime,
            "activation volume binding is invalid",
        ),
        (
            Json::from(json_object! { "12" => extra }),
            ErrorClass::Runtime,
            "activation volume binding is invalid",
        ),
        (
            Json::from(json_object! {
                "12" => json_object! { "anchor" => root.as_str(), "uuid" => DATA_VOLUME },
            }),
            ErrorClass::Runtime,
            "activation volume binding is invalid",
        ),
        (
            Json::from(json_object! {
                "12" => json_object! { "anchor" => "", "uuid" => journal_uuid(DATA_VOLUME) },
            }),
            ErrorClass::Runtime,
            "activation transaction volume anchor is invalid",
        ),
        (
            Json::from(json_object! {
                "12" => json_object! {
                    "anchor" => format!("{root}/../install"),
                    "uuid" => journal_uuid(DATA_VOLUME),
                },
            }),
            ErrorClass::Runtime,
            "activation volume binding is unsupported",
        ),
        (
            Json::from(json_object! {
                "12" => json_object! { "anchor" => "install", "uuid" => journal_uuid(DATA_VOLUME) },
            }),
            ErrorClass::Runtime,
            "activation volume binding is unsupported",
        ),
        (
            Json::from(vec![Json::from(1)]),
            ErrorClass::Runtime,
            "activation volume bindings are invalid",
        ),
        (
            Json::from((1..=9).map(|n| (n.to_string(), Json::from(good()))).fold(
                JsonObject::new(),
                |mut object, (key, value)| {
                    object.insert(key, value);
                    object
                },
            )),
            ErrorClass::Runtime,
            "activation volume bindings are invalid",
        ),
    ];
    for (bindings, class, message) in cases {
        journal.install.edit_manifest(|value| {
            value.insert("volume_bindings", bindings);
        });
        assert_error(journal.read(&volumes), class, message);
    }
}

#[test]
fn a_changed_unsafe_or_unreadable_volume_refuses() {
    let journal = TwoVolumes::linked("changed");
    let data = journal.device(&journal.root());
    journal.written_before_remount(data + 7);
    let volumes = Volumes::darwin().volume(&journal.root(), OTHER_VOLUME);
    assert_error(
        journal.read(&volumes),
        ErrorClass::Runtime,
        "activation filesystem identity changed",
    );
    let volumes = Volumes::darwin().volume(&journal.root(), DATA_VOLUME);
    let replies: Vec<(Reply, ErrorClass, &str)> = vec![
        (
            Err(45),
            ErrorClass::Os,
            "[Errno 45] cannot read activation volume UUID",
        ),
        (
            Err(13),
            ErrorClass::Permission,
            "[Errno 13] cannot read activation volume UUID",
        ),
        (
            Ok({
                let mut reply = attributes(DATA_VOLUME).unwrap();
                reply[..4].copy_from_slice(&24u32.to_ne_bytes());
                reply
            }),
            ErrorClass::Runtime,
            "activation volume UUID response is invalid",
        ),
        (
            Ok(attributes(DATA_VOLUME).unwrap()[..16].to_vec()),
            ErrorClass::Runtime,
            "activation volume UUID response is invalid",
        ),
        (
            attributes("00000000-0000-0000-0000-000000000000"),
            ErrorClass::Runtime,
            "activation filesystem has no persistent volume UUID",
        ),
    ];
    for (reply, class, message) in replies {
        volumes.directory(&journal.root(), reply);
        assert_error(journal.read(&volumes), class, message);
    }
    volumes.by_inode.borrow_mut().clear();
    journal.read(&volumes).unwrap();
    // An anchor writable by its group is not trusted to name a volume.
    let anchor = journal.install.base.join("anchor");
    make_dir(&anchor, 0o775);
    journal.install.edit_manifest(|value| {
        value.insert(
            "volume_bindings",
            json_object! {
                (data + 7).to_string() => json_object! {
                    "anchor" => anchor.to_str().unwrap(),
                    "uuid" => journal_uuid(DATA_VOLUME),
                },
            },
        );
    });
    assert_error(
        journal.read(&volumes),
        ErrorClass::Permission,
        "activation volume anchor is unsafe",
    );
    fs::remove_dir(&anchor).unwrap();
    assert_error(
        journal.read(&volumes),
        ErrorClass::NotFound,
        &format!(
            "[Errno 2] No such file or directory: '{}'",
            anchor.display()
        ),
    );
}

#[test]
fn two_bindings_may_not_collapse_onto_one_device() {
    let journal = TwoVolumes::linked("collapse");
    let data = journal.device(&journal.root());
    journal.written_before_remount(data + 7);
    journal.install.edit_manifest(|value| {
        let bindings = value
            .get_mut("volume_bindings")
            .unwrap()
            .as_object_mut()
            .unwrap();
        bindings.insert(
            (data + 8).to_string(),
            json_object! {
                "anchor" => journal.state_root().to_str().unwrap(),
                "uuid" => journal_uuid(DATA_VOLUME),
            },
        );
    });
    let volumes = Volumes::darwin().volume(&journal.root(), DATA_VOLUME);
    assert_error(
        journal.read(&volumes),
        ErrorClass::Runtime,
        "activation filesystems no longer have distinct identities",
    );
}

#[test]
fn a_hub_reactivation_may_not_cross_a_remount() {
    let journal = TwoVolumes::linked("hub");
    let data = journal.device(&journal.root());
    let volumes = Volumes::darwin().volume(&journal.root(), DATA_VOLUME);
    for intent in ["host-reactivation", "failed-host-repair"] {
        journal.written_before_remount(data);
        journal.install.edit_manifest(|value| {
            value.insert("intent", intent);
        });
        // Same device numbers: nothing was remounted.
        journal.read(&volumes).unwrap();
        journal.written_before_remount(data + 7);
        assert_error(
            journal.read(&volumes),
            ErrorClass::Runtime,
            "interrupted Team Hub reactivation crossed a filesystem remount; \
             its separate recovery journal requires support-assisted recovery",
        );
    }
}

#[test]
fn publishing_refuses_a_device_number_now_held_by_another_volume() {
    let journal = TwoVolumes::linked("capture");
    let data = journal.device(&journal.root());
    journal.written_before_remount(data + 7);
    // The unit directory's device is bound (from an earlier publication) to
    // a volume other than the one now mounted there.
    let unit_device = journal.device(&journal.unit_dir());
    journal.install.edit_manifest(|value| {
        let bindings = value
            .get_mut("volume_bindings")
            .unwrap()
            .as_object_mut()
            .unwrap();
        bindings.insert(
            unit_device.to_string(),
            json_object! {
                "anchor" => journal.home().to_str().unwrap(),
                "uuid" => journal_uuid(UNIT_VOLUME),
            },
        );
    });
    let volumes = Volumes::darwin()
        .volume(&journal.root(), DATA_VOLUME)
        .volume(&journal.home(), UNIT_VOLUME);
    journal.read(&volumes).unwrap();
    volumes.directory(&journal.unit_dir(), attributes(OTHER_VOLUME));
    let before = fs::read(journal.manifest_path()).unwrap();
    assert_error(
        journal.publish_unit(&volumes),
        ErrorClass::Runtime,
        "activation filesystem identity changed",
    );
    assert_eq!(fs::read(journal.manifest_path()).unwrap(), before);
    assert_ne!(
        fs::read_to_string(journal.service_path()).unwrap(),
        UNIT,
        "nothing was published"
    );
}

const FILESYSTEM_CHANGED: &str = "prepared filesystem identity changed";

/// How `check_binding_on` must answer a saved binding: accept it, or refuse
/// it with this RuntimeError.
type Answer = Result<(), &'static str>;

/// `saved` with `key` set to `value`.
fn with_key(saved: &Json, key: &str, value: Json) -> Json {
    let mut changed = saved.as_object().unwrap().clone();
    changed.insert(key, value);
    Json::from(changed)
}

/// The saved bindings of one prepared directory and how the Darwin
/// `volumes` and Linux must each answer them: (what, probe, saved, answer).
/// `darwin` and `linux` are the bindings each took of the directory, whose
/// metadata is `info`.
fn saved_bindings<'a>(
    volumes: &'a Volumes,
    darwin: &Json,
    linux: &Json,
    info: &fs::Metadata,
) -> Vec<(&'static str, &'a dyn VolumeProbe, Json, Answer)> {
    // After a remount the device differs; the UUID and inode still prove it.
    let remounted = with_key(darwin, "device", Json::from(info.dev() + 7));
    let changed = |key: &str, value: Json| with_key(&remounted, key, value);
    vec![
        ("darwin: as taken", volumes, darwin.clone(), Ok(())),
        ("darwin: remounted", volumes, remounted.clone(), Ok(())),
        (
            "darwin: another volume",
            volumes,
            changed("volume_uuid", Json::from(journal_uuid(OTHER_VOLUME))),
            Err(FILESYSTEM_CHANGED),
        ),
        (
            "darwin: a null UUID",
            volumes,
            changed("volume_uuid", Json::Null),
            Err(FILESYSTEM_CHANGED),
        ),
        (
            "darwin: an empty UUID",
            volumes,
            changed("volume_uuid", Json::from("")),
            Err(FILESYSTEM_CHANGED),
        ),
        (
            "darwin: another inode",
            volumes,
            changed("inode", Json::from(info.ino() + 1)),
            Err("prepared directory identity changed"),
        ),
        // Linux: the UUID is null and the device must match.
        (
            "linux: the Darwin binding",
            &SystemVolumes,
            darwin.clone(),
            Err(FILESYSTEM_CHANGED),
        ),
        (
            "linux: the remounted Darwin binding",
            &SystemVolumes,
            remounted,
            Err(FILESYSTEM_CHANGED),
        ),
        ("linux: as taken", &SystemVolumes, linux.clone(), Ok(())),
    ]
}

/// `check_binding_on` answered a table case as `answer` says; every
/// message names the case.
#[track_caller]
fn assert_answers(outcome: agents_common::Result<()>, answer: Answer, case: &str) {
    match (outcome, answer) {
        (Ok(()), Ok(())) => {}
        (Err(error), Err(message)) => assert_eq!(
            (error.class(), error.message()),
            (ErrorClass::Runtime, message),
            "{case}: {}",
            error.python_line()
        ),
        (outcome, answer) => panic!("{case}: expected {answer:?}, got {outcome:?}"),
    }
}

#[test]
fn prepared_directories_are_bound_by_volume_uuid_on_darwin() {
    let install = Install::new("preparation");
    let root = install.root();
    let volumes = Volumes::darwin().volume(&root, DATA_VOLUME);
    let info = fs::metadata(&root).unwrap();
    let darwin = directory_binding_on(&volumes, &root).unwrap();
    assert_eq!(
        darwin,
        Json::from(json_object! {
            "device" => info.dev(),
            "inode" => info.ino(),
            "volume_uuid" => journal_uuid(DATA_VOLUME),
        })
    );
    let linux = directory_binding_on(&SystemVolumes, &root).unwrap();
    assert_eq!(linux.get("volume_uuid"), Some(&Json::Null));
    for (case, probe, saved, answer) in saved_bindings(&volumes, &darwin, &linux, &info) {
        assert_answers(check_binding_on(probe, &root, &saved), answer, case);
    }
    // An unreadable volume is the attribute call's OSError.
    volumes.directory(&root, Err(5));
    assert_error(
        directory_binding_on(&volumes, &root),
        ErrorClass::Os,
        "[Errno 5] cannot read activation volume UUID",
    );
    assert_error(
        check_binding_on(
            &volumes,
            &root,
            &Json::from(
                json_object! { "device" => true, "inode" => 1, "volume_uuid" => Json::Null },
            ),
        ),
        ErrorClass::Value,
        "invalid preparation directory identity",
    );
}

#[test]
fn the_uuid_is_read_from_the_exact_inspected_directory() {
    let install = Install::new("anchor");
    let root = install.root();
    let volumes = Volumes::darwin().volume(&root, DATA_VOLUME);
    let identity = rustix::fs::lstat(&root).unwrap();
    assert_eq!(
        volume_uuid(&volumes, &root, &identity).unwrap(),
        "0a81f3b1-51d9-3335-b3e3-169c3640360d"
    );
    // The directory was replaced after it was inspected.
    let moved = install.base.join("install.moved");
    fs::rename(&root, &moved).unwrap();
    make_dir(&root, 0o700);
    assert_error(
        volume_uuid(&volumes, &root, &identity),
        ErrorClass::Runtime,
        "activation volume anchor changed",
    );
    // A link in its place is never followed (O_NOFOLLOW|O_DIRECTORY: Linux
    // says ENOTDIR, macOS ELOOP), even to the very directory inspected.
    fs::remove_dir(&root).unwrap();
    std::os::unix::fs::symlink(&moved, &root).unwrap();
    let error = volume_uuid(&volumes, &root, &identity).unwrap_err();
    let refused_link = if cfg!(target_os = "macos") {
        ErrorClass::Os
    } else {
        ErrorClass::NotADirectory
    };
    assert_eq!(error.class(), refused_link, "{error:?}");
    assert!(error.message().ends_with("/install'"), "{error:?}");
}
