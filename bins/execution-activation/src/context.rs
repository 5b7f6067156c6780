//! What every journal-owned operation establishes first: the layout the
//! installer passed, the outer journal that authorizes it, and proof that
//! this process descends from the installer holding `.install-lock`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use agents_common::{
    execution_context, owned_directory, read_owned_config, ActivationManifest, Error,
    ExecutionLayout, PlatformName, Result, Role,
};
use python_compat::{
    json::{Json, JsonObject},
    path::{pure_path, pure_path_text},
    ErrorClass,
};

use crate::cli::Args;
use crate::environment::runtime_environment;

/// `Path(value)`: the pathlib spelling of a command-line path. A missing
/// option is Python's `TypeError` from `Path(None)`.
fn path_arg(value: Option<&PathBuf>) -> Result<PathBuf> {
    match value {
        // The bytes as given: a lossy spelling would name another path.
        Some(path) => Ok(pure_path(path)),
        None => Err(python_compat::Exception::not_a_path("NoneType").into()),
    }
}

/// `command_layout(args)`: the layout install.sh describes, with both
/// services on `--release-dir` and no environment. Built once per command:
/// it depends on the arguments alone.
pub(crate) fn command_layout(args: &Args) -> Result<ExecutionLayout> {
    let release = path_arg(args.release_dir.as_ref())?;
    Ok(ExecutionLayout {
        install_root: path_arg(Some(&args.root))?,
        config_root: path_arg(args.config_root.as_ref())?,
        state_root: path_arg(args.state_root.as_ref())?,
        home: path_arg(args.home.as_ref())?,
        // Without `--platform` the layout's platform is no supported one.
        platform: args
            .platform
            .clone()
            .unwrap_or_else(|| PlatformName::parse("")),
        worker_release: release.clone(),
        gateway_release: release,
        bind: args.bind.clone().unwrap_or_default(),
        port: args.port.map_or(Json::Null, Json::from),
        environment: Json::Object(JsonObject::new()),
    })
}

/// `command_layout(args, environment=True)`: the same layout with the parsed
/// runtime `config/env`, for the operations that render units.
pub(crate) fn with_runtime_environment(layout: &ExecutionLayout) -> Result<ExecutionLayout> {
    let environment = runtime_environment(&layout.config_root.join("env"))?;
    Ok(ExecutionLayout {
        environment: Json::Object(environment),
        ..layout.clone()
    })
}

/// `transaction(args)`: the outer journal, which must be a split-service
/// journal for exactly this layout, while this process descends from the
/// installer that holds the install lock.
pub(crate) fn transaction(args: &Args, layout: &ExecutionLayout) -> Result<ActivationManifest> {
    let root = path_arg(Some(&args.root))?;
    let Some(value) = execution_context(&root)? else {
        return Err(Error::runtime(
            "outer transaction does not authorize split service changes",
        ));
    };
    let text = |path: &Path| pure_path_text(path);
    if value.text("service_path") != text(&layout.service_path(Role::Worker)?)
        || value.text("gateway_path") != text(&layout.service_path(Role::Gateway)?)
        || value.text("env_path") != text(&layout.config_root.join("env"))
        || value.execution_field("runtime_dir") != &Json::from(text(&layout.runtime_dir()))
        || value.text("release_dir") != text(&layout.worker_release)
    {
        return Err(Error::runtime(
            "split service invocation differs from the outer transaction",
        ));
    }
    assert_install_lock(&root)?;
    Ok(value)
}

/// How many ancestors `assert_install_lock` climbs (install.sh's subshells).
const LOCK_ANCESTRY_DEPTH: usize = 8;

/// `assert_install_lock(root)`: `.install-lock` is the installer's private
/// lock directory and its PID is this process's parent or a near ancestor
/// (install.sh runs helpers through one or two subshells).
pub(crate) fn assert_install_lock(root: &Path) -> Result<()> {
    let lock = root.join(".install-lock");
    owned_directory(&lock, true)?;
    let pid_data = read_owned_config(&lock.join("pid"), 32)?;
    let Some(owner) = lock_pid(&pid_data) else {
        return Err(Error::runtime("installer lock identity is invalid"));
    };
    let mut parent =
        i128::from(rustix::process::getppid().map_or(0, |pid| pid.as_raw_nonzero().get()));
    for _ in 0..LOCK_ANCESTRY_DEPTH {
        if parent == owner || parent <= 1 {
            break;
        }
        parent = parent_of_process(parent)?;
    }
    if parent != owner {
        return Err(Error::runtime(
            "split operation is not a child of the owning installer",
        ));
    }
    Ok(())
}

/// `re.fullmatch(rb"[1-9][0-9]*\n?", data)` then `int(data)`.
fn lock_pid(data: &[u8]) -> Option<i128> {
    let digits = data.strip_suffix(b"\n").unwrap_or(data);
    let valid = digits.first().is_some_and(|b| (b'1'..=b'9').contains(b))
        && digits.iter().all(u8::is_ascii_digit);
    if !valid {
        return None;
    }
    // Python ints are unbounded; a PID beyond i128 can never match.
    std::str::from_utf8(digits)
        .ok()?
        .parse()
        .ok()
        .or(Some(i128::MAX))
}

/// The parent of `pid`, to prove this helper descends from the installer
/// that holds the install lock: `int(subprocess.check_output(["/bin/ps",
/// "-p", pid, "-o", "ppid="]).strip())`.
pub(crate) fn parent_of_process(pid: i128) -> Result<i128> {
    let arguments = [
        "-p".to_string(),
        pid.to_string(),
        "-o".to_string(),
        "ppid=".to_string(),
    ];
    let output = Command::new("/bin/ps")
        .args(&arguments)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|error| Error::from_io_path(&error, Path::new("/bin/ps")))?;
    if !output.status.success() {
        let code = output.status.code().unwrap_or(-1);
        return Err(Error::new(
            ErrorClass::Runtime,
            format!(
                "Command '['/bin/ps', '-p', '{pid}', '-o', 'ppid=']' returned non-zero exit status {code}."
            ),
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let text = text.trim();
    text.parse()
        .map_err(|_| Error::value(format!("invalid literal for int() with base 10: '{text}'")))
}

/// `print(text)`: one line on stdout, the only output install.sh captures.
pub(crate) fn print_line(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(Error::from)
}
