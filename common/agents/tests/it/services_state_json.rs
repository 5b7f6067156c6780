//! ServiceState in the journal's dict shape (`prior_services` entries), with
//! the per-role checks and messages of the original's `_service_states`, and the
//! host check of `NativeServices::new`.

use agents_common::{NativeServices, Platform, ServiceRunState, ServiceState, ServiceStates};
use agents_tests::{assert_error_is, TempDir};
use python_compat::{
    json::{encode_line, parse_json},
    ErrorClass,
};

fn state(text: &str) -> agents_common::Result<ServiceState> {
    ServiceState::from_json(&parse_json(text.as_bytes()).unwrap())
}

#[test]
fn observed_states_serialise_like_the_original_dicts() {
    let states = ServiceStates {
        worker: ServiceState {
            instance_id: Some("0f1e2d3c4b5a69788796a5b4c3d2e1f0".into()),
            ..ServiceState::running(true, 4242)
        },
        gateway: ServiceState::stopped(false),
    };
    assert_eq!(
        encode_line(&states.to_json(), false),
        r#"{"worker": {"state": "running", "enabled": true, "pid": 4242, "instance_id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0"}, "gateway": {"state": "stopped", "enabled": false}}"#
    );
    assert_eq!(
        encode_line(&ServiceState::absent().to_json(), true),
        r#"{"enabled": false, "state": "absent"}"#
    );
    assert_eq!(states.role("gateway"), Some(&ServiceState::stopped(false)));
    assert_eq!(states.role("other"), None);
}

#[test]
fn recorded_states_round_trip() {
    for text in [
        r#"{"state": "absent", "enabled": false}"#,
        r#"{"state": "stopped", "enabled": true}"#,
        r#"{"state": "running", "enabled": false, "pid": 7}"#,
        r#"{"state": "running", "enabled": true, "pid": 7, "instance_id": "abc"}"#,
        // The original allows a running worker without pid (only gateway scope needs it)
        // and process identity on other states.
        r#"{"state": "running", "enabled": true}"#,
        r#"{"state": "stopped", "enabled": true, "pid": 3, "instance_id": "x"}"#,
    ] {
        let parsed = state(text).unwrap();
        assert_eq!(encode_line(&parsed.to_json(), false), text);
    }
    let parsed = state(r#"{"enabled": true, "pid": 12, "state": "running"}"#).unwrap();
    assert_eq!(parsed, ServiceState::running(true, 12));
    assert_eq!(parsed.state, ServiceRunState::Running);
}

#[test]
fn invalid_recorded_states_are_refused_with_the_original_messages() {
    let invalid_state = "invalid prior native service state";
    let invalid_pid = "invalid native service process identity";
    let invalid_text = "configuration text must be nonempty and contain no control characters";
    let cases = [
        (r#"[]"#, invalid_state),
        (r#"{"state": "running"}"#, invalid_state),
        (r#"{"enabled": true}"#, invalid_state),
        (
            r#"{"state": "running", "enabled": true, "extra": 1}"#,
            invalid_state,
        ),
        (
            r#"{"state": "transitioning", "enabled": true}"#,
            invalid_state,
        ),
        (r#"{"state": "Running", "enabled": true}"#, invalid_state),
        (r#"{"state": 1, "enabled": true}"#, invalid_state),
        (r#"{"state": "stopped", "enabled": 1}"#, invalid_state),
        (r#"{"state": "stopped", "enabled": null}"#, invalid_state),
        (r#"{"state": "absent", "enabled": true}"#, invalid_state),
        // The state checks come before the pid check.
        (
            r#"{"state": "absent", "enabled": true, "pid": 0}"#,
            invalid_state,
        ),
        (
            r#"{"state": "running", "enabled": true, "pid": 0}"#,
            invalid_pid,
        ),
        (
            r#"{"state": "running", "enabled": true, "pid": -4}"#,
            invalid_pid,
        ),
        (
            r#"{"state": "running", "enabled": true, "pid": true}"#,
            invalid_pid,
        ),
        (
            r#"{"state": "running", "enabled": true, "pid": 7.0}"#,
            invalid_pid,
        ),
        (
            r#"{"state": "running", "enabled": true, "pid": "7"}"#,
            invalid_pid,
        ),
        (
            r#"{"state": "running", "enabled": true, "pid": 4294967296}"#,
            invalid_pid,
        ),
        (
            r#"{"state": "running", "enabled": true, "pid": 0, "instance_id": ""}"#,
            invalid_pid,
        ),
        (
            r#"{"state": "running", "enabled": true, "instance_id": ""}"#,
            invalid_text,
        ),
        (
            r#"{"state": "running", "enabled": true, "instance_id": "a\tb"}"#,
            invalid_text,
        ),
        (
            r#"{"state": "running", "enabled": true, "instance_id": 5}"#,
            invalid_text,
        ),
    ];
    for (text, message) in cases {
        let err = state(text).expect_err(text);
        assert_error_is(&err, ErrorClass::Value, message);
    }
}

#[test]
fn the_real_adapter_requires_the_host_platform() {
    let temp = TempDir::new("agents-fs-test");
    let linux = agents_tests::recorded_commands::layout(Platform::Linux, &temp.join("home"));
    let darwin = agents_tests::recorded_commands::layout(Platform::Darwin, &temp.join("home"));
    let (native, foreign) = if cfg!(target_os = "macos") {
        (darwin, linux)
    } else {
        (linux, darwin)
    };
    assert!(NativeServices::new(&native).is_ok());
    let err = NativeServices::new(&foreign)
        .err()
        .expect("the other platform is refused");
    assert_error_is(
        &err,
        ErrorClass::Value,
        "native execution platform does not match this host",
    );
}
