//! A running split installation (worker and gateway started by a real
//! systemd user manager from their rendered units) for the black-box tests
//! of the split uninstall.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agents_common::ExecutionLayout;
use agents_common::{GATEWAY_UNIT, WORKER_UNIT};
use agents_tests::{
    free_port, poll_until, Installation, RequestRecord, Role, Sandbox, SplitServices, Switches,
    UnitState,
};
use python_compat::json::{parse_json, Json};

use super::{
    clean_env, differences, run, snapshot, start, Entry, Implementation, Input, Outcome, Running,
};

/// Non-volatile state files every case has (compared byte for byte).
pub(crate) const STATE_FILES: [&str; 4] = [
    "sessions.json",
    "secure-peers/client/identity.key",
    "team-hub/team-hub.sqlite3",
    "providers/sentinel",
];

/// The calling test's [`SplitCase::start`] (with a closure,
/// [`SplitCase::start_with`]); the test returns, skipped, where no sandbox
/// can run.
macro_rules! split_case {
    () => {
        match SplitCase::start(agents_tests::test_name!()) {
            Some(case) => case,
            None => return,
        }
    };
    ($prepare:expr) => {
        match SplitCase::start_with(agents_tests::test_name!(), $prepare) {
            Some(case) => case,
            None => return,
        }
    };
}
pub(crate) use split_case;

/// A split installation running under its own manager.
pub(crate) struct SplitCase {
    /// The manager and home.
    pub sandbox: Sandbox,
    /// The roots and releases.
    pub installation: Installation,
    /// The installed layout.
    pub layout: ExecutionLayout,
    /// Both services as started.
    pub services: SplitServices,
}

impl SplitCase {
    /// Starts a sandbox, installs releases 1.0.0 (worker) and 1.1.0
    /// (gateway), makes the three roots private (0700) as a real
    /// installation has them, adds state, and starts both services.
    pub(crate) fn start(test: &str) -> Option<SplitCase> {
        SplitCase::start_with(test, |_| {})
    }

    /// Registers `children` (a JSON list) as the server's provider children
    /// in `state/admin/provider-children.json`: a live one keeps the
    /// uninstaller from removing anything.
    pub(crate) fn register_provider_children(&self, children: &str) {
        let path = self
            .installation
            .state_root
            .join("admin/provider-children.json");
        let document = format!("{{\"children\": {children}}}\n");
        agents_tests::write_file_making_parents(&path, document.as_bytes(), 0o600);
    }

    /// Like [`SplitCase::start`], changing the files before the services start.
    pub(crate) fn start_with(test: &str, prepare: impl FnOnce(&Installation)) -> Option<SplitCase> {
        let sandbox = Sandbox::start_or_skip(test)?;
        Some(SplitCase::start_in(sandbox, free_port(), prepare))
    }

    /// [`SplitCase::start_with`] under `sandbox`, the public listener on `port`.
    pub(crate) fn start_in(
        sandbox: Sandbox,
        port: u16,
        prepare: impl FnOnce(&Installation),
    ) -> SplitCase {
        let installation = Installation::in_sandbox(&sandbox);
        let worker = installation.add_release("1.0.0");
        let gateway = installation.add_release("1.1.0");
        let layout = installation.layout(&worker, &gateway, port);
        installation.install_split(&layout);
        for root in [
            &installation.install_root,
            &installation.config_root,
            &installation.state_root,
        ] {
            fs::set_permissions(root, fs::Permissions::from_mode(0o700)).unwrap();
        }
        fs::create_dir(installation.install_root.join(".execution-completed-0a1b")).unwrap();
        for name in STATE_FILES {
            agents_tests::write_file_making_parents(
                &installation.state_root.join(name),
                format!("{name} content\n").as_bytes(),
                0o600,
            );
        }
        prepare(&installation);
        let services = installation.start_split(&sandbox, &layout);
        SplitCase {
            sandbox,
            installation,
            layout,
            services,
        }
    }

    /// The helper form's arguments followed by `extra`.
    pub(crate) fn args(&self, extra: &[&str]) -> Vec<String> {
        let i = &self.installation;
        let text = |path: &PathBuf| path.to_str().unwrap().to_string();
        let mut args = vec![
            "--root".to_string(),
            text(&i.install_root),
            "--config-root".to_string(),
            text(&i.config_root),
            "--state-root".to_string(),
            text(&i.state_root),
            "--home".to_string(),
            text(&i.home),
        ];
        args.extend(extra.iter().map(|arg| arg.to_string()));
        args
    }

    /// The manager's environment for the uninstaller.
    pub(crate) fn env(&self) -> Vec<(String, OsString)> {
        clean_env(&self.sandbox.env())
    }

    /// [`Self::env`] with the installation's roots named as an operator
    /// names them to `uninstall.sh` (`AGENTS_SERVER_*_DIR`).
    pub(crate) fn script_env(&self) -> Vec<(String, OsString)> {
        let i = &self.installation;
        let mut env = self.env();
        for (name, root) in [
            ("AGENTS_SERVER_INSTALL_DIR", &i.install_root),
            ("AGENTS_SERVER_CONFIG_DIR", &i.config_root),
            ("AGENTS_SERVER_STATE_DIR", &i.state_root),
        ] {
            env.push((name.into(), root.clone().into()));
        }
        env
    }

    /// Runs the port in the helper form to its end.
    pub(crate) fn run(&self, extra: &[&str], input: Input) -> Outcome {
        let args = self.args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(Implementation::Port, &self.env(), &args, input)
    }

    /// Starts the port in the helper form with `--yes`.
    pub(crate) fn start_run(&self) -> Running {
        self.start_run_with(&["--yes"], Input::Null)
    }

    /// Starts the port in the helper form with `extra` arguments.
    pub(crate) fn start_run_with(&self, extra: &[&str], input: Input) -> Running {
        let args = self.args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        start(Implementation::Port, &self.env(), &args, input)
    }

    /// The unit's state as the manager reports it.
    pub(crate) fn unit(&self, unit: &str) -> UnitState {
        self.sandbox.unit_state(unit)
    }

    /// Everything an uninstall must keep or remove as a whole: the install
    /// and config roots, the unit directory, and the state root without the
    /// services' runtime files (`execution/`, `admin/`, `test-worker/`).
    pub(crate) fn kept_tree(&self) -> BTreeMap<PathBuf, Entry> {
        let mut tree = BTreeMap::new();
        let i = &self.installation;
        for (name, root) in [
            ("install", &i.install_root),
            ("config", &i.config_root),
            ("units", &self.sandbox.unit_dir()),
            ("state", &i.state_root),
        ] {
            for (path, entry) in snapshot(root) {
                let volatile = name == "state"
                    && ["execution", "admin", "test-worker"]
                        .iter()
                        .any(|dir| path.starts_with(dir));
                if !volatile {
                    tree.insert(Path::new(name).join(path), entry);
                }
            }
        }
        tree
    }

    /// The state files, byte for byte.
    pub(crate) fn state_files(&self) -> Vec<(String, Option<Vec<u8>>)> {
        STATE_FILES
            .iter()
            .map(|name| {
                (
                    name.to_string(),
                    fs::read(self.installation.state_root.join(name)).ok(),
                )
            })
            .collect()
    }

    /// Both units still run the very processes that were started, enabled.
    #[track_caller]
    pub(crate) fn assert_services_untouched(&self) {
        for (unit, pid) in [
            (WORKER_UNIT, self.services.worker_pid),
            (GATEWAY_UNIT, self.services.gateway_pid),
        ] {
            let state = self.unit(unit);
            assert!(
                state.is_running() && state.main_pid == pid,
                "{unit}: {state:?}"
            );
            assert_eq!(state.unit_file_state, "enabled", "{unit}");
        }
    }

    /// The worker holds no admission lease.
    #[track_caller]
    pub(crate) fn assert_worker_unheld(&self) {
        let status = self.worker_status();
        assert_eq!(status.get("lease"), Some(&Json::Null), "{status:?}");
    }

    /// The worker's private status, asked over its callback listener.
    pub(crate) fn worker_status(&self) -> Json {
        let record = self
            .installation
            .receipt(Role::Worker)
            .expect("worker.json");
        let origin = record
            .get("callback_origin")
            .and_then(Json::as_str)
            .unwrap();
        let address = agents_tests::origin_address(origin).unwrap();
        let response = agents_tests::HttpRequest::get("/api/admin/execution/status")
            .bearer(&self.installation.control_token())
            .send(address)
            .expect("status answers");
        assert_eq!(response.status, 200, "{response:?}");
        response.json()
    }

    /// Maintenance actions the worker received, in order.
    pub(crate) fn maintenance_actions(&self) -> Vec<String> {
        self.requests(Role::Worker)
            .into_iter()
            .filter_map(|record| record.action)
            .collect()
    }

    /// Every request a role logged.
    pub(crate) fn requests(&self, role: Role) -> Vec<RequestRecord> {
        self.installation.requests(role)
    }

    /// Sets a role's misbehaviour switches.
    pub(crate) fn switches(&self, role: Role, switches: Switches) {
        self.installation.set_switches(role, &switches);
    }

    /// The intent file's parsed content, if present.
    pub(crate) fn intent(&self) -> Option<Json> {
        let data = fs::read(
            self.installation
                .install_root
                .join(".execution-uninstall.json"),
        )
        .ok()?;
        parse_json(&data).ok()
    }

    /// The intent's phase, if present.
    pub(crate) fn phase(&self) -> Option<String> {
        Some(self.intent()?.get("phase")?.as_str()?.to_string())
    }

    /// Waits until the intent reaches `phase`.
    pub(crate) fn wait_for_phase(&self, phase: &str) {
        poll_until(
            Duration::from_secs(30),
            &format!("intent phase {phase}"),
            || (self.phase().as_deref() == Some(phase)).then_some(()),
        );
    }

    /// A complete removal: roots and units gone, state kept (or purged).
    #[track_caller]
    pub(crate) fn assert_removed(&self, outcome: &Outcome, state_kept: bool) {
        self.assert_removed_after_prompts(outcome, "", state_kept);
    }

    /// [`SplitCase::assert_removed`] when stdout starts with `prompts`
    /// (Python's `input()` writes them there when stdout is not a terminal).
    #[track_caller]
    pub(crate) fn assert_removed_after_prompts(
        &self,
        outcome: &Outcome,
        prompts: &str,
        state_kept: bool,
    ) {
        assert_eq!(outcome.code(), 0, "{outcome:?}");
        let printed = outcome
            .stdout
            .strip_prefix(prompts)
            .unwrap_or_else(|| panic!("stdout starts with {prompts:?}: {outcome:?}"));
        let i = &self.installation;
        let mut expected = vec![
            "AgentsServer gateway, execution service, release runtime and configuration removed."
                .to_string(),
        ];
        if state_kept {
            expected.push(format!(
                "Preserved chat history, jobs, files, Team Hub state and secure-peer credentials at {}",
                i.state_root.display()
            ));
        }
        expected
            .push("Persistent chat terminals remain independent and were not stopped.".to_string());
        assert_eq!(printed.lines().collect::<Vec<_>>(), expected, "{outcome:?}");
        assert!(!i.install_root.exists(), "install root removed");
        assert!(!i.config_root.exists(), "config root removed");
        for unit in [WORKER_UNIT, GATEWAY_UNIT] {
            assert!(!self.sandbox.unit_dir().join(unit).exists());
            let state = self.unit(unit);
            assert_eq!(
                (state.load_state.as_str(), state.main_pid),
                ("not-found", 0),
                "{unit}"
            );
        }
        for pid in [self.services.worker_pid, self.services.gateway_pid] {
            assert!(!agents_tests::process_alive(pid));
        }
        assert_eq!(i.state_root.exists(), state_kept);
    }
}

/// `differences` of two kept trees, for messages.
pub(crate) fn changes(
    before: &BTreeMap<PathBuf, Entry>,
    after: &BTreeMap<PathBuf, Entry>,
) -> Vec<String> {
    differences(before, after)
}
