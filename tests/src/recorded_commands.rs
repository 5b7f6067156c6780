//! Replaying recorded `systemctl` / `launchctl` output through NativeServices'
//! injectable command runner, and layouts whose service files the tests place.
// Fixture plumbing whose names say what each item is; documenting every
// field would repeat them.
#![allow(missing_docs)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use agents_common::{
    CommandCapture, CommandRunner, Error, ExecutionLayout, NativeServices, Result,
};
use python_compat::json::Json;
use python_compat::os::current_uid;

/// One recorded command: what NativeServices must run and what it printed.
pub struct Exchange {
    pub args: Vec<String>,
    pub reply: Result<CommandCapture>,
}

/// A command exiting with `status` after printing `stdout` and `stderr`.
pub fn reply(status: i32, stdout: &str, stderr: &str) -> Result<CommandCapture> {
    Ok(CommandCapture {
        status,
        stdout: stdout.as_bytes().to_vec(),
        stderr: stderr.as_bytes().to_vec(),
    })
}

/// `args` must be run next and prints `reply`.
pub fn expect(args: &[&str], reply: Result<CommandCapture>) -> Exchange {
    Exchange {
        args: args.iter().map(|arg| arg.to_string()).collect(),
        reply,
    }
}

#[derive(Default)]
struct Script {
    pending: VecDeque<Exchange>,
    /// Replayed forever once `pending` is empty (for stop polling).
    repeat: Vec<Exchange>,
    repeat_next: usize,
    calls: Vec<(Vec<String>, Duration)>,
}

/// A `CommandRunner` that replays exchanges in order and records every call;
/// an unexpected command fails the test.
#[derive(Clone, Default)]
pub struct Recorded(Rc<RefCell<Script>>);

impl Recorded {
    pub fn new(exchanges: Vec<Exchange>) -> Self {
        let recorded = Recorded::default();
        recorded.0.borrow_mut().pending = exchanges.into();
        recorded
    }

    /// After the scripted exchanges, answer with these in a cycle.
    pub fn then_repeat(self, exchanges: Vec<Exchange>) -> Self {
        self.0.borrow_mut().repeat = exchanges;
        self
    }

    /// Every command run so far, with the timeout it was given.
    pub fn calls(&self) -> Vec<(Vec<String>, Duration)> {
        self.0.borrow().calls.clone()
    }

    /// Only the argument lists of the calls so far.
    pub fn commands(&self) -> Vec<Vec<String>> {
        self.calls().into_iter().map(|(args, _)| args).collect()
    }

    /// Scripted exchanges that were never requested.
    pub fn unused(&self) -> usize {
        self.0.borrow().pending.len()
    }

    pub fn boxed(&self) -> Box<dyn CommandRunner> {
        Box::new(self.clone())
    }
}

impl CommandRunner for Recorded {
    fn run(&self, args: &[String], timeout: Duration) -> Result<CommandCapture> {
        let mut script = self.0.borrow_mut();
        script.calls.push((args.to_vec(), timeout));
        let exchange = match script.pending.pop_front() {
            Some(exchange) => exchange,
            None if !script.repeat.is_empty() => {
                let index = script.repeat_next % script.repeat.len();
                script.repeat_next += 1;
                let exchange = &script.repeat[index];
                Exchange {
                    args: exchange.args.clone(),
                    reply: exchange.reply.clone(),
                }
            }
            None => panic!("unexpected command {args:?}"),
        };
        assert_eq!(args, exchange.args.as_slice(), "commands out of order");
        exchange.reply
    }
}

/// A layout whose home is `home`; only the platform and home matter to
/// NativeServices (the other fields are never read by it).
pub fn layout(platform: &str, home: &Path) -> ExecutionLayout {
    let base = home.parent().unwrap();
    ExecutionLayout {
        install_root: base.join("install"),
        config_root: base.join("config"),
        state_root: base.join("state"),
        home: home.to_path_buf(),
        platform: platform.to_string(),
        worker_release: base.join("install/releases/1.0.0"),
        gateway_release: base.join("install/releases/1.0.0"),
        bind: "127.0.0.1".to_string(),
        port: Json::from(8765),
        environment: Json::Object(python_compat::json::JsonObject::new()),
    }
}

/// Writes the service file of `role` (0600) under the layout's home.
pub fn place_service_file(layout: &ExecutionLayout, role: &str) -> PathBuf {
    let path = layout.service_path(role).unwrap();
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, b"[Service]\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// A home in a private temporary directory and the layout of it for one
/// platform, with the service files (units or plists) of some roles placed.
pub struct ServiceHome {
    _temp: crate::TempDir,
    pub layout: ExecutionLayout,
}

impl ServiceHome {
    /// A `platform` (`Linux`, `Darwin`) layout whose service files of
    /// `roles` (`worker`, `gateway`) exist, 0600.
    pub fn with_files(platform: &str, roles: &[&str]) -> ServiceHome {
        let temp = crate::TempDir::new("agents-service-home");
        let home = temp.join("home");
        crate::make_dir(&home, 0o755);
        let layout = layout(platform, &home);
        for role in roles {
            place_service_file(&layout, role);
        }
        ServiceHome {
            _temp: temp,
            layout,
        }
    }

    /// `launchctl bootstrap gui/<uid> <plist of role>` answering `reply`.
    pub fn bootstrap(&self, role: &str, reply: Result<CommandCapture>) -> Exchange {
        let plist = self.layout.service_path(role).unwrap();
        expect(
            &[
                "/bin/launchctl",
                "bootstrap",
                &domain(),
                plist.to_str().unwrap(),
            ],
            reply,
        )
    }
}

/// NativeServices on `layout` answering through `recorded`.
pub fn services(layout: &ExecutionLayout, recorded: &Recorded) -> NativeServices {
    NativeServices::with_runner(layout, recorded.boxed())
}

/// `gui/<uid>` of the current user, as the launchd commands name the domain.
pub fn domain() -> String {
    format!("gui/{}", current_uid())
}

/// A recorded `launchctl` output from `tests/fixtures/launchd/<name>` (its
/// README says where each shape comes from) with each `{key}` placeholder
/// replaced by its value; a placeholder left over fails the test, so no
/// fixture is replayed half filled in.
#[track_caller]
pub fn launchd_output(name: &str, values: &[(&str, &str)]) -> String {
    let path = crate::fixture_path("launchd").join(name);
    let mut text = fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("launchd fixture {}: {err}", path.display()));
    for (key, value) in values {
        text = text.replace(&format!("{{{key}}}"), value);
    }
    for key in ["uid", "label", "home", "pid", "secret", "entries"] {
        assert!(
            !text.contains(&format!("{{{key}}}")),
            "launchd fixture {name}: {{{key}}} was not given"
        );
    }
    text
}

/// A provider key a plist's environment carries: `launchctl print` shows
/// it, and no refusal may repeat it.
pub const LAUNCHD_SECRET: &str = "sk-proj-token-must-never-be-echoed";

/// [`launchd_output`] `name` for `label` in this user's GUI domain, with
/// process `pid`, a home under `/Users` and [`LAUNCHD_SECRET`].
#[track_caller]
pub fn launchd_fixture(name: &str, label: &str, pid: &str) -> String {
    launchd_output(
        name,
        &[
            ("uid", &current_uid().to_string()),
            ("label", label),
            ("home", "/Users/alice"),
            ("pid", pid),
            ("secret", LAUNCHD_SECRET),
        ],
    )
}

/// `launchctl print-disabled gui/<uid>` (macOS 13+ spelling) holding
/// `entries` (`"<label>" => <value>` lines) among Apple's own.
pub fn launchd_print_disabled(entries: &[(&str, &str)]) -> String {
    let mut lines = String::new();
    for (label, value) in entries {
        lines.push_str(&format!("\t\"{label}\" => {value}\n"));
    }
    launchd_output("print-disabled.txt", &[("entries", &lines)])
}

/// The error of a call that must fail.
#[track_caller]
pub fn failure<T: std::fmt::Debug>(result: Result<T>) -> Error {
    result.expect_err("the call must fail")
}
