//! The command lines systemd runs the test worker with.
//!
//! Each release's `.venv/bin/python` is a symlink to this program, so argv is
//! exactly the interpreter's: `<python> <runtime>/execution_service.py <role>
//! --runtime-dir D --bind B --port P [--callback-port N]` for the split
//! services, and `<python> <runtime>/agent_server.py serve --bind B --port P`
//! for a legacy monolith.

use std::path::PathBuf;

use agents_tests::Role;

/// What to run, as the Python argument parser would have understood it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invocation {
    /// Which process to play.
    pub role: Role,
    /// The "script" path (argv[1]); its resolved directory is the release root.
    pub script: PathBuf,
    /// `--runtime-dir` (split services only).
    pub runtime_dir: Option<PathBuf>,
    /// `--bind` (default `127.0.0.1`).
    pub bind: String,
    /// `--port` (default 7850).
    pub port: u16,
    /// `--callback-port` (default 0: ephemeral).
    pub callback_port: u16,
}

fn value<'a>(
    arguments: &mut impl Iterator<Item = &'a String>,
    flag: &str,
) -> Result<&'a String, String> {
    arguments
        .next()
        .ok_or_else(|| format!("argument {flag}: expected one argument"))
}

fn port(text: &str, minimum: u16) -> Result<u16, String> {
    text.parse::<u16>()
        .ok()
        .filter(|port| *port >= minimum)
        .ok_or_else(|| "Invalid listener port".to_string())
}

/// Parses `argv[1..]`; errors read like argparse's.
pub(crate) fn parse(arguments: &[String]) -> Result<Invocation, String> {
    let mut arguments = arguments.iter();
    let script = PathBuf::from(arguments.next().ok_or("the script path is required")?);
    let role = match arguments.next().map(String::as_str) {
        Some("worker") => Role::Worker,
        Some("gateway") => Role::Gateway,
        Some("serve")
            if script
                .file_name()
                .is_some_and(|name| name == "agent_server.py") =>
        {
            Role::Monolith
        }
        other => return Err(format!("argument role: invalid choice: {other:?}")),
    };
    let mut invocation = Invocation {
        role,
        script,
        runtime_dir: None,
        bind: "127.0.0.1".to_string(),
        port: 7850,
        callback_port: 0,
    };
    while let Some(flag) = arguments.next() {
        match flag.as_str() {
            "--runtime-dir" => {
                invocation.runtime_dir = Some(PathBuf::from(value(&mut arguments, flag)?))
            }
            "--bind" => invocation.bind = value(&mut arguments, flag)?.clone(),
            "--port" => invocation.port = port(value(&mut arguments, flag)?, 1)?,
            "--callback-port" => invocation.callback_port = port(value(&mut arguments, flag)?, 0)?,
            // Accepted for fidelity; the test worker has no application to load.
            "--application" => {
                value(&mut arguments, flag)?;
            }
            other => return Err(format!("unrecognized arguments: {other}")),
        }
    }
    if role != Role::Monolith {
        match &invocation.runtime_dir {
            None => return Err("the following arguments are required: --runtime-dir".to_string()),
            Some(directory) if !directory.is_absolute() => {
                return Err("--runtime-dir must be absolute".to_string())
            }
            Some(_) => {}
        }
    }
    Ok(invocation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| item.to_string()).collect()
    }

    #[test]
    fn worker_command_line_as_rendered() {
        let invocation = parse(&strings(&[
            "/i/releases/1/execution_service.py",
            "worker",
            "--runtime-dir",
            "/s/execution",
            "--bind",
            "0.0.0.0",
            "--port",
            "8123",
            "--callback-port",
            "0",
        ]))
        .unwrap();
        assert_eq!(invocation.role, Role::Worker);
        assert_eq!(invocation.runtime_dir, Some(PathBuf::from("/s/execution")));
        assert_eq!(
            (
                invocation.bind.as_str(),
                invocation.port,
                invocation.callback_port
            ),
            ("0.0.0.0", 8123, 0)
        );
    }

    #[test]
    fn monolith_and_refusals() {
        let monolith = parse(&strings(&[
            "/i/current/agent_server.py",
            "serve",
            "--port",
            "9000",
        ]))
        .unwrap();
        assert_eq!((monolith.role, monolith.port), (Role::Monolith, 9000));
        assert!(parse(&strings(&["/x/execution_service.py", "serve"])).is_err());
        assert!(parse(&strings(&["/x/execution_service.py", "gateway"])).is_err());
        assert!(parse(&strings(&[
            "/x/execution_service.py",
            "gateway",
            "--runtime-dir",
            "rel"
        ]))
        .is_err());
        assert!(parse(&strings(&[
            "/x/execution_service.py",
            "worker",
            "--runtime-dir",
            "/a",
            "--port",
            "0"
        ]))
        .is_err());
    }
}
