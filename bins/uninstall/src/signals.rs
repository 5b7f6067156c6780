//! `trap 'exit 130' HUP INT TERM`: after the install lock is taken, a hangup,
//! interrupt or termination ends the uninstaller with status 130 through the
//! normal exit path, so the lock is released exactly as the script's EXIT
//! trap releases it.
//!
//! Like bash, the signal is acted on between steps: a running `systemctl` or
//! a 0.1 s poll finishes first, while a prompt waiting for input is
//! interrupted at once (the handler is installed without `SA_RESTART`).

use std::sync::atomic::{AtomicBool, Ordering};

static PENDING: AtomicBool = AtomicBool::new(false);

extern "C" fn note_signal(_signal: libc::c_int) {
    PENDING.store(true, Ordering::SeqCst);
}

/// Installs the handlers (the script's `trap` line).
pub(crate) fn trap_exit_130() {
    install(&[libc::SIGHUP, libc::SIGINT, libc::SIGTERM]);
}

/// Installs the noting handler for each of `signals` that the caller did not
/// ignore: a signal ignored on entry stays ignored, as bash's `trap` and
/// Python's SIGINT handling both leave it.
fn install(signals: &[libc::c_int]) {
    for &signal in signals {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; the sigaction structs are fully initialised.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) == 0
                && current.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = 0;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Notes SIGINT instead of dying at once, so the split uninstall can run
/// its recovery (as Python's `KeyboardInterrupt` does) before it dies of it
/// with [`die_of_interrupt`].
pub(crate) fn trap_interrupt() {
    install(&[libc::SIGINT]);
}

/// Ends the process by SIGINT's default action, as an uncaught
/// `KeyboardInterrupt` ends Python.
pub(crate) fn die_of_interrupt() -> ! {
    // SAFETY: restoring the default disposition and raising a signal.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::raise(libc::SIGINT);
    }
    std::process::exit(130)
}

/// True once a trapped signal has arrived.
pub(crate) fn pending() -> bool {
    PENDING.load(Ordering::SeqCst)
}
