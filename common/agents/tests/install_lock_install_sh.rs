//! The Rust InstallationLock and a shell process following install.sh's
//! documented `.install-lock` protocol (`install_sh_lock.sh`) exclude each
//! other, and each reaps the other's abandoned lock.

use std::fs;

use agents_common::InstallationLock;
use agents_tests::install_lock_fixtures::{listing, lock_path, touch, Contender, Kind, TempRoot};

/// Entry point of this file's `Kind::Rust` contender processes; not a test.
#[test]
#[ignore = "runs only inside contender processes started by the other tests"]
fn lock_holder_process() {
    agents_tests::install_lock_fixtures::holder_process();
}

#[test]
fn a_running_installer_keeps_the_rust_helpers_out() {
    let temp = TempRoot::new("sh-holds");
    let root = temp.root();
    let release = temp.path().join("release");
    let installer = Contender::spawn(
        Kind::Shell,
        &root,
        "-",
        &temp.path().join("report"),
        release.to_str().unwrap(),
    );
    assert_eq!(installer.outcome(), "acquired");
    let owner = fs::read_to_string(lock_path(&root).join("pid")).unwrap();
    assert_eq!(owner, format!("{}\n", installer.pid()));

    let err = InstallationLock::acquire(&root).unwrap_err();
    assert_eq!(
        err.python_line(),
        "RuntimeError: another installer owns the installation lock"
    );
    assert_eq!(listing(&root), [".install-lock"]);
    assert_eq!(
        fs::read_to_string(lock_path(&root).join("pid")).unwrap(),
        owner
    );

    // The installer's own release still finds its exact lock.
    touch(&release);
    assert_eq!(installer.finish(), (Some(0), Some("released".to_string())));
    assert!(listing(&root).is_empty());
}

#[test]
fn a_rust_helper_holding_the_lock_keeps_the_installer_out() {
    let temp = TempRoot::new("rust-holds");
    let root = temp.root();
    let lock = InstallationLock::acquire(&root).unwrap();
    let installer = Contender::spawn(Kind::Shell, &root, "-", &temp.path().join("report"), "-");
    assert_eq!(
        installer.outcome(),
        format!(
            "refused another AgentsServer installation is active ({})",
            std::process::id()
        )
    );
    assert_eq!(installer.finish(), (Some(1), None));
    assert_eq!(
        listing(&root),
        [".install-lock"],
        "the installer left no candidate"
    );
    lock.release().unwrap();
    assert!(listing(&root).is_empty());
}

#[test]
fn each_side_reaps_the_other_sides_abandoned_lock() {
    let temp = TempRoot::new("cross-reap");
    let root = temp.root();

    let installer = Contender::spawn(Kind::Shell, &root, "-", &temp.path().join("sh"), "abandon");
    assert_eq!(installer.outcome(), "acquired");
    let installer_pid = installer.pid();
    assert_eq!(installer.finish(), (Some(0), None));
    assert_eq!(
        fs::read_to_string(lock_path(&root).join("pid")).unwrap(),
        format!("{installer_pid}\n")
    );
    InstallationLock::acquire(&root).unwrap().release().unwrap();
    assert!(listing(&root).is_empty());

    let helper = Contender::spawn(Kind::Rust, &root, "-", &temp.path().join("rs"), "abandon");
    assert_eq!(helper.outcome(), "acquired");
    assert_eq!(helper.finish(), (Some(0), None));
    assert!(lock_path(&root).join("pid").exists());
    let installer = Contender::spawn(Kind::Shell, &root, "-", &temp.path().join("sh2"), "-");
    assert_eq!(installer.outcome(), "acquired");
    assert_eq!(installer.finish(), (Some(0), Some("released".to_string())));
    assert!(listing(&root).is_empty());
}

#[test]
fn installers_and_rust_helpers_racing_for_the_lock_never_both_win() {
    let temp = TempRoot::new("mixed-race");
    let root = temp.root();
    for round in 0..10 {
        let go = temp.path().join(format!("go-{round}"));
        let release = temp.path().join(format!("release-{round}"));
        let contenders: Vec<Contender> = [Kind::Shell, Kind::Rust, Kind::Shell, Kind::Rust]
            .into_iter()
            .enumerate()
            .map(|(index, kind)| {
                Contender::spawn(
                    kind,
                    &root,
                    go.to_str().unwrap(),
                    &temp.path().join(format!("report-{round}-{index}")),
                    release.to_str().unwrap(),
                )
            })
            .collect();
        touch(&go);
        let outcomes: Vec<String> = contenders.iter().map(Contender::outcome).collect();
        let winner = outcomes
            .iter()
            .position(|line| line == "acquired")
            .unwrap_or_else(|| panic!("round {round}: nobody won: {outcomes:?}"));
        assert_eq!(
            outcomes.iter().filter(|line| *line == "acquired").count(),
            1,
            "round {round}: {outcomes:?}"
        );
        let winner_pid = contenders[winner].pid();
        for (contender, line) in contenders.iter().zip(&outcomes) {
            if line == "acquired" {
                continue;
            }
            let expected = match contender.kind {
                Kind::Rust => {
                    "refused RuntimeError: another installer owns the installation lock".to_string()
                }
                Kind::Shell => {
                    format!("refused another AgentsServer installation is active ({winner_pid})")
                }
            };
            assert_eq!(line, &expected, "round {round}");
        }
        touch(&release);
        for (contender, line) in contenders.into_iter().zip(&outcomes) {
            let expected = if line == "acquired" {
                (Some(0), Some("released".to_string()))
            } else {
                (Some(1), None)
            };
            assert_eq!(contender.finish(), expected, "round {round}");
        }
        assert!(
            listing(&root).is_empty(),
            "round {round}: {:?}",
            listing(&root)
        );
    }
}
