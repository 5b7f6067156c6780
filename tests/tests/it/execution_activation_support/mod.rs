//! Shared support of the `execution-activation` black-box tests: a legacy
//! monolith (the single `agents-server.service` of a pre-split install)
//! running under a real systemd user manager inside an admitted update, and
//! install.sh's command lines for it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agents_common::WORKER_UNIT;
use agents_tests::journal_writer::Roots;
use agents_tests::{binary_path, free_port, poll_until, Sandbox};
use agents_tests::{make_dir, write_file};
use python_compat::{
    json::{encode_indented, Json, JsonObject},
    json_object,
};

pub(crate) const UPDATE: &str = "0123456789abcdef0123456789abcdef";
pub(crate) const SERVER: &str = "srv-legacy-1";

pub(crate) struct Monolith<'a> {
    pub sandbox: &'a Sandbox,
    pub roots: Roots,
    pub pid: u32,
}

pub(crate) fn write_json(path: &Path, value: JsonObject) {
    write_file(path, &encode_indented(&Json::Object(value)), 0o600);
}

impl<'a> Monolith<'a> {
    /// A legacy install whose monolith runs, inside an admitted update.
    pub(crate) fn start(sandbox: &'a Sandbox) -> Monolith<'a> {
        Monolith::start_on(sandbox, free_port())
    }

    /// [`Monolith::start`] whose installation listens on `port`.
    pub(crate) fn start_on(sandbox: &'a Sandbox, port: u16) -> Monolith<'a> {
        let mut roots = Roots::create(sandbox.base(), sandbox.home());
        roots.port = port;
        roots.release("1.0.0");
        roots.link_current("1.0.0");
        roots.staging("1.1.0");
        roots.hold_lock(std::process::id());
        roots.write_unit(
            &roots.service_path(),
            "[Unit]\nDescription=AgentsServer (legacy)\n\n[Service]\nType=simple\n\
             ExecStart=/bin/sleep 600\n\n[Install]\nWantedBy=default.target\n",
            0o644,
        );
        sandbox.systemctl_ok(&["daemon-reload"]);
        sandbox.systemctl_ok(&["start", WORKER_UNIT]);
        let pid = poll_until(std::time::Duration::from_secs(10), "the monolith", || {
            let state = sandbox.unit_state(WORKER_UNIT);
            state.is_running().then_some(state.main_pid)
        });
        let admin = roots.state_root().join("admin");
        make_dir(&admin, 0o700);
        let monolith = Monolith {
            sandbox,
            roots,
            pid,
        };
        write_json(
            &monolith.status_path(),
            json_object! {
                "phase" => "installing", "update_id" => UPDATE, "target_version" => "1.1.0",
            },
        );
        write_json(
            &monolith.update_path(),
            json_object! {
                "phase" => "installing", "update_id" => UPDATE, "server_identity" => SERVER,
            },
        );
        monolith.write_health(json_object! {});
        monolith
    }

    pub(crate) fn status_path(&self) -> PathBuf {
        self.roots.state_root().join("admin/server-update.json")
    }
    pub(crate) fn update_path(&self) -> PathBuf {
        self.roots
            .state_root()
            .join("admin/.execution-update-proof.AAAAAAAA")
    }
    pub(crate) fn health_path(&self) -> PathBuf {
        self.roots
            .state_root()
            .join("admin/.execution-handoff.AAAAAAAA")
    }

    /// The monolith's authenticated health, with `extra` members.
    pub(crate) fn write_health(&self, extra: JsonObject) {
        let mut health = json_object! {
            "ok" => true,
            "server_identity" => SERVER,
            "active_count" => 0,
            "queued" => JsonObject::new(),
            "server_update" => json_object! { "update_id" => UPDATE },
            "update_service_cgroup" => json_object! { "safe" => true, "unknown_descendant_count" => 0 },
        };
        for (key, value) in extra {
            health.insert(key, value);
        }
        write_json(&self.health_path(), health);
    }

    /// install.sh's preflight with the legacy proof flags.
    pub(crate) fn preflight(&self, health: bool) -> Output {
        self.preflight_command(health, false).output().unwrap()
    }

    /// The preflight command; `masked` starts it as install.sh does inside
    /// `trap '' HUP INT TERM` (bash hands ignored signals to what it runs).
    pub(crate) fn preflight_command(&self, health: bool, masked: bool) -> Command {
        let args = self.legacy_args("preflight", health);
        let mut command = if masked {
            let mut shell = self.sandbox.command("/bin/bash");
            shell
                .args(["-c", "trap '' HUP INT TERM; exec \"$0\" \"$@\""])
                .arg(binary_path("execution-activation"));
            shell
        } else {
            self.sandbox.command(binary_path("execution-activation"))
        };
        // The masked window is the shell's trap alone, not the test run's.
        agents_tests::with_termination_signals(&mut command, &[]);
        command.args(args);
        command
    }

    /// install.sh's arguments for `operation` (`preflight`, `stop`) with the
    /// legacy proof flags; the health file only when `health`.
    pub(crate) fn legacy_args(&self, operation: &str, health: bool) -> Vec<String> {
        let mut args =
            self.roots
                .operation_args(operation, "1.1.0", "127.0.0.1", i128::from(self.roots.port));
        let staging = self.roots.releases().join(".staging-1.1.0-4242");
        let health_file = if health {
            self.health_path()
        } else {
            PathBuf::new()
        };
        for (flag, value) in [
            ("--expected-server-identity", SERVER.to_string()),
            ("--health-file", health_file.to_str().unwrap().to_string()),
            (
                "--update-file",
                self.update_path().to_str().unwrap().to_string(),
            ),
            ("--expected-native-pid", self.pid.to_string()),
            ("--managed-update-id", UPDATE.to_string()),
            ("--handoff-file", String::new()),
            ("--candidate-source", staging.to_str().unwrap().to_string()),
            ("--release-version", "1.1.0".to_string()),
            ("--api-contract", "7".to_string()),
        ] {
            args.push(flag.to_string());
            args.push(value);
        }
        args
    }

    /// A `worker.json` and free `worker.lock` an earlier split install left.
    pub(crate) fn abandon_receipt(&self, pid: u32) {
        let runtime = self.roots.runtime_dir();
        if !runtime.exists() {
            make_dir(&runtime, 0o700);
        }
        write_json(
            &runtime.join("worker.json"),
            json_object! {
                "schema" => 1,
                "role" => "worker",
                "protocol" => 1,
                "pid" => pid,
                "instance_id" => "00112233445566778899aabbccddeeff",
                "version" => "1.0.0",
                "callback_origin" => "http://127.0.0.1:41999",
                "release_root" => self.roots.release_dir("1.0.0").to_str().unwrap(),
                "public_bind" => "127.0.0.1",
                "public_port" => u32::from(self.roots.port),
            },
        );
        let lock = runtime.join("worker.lock");
        if !lock.exists() {
            write_file(&lock, b"", 0o600);
        }
    }
}
