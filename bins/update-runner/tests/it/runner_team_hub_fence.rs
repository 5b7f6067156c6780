//! The Team Hub maintenance fence through its control files only: real
//! directories, modes, owners and links, a real flock held by another
//! process, and the refusal of a pending snapshot restore. The Hub's own
//! Python (`HubStore`) is not part of the originals, so the expected behaviour is
//! the upstream store's as the reference describes it.

use agents_tests::release_support;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use python_compat::{
    json::{encode_compact_sorted, Json, JsonObject},
    json_object, ErrorClass,
};
use release_support::TempDir;
use update_runner::team_hub_fence::TeamHubFence;

const HUB_ID: &str = "hub_0123456789";
const HOST: &str = "server-identity-1";
const UPDATE_ID: &str = "0123456789abcdef0123456789abcdef";
const SNAPSHOT: &str = "snapshot_00000001700000000000000000_0123456789abcdef";

fn marker() -> JsonObject {
    json_object! {
        "format" => 1,
        "reason" => "server-update",
        "operation_id" => UPDATE_ID,
        "hub_id" => HUB_ID,
        "host_server_identity" => HOST,
        "snapshot" => SNAPSHOT,
        "created_at" => "2024-01-01T00:00:00Z",
    }
}

/// A Hub data directory as the server leaves it during an update.
struct Hub {
    _root: TempDir,
    data: PathBuf,
    snapshot: PathBuf,
}

impl Hub {
    fn new() -> Self {
        let root = TempDir::new("runner-fence");
        let data = root.path().join("team-hub");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        let snapshot = data.join("maintenance-backups").join(SNAPSHOT);
        Hub {
            _root: root,
            data,
            snapshot,
        }
    }

    fn fence_path(&self) -> PathBuf {
        self.data.join("maintenance-fence.json")
    }

    fn write_fence_bytes(&self, bytes: &[u8], mode: u32) {
        let path = self.fence_path();
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn write_fence(&self, marker: &JsonObject) {
        self.write_fence_bytes(&encode_compact_sorted(&Json::Object(marker.clone())), 0o600);
    }

    fn fence(&self) -> TeamHubFence<'_> {
        TeamHubFence {
            data_dir: &self.data,
            hub_id: HUB_ID,
            host_identity: HOST,
            reason: "server-update",
            operation_id: UPDATE_ID,
            snapshot: &self.snapshot,
        }
    }
}

fn message(result: agents_common::Result<bool>) -> String {
    result.expect_err("refused").message().to_string()
}

#[test]
fn an_absent_fence_reads_false_and_prepares_the_control_files() {
    let hub = Hub::new();
    std::fs::remove_dir(&hub.data).unwrap();
    assert!(!hub.fence().matches_control().unwrap());
    assert!(!hub.fence().clear_control().unwrap());
    let data = std::fs::metadata(&hub.data).unwrap();
    assert_eq!(data.mode() & 0o7777, 0o700);
    let lock = std::fs::symlink_metadata(hub.data.join("maintenance-control.lock")).unwrap();
    assert!(lock.is_file());
    assert_eq!(lock.mode() & 0o7777, 0o600);
    // An existing data directory is made private.
    std::fs::set_permissions(&hub.data, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(!hub.fence().matches_control().unwrap());
    assert_eq!(std::fs::metadata(&hub.data).unwrap().mode() & 0o7777, 0o700);
}

#[test]
fn the_exact_fence_matches_and_clears_once() {
    let hub = Hub::new();
    hub.write_fence(&marker());
    assert!(hub.fence().matches_control().unwrap());
    assert!(hub.fence().clear_control().unwrap());
    assert!(!hub.fence_path().exists());
    assert!(!hub.fence().clear_control().unwrap());
    assert!(!hub.fence().matches_control().unwrap());

    // Python compares with ==: `true == 1`, and the operation id is stripped;
    // only the snapshot's last component counts.
    let mut loose = marker();
    loose.insert("format", true);
    hub.write_fence(&loose);
    let spaced = format!(" {UPDATE_ID} ");
    let snapshot = Path::new(SNAPSHOT);
    let fence = TeamHubFence {
        operation_id: &spaced,
        snapshot,
        ..hub.fence()
    };
    assert!(fence.matches_control().unwrap());
    assert!(fence.clear_control().unwrap());
}

#[test]
fn another_fence_is_refused_and_kept() {
    let hub = Hub::new();
    let mut cases: Vec<(&str, JsonObject)> = Vec::new();
    for (key, value) in [
        ("format", Json::from(2)),
        ("reason", Json::from("manual")),
        ("operation_id", Json::from("another-update")),
        ("hub_id", Json::from("hub_other000")),
        ("host_server_identity", Json::from("other-host")),
        ("snapshot", Json::from("snapshot_other")),
    ] {
        let mut changed = marker();
        changed.insert(key, value);
        cases.push((key, changed));
    }
    let mut extra = marker();
    extra.insert("extra", 1);
    cases.push(("extra key", extra));
    let mut missing = marker();
    missing.remove("created_at");
    cases.push(("missing key", missing));
    for (label, changed) in cases {
        hub.write_fence(&changed);
        for result in [hub.fence().matches_control(), hub.fence().clear_control()] {
            assert_eq!(
                message(result),
                "Team Hub maintenance fence does not match",
                "{label}"
            );
        }
        assert!(hub.fence_path().exists(), "{label}");
    }
    for bytes in [&b"{not json"[..], b"\xff\xfe\x00", b"[1, 2]"] {
        hub.write_fence_bytes(bytes, 0o600);
        let expected = if bytes.starts_with(b"[") {
            "Team Hub maintenance fence does not match"
        } else {
            "Team Hub maintenance fence is invalid"
        };
        assert_eq!(message(hub.fence().clear_control()), expected);
        assert!(hub.fence_path().exists());
    }
}

#[test]
fn unsafe_fence_files_are_refused() {
    let hub = Hub::new();
    let bytes = encode_compact_sorted(&Json::Object(marker()));
    // Group-readable, empty and oversized markers.
    for (content, mode) in [
        (bytes.clone(), 0o644),
        (Vec::new(), 0o600),
        (vec![b' '; 16 * 1024 + 1], 0o600),
    ] {
        hub.write_fence_bytes(&content, mode);
        let error = hub.fence().clear_control().unwrap_err();
        assert_eq!(error.message(), "Team Hub snapshot file is invalid");
        assert_eq!(error.class(), ErrorClass::Permission);
        assert!(hub.fence_path().exists());
    }
    // A second hard link.
    hub.write_fence_bytes(&bytes, 0o600);
    let alias = hub.data.join("alias.json");
    std::fs::hard_link(hub.fence_path(), &alias).unwrap();
    assert_eq!(
        message(hub.fence().matches_control()),
        "Team Hub snapshot file is invalid"
    );
    std::fs::remove_file(&alias).unwrap();
    // Another owner (the tests run as root, so hand the file to nobody).
    if rustix::process::getuid().is_root() {
        std::os::unix::fs::chown(hub.fence_path(), Some(65534), Some(65534)).unwrap();
        assert_eq!(
            message(hub.fence().clear_control()),
            "Team Hub snapshot file is invalid"
        );
        std::os::unix::fs::chown(hub.fence_path(), Some(0), Some(0)).unwrap();
    }
    // A symlink is never followed.
    let target = hub.data.join("elsewhere.json");
    std::fs::rename(hub.fence_path(), &target).unwrap();
    std::os::unix::fs::symlink(&target, hub.fence_path()).unwrap();
    let error = hub.fence().clear_control().unwrap_err();
    assert_eq!(
        error.message(),
        format!(
            "[Errno 40] Too many levels of symbolic links: '{}'",
            hub.fence_path().display()
        )
    );
    assert!(target.exists() && std::fs::symlink_metadata(hub.fence_path()).is_ok());
}

#[test]
fn unsafe_data_directories_and_locks_are_refused() {
    let hub = Hub::new();
    hub.write_fence(&marker());
    let lock = hub.data.join("maintenance-control.lock");
    std::fs::write(&lock, b"").unwrap();
    let alias = hub.data.join("lock-alias");
    std::fs::hard_link(&lock, &alias).unwrap();
    assert_eq!(
        message(hub.fence().clear_control()),
        "Team Hub lock file is unsafe"
    );
    std::fs::remove_file(&alias).unwrap();
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink("/dev/null", &lock).unwrap();
    assert!(message(hub.fence().clear_control()).starts_with("[Errno 40]"));
    std::fs::remove_file(&lock).unwrap();

    let linked = hub.data.with_file_name("linked-hub");
    std::os::unix::fs::symlink(&hub.data, &linked).unwrap();
    let fence = TeamHubFence {
        data_dir: &linked,
        ..hub.fence()
    };
    // O_NOFOLLOW | O_DIRECTORY on a link: ENOTDIR, as Python's os.open reports.
    assert_eq!(
        message(fence.clear_control()),
        format!("[Errno 20] Not a directory: '{}'", linked.display())
    );

    if rustix::process::getuid().is_root() {
        std::os::unix::fs::chown(&hub.data, Some(65534), Some(65534)).unwrap();
        assert_eq!(
            message(hub.fence().clear_control()),
            format!(
                "Team Hub data path must be an owner-controlled directory: {}",
                hub.data.display()
            )
        );
        std::os::unix::fs::chown(&hub.data, Some(0), Some(0)).unwrap();
    }
    assert!(hub.fence_path().exists());
    assert!(hub.fence().clear_control().unwrap());
}

/// Another process holding the Hub's control lock.
struct LockHolder(Child);

impl LockHolder {
    fn hold(path: &Path) -> Self {
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import fcntl, os, sys, time\n\
                 fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n\
                 fcntl.flock(fd, fcntl.LOCK_EX)\n\
                 print('locked', flush=True)\n\
                 time.sleep(60)\n",
            ])
            .arg(path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 holds the lock");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        LockHolder(child)
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_busy_control_lock_is_awaited_five_seconds() {
    let hub = Hub::new();
    hub.write_fence(&marker());
    let holder = LockHolder::hold(&hub.data.join("maintenance-control.lock"));
    let started = Instant::now();
    assert_eq!(
        message(hub.fence().clear_control()),
        "Team Hub local control is busy"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    assert!(hub.fence_path().exists());
    drop(holder);
    assert!(hub.fence().clear_control().unwrap());
}

#[test]
fn a_pending_restore_fails_closed() {
    let hub = Hub::new();
    hub.write_fence(&marker());
    let refusal = "Team Hub snapshot restore recovery is pending; the update runner cannot \
                   finish it without the Hub database";
    let journal = hub.data.join(".restore-transaction.json");
    std::os::unix::fs::symlink("missing", &journal).unwrap();
    assert_eq!(message(hub.fence().clear_control()), refusal);
    std::fs::remove_file(&journal).unwrap();
    let staging = hub.data.join(".restore-12-0123456789abcdef");
    std::fs::create_dir(&staging).unwrap();
    assert_eq!(message(hub.fence().matches_control()), refusal);
    assert!(hub.fence_path().exists());
    std::fs::remove_dir(&staging).unwrap();
    // Names that only look similar are not restore staging.
    std::fs::create_dir(hub.data.join(".restore-0-0123456789abcdef")).unwrap();
    assert!(hub.fence().clear_control().unwrap());
}
