//! Real-component test support for the black-box tests of the five helpers.
//!
//! Cargo builds other packages' binaries only with `cargo build --workspace`,
//! so tests find the helpers and the test worker with [`binary_path`].
//!
//! - [`Sandbox`]: a real `systemd --user` manager per test, in its own mount
//!   namespace and cgroup with a private `HOME` and `XDG_RUNTIME_DIR`; run
//!   helpers with [`Sandbox::command`] so their `systemctl --user` reaches it.
//!   Without root, `unshare` or `systemd` a test says why and skips; under
//!   `CI=true` it fails instead.
//! - [`Installation`]: owned `install/ config/ state/` roots beside the home,
//!   releases whose `.venv/bin/python` is the test worker, `current`,
//!   `config/env`, rendered units, the installed manifest, and
//!   [`Installation::start_split`] to run worker and gateway under the
//!   sandbox ([`Installation::service_command`] runs one without systemd).
//! - The test worker (`test-worker` binary) plays the worker, gateway or a
//!   legacy monolith; [`Switches`] make it misbehave and [`RequestRecord`]s
//!   tell what it received.
//! - [`HttpRequest`]: a raw loopback HTTP client for any request, well-formed
//!   or not.
//! - [`Outcome`]: how one helper run ended (exit code, stdout, stderr) and the
//!   checks of success, one JSON line and an exact refusal.
//! - [`Originals`] and [`require_originals!`]: the Python originals the
//!   oracle tests run side by side (`AGENTS_ORIGINALS_DIR`); without them a test
//!   reports itself skipped through [`skip`] (a failure under `CI=true`).
//! - [`upstream`]: the comparison with the originals run with the real
//!   upstream modules (`AGENTS_UPSTREAM_DIR`, `scripts/upstream-compare.sh`).
//! - [`alone`]: one test of the running test binary run again by itself in a
//!   child process, for a test that changes what the whole process shares.
//! - [`golden_path`]: the upstream bytes under `tests/fixtures/golden/`.
//! - [`ReleaseHost`]: signed releases (real Ed25519 key, tar.gz archives,
//!   schema-1 manifests) on 127.0.0.1 for `update-runner`.
//! - [`test_tls`]: a test CA and server certificates for HTTPS release
//!   hosts; [`forward_proxy`]: a real forward proxy (tinyproxy) on loopback.
//!
//! ```no_run
//! use agents_tests::{free_port, Installation, Role, Sandbox, Switches};
//!
//! let Some(sandbox) = Sandbox::start_or_skip("my_test") else { return };
//! let installation = Installation::in_sandbox(&sandbox);
//! let release = installation.add_release("1.0.0");
//! let layout = installation.layout(&release, &release, free_port());
//! installation.install_split(&layout);
//! let services = installation.start_split(&sandbox, &layout);
//! installation.set_switches(Role::Worker, &Switches {
//!     blockers: vec![("active_runs".to_string(), 1)],
//!     ..Switches::default()
//! });
//! let output = sandbox
//!     .command(agents_tests::binary_path("execution-manage"))
//!     .args(["inspect", "--root"])
//!     .arg(&installation.install_root)
//!     .output()
//!     .unwrap();
//! # let _ = (services, output);
//! ```

#![deny(missing_docs)]

mod alone;
mod binaries;
mod cgroup;
pub mod crash_points;
mod files;
mod fixture;
mod fixtures;
pub mod forward_proxy;
pub mod generative;
mod http_client;
mod install_base;
pub mod install_lock_fixtures;
pub mod installsh;
pub mod installsh_facets;
pub mod installsh_state;
pub mod journal_writer;
pub mod loopback_peers;
mod originals;
mod outcome;
mod poll;
pub mod power_cut;
mod processes;
mod python_errors;
pub mod recorded_commands;
pub mod release_dist;
mod release_host;
pub mod release_support;
mod sandbox;
pub mod server_control;
pub mod server_status;
mod skip;
pub mod suite;
mod tempdir;
pub mod test_tls;
pub mod upstream;
pub mod upstream_activation;
pub mod upstream_files;
pub mod upstream_json;
pub mod upstream_layout;
pub mod worker_double;
mod worker_files;

pub use alone::{alone, assert_passed_alone, ran_alone, running_alone, test_name, ALONE_ENV};
pub use binaries::{binary_path, profile_dir, test_worker_path, HELPERS, TEST_WORKER};
pub use files::{
    chown_other, entries, make_dir, make_dirs, make_fifo, mode_of, set_mode, unique_base,
    write_file, write_file_making_parents, OTHER_UID,
};
pub use fixture::{
    free_port, DirectService, Installation, SplitServices, AGENT_TOKEN, SERVICE_TIMEOUT,
};
pub use fixtures::{fixture_path, golden_bytes, golden_path, workspace_root};
pub use http_client::{origin_address, send_raw, HttpRequest, HttpResponse, DEFAULT_TIMEOUT};
pub use install_base::{link, with, InstallBase};
pub use originals::{
    Originals, MISSING_ORIGINALS, ORIGINALS_DIR_ENV, ORIGINAL_FILES, SEEDS_DIR_ENV,
};
pub use outcome::Outcome;
pub use poll::{poll_until, try_poll_until, POLL_INTERVAL};
pub use processes::{
    descendants, process_alive, run_measured, with_termination_signals, GroupChild, Measured,
    ProcessIdentity,
};
pub use python_errors::{assert_case_refused, assert_error, assert_error_is, assert_os_error};
pub use release_host::{
    legacy_release_manifest, schema1_manifest, schema2_manifest, ReleaseFile, ReleaseHost,
};
pub use sandbox::{Sandbox, SandboxError, UnitState};
#[doc(hidden)]
pub use skip::function_name;
pub use skip::{ci_requires_everything, skip, SKIP_LOG_ENV};
pub use tempdir::TempDir;
pub use worker_files::{
    errors_log_path, request_log_path, switches_path, test_worker_dir, Death, DeathPoint,
    RequestMatch, RequestRecord, Role, Stall, Switches,
};
