//! One owner per role (`execution_service.ProcessLease`): the role lock held
//! for the process's life, and the `worker.json` / `gateway.json` receipt the
//! helpers trust to find the process.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use python_compat::json::{encode_line, parse_json, Json, JsonObject};
use python_compat::os::current_uid;
use rustix::fs::{flock, FlockOperation};

use crate::private_files::{open_lock, publish_private};
use crate::random::uuid4_hex;
use agents_tests::upstream_files::ensure_execution_secret;

/// Why the role lock could not be taken.
#[derive(Debug)]
pub(crate) enum LeaseError {
    /// Another process of this role holds it (upstream exits 2).
    Busy,
    /// Anything else (upstream raises, exiting 1).
    Failed(String),
}

/// The held role lock and this process's receipt identity.
#[derive(Debug)]
pub(crate) struct ProcessLease {
    directory: PathBuf,
    role: &'static str,
    instance_id: String,
    // Held (flocked) until the process exits; never deleted.
    _lock: fs::File,
}

impl ProcessLease {
    /// Creates the 0700 runtime directory, the control token (if missing) and
    /// takes `<role>.lock` without waiting.
    pub(crate) fn acquire(
        directory: &Path,
        role: &'static str,
    ) -> Result<ProcessLease, LeaseError> {
        let failed =
            |what: &str, err: &dyn std::fmt::Display| LeaseError::Failed(format!("{what}: {err}"));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(directory)
            .map_err(|err| failed("cannot create the runtime directory", &err))?;
        ensure_execution_secret(&directory.join("control.token"))
            .map_err(|err| failed("cannot create the control token", &err))?;
        let lock = open_lock(&directory.join(format!("{role}.lock")))
            .map_err(|err| failed("cannot open the role lock", &err))?;
        let info = lock
            .metadata()
            .map_err(|err| failed("cannot stat the role lock", &err))?;
        if !info.is_file() || info.uid() != current_uid() {
            return Err(LeaseError::Failed(
                "Execution lease is not an owned regular file".to_string(),
            ));
        }
        if info.permissions().mode() & 0o7777 != 0o600 {
            return Err(LeaseError::Failed(
                "Execution lease must be owner-only".to_string(),
            ));
        }
        match flock(&lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(LeaseError::Busy),
            Err(err) => return Err(failed("cannot lock the role lock", &err)),
        }
        Ok(ProcessLease {
            directory: directory.to_path_buf(),
            role,
            instance_id: uuid4_hex(),
            _lock: lock,
        })
    }

    /// This process's `instance_id` (32 hex digits, new every start).
    pub(crate) fn instance_id(&self) -> &str {
        &self.instance_id
    }

    fn receipt_path(&self) -> PathBuf {
        self.directory.join(format!("{}.json", self.role))
    }

    /// Writes the receipt: the common keys plus `values`, as Python's
    /// `json.dump(sort_keys=True)` line, through an fsynced 0600 temp file
    /// renamed into place (no directory fsync, as upstream).
    pub(crate) fn publish(&self, values: JsonObject) -> io::Result<()> {
        let started_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the clock is after 1970")
            .as_secs_f64();
        let mut receipt = JsonObject::new();
        receipt.insert("schema", 1);
        receipt.insert("protocol", 1);
        receipt.insert("role", self.role);
        receipt.insert("pid", std::process::id());
        receipt.insert("instance_id", self.instance_id.as_str());
        receipt.insert("started_at", started_at);
        for (key, value) in values {
            receipt.insert(key, value);
        }
        let temporary = self
            .directory
            .join(format!(".{}.{}.tmp", self.role, self.instance_id));
        let document = encode_line(&Json::Object(receipt), true) + "\n";
        publish_private(&temporary, document.as_bytes(), &self.receipt_path())
    }

    /// Removes the receipt if it still names this process (a crash leaves it).
    pub(crate) fn remove_receipt(&self) {
        let path = self.receipt_path();
        let ours = fs::symlink_metadata(&path).is_ok_and(|info| !info.file_type().is_symlink())
            && fs::read(&path)
                .ok()
                .and_then(|data| parse_json(&data).ok())
                .is_some_and(|receipt| {
                    receipt.get("instance_id").and_then(Json::as_str) == Some(&self.instance_id)
                });
        if ours {
            let _ = fs::remove_file(&path);
        }
    }
}
