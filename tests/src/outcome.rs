//! How one helper run ended, as one comparable value, with the checks every
//! black-box test makes of it.

use std::process::{Command, Output, Stdio};

use python_compat::json::{parse_json, Json};

/// Exit code and output of one helper run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Everything printed on stdout.
    pub stdout: String,
    /// Everything printed on stderr.
    pub stderr: String,
}

impl From<Output> for Outcome {
    fn from(output: Output) -> Outcome {
        Outcome {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Outcome {
    /// Runs `command` to completion with standard input from `/dev/null`.
    pub fn of(command: &mut Command) -> Outcome {
        Outcome::from(command.stdin(Stdio::null()).output().expect("spawn"))
    }

    /// Exit 0 with exactly `stdout` and nothing on stderr.
    #[track_caller]
    pub fn assert_success(&self, stdout: &str) {
        assert_eq!(
            (self.code, self.stdout.as_str(), self.stderr.as_str()),
            (Some(0), stdout, ""),
            "helper outcome"
        );
    }

    /// Exit 0 with one JSON line on stdout and nothing on stderr; returns the
    /// line parsed.
    #[track_caller]
    pub fn assert_ok_json(&self) -> Json {
        assert_eq!(
            (self.code, self.stderr.as_str()),
            (Some(0), ""),
            "stdout: {}",
            self.stdout
        );
        assert!(self.stdout.ends_with('\n') && self.stdout.matches('\n').count() == 1);
        parse_json(self.stdout.as_bytes()).expect("stdout is JSON")
    }

    /// Exit 1, nothing on stdout, exactly `line` on stderr: a refusal.
    #[track_caller]
    pub fn assert_refused(&self, line: &str) {
        assert_eq!(
            (self.code, self.stdout.as_str(), self.stderr.as_str()),
            (Some(1), "", &*format!("{line}\n")),
            "helper outcome"
        );
    }

    /// Exit 1, nothing on stdout, one stderr line; returns it.
    #[track_caller]
    pub fn refusal_line(&self) -> &str {
        assert_eq!((self.code, self.stdout.as_str()), (Some(1), ""), "{self:?}");
        assert!(
            self.stderr.ends_with('\n') && self.stderr.matches('\n').count() == 1,
            "one stderr line: {self:?}"
        );
        self.stderr.trim_end()
    }
}
