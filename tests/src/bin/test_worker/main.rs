//! Test-only stand-in for the Python execution service (never shipped).
//!
//! Each fixture release's `.venv/bin/python` links here, so the real systemd
//! user manager starts this program with the rendered ExecStart arguments.
//! It plays the split `worker` (private callback listener with the control
//! protocol, `worker.json`, the lease, the state-owner lock, the startup
//! hold), the split `gateway` (public health carrying both identities,
//! `gateway.json`, the server's update status read) or a legacy monolith
//! (public health, no receipts), and
//! misbehaves on request through `state_root/test-worker/<role>.json`.

mod args;
mod control;
mod execution_journal;
mod health;
mod http_server;
mod maintenance;
mod ownership;
mod private_files;
mod random;
mod receipts;
mod service;
mod signals;
mod startup_hold;
mod update_status;

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agents_tests::{errors_log_path, test_worker_dir, Role, Switches};
use python_compat::json_object;

use crate::args::Invocation;
use crate::health::{api_contract_version, server_identity, ServerFacts};
use crate::maintenance::Maintenance;
use crate::receipts::{LeaseError, ProcessLease};
use crate::service::{Listener, Service};

/// A startup failure: exit status and message.
struct Exit(i32, String);

fn fail(message: impl std::fmt::Display) -> Exit {
    Exit(1, message.to_string())
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let outcome = args::parse(&arguments)
        .map_err(|message| Exit(2, format!("error: {message}")))
        .and_then(run);
    if let Err(Exit(code, message)) = outcome {
        eprintln!("test-worker: {message}");
        std::process::exit(code);
    }
}

fn environment(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
}

/// The directory of the running "script", resolved like
/// `Path(__file__).resolve().parent` (through `current` for the gateway).
fn release_root(script: &Path) -> Result<PathBuf, Exit> {
    let resolved = script
        .canonicalize()
        .map_err(|err| fail(format!("{}: {err}", script.display())))?;
    Ok(resolved
        .parent()
        .expect("a file has a directory")
        .to_path_buf())
}

fn version_of(directory: &Path) -> String {
    std::fs::read_to_string(directory.join("VERSION"))
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|_| "development".to_string())
}

/// Finds the state root, then starts; a startup failure is also appended to
/// `state_root/test-worker/<role>.errors.log`, because systemd's journal is
/// not available in the sandbox.
fn run(invocation: Invocation) -> Result<(), Exit> {
    let state_root = environment(&["AGENTSDOCK_STATE_DIR", "AGENTS_SERVER_STATE_DIR"])
        .map(PathBuf::from)
        .or_else(|| {
            invocation
                .runtime_dir
                .as_ref()
                .and_then(|dir| dir.parent())
                .map(Path::to_path_buf)
        })
        .ok_or_else(|| fail("AGENTSDOCK_STATE_DIR is required"))?;
    let role = invocation.role;
    start(invocation, state_root.clone()).inspect_err(|Exit(code, message)| {
        let line = format!("pid {} exit {code}: {message}\n", std::process::id());
        let appended = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(test_worker_dir(&state_root))
            .and_then(|()| {
                fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(errors_log_path(&state_root, role))
            })
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(err) = appended {
            eprintln!("test-worker: cannot record the failure: {err}");
        }
    })
}

fn start(invocation: Invocation, state_root: PathBuf) -> Result<(), Exit> {
    let release = release_root(&invocation.script)?;
    let runtime_dir = invocation.runtime_dir.clone();
    let switches = Switches::load(&state_root, invocation.role).map_err(fail)?;
    let facts = ServerFacts {
        server_identity: server_identity(&state_root),
        server_instance_id: random::uuid4_hex(),
        api_contract_version: api_contract_version(&release),
    };
    let mut service = Service {
        role: invocation.role,
        instance_id: random::uuid4_hex(),
        version: version_of(&release),
        state_root: state_root.clone(),
        runtime_dir: runtime_dir.clone(),
        agent_token: environment(&[
            "AGENTSDOCK_AGENT_TOKEN",
            "ZENITHDOCK_AGENT_TOKEN",
            "ZENITHBOT_AGENT_TOKEN",
        ]),
        control_token: None,
        maintenance: None,
        facts,
    };
    match invocation.role {
        Role::Monolith => {
            let _owner = ownership::acquire_state_ownership(&state_root).map_err(fail)?;
            let listener =
                TcpListener::bind((invocation.bind.as_str(), invocation.port)).map_err(fail)?;
            signals::on_sigterm(|| {});
            http_server::serve(listener, handler(service, Listener::Public));
            Ok(())
        }
        Role::Worker | Role::Gateway => {
            let runtime_dir = runtime_dir.expect("split roles have a runtime directory");
            let lease = match ProcessLease::acquire(&runtime_dir, invocation.role.name()) {
                Ok(lease) => Arc::new(lease),
                Err(LeaseError::Busy) => {
                    return Err(Exit(
                        2,
                        format!(
                            "Another {} already owns this execution directory",
                            invocation.role.name()
                        ),
                    ))
                }
                Err(LeaseError::Failed(message)) => return Err(fail(message)),
            };
            service.instance_id = lease.instance_id().to_string();
            service.control_token = Some(
                agents_tests::upstream_files::read_secret(&runtime_dir.join("control.token"))
                    .map_err(fail)?,
            );
            if invocation.role == Role::Worker {
                run_worker(invocation, service, lease, &release, &switches)
            } else {
                service.version = version_of(
                    invocation
                        .script
                        .parent()
                        .expect("the script has a directory"),
                );
                run_gateway(invocation, service, lease, &release, &switches)
            }
        }
    }
}

fn handler(
    service: Service,
    listener: Listener,
) -> Arc<dyn Fn(http_server::Request) + Send + Sync> {
    let service = Arc::new(service);
    Arc::new(move |request| service.handle(listener, request))
}

fn receipt_delay(switches: &Switches) {
    std::thread::sleep(Duration::from_secs_f64(
        switches.receipt_delay_seconds.max(0.0),
    ));
}

fn run_worker(
    invocation: Invocation,
    mut service: Service,
    lease: Arc<ProcessLease>,
    release: &Path,
    switches: &Switches,
) -> Result<(), Exit> {
    let runtime_dir = invocation
        .runtime_dir
        .clone()
        .expect("the worker has a runtime directory");
    let state_root = service.state_root.canonicalize().map_err(fail)?;
    if runtime_dir != state_root.join("execution") {
        return Err(fail(
            "Worker runtime directory must be its state directory's execution folder",
        ));
    }
    let _owner = ownership::acquire_state_ownership(&state_root).map_err(fail)?;
    let listener = TcpListener::bind(("127.0.0.1", invocation.callback_port)).map_err(fail)?;
    let callback_origin = format!(
        "http://127.0.0.1:{}",
        listener.local_addr().map_err(fail)?.port()
    );
    let mut maintenance = Maintenance::open(
        state_root.join("admin/execution-maintenance.json"),
        lease.instance_id(),
    )
    .map_err(fail)?;
    if let Some(root) = environment(&["AGENTS_SERVER_INSTALL_DIR"]) {
        let root = PathBuf::from(root).canonicalize().map_err(fail)?;
        if let Some(operation) =
            startup_hold::pending_worker_operation(&root, release).map_err(fail)?
        {
            maintenance.hold_for_startup(&operation).map_err(fail)?;
        }
    }
    service.maintenance = Some(Mutex::new(maintenance));
    let version = switches
        .version
        .clone()
        .unwrap_or_else(|| service.version.clone());
    let cleanup = Arc::clone(&lease);
    signals::on_sigterm(move || cleanup.remove_receipt());
    let serving = std::thread::spawn(move || {
        http_server::serve(listener, handler(service, Listener::Callback))
    });
    // The receipt appears only once the listener accepts connections.
    receipt_delay(switches);
    lease
        .publish(json_object! {
            "version" => version,
            "release_root" => release.to_string_lossy().into_owned(),
            "callback_origin" => callback_origin,
            "public_bind" => invocation.bind.as_str(),
            "public_port" => u32::from(invocation.port),
        })
        .map_err(fail)?;
    serving
        .join()
        .map_err(|_| fail("the callback listener stopped"))
}

fn run_gateway(
    invocation: Invocation,
    service: Service,
    lease: Arc<ProcessLease>,
    release: &Path,
    switches: &Switches,
) -> Result<(), Exit> {
    let version = switches
        .version
        .clone()
        .unwrap_or_else(|| service.version.clone());
    receipt_delay(switches);
    // Upstream publishes before binding the public port.
    lease
        .publish(json_object! {
            "version" => version,
            "release_root" => release.to_string_lossy().into_owned(),
            "public_bind" => invocation.bind.as_str(),
            "public_port" => u32::from(invocation.port),
        })
        .map_err(fail)?;
    let listener = match TcpListener::bind((invocation.bind.as_str(), invocation.port)) {
        Ok(listener) => listener,
        Err(err) => {
            lease.remove_receipt();
            return Err(fail(format!(
                "cannot listen on {}:{}: {err}",
                invocation.bind, invocation.port
            )));
        }
    };
    let cleanup = Arc::clone(&lease);
    signals::on_sigterm(move || cleanup.remove_receipt());
    http_server::serve(listener, handler(service, Listener::Public));
    Ok(())
}
