//! Runs a built helper and, side by side, the Python original's own argparse
//! parser on the same argv, so each command-line outcome is compared with
//! the original's (the oracle) rather than with expectations we wrote.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use agents_tests::{binary_path, Originals, TempDir};

/// Imports the original with stand-ins for the modules it imports that are not
/// there, replaces `ArgumentParser.parse_args` so that a successful parse
/// prints `PARSED <vars(args)>` and exits 1 before the original acts, then runs
/// the original's `main` with argv[0] set to our program name (argparse's
/// default `prog`). Usage errors and help behave exactly as in the original.
const ORACLE: &str = r#"
import argparse, builtins, importlib.util, json, os, sys, types
original_dir, module, prog = sys.argv[1:4]
argv = sys.argv[4:]
class Dummy:
    def __getattr__(self, name): return Dummy()
    def __call__(self, *args, **kwargs): return Dummy()
class Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith('__'): raise AttributeError(name)
        return Dummy()
real_import = builtins.__import__
def tolerant_import(name, globals=None, locals=None, fromlist=(), level=0):
    try:
        return real_import(name, globals, locals, fromlist, level)
    except ImportError:
        sys.modules[name] = Stub(name)
        return sys.modules[name]
builtins.__import__ = tolerant_import
real_parse_args = argparse.ArgumentParser.parse_args
def parse_args(self, args=None, namespace=None):
    values = vars(real_parse_args(self, args, namespace))
    shown = {k: v if isinstance(v, (str, int, bool, type(None))) else str(v) for k, v in values.items()}
    sys.stdout.write("PARSED " + json.dumps(shown, sort_keys=True) + "\n")
    sys.stdout.flush()
    os._exit(1)
argparse.ArgumentParser.parse_args = parse_args
sys.argv = [prog] + argv
spec = importlib.util.spec_from_file_location("original_under_test", os.path.join(original_dir, module + ".py"))
original = importlib.util.module_from_spec(spec)
spec.loader.exec_module(original)
builtins.__import__ = real_import
if module == "update_runner":
    original.main()
else:
    original.main(argv)
"#;

/// An environment without what changes argparse's or the helpers' output.
fn clean(command: &mut Command) -> &mut Command {
    command
        .env_remove("COLUMNS")
        .env_remove("LINES")
        .env_remove("PYTHONSTARTUP")
        .env("PYTHONDONTWRITEBYTECODE", "1")
}

/// Runs a built helper with `args`.
pub(crate) fn run<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Output {
    let mut command = Command::new(binary_path(program));
    clean(&mut command).args(args);
    in_scratch_directory(&mut command)
}

/// Runs a built helper with `args` and a different `argv[0]`.
pub(crate) fn run_as<S: AsRef<OsStr>>(program: &str, argv0: &str, args: &[S]) -> Output {
    let mut command = Command::new(binary_path(program));
    clean(&mut command).arg0(argv0).args(args);
    in_scratch_directory(&mut command)
}

/// Runs `command` in a fresh directory that is removed afterwards: accepted
/// command lines now run the real operation, so relative paths in them must
/// land somewhere disposable, never in the test's or the machine's tree.
fn in_scratch_directory(command: &mut Command) -> Output {
    let scratch = TempDir::new("cli-run");
    command
        .current_dir(scratch.path())
        .output()
        .expect("the helper runs")
}

/// Runs the original `module`'s parser on `args` (see [`ORACLE`]).
pub(crate) fn oracle<S: AsRef<OsStr>>(
    originals: &Originals,
    module: &str,
    prog: &str,
    args: &[S],
) -> Output {
    oracle_in(originals.dir(), module, prog, args)
}

/// Runs the parser of `dir/module.py` (a `main(argv)` building an argparse
/// parser) on `args`, like [`oracle`].
pub(crate) fn oracle_in<S: AsRef<OsStr>>(
    dir: &Path,
    module: &str,
    prog: &str,
    args: &[S],
) -> Output {
    let mut command = Command::new("python3");
    clean(&mut command)
        .arg("-B")
        .arg("-c")
        .arg(ORACLE)
        .arg(dir)
        .arg(module)
        .arg(prog)
        .args(args);
    command
        .output()
        .expect("python3 runs (scripts/setup.sh installs it)")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts that the helper and the original's parser end `args` the same way:
/// the same help page start (up to the first blank line: the usage) with
/// status 0, the same usage error bytes with status 2, or both accepting the
/// arguments. An accepted command line then runs the operation: anything
/// but a usage error, help or a placeholder for an operation that is not
/// there. Returns the helper's output.
#[track_caller]
pub(crate) fn assert_same_as_original<S: AsRef<OsStr> + std::fmt::Debug>(
    originals: &Originals,
    program: &str,
    module: &str,
    args: &[S],
) -> Output {
    assert_same_as_parser(program, originals.dir(), module, args)
}

/// [`assert_same_as_original`] with the parser of `dir/module.py`.
#[track_caller]
pub(crate) fn assert_same_as_parser<S: AsRef<OsStr> + std::fmt::Debug>(
    program: &str,
    dir: &Path,
    module: &str,
    args: &[S],
) -> Output {
    let ours = run(program, args);
    let original = oracle_in(dir, module, program, args);
    let original_stdout = text(&original.stdout);
    let context = format!(
        "{program} {args:?}\n--- ours (status {:?}):\n{}{}\n--- original (status {:?}):\n{}{}",
        ours.status.code(),
        text(&ours.stdout),
        text(&ours.stderr),
        original.status.code(),
        original_stdout,
        text(&original.stderr)
    );
    match original.status.code() {
        Some(0) => {
            assert_eq!(
                ours.status.code(),
                Some(0),
                "help status differs: {context}"
            );
            let usage = |page: &str| page.split("\n\n").next().unwrap_or_default().to_string();
            assert_eq!(
                usage(&text(&ours.stdout)),
                usage(&original_stdout),
                "help usage differs: {context}"
            );
            assert!(ours.stderr.is_empty(), "{context}");
        }
        Some(2) => {
            assert_eq!(
                ours.status.code(),
                Some(2),
                "usage status differs: {context}"
            );
            assert_eq!(
                text(&ours.stderr),
                text(&original.stderr),
                "usage error differs: {context}"
            );
            assert!(
                ours.stdout.is_empty() && original.stdout.is_empty(),
                "{context}"
            );
        }
        Some(1) => {
            assert!(
                original_stdout.starts_with("PARSED "),
                "the original failed otherwise: {context}"
            );
            let stderr = text(&ours.stderr);
            assert_ne!(
                ours.status.code(),
                Some(2),
                "refused what the original accepts: {context}"
            );
            assert!(
                !stderr.starts_with("usage:") && !text(&ours.stdout).starts_with("usage:"),
                "{context}"
            );
            assert!(!stderr.contains("is not implemented yet"), "{context}");
        }
        other => panic!("unexpected original status {other:?}: {context}"),
    }
    ours
}
