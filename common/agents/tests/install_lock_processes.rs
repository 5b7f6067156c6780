//! InstallationLock between real processes: contention, a dead owner's lock,
//! and an owner this user may not signal (EPERM counts as alive).

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};

use agents_common::InstallationLock;
use agents_tests::install_lock_fixtures::{
    dead_pid, drafts, listing, lock_path, plant_lock, touch, Contender, Kind, LiveProcess, TempRoot,
};

const OWNED_BY_OTHER: &str = "RuntimeError: another installer owns the installation lock";

/// Entry point of this file's `Kind::Rust` contender processes; not a test.
#[test]
#[ignore = "runs only inside contender processes started by the other tests"]
fn lock_holder_process() {
    agents_tests::install_lock_fixtures::holder_process();
}

#[test]
fn exactly_one_of_several_contending_processes_wins() {
    let temp = TempRoot::new("contention");
    let root = temp.root();
    for round in 0..12 {
        let go = temp.path().join(format!("go-{round}"));
        let release = temp.path().join(format!("release-{round}"));
        let contenders: Vec<Contender> = (0..4)
            .map(|index| {
                Contender::spawn(
                    Kind::Rust,
                    &root,
                    go.to_str().unwrap(),
                    &temp.path().join(format!("report-{round}-{index}")),
                    release.to_str().unwrap(),
                )
            })
            .collect();
        touch(&go);
        let outcomes: Vec<String> = contenders.iter().map(Contender::outcome).collect();
        let winners = outcomes.iter().filter(|line| *line == "acquired").count();
        assert_eq!(winners, 1, "round {round}: {outcomes:?}");
        for line in outcomes.iter().filter(|line| *line != "acquired") {
            assert_eq!(line, &format!("refused {OWNED_BY_OTHER}"), "round {round}");
        }
        let winner = outcomes.iter().position(|line| line == "acquired").unwrap();
        assert_eq!(
            fs::read_to_string(lock_path(&root).join("pid")).unwrap(),
            format!("{}\n", contenders[winner].pid())
        );
        touch(&release);
        for (index, contender) in contenders.into_iter().enumerate() {
            let (code, done) = contender.finish();
            if index == winner {
                assert_eq!((code, done.as_deref()), (Some(0), Some("released")));
            } else {
                assert_eq!((code, done), (Some(1), None));
            }
        }
        assert!(
            listing(&root).is_empty(),
            "round {round}: {:?}",
            listing(&root)
        );
    }
}

#[test]
fn a_lock_abandoned_by_an_exited_process_is_reaped() {
    let temp = TempRoot::new("abandoned");
    let root = temp.root();
    let holder = Contender::spawn(
        Kind::Rust,
        &root,
        "-",
        &temp.path().join("report"),
        "abandon",
    );
    assert_eq!(holder.outcome(), "acquired");
    let pid = holder.pid();
    assert_eq!(holder.finish(), (Some(0), None));
    assert_eq!(
        fs::read_to_string(lock_path(&root).join("pid")).unwrap(),
        format!("{pid}\n"),
        "the exited holder's lock is still on disk"
    );

    let lock = InstallationLock::acquire(&root).unwrap();
    assert_eq!(
        fs::read_to_string(lock_path(&root).join("pid")).unwrap(),
        format!("{}\n", std::process::id())
    );
    lock.release().unwrap();
    assert!(listing(&root).is_empty());
}

#[test]
fn an_owner_that_cannot_be_signalled_counts_as_alive() {
    const NOBODY: u32 = 65534;
    let temp = TempRoot::new("eperm");
    // The holder runs as `nobody`, so the install root and lock are nobody's;
    // the planted owner is a root process that nobody may not signal (EPERM).
    let prepare = |name: &str, owner_pid: u32| {
        let root = temp.path().join(name);
        fs::create_dir(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let lock = plant_lock(&root, format!("{owner_pid}\n").as_bytes(), 0o600);
        for path in [&root, &lock, &lock.join("pid")] {
            chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        root
    };
    let reports = temp.path().join("reports");
    fs::create_dir(&reports).unwrap();
    chown(&reports, Some(NOBODY), Some(NOBODY)).unwrap();
    let root_owned = LiveProcess::start();
    let refused_root = prepare("live", root_owned.pid());
    let before = fs::read(lock_path(&refused_root).join("pid")).unwrap();
    let holder = Contender::spawn_as(
        Kind::Rust,
        &refused_root,
        "-",
        &reports.join("live"),
        "-",
        NOBODY,
    );
    assert_eq!(holder.outcome(), format!("refused {OWNED_BY_OTHER}"));
    assert_eq!(holder.finish(), (Some(1), None));
    assert_eq!(
        fs::read(lock_path(&refused_root).join("pid")).unwrap(),
        before
    );
    assert!(drafts(&refused_root).is_empty());

    // Control: the same unprivileged holder reaps a dead owner, so the refusal
    // above came from EPERM, not from the setup.
    let reaped_root = prepare("dead", dead_pid());
    let holder = Contender::spawn_as(
        Kind::Rust,
        &reaped_root,
        "-",
        &reports.join("dead"),
        "-",
        NOBODY,
    );
    assert_eq!(holder.outcome(), "acquired");
    assert_eq!(holder.finish(), (Some(0), Some("released".to_string())));
    assert!(listing(&reaped_root).is_empty());
}
