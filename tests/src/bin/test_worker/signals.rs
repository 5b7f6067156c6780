//! Clean shutdown on SIGTERM, as uvicorn gives the Python service: the
//! receipt is removed (if still ours) and the process exits 0.
//!
//! The handler only sets a flag (nothing else is async-signal-safe); a
//! watcher thread does the cleanup. rustix offers no signal-handler
//! installation outside its libc-replacement runtime, so libc's `signal`,
//! which std already links, is declared here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

const SIGTERM: i32 = 15;

static TERMINATING: AtomicBool = AtomicBool::new(false);

extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
}

extern "C" fn on_terminate(_signum: i32) {
    TERMINATING.store(true, Ordering::SeqCst);
}

/// Runs `cleanup` and exits 0 once SIGTERM arrives.
pub(crate) fn on_sigterm(cleanup: impl FnOnce() + Send + 'static) {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        signal(SIGTERM, on_terminate);
    }
    thread::spawn(move || {
        while !TERMINATING.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(20));
        }
        cleanup();
        std::process::exit(0);
    });
}
