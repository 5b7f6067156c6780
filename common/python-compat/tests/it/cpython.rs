//! CPython 3.11 as the oracle: `python3 -B -c PROGRAM` and the lines it prints.

use std::process::Command;

/// `python3 -B -c program`, to add arguments and environment to.
pub(crate) fn python(program: &str) -> Command {
    let mut command = Command::new("python3");
    command.args(["-B", "-c", program]);
    command
}

/// The lines `command` prints; it must succeed.
pub(crate) fn printed_lines(command: &mut Command) -> Vec<String> {
    let output = command.output().expect("python3 runs");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}
