//! `Path(text).expanduser().resolve()` as the original resolves its status
//! file, public key and install root: `~user` from the password database, and
//! pathlib's RuntimeError where no home is found.

use std::path::Path;

use python_compat::ErrorClass;
use update_runner::server_health::resolve_user_path;

#[test]
fn a_user_the_password_database_has_expands_and_an_unknown_one_is_a_runtime_error() {
    assert_eq!(
        resolve_user_path(Path::new("~root/status.json")).unwrap(),
        python_compat::path::resolve(Path::new("/root/status.json")).unwrap()
    );
    for unknown in [
        "~no-such-user-here/status.json",
        "~~/x",
        "~no-such-user-here",
    ] {
        let error = resolve_user_path(Path::new(unknown)).unwrap_err();
        assert_eq!(error.class(), ErrorClass::Runtime, "{unknown}");
        assert_eq!(
            error.python_line(),
            "RuntimeError: Could not determine home directory.",
            "{unknown}"
        );
    }
    // A `~` that is not the first part is a name like any other.
    let relative = resolve_user_path(Path::new("a/~root")).unwrap();
    assert!(relative.ends_with("a/~root"), "{relative:?}");
}
