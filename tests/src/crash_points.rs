//! The crash-point campaign's machinery: run a helper under `crash-tracer`
//! (SIGKILL on entry to its N-th durable system call), choose the kill points
//! of a campaign, and count and report which converged.
//!
//! A campaign runs one state-changing operation once to completion (counting
//! its durable calls), then, for each chosen N, sets the scene up afresh,
//! kills the operation at its N-th durable call, runs what an operator or
//! the next caller would run, and checks the invariants. The normal test run
//! samples the points (the first, the last and five spread between them);
//! `AGENTS_CRASH_POINTS=all` (what `scripts/crash-points.sh` sets) runs every
//! N from 1 until the operation completes without being hit.

use std::fmt;
use std::fs;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::binaries::binary_path;
use crate::outcome::Outcome;
use crate::power_cut::{self, CrashState};
use crate::tempdir::TempDir;

/// Set to `all` to run every kill point instead of the sample.
pub const CRASH_POINTS_ENV: &str = "AGENTS_CRASH_POINTS";
/// A file each campaign appends its summary line to (set by the script).
pub const CRASH_REPORT_ENV: &str = "AGENTS_CRASH_REPORT";
/// Extra spread points the sample takes between the first and the last.
const SPREAD: usize = 5;

/// One durable system call the tracer saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableCall {
    /// Its position among the run's durable calls (1-based).
    pub number: usize,
    /// The system call (`renameat`, `fsync`, `write`...).
    pub call: String,
    /// The paths it names (`from -> to` for two).
    pub paths: String,
}

impl DurableCall {
    /// True when the call is `call` and its paths contain `fragment`.
    pub fn is(&self, call: &str, fragment: &str) -> bool {
        self.call == call && self.paths.contains(fragment)
    }
}

impl fmt::Display for DurableCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}({})", self.number, self.call, self.paths)
    }
}

/// How the fault injection follows the program.
#[derive(Debug, Clone, Default)]
pub struct Injection {
    /// Trace every process the program starts (for a shell script).
    pub follow: bool,
    /// Command names (`/proc/<pid>/comm`) whose calls are not counted.
    pub exclude: Vec<String>,
    /// File names whose first write counts as a durable call.
    pub journal: Vec<String>,
    /// Start from the test's own environment (as a command that never
    /// called `env_clear` does) rather than only the variables it set.
    pub inherit_environment: bool,
}

impl Injection {
    /// A helper traced by itself; writes to these files count.
    pub fn helper(journal: &[&str]) -> Injection {
        Injection {
            journal: journal.iter().map(|name| name.to_string()).collect(),
            ..Injection::default()
        }
    }
}

thread_local! {
    /// The call the last traced run on this thread was killed on, so a
    /// campaign can name it when the checks after it fail.
    static LAST_KILLED: std::cell::RefCell<Option<DurableCall>> =
        const { std::cell::RefCell::new(None) };
}

/// The journals, markers and status rows the helpers write (matched in a
/// file name, so their temporaries count too): their first write is a
/// durable call of the campaign.
pub const JOURNAL_NAMES: [&str; 3] = [
    "manifest.json",
    ".execution-uninstall.json",
    "server-update.json",
];

/// The injection every helper of the campaign runs under: the helper traced
/// by itself, its first write to each of [`JOURNAL_NAMES`] counted.
pub fn helper_injection() -> Injection {
    Injection::helper(&JOURNAL_NAMES)
}

/// One traced run.
#[derive(Debug, Clone)]
pub struct Traced {
    /// How it ended (`code` `None` when it was killed).
    pub outcome: Outcome,
    /// Every durable call it made, in order (up to the killed one).
    pub calls: Vec<DurableCall>,
    /// The call it was killed on, before that call ran.
    pub killed: Option<DurableCall>,
}

/// Runs `command` under the tracer, killing it on entry to its `kill_at`-th
/// durable call (never, for `None`). The command's program, arguments,
/// explicitly set environment and working directory are kept; the rest of
/// the environment is cleared, as sandbox commands clear it, unless the
/// injection inherits it. stdin is `/dev/null`. Returns once the commands it started have finished.
pub fn run_traced(command: &Command, injection: &Injection, kill_at: Option<usize>) -> Traced {
    run_traced_with_stdin(command, injection, kill_at, Stdio::null())
}

/// [`run_traced`] with `stdin` (a terminal for the prompts, say).
pub fn run_traced_with_stdin(
    command: &Command,
    injection: &Injection,
    kill_at: Option<usize>,
    stdin: Stdio,
) -> Traced {
    let scratch = TempDir::new("crash-tracer");
    let report = scratch.join("report");
    let mut traced = Command::new(binary_path("crash-tracer"));
    traced.arg("--report").arg(&report);
    if let Some(n) = kill_at {
        traced.args(["--kill-at", &n.to_string()]);
    }
    if injection.follow {
        traced.arg("--follow");
    }
    for name in &injection.exclude {
        traced.args(["--exclude", name]);
    }
    for name in &injection.journal {
        traced.args(["--journal", name]);
    }
    let record = power_cut::recording().then(|| scratch.join("record"));
    if let Some(record) = &record {
        traced.arg("--record").arg(record);
    }
    traced
        .arg("--")
        .arg(command.get_program())
        .args(command.get_args());
    if !injection.inherit_environment {
        traced.env_clear();
    }
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => traced.env(key, value),
            None => traced.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        traced.current_dir(dir);
    }
    let output = traced.stdin(stdin).output().expect("crash-tracer runs");
    let text = fs::read_to_string(&report).unwrap_or_else(|err| {
        panic!(
            "crash-tracer wrote no report ({err}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let mut calls = Vec::new();
    let mut killed = None;
    let mut ended = false;
    for line in text.lines() {
        let fields: Vec<&str> = line.splitn(3, '\t').collect();
        if let [number, call, paths] = fields[..] {
            calls.push(DurableCall {
                number: number.parse().expect("a call number"),
                call: call.to_string(),
                paths: paths.to_string(),
            });
        } else if let Some(number) = line.strip_prefix("killed ") {
            let number: usize = number.parse().expect("a killed call number");
            killed = calls.iter().find(|call| call.number == number).cloned();
            ended = true;
        } else if line.starts_with("exited ") || line.starts_with("signaled ") {
            ended = true;
        } else {
            panic!("crash-tracer: {line}");
        }
    }
    assert!(ended, "crash-tracer report ends with the program's end");
    let mut outcome = Outcome::from(output);
    if killed.is_some() {
        outcome.code = None;
    }
    LAST_KILLED.with(|last| *last.borrow_mut() = killed.clone());
    if let (Some(record), Some(_)) = (record, &killed) {
        // The machine stopped here: the disk becomes the point's crash state.
        power_cut::after_kill(&fs::read_to_string(record).expect("the tracer's record"));
    }
    Traced {
        outcome,
        calls,
        killed,
    }
}

/// True when every kill point runs (`AGENTS_CRASH_POINTS=all`).
pub fn all_points() -> bool {
    std::env::var(CRASH_POINTS_ENV).is_ok_and(|value| value == "all")
}

/// The sampled kill points of a run with `total` durable calls: the first,
/// the last and [`SPREAD`] spread evenly between them (fewer when there are
/// fewer calls), ascending.
pub fn sample(total: usize) -> Vec<usize> {
    let mut points: Vec<usize> = (0..SPREAD + 2)
        .map(|step| 1 + step * total.saturating_sub(1) / (SPREAD + 1))
        .filter(|&n| n >= 1 && n <= total)
        .collect();
    points.dedup();
    points
}

/// What one kill point gave.
#[derive(Debug, Clone)]
pub enum PointResult {
    /// The operation was killed there and everything converged.
    Converged(DurableCall),
    /// The operation completed without reaching this many durable calls.
    NotReached,
}

/// The tally of one campaign.
#[derive(Debug, Default)]
pub struct Campaign {
    name: String,
    killed: usize,
    converged: usize,
    failures: Vec<String>,
    observed: bool,
    /// Crash states built (SIGKILL included) and how many converged.
    states: usize,
    states_converged: usize,
    /// Crash states the disk cannot be turned into (see `Changes::resurrected`).
    unbuildable: usize,
}

impl Campaign {
    /// A campaign for the operation `name` (the report line's first word).
    pub fn new(name: &str) -> Campaign {
        Campaign {
            name: name.to_string(),
            ..Campaign::default()
        }
    }

    /// A campaign of a Python original: it is run under the same injection
    /// and its tally reported (with each point that did not converge), but
    /// it does not fail the test; the binary's own campaign must converge
    /// wherever the original does.
    pub fn observing(name: &str) -> Campaign {
        Campaign {
            observed: true,
            ..Campaign::new(name)
        }
    }

    /// [`Campaign::observing`] for an original's campaign, otherwise
    /// [`Campaign::new`].
    pub fn of(name: &str, original: bool) -> Campaign {
        if original {
            Campaign::observing(name)
        } else {
            Campaign::new(name)
        }
    }

    /// Runs the campaign: `point(n)` sets the scene up, kills the operation
    /// at its n-th durable call, recovers and checks (panicking when
    /// something does not converge). `total` is the durable-call count of a
    /// complete run. Prints and records the summary line, then fails when
    /// any point did not converge.
    pub fn run(mut self, total: usize, mut point: impl FnMut(usize) -> PointResult) {
        let cut_points = power_cut::power_cut_points(&sample(total));
        let mut sampled = sample(total).into_iter();
        let mut next = 1;
        loop {
            let n = if all_points() {
                next += 1;
                next - 1
            } else {
                match sampled.next() {
                    Some(n) => n,
                    None => break,
                }
            };
            let cut = power_cut::everywhere() || (!all_points() && cut_points.contains(&n));
            let kill = cut.then_some(CrashState::Kill);
            let Some(others) = self.attempt(n, kill, &mut point) else {
                break;
            };
            for state in others {
                self.attempt(n, Some(state), &mut point);
            }
        }
        self.report();
    }

    /// Runs point `n` (in `state` when a power cut applies) and tallies it.
    /// `None` when the operation completed before call `n`; otherwise the
    /// crash states beyond SIGKILL that differ from it at this point.
    fn attempt(
        &mut self,
        n: usize,
        state: Option<CrashState>,
        point: &mut impl FnMut(usize) -> PointResult,
    ) -> Option<Vec<CrashState>> {
        LAST_KILLED.with(|last| *last.borrow_mut() = None);
        let (result, built) = run_point(n, state, point);
        let label = match state {
            Some(state) if state != CrashState::Kill => format!(" ({})", state.name()),
            _ => String::new(),
        };
        // A state the disk already was in is not one more state.
        let same_as_kill = state.is_some_and(|state| state != CrashState::Kill)
            && built
                .as_ref()
                .is_some_and(|(_, changes)| changes.is_empty());
        match result {
            Ok(PointResult::NotReached) => return None,
            Ok(PointResult::Converged(_)) if same_as_kill => {}
            Ok(PointResult::Converged(call)) => {
                self.tally(state, true);
                eprintln!("{}: killed at {call}{label}: converged", self.name);
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
                    .unwrap_or_default();
                self.tally(state, false);
                let at = LAST_KILLED
                    .with(|last| last.borrow().clone())
                    .map_or_else(|| format!("kill point {n}"), |call| call.to_string());
                let lost = built
                    .as_ref()
                    .map(|(_, changes)| changes.summary())
                    .filter(|summary| !summary.is_empty())
                    .map_or_else(String::new, |summary| format!(" [{summary}]"));
                eprintln!(
                    "{}: killed at {at}{label}{lost}: NOT CONVERGED: {message}",
                    self.name
                );
                self.failures.push(format!("{at}{label}{lost}: {message}"));
            }
        }
        Some(match state {
            Some(CrashState::Kill) => self.other_states(n, &built),
            _ => Vec::new(),
        })
    }

    /// The crash states beyond SIGKILL that differ from it at point `n`
    /// (from the model of the killed run), less those that cannot be built.
    fn other_states(
        &mut self,
        n: usize,
        built: &Option<(power_cut::Model, power_cut::Changes)>,
    ) -> Vec<CrashState> {
        let Some((model, _)) = built else {
            return Vec::new();
        };
        let mut states = Vec::new();
        for other in &CrashState::ALL[1..] {
            let changes = model.changes(*other);
            if !changes.resurrected.is_empty() {
                self.unbuildable += 1;
                eprintln!(
                    "{}: at kill point {n} ({}): not built, a removed directory would come back: {:?}",
                    self.name,
                    other.name(),
                    changes.resurrected
                );
            } else if !changes.is_empty() {
                states.push(*other);
            }
        }
        states
    }

    /// Counts one converged (or not) point in `state`.
    fn tally(&mut self, state: Option<CrashState>, converged: bool) {
        if matches!(state, None | Some(CrashState::Kill)) {
            self.killed += 1;
            self.converged += usize::from(converged);
        }
        if state.is_some() {
            self.states += 1;
            self.states_converged += usize::from(converged);
        }
    }

    /// Prints and records the summary lines, then fails when any point did
    /// not converge.
    fn report(self) {
        let mut lines = vec![format!(
            "{}: {} kill points, {} converged",
            self.name, self.killed, self.converged
        )];
        if self.states > 0 {
            lines.push(format!(
                "{}: {} crash states, {} converged",
                self.name, self.states, self.states_converged
            ));
        }
        if self.unbuildable > 0 {
            lines.push(format!(
                "{}: {} more crash states not built (a removed directory would come back)",
                self.name, self.unbuildable
            ));
        }
        for line in &lines {
            println!("{line}");
        }
        if let Some(path) = std::env::var_os(CRASH_REPORT_ENV) {
            let mut file = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(PathBuf::from(path))
                .expect("open the crash-point report");
            // One write, so concurrent campaigns do not interleave.
            let mut record: String = lines.iter().map(|line| format!("{line}\n")).collect();
            if self.observed {
                for failure in &self.failures {
                    let first = failure.lines().next().unwrap_or_default();
                    record.push_str(&format!("  does not converge at {first}\n"));
                }
            }
            file.write_all(record.as_bytes())
                .expect("record the crash-point line");
        }
        if self.observed {
            return;
        }
        assert!(
            self.failures.is_empty(),
            "{}: points that did not converge:\n{}",
            self.name,
            self.failures.join("\n")
        );
    }
}

/// What a point gave, and the power cut's model and changes when one applied.
pub type PointRun = (
    std::thread::Result<PointResult>,
    Option<(power_cut::Model, power_cut::Changes)>,
);

/// Runs point `n` once: under a power cut in `state` (the first traced run
/// killed in it is turned into that state, and after the recovery every
/// file the operation wrote must be non-empty and JSON must parse), or as
/// a plain SIGKILL for `None`. A panic (a check that failed) is caught.
pub fn run_point(
    n: usize,
    state: Option<CrashState>,
    point: &mut impl FnMut(usize) -> PointResult,
) -> PointRun {
    if let Some(state) = state {
        power_cut::begin(state);
    }
    let mut built = None;
    let result = catch_unwind(AssertUnwindSafe(|| {
        let result = point(n);
        built = power_cut::end();
        if let (PointResult::Converged(_), Some((model, _))) = (&result, &built) {
            power_cut::check_owned_files(model);
        }
        result
    }));
    (result, built.or_else(power_cut::end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_takes_the_first_the_last_and_five_between() {
        assert_eq!(sample(1), [1]);
        assert_eq!(sample(3), [1, 2, 3]);
        assert_eq!(sample(7), [1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(sample(61), [1, 11, 21, 31, 41, 51, 61]);
        assert_eq!(sample(0), Vec::<usize>::new());
    }
}
