//! `_absolute` (`os.path.abspath(os.path.expanduser(p))`) against CPython:
//! `~`, `~/x`, `~user/x` for users the password database has and has not,
//! with and without `HOME`. `python3` must be installed (it is in CI).

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::process::Command;

use crate::cpython::{printed_lines, python};

/// CPython's `os.path.abspath(os.path.expanduser(p))` for each path, with
/// `HOME` as given (unset for `None`), run from `/`.
fn cpython_absolute(paths: &[&str], home: Option<&str>) -> Vec<String> {
    let mut command = python(
        "import os, sys\nfor p in sys.argv[1:]:\n    print(os.path.abspath(os.path.expanduser(p)))",
    );
    command.args(paths).current_dir("/").env_remove("HOME");
    if let Some(home) = home {
        command.env("HOME", home);
    }
    printed_lines(&mut command)
}

/// The port's `absolute_path` of each path in a child process with the same
/// environment: `HOME` is the process's, so the test runs itself again.
#[test]
fn tilde_forms_expand_as_cpython_expands_them() {
    const PATHS: [&str; 9] = [
        "~",
        "~/",
        "~/a/../b",
        "~root",
        "~root/x",
        "~nobody/y",
        "~no-such-user-here/z",
        "~~",
        "a/~root",
    ];
    if let Ok(home) = std::env::var("PATH_PYTHON_CHILD_HOME") {
        let home = (home != "-").then_some(home);
        assert_eq!(std::env::var("HOME").ok(), home);
        for path in PATHS {
            let ours = python_compat::path::absolute_path(Path::new(path));
            println!(
                "\nabsolute: {}",
                String::from_utf8_lossy(ours.as_os_str().as_bytes())
            );
        }
        return;
    }
    for home in [Some("/home/someone//"), Some("/"), None] {
        let expected = cpython_absolute(&PATHS, home);
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .args([
                "--exact",
                "path_python::tilde_forms_expand_as_cpython_expands_them",
                "--nocapture",
                "--test-threads=1",
            ])
            .current_dir("/")
            .env("PATH_PYTHON_CHILD_HOME", home.unwrap_or("-"))
            .env_remove("HOME");
        if let Some(home) = home {
            child.env("HOME", home);
        }
        let output = child.output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let printed = String::from_utf8(output.stdout).unwrap();
        let ours: Vec<&str> = printed
            .lines()
            .filter_map(|line| line.strip_prefix("absolute: "))
            .collect();
        assert_eq!(ours, expected, "HOME={home:?}: {printed}");
    }
}

/// `Path(p).resolve(strict=True)` against CPython on a tree of links: the
/// resolved path, or the last traceback line naming the component that
/// failed (a dangling link's missing target, a file used as a folder, a
/// loop as `RuntimeError`).
#[test]
fn strict_resolution_names_the_component_that_failed_as_cpython_does() {
    use std::os::unix::fs::symlink;
    let base = std::env::temp_dir().join(format!("resolve-strict-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("real/inner")).unwrap();
    std::fs::write(base.join("real/file"), b"").unwrap();
    symlink(base.join("real"), base.join("good")).unwrap();
    symlink(base.join("missing/deeper"), base.join("dangling")).unwrap();
    symlink("real/inner/../file", base.join("relative")).unwrap();
    symlink(base.join("loop-b"), base.join("loop-a")).unwrap();
    symlink(base.join("loop-a"), base.join("loop-b")).unwrap();
    symlink(base.join("dangling"), base.join("chain")).unwrap();
    let paths: Vec<String> = [
        "good/inner",
        "dangling",
        "chain/x",
        "relative",
        "real/file/x",
        "loop-a",
        "good/../real/file",
        "absent/x",
    ]
    .iter()
    .map(|name| base.join(name).to_string_lossy().into_owned())
    .collect();
    let mut command = python(
        "import pathlib, sys, traceback\n\
         for p in sys.argv[1:]:\n\
         \x20   try:\n\
         \x20       print(pathlib.Path(p).resolve(strict=True))\n\
         \x20   except Exception as error:\n\
         \x20       print(traceback.format_exception_only(error)[-1].strip())",
    );
    command.args(&paths);
    let expected = printed_lines(&mut command);
    let ours: Vec<String> = paths
        .iter()
        .map(
            |path| match python_compat::path::resolve_strict(Path::new(path)) {
                Ok(resolved) => resolved.to_string_lossy().into_owned(),
                Err(error) => error.python_line(),
            },
        )
        .collect();
    std::fs::remove_dir_all(&base).unwrap();
    assert_eq!(ours, expected);
}

/// A path inside a message (`f"...{path}"`) as CPython's stderr writes it:
/// undecodable bytes as `\udcXX`, the rest as it is.
#[test]
fn a_path_in_a_message_shows_as_cpython_writes_it() {
    use std::os::unix::ffi::OsStrExt as _;
    for raw in [
        &b"/plain/path"[..],
        b"/caf\xc3\xa9/x",
        b"/odd\xff/y\xfe",
        b"/\xe2\x82",
    ] {
        let path = Path::new(std::ffi::OsStr::from_bytes(raw));
        let output = python("import sys\nsys.stderr.write(f'x: {sys.argv[1]}\\n')")
            .arg(path)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let ours = format!("x: {}\n", python_compat::path::shown(path));
        assert_eq!(String::from_utf8_lossy(&output.stderr), ours, "{raw:?}");
    }
}
