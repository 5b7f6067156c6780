//! Real-component test support for the black-box tests of the five helpers.
//!
//! - [`Sandbox`]: a real `systemd --user` manager per test, in its own mount
//!   namespace with a private `HOME` and `XDG_RUNTIME_DIR`.
//! - [`binary_path`]: the built helpers and the test worker.
//! - [`TempDir`], [`poll_until`], [`ProcessIdentity`]: small utilities.

mod binaries;
mod cgroup;
mod fixture;
mod http_client;
mod poll;
mod processes;
mod sandbox;
mod tempdir;
mod worker_files;

pub use binaries::{binary_path, profile_dir, test_worker_path, HELPERS, TEST_WORKER};
pub use fixture::{
    free_port, DirectService, Installation, SplitServices, AGENT_TOKEN, SERVICE_TIMEOUT,
};
pub use http_client::{origin_address, send_raw, HttpRequest, HttpResponse, DEFAULT_TIMEOUT};
pub use poll::{poll_until, try_poll_until, POLL_INTERVAL};
pub use processes::{descendants, process_alive, ProcessIdentity};
pub use sandbox::{Sandbox, SandboxError, UnitState};
pub use tempdir::TempDir;
pub use worker_files::{
    request_log_path, switches_path, test_worker_dir, Death, DeathPoint, RequestMatch,
    RequestRecord, Role, Stall, Switches,
};
