//! Bounded waiting for things that happen in other processes.

use std::thread;
use std::time::{Duration, Instant};

/// How often [`poll_until`] re-checks.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Re-runs `check` every [`POLL_INTERVAL`] until it returns `Some`, or gives up
/// after `timeout` with an error naming `what` was awaited.
pub fn try_poll_until<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Like [`try_poll_until`], but a timeout fails the test.
pub fn poll_until<T>(timeout: Duration, what: &str, check: impl FnMut() -> Option<T>) -> T {
    try_poll_until(timeout, what, check).unwrap_or_else(|message| panic!("{message}"))
}
