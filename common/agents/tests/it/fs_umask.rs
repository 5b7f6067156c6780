//! `atomic_write` leaves exactly the requested mode whatever the umask. The
//! umask is process-wide, so the test changes it only in a child process
//! running that test alone.

use std::fs;

use agents_common::atomic_write;
use agents_tests::{mode_of, TempDir};
use rustix::fs::Mode;

#[test]
fn atomic_write_mode_is_independent_of_the_umask() {
    if !agents_tests::running_alone() {
        let test = agents_tests::test_name!();
        let output = agents_tests::alone(module_path!(), test).output().unwrap();
        agents_tests::assert_passed_alone(&output);
        return;
    }
    let dir = TempDir::new("agents-fs-test");
    let previous = rustix::process::umask(Mode::from_raw_mode(0o077));
    let outcome = std::panic::catch_unwind(|| {
        for (umask, mode) in [
            (0o077, 0o644),
            (0o777, 0o640),
            (0o000, 0o600),
            (0o022, 0o666),
        ] {
            rustix::process::umask(Mode::from_raw_mode(umask));
            let path = dir.join(format!("u{umask:o}-m{mode:o}"));
            atomic_write(&path, b"x", mode).unwrap();
            assert_eq!(mode_of(&path), mode, "umask {umask:o}");
            assert_eq!(fs::read(&path).unwrap(), b"x");
        }
    });
    rustix::process::umask(previous);
    outcome.unwrap();
}
