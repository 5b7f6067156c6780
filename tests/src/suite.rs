//! What `scripts/test.sh` needs around `cargo test`: one summary line that
//! counts passed, failed and skipped tests with the reasons for skips, and
//! proof that no process started by the suite outlived it.
//!
//! The `run-suite` binary becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`)
//! before it starts the suite, so every process the suite leaves behind,
//! however it detached (new session, new process group, double fork), is
//! re-parented to it rather than to init. Leftovers are found by that
//! parentage, never by name.

use std::collections::BTreeMap;
use std::fs;

/// The counts of libtest's `test result:` lines, summed over a whole run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TestTotals {
    /// Tests that passed (skipped tests return early and count here too).
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests marked `#[ignore]` that did not run.
    pub ignored: u64,
}

impl TestTotals {
    /// Adds the counts of one output line when it is a libtest result line
    /// (`test result: ok. 12 passed; 0 failed; 1 ignored; ...`).
    pub fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim_start().strip_prefix("test result: ") else {
            return;
        };
        let Some((_, counts)) = rest.split_once(". ") else {
            return;
        };
        for count in counts.split("; ") {
            let mut words = count.split_whitespace();
            let (Some(number), Some(what)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(number) = number.parse::<u64>() else {
                continue;
            };
            match what {
                "passed" => self.passed += number,
                "failed" => self.failed += number,
                "ignored" => self.ignored += number,
                _ => {}
            }
        }
    }
}

/// The skip lines (`SKIPPED <test>: <reason>`) of a skip log, deduplicated
/// by test, as reason -> number of tests.
pub fn skip_reasons(log: &str) -> BTreeMap<String, u64> {
    let mut tests = BTreeMap::new();
    for line in log.lines() {
        if let Some((test, reason)) = line
            .strip_prefix("SKIPPED ")
            .and_then(|rest| rest.split_once(": "))
        {
            tests.insert(test.to_string(), reason.to_string());
        }
    }
    let mut reasons = BTreeMap::new();
    for reason in tests.into_values() {
        *reasons.entry(reason).or_insert(0) += 1;
    }
    reasons
}

/// The one summary line: `tests: P passed, F failed, S skipped (n: reason;
/// ...), I ignored`. Skipped tests are taken out of libtest's passed count.
pub fn summary_line(totals: TestTotals, skips: &BTreeMap<String, u64>) -> String {
    let skipped: u64 = skips.values().sum();
    let mut line = format!(
        "tests: {} passed, {} failed, {skipped} skipped",
        totals.passed.saturating_sub(skipped),
        totals.failed
    );
    if !skips.is_empty() {
        let reasons: Vec<String> = skips
            .iter()
            .map(|(reason, count)| format!("{count}: {reason}"))
            .collect();
        line.push_str(&format!(" ({})", reasons.join("; ")));
    }
    line.push_str(&format!(", {} ignored", totals.ignored));
    line
}

/// One process the suite left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Its PID.
    pub pid: i32,
    /// Its process group.
    pub group: i32,
    /// Its session.
    pub session: i32,
    /// Its command line, NULs shown as spaces.
    pub command: String,
}

/// Live children of `parent` (zombies excluded), read from `/proc`.
pub fn children_of(parent: i32) -> Vec<Leftover> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is parenthesised and may contain ") ".
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |index: usize| {
            fields
                .get(index)
                .and_then(|value| value.parse::<i32>().ok())
        };
        if fields.first() == Some(&"Z") || field(1) != Some(parent) {
            continue;
        }
        let command = fs::read(format!("/proc/{pid}/cmdline"))
            .map(|bytes| {
                String::from_utf8_lossy(&bytes)
                    .trim_end_matches('\0')
                    .replace('\0', " ")
            })
            .unwrap_or_default();
        children.push(Leftover {
            pid,
            group: field(2).unwrap_or(0),
            session: field(3).unwrap_or(0),
            command,
        });
    }
    children.sort_by_key(|child| child.pid);
    children
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_are_summed_and_other_lines_ignored() {
        let mut totals = TestTotals::default();
        for line in [
            "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.05s",
            "running 3 tests",
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
            "test something ... ok",
        ] {
            totals.add_line(line);
        }
        assert_eq!(
            totals,
            TestTotals {
                passed: 14,
                failed: 1,
                ignored: 1
            }
        );
    }

    #[test]
    fn skips_are_counted_once_per_test_and_grouped_by_reason() {
        let log = "SKIPPED a: Python originals not found (set AGENTS_ORIGINALS_DIR)\n\
                   SKIPPED b: Python originals not found (set AGENTS_ORIGINALS_DIR)\n\
                   SKIPPED a: Python originals not found (set AGENTS_ORIGINALS_DIR)\n\
                   SKIPPED c: systemd sandbox unavailable: no root\n\
                   noise\n";
        let reasons = skip_reasons(log);
        assert_eq!(reasons.len(), 2);
        let totals = TestTotals {
            passed: 10,
            failed: 0,
            ignored: 3,
        };
        assert_eq!(
            summary_line(totals, &reasons),
            "tests: 7 passed, 0 failed, 3 skipped (2: Python originals not found (set \
             AGENTS_ORIGINALS_DIR); 1: systemd sandbox unavailable: no root), 3 ignored"
        );
        assert_eq!(
            summary_line(totals, &BTreeMap::new()),
            "tests: 10 passed, 0 failed, 0 skipped, 3 ignored"
        );
    }

    #[test]
    fn children_are_found_by_parentage() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let pid = child.id() as i32;
        // Until the child has exec'd, its command line is not yet `sleep 30`.
        let cmdline = format!("/proc/{pid}/cmdline");
        crate::poll_until(
            std::time::Duration::from_secs(20),
            "the child's exec",
            || {
                std::fs::read(&cmdline)
                    .ok()
                    .filter(|raw| raw.starts_with(b"sleep"))
            },
        );
        let found = children_of(me);
        child.kill().unwrap();
        child.wait().unwrap();
        let ours = found
            .iter()
            .find(|leftover| leftover.pid == pid)
            .expect("the child is listed");
        assert_eq!(ours.command, "sleep 30");
        assert!(children_of(me).iter().all(|leftover| leftover.pid != pid));
    }
}
