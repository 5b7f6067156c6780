//! The install.sh benchmark (`scripts/bench-installsh.sh`): what a user of
//! AgentsServer feels. Upstream's unmodified install.sh, on the release as
//! published (the Python originals) and after the migration kit (the
//! binaries), each run a fresh sandbox doing, in order, a fresh install, a
//! managed update, an update whose candidate never turns healthy (rolled
//! back) and an uninstall, the two sides alternating run by run. Measured per
//! operation: the wall time of install.sh (or uninstall.sh), the time spent
//! inside helper calls (from a timed exec trace), and from outside the
//! server's health endpoint probed every 50 ms, how long it did not answer.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agents_tests::installsh::{finish, Host, Scratch, RELEASE_A, RELEASE_B, RELEASE_UNHEALTHY};
use agents_tests::installsh_facets::timed_helper_calls;
use agents_tests::upstream::Side;
use agents_tests::{free_port, Sandbox};

use crate::installsh_compare::{command, Step, NONE};

/// How many runs per side (at least 5 for a published figure).
const RUNS_ENV: &str = "AGENTS_BENCH_RUNS";
/// A folder to keep each operation's exec log in (the last run's), to read
/// where the time went.
const KEEP_ENV: &str = "AGENTS_BENCH_KEEP";
/// How often the health endpoint is probed.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);

/// The operations of one run, in order, each on the state the one before
/// left, with the exit status install.sh (or uninstall.sh) ends it with.
const OPERATIONS: [(&str, Step, i32); 4] = [
    ("fresh install", Step::Install(RELEASE_A, NONE), 0),
    ("managed update", Step::Update(RELEASE_B), 0),
    ("update rolled back", Step::Update(RELEASE_UNHEALTHY), 1),
    ("uninstall", Step::Uninstall, 0),
];

/// At most this many runs per side for each run counted.
const ATTEMPTS_PER_RUN: usize = 3;

/// Whether every operation of a run ended as designed. install.sh's
/// `env_file_has_key` can read a key that is there as absent (a `SIGPIPE`
/// race under `pipefail`, far likelier under the timed trace; see
/// docs/release-engineering.md), which ends an update early on either
/// side: such a run measures that, not the update, so it is not counted.
fn ended_as_designed(samples: &[Sample]) -> bool {
    samples.len() == OPERATIONS.len()
        && samples
            .iter()
            .zip(&OPERATIONS)
            .all(|(sample, (_, _, exit))| sample.exit == Some(*exit))
}

/// One operation's measurements.
#[derive(Debug, Clone)]
struct Sample {
    wall: f64,
    helpers: f64,
    calls: usize,
    /// Seconds the health endpoint did not answer, from its first failure
    /// after a success to its next success (`None`: it never both answered
    /// and stopped within the operation).
    downtime: Option<f64>,
    exit: Option<i32>,
    /// The last line install.sh wrote to stderr, to tell an unexpected exit.
    last_error: String,
    /// The slowest helper calls, to tell where the time went.
    slowest: Vec<(f64, String)>,
}

/// `GET /api/health` on `port` every [`PROBE_INTERVAL`] from a thread: each
/// probe's time and whether it got a 200.
struct Probe {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<(Instant, bool)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Probe {
    /// Probes with the agent token install.sh keeps in `env` (the runtime
    /// env file), as a client of the server does.
    fn start(port: u16, env: PathBuf) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stopping, recording) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                let at = Instant::now();
                let answered = agent_token(&env).is_some_and(|token| healthy(port, &token));
                recording.lock().unwrap().push((at, answered));
                std::thread::sleep(PROBE_INTERVAL.saturating_sub(at.elapsed()));
            }
        });
        Probe {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// Stops probing; the longest stretch without an answer that began after
    /// an answer and ended with one.
    fn downtime(mut self) -> Option<f64> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let seen = self.seen.lock().unwrap();
        let mut longest: Option<f64> = None;
        let mut last_up: Option<Instant> = None;
        let mut down_since: Option<Instant> = None;
        for &(at, up) in seen.iter() {
            match (up, down_since) {
                (true, Some(since)) if last_up.is_some() => {
                    let gap = at.duration_since(since).as_secs_f64();
                    longest = Some(longest.map_or(gap, |known: f64| known.max(gap)));
                    down_since = None;
                }
                (true, _) => down_since = None,
                (false, None) if last_up.is_some() => down_since = Some(at),
                _ => {}
            }
            if up {
                last_up = Some(at);
            }
        }
        longest
    }
}

/// `AGENTSDOCK_AGENT_TOKEN` of the runtime env file.
fn agent_token(env: &Path) -> Option<String> {
    let text = std::fs::read_to_string(env).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("AGENTSDOCK_AGENT_TOKEN="))
        .map(|token| token.trim_matches('"').to_string())
}

/// Whether the server answers its health endpoint with 200 within 250 ms.
fn healthy(port: u16, token: &str) -> bool {
    let timeout = Duration::from_millis(250);
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, timeout) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(timeout));
    let request =
        format!("GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

/// One run of every operation for `side`, in a fresh sandbox.
fn run(scratch: &Scratch, side: Side) -> Vec<Sample> {
    let sandbox = Sandbox::start_named("bench-installsh").expect("the systemd sandbox starts");
    let port = free_port();
    let host = Host::new(Some(&scratch.uv_cache()), &sandbox, port).timed();
    for release in [RELEASE_A, RELEASE_B, RELEASE_UNHEALTHY] {
        scratch.release(side, sandbox.base(), release);
    }
    let mut samples = Vec::new();
    for (_, step, _) in &OPERATIONS {
        let probe = Probe::start(port, host.roots()[1].join("env"));
        let started = Instant::now();
        let output = finish(command(&host, step, "").spawn().expect("install.sh starts"));
        let wall = started.elapsed().as_secs_f64();
        let downtime = probe.downtime();
        let calls = timed_helper_calls(&host.exec_log());
        let mut slowest: Vec<(f64, String)> = calls
            .iter()
            .filter_map(|call| call.seconds.map(|seconds| (seconds, call.words.clone())))
            .collect();
        slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
        slowest.truncate(3);
        if let Some(keep) = std::env::var_os(KEEP_ENV) {
            let name = format!("{}-{}.exec.log", side_name(side), samples.len() + 1);
            let _ = std::fs::copy(host.exec_log(), Path::new(&keep).join(name));
        }
        samples.push(Sample {
            wall,
            helpers: calls.iter().filter_map(|call| call.seconds).sum(),
            calls: calls.len(),
            downtime,
            exit: output.status.code(),
            last_error: String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or_default()
                .to_string(),
            slowest,
        });
        host.settle();
    }
    samples
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// `median (min–max)` of a figure over the samples that have it.
fn figure(samples: &[Sample], pick: impl Fn(&Sample) -> Option<f64>) -> (String, Option<f64>) {
    let mut values: Vec<f64> = samples.iter().filter_map(&pick).collect();
    if values.is_empty() {
        return ("–".to_string(), None);
    }
    let (low, high) = values.iter().fold((f64::MAX, f64::MIN), |(low, high), &v| {
        (low.min(v), high.max(v))
    });
    let middle = median(&mut values);
    (format!("{middle:.2} s ({low:.2}–{high:.2})"), Some(middle))
}

fn ratio(original: Option<f64>, binaries: Option<f64>) -> String {
    match (original, binaries) {
        (Some(original), Some(binaries)) if binaries > 0.0 => {
            format!("{:.2}×", original / binaries)
        }
        _ => "–".to_string(),
    }
}

fn report(runs: usize, by_side: &[(Side, Vec<Vec<Sample>>)]) {
    println!(
        "\ninstall.sh benchmark: {runs} runs per side, alternating, uv from a warm cache; machine: {}",
        machine()
    );
    println!("| operation | side | wall | in helpers (calls) | downtime | exit |");
    println!("|---|---|---|---|---|---|");
    for (index, (name, _, _)) in OPERATIONS.iter().enumerate() {
        let mut medians = Vec::new();
        for (side, runs) in by_side {
            let samples: Vec<Sample> = runs.iter().map(|run| run[index].clone()).collect();
            let (wall, wall_median) = figure(&samples, |s| Some(s.wall));
            let (helpers, helpers_median) = figure(&samples, |s| Some(s.helpers));
            let (downtime, downtime_median) = figure(&samples, |s| s.downtime);
            let calls = samples.iter().map(|s| s.calls).max().unwrap_or(0);
            let exits: Vec<String> = samples
                .iter()
                .map(|s| s.exit.map_or("signal".to_string(), |code| code.to_string()))
                .collect();
            println!(
                "| {name} | {} | {wall} | {helpers} ({calls}) | {downtime} | {} |",
                side_name(*side),
                exits.join(",")
            );
            medians.push((wall_median, helpers_median, downtime_median));
        }
        for (side, runs) in by_side {
            let mut endings: Vec<String> = runs
                .iter()
                .map(|run| format!("exit {:?}: {}", run[index].exit, run[index].last_error))
                .collect();
            endings.dedup();
            if endings.len() > 1 {
                println!(
                    "<!-- {name}, {}: runs ended differently: {endings:?} -->",
                    side_name(*side)
                );
            }
        }
        for (side, runs) in by_side {
            if let Some(last) = runs.last() {
                let slowest: Vec<String> = last[index]
                    .slowest
                    .iter()
                    .map(|(seconds, words)| format!("{seconds:.2} s {}", shorten(words)))
                    .collect();
                println!(
                    "<!-- {name}, {}: slowest calls of the last run: {} -->",
                    side_name(*side),
                    slowest.join("; ")
                );
            }
        }
        if let [original, binaries] = medians[..] {
            println!(
                "| {name} | ratio | {} | {} | {} | |",
                ratio(original.0, binaries.0),
                ratio(original.1, binaries.1),
                ratio(original.2, binaries.2)
            );
        }
    }
}

/// A helper call's first words (its operation), without the paths.
fn shorten(words: &str) -> String {
    words.split(' ').take(2).collect::<Vec<_>>().join(" ")
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Original => "originals",
        Side::Port => "binaries",
    }
}

/// The CPU model and count, from `/proc/cpuinfo`.
fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".to_string());
    let count = info
        .lines()
        .filter(|line| line.starts_with("processor"))
        .count();
    format!("{count} × {model}")
}

/// Prints each run that did not end as designed, which the figures leave out.
fn report_spoiled(spoiled: &[(Side, Vec<Sample>)]) {
    for (side, samples) in spoiled {
        let endings: Vec<String> = samples
            .iter()
            .zip(&OPERATIONS)
            .map(|(sample, (name, _, _))| {
                format!("{name}: exit {:?} {}", sample.exit, sample.last_error)
            })
            .collect();
        println!(
            "<!-- not counted, {}: a run that did not end as designed: {} -->",
            side_name(*side),
            endings.join("; ")
        );
    }
}

/// Runs [`RUNS_ENV`] (default 5) runs per side that end as designed,
/// alternating which side goes first (at most [`ATTEMPTS_PER_RUN`] times as
/// many attempts), and prints the table: median and spread per side, and
/// the ratio.
#[test]
#[ignore = "benchmark: run by scripts/bench-installsh.sh"]
fn installsh_benchmark() {
    let Some(scratch) = Scratch::locate(agents_tests::test_name!()) else {
        return;
    };
    let runs: usize = std::env::var(RUNS_ENV)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(5);
    // Warm uv's cache and the lock once, outside the measured runs.
    let _ = run(&scratch, Side::Original);
    let mut by_side = vec![(Side::Original, Vec::new()), (Side::Port, Vec::new())];
    let mut spoiled = Vec::new();
    for round in 0..runs * ATTEMPTS_PER_RUN {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for index in order {
            let side = by_side[index].0;
            if by_side[index].1.len() == runs {
                continue;
            }
            let samples = run(&scratch, side);
            println!(
                "bench-installsh: attempt {} {}: {samples:?}",
                round + 1,
                side_name(side)
            );
            if ended_as_designed(&samples) {
                by_side[index].1.push(samples);
            } else {
                spoiled.push((side, samples));
            }
        }
    }
    report_spoiled(&spoiled);
    for (side, counted) in &by_side {
        assert_eq!(
            counted.len(),
            runs,
            "{}: too few runs ended as designed",
            side_name(*side)
        );
    }
    report(runs, &by_side);
}
