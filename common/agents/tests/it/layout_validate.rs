//! `ExecutionLayout.from_dict` / `validate` / `render_service` refusals on real
//! trees, each with Python's exception class and exact message, plus equality
//! and serialization.

use std::fs;
use std::os::unix::fs::chown;

use agents_common::{layout_manifest, render_service, ExecutionLayout, PlatformName};
use agents_tests::{assert_error, link, make_dir, set_mode, with, write_file, InstallBase};
use python_compat::{
    json::{parse_json, Json, JsonObject},
    json_object, ErrorClass,
};

const FIELDS_INVALID: &str = "execution layout fields are invalid";
const TRAVERSAL: &str = "execution paths must be absolute without traversal";
const TEXT: &str = "configuration text must be nonempty and contain no control characters";
const PORT: &str = "public port must be between 1 and 65535";
const PLATFORM: &str = "unsupported execution service platform";
const NOT_RETAINED: &str = "execution runtime must be a retained versioned release";
const ENV_MAPPING: &str = "environment must be a string mapping";
const ENV_NAME: &str = "invalid execution environment variable name";
const ENV_VALUE: &str = "invalid execution environment value";
const NOBODY: u32 = 65534;

/// A base with one complete release `1.0.0` and a Linux layout over it.
fn linux_base(tag: &str) -> (InstallBase, JsonObject) {
    let base = InstallBase::new(tag);
    base.release("1.0.0");
    let layout = base.layout("Linux", "1.0.0", "1.0.0");
    (base, layout)
}

fn path(base: &InstallBase, relative: &str) -> String {
    base.join(relative).to_str().unwrap().to_string()
}

#[test]
fn valid_layout_loads_with_python_normalised_paths() {
    let (base, layout) = linux_base("normal");
    let messy = with(
        &layout,
        "install_root",
        format!("{}//install/", base.text()),
    );
    let messy = with(
        messy.as_object().unwrap(),
        "worker_release",
        format!("{}/install/./releases/1.0.0/", base.text()),
    );
    let loaded = ExecutionLayout::from_dict(&messy).unwrap();
    assert_eq!(loaded.to_dict(), Json::Object(layout.clone()));
    assert_eq!(
        loaded,
        ExecutionLayout::from_dict(&Json::Object(layout)).unwrap()
    );
    assert_eq!(loaded.public_port(), Some(7850));
    assert_eq!(loaded.runtime_dir(), base.join("state/execution"));
    assert_eq!(loaded.current(), base.join("install/current"));
    assert_eq!(
        loaded.manifest_path(),
        base.join("install/execution-layout.json")
    );
    assert_eq!(
        loaded.transaction_dir(),
        base.join("install/.execution-transaction")
    );
}

#[test]
fn key_set_must_be_exact() {
    let (_base, layout) = linux_base("keys");
    let mut missing = layout.clone();
    missing.remove("environment");
    assert_error(
        ExecutionLayout::from_dict(&Json::Object(missing)),
        ErrorClass::Value,
        FIELDS_INVALID,
    );
    let extra = with(&layout, "extra", 1_i64);
    assert_error(
        ExecutionLayout::from_dict(&extra),
        ErrorClass::Value,
        FIELDS_INVALID,
    );
    for value in [Json::Null, Json::Array(vec![]), Json::from("layout")] {
        assert_error(
            ExecutionLayout::from_dict(&value),
            ErrorClass::Value,
            FIELDS_INVALID,
        );
    }
}

#[test]
fn paths_must_be_absolute_without_traversal_or_symlinks() {
    let (base, layout) = linux_base("paths");
    for bad in [
        Json::from("install"),
        Json::from(""),
        Json::from(format!("{}/install/../install", base.text())),
    ] {
        let value = with(&layout, "install_root", bad);
        assert_error(
            ExecutionLayout::from_dict(&value),
            ErrorClass::Value,
            TRAVERSAL,
        );
    }
    // The path check runs on all six paths before any ownership check.
    link(&base.join("config"), &base.join("config-link"));
    let value = with(&layout, "gateway_release", path(&base, "config-link/x"));
    let value = with(
        value.as_object().unwrap(),
        "home",
        path(&base, "missing-home"),
    );
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Value,
        &format!(
            "execution path contains a symlink: {}",
            path(&base, "config-link/x")
        ),
    );
    let value = with(&layout, "config_root", path(&base, "config-link"));
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Value,
        &format!(
            "execution path contains a symlink: {}",
            path(&base, "config-link")
        ),
    );
    let value = with(&layout, "home", format!("{}/home\tx", base.text()));
    assert_error(ExecutionLayout::from_dict(&value), ErrorClass::Value, TEXT);
}

/// CPython's last traceback line for `Path(json.loads(document))`.
fn cpython_path_of(document: &str) -> String {
    let output = std::process::Command::new("python3")
        .args([
            "-B",
            "-c",
            "import json, sys\nfrom pathlib import Path\ntry:\n    Path(json.loads(sys.argv[1]))\n\
             except Exception as e:\n    print('%s: %s' % (type(e).__name__, e))",
            document,
        ])
        .output()
        .expect("python3 runs");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn a_path_that_is_not_text_is_pythons_type_error() {
    let (_base, layout) = linux_base("path-types");
    for (document, value) in [
        ("null", Json::Null),
        ("true", Json::Bool(true)),
        ("5", Json::from(5_i64)),
        (
            "123456789012345678901234567890123456789012",
            parse_json(b"123456789012345678901234567890123456789012").unwrap(),
        ),
        ("1.5", Json::Float(1.5)),
        ("[\"/x\"]", parse_json(b"[\"/x\"]").unwrap()),
        ("{}", Json::Object(JsonObject::new())),
    ] {
        for key in ["install_root", "home", "gateway_release"] {
            let error = ExecutionLayout::from_dict(&with(&layout, key, value.clone())).unwrap_err();
            assert_eq!(error.class(), ErrorClass::Type, "{key} = {document}");
            assert_eq!(
                error.python_line(),
                cpython_path_of(document),
                "{key} = {document}"
            );
        }
    }
}

#[test]
fn roots_must_be_owned_directories_without_group_or_other_write() {
    let (base, layout) = linux_base("owned");
    let value = Json::Object(layout.clone());
    chown(base.join("state"), Some(NOBODY), None).unwrap();
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Permission,
        &format!(
            "execution directory is not an owned directory: {}",
            path(&base, "state")
        ),
    );
    chown(base.join("state"), Some(0), None).unwrap();
    set_mode(&base.join("home"), 0o775);
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Permission,
        &format!(
            "execution directory permissions are unsafe: {}",
            path(&base, "home")
        ),
    );
    set_mode(&base.join("home"), 0o700); // private modes are fine for roots
    ExecutionLayout::from_dict(&value).unwrap();
    fs::remove_dir(base.join("home")).unwrap();
    let error = ExecutionLayout::from_dict(&value).unwrap_err();
    assert_eq!(error.class(), ErrorClass::NotFound);
    assert!(error
        .message()
        .ends_with(&format!("'{}'", path(&base, "home"))));
}

#[test]
fn install_config_and_state_must_not_overlap() {
    let (base, layout) = linux_base("overlap");
    make_dir(&base.join("install/state"), 0o755);
    for (key, value) in [
        ("state_root", path(&base, "install/state")),
        ("config_root", path(&base, "install")),
        ("install_root", path(&base, "state")),
    ] {
        let value = with(&layout, key, value);
        assert_error(
            ExecutionLayout::from_dict(&value),
            ErrorClass::Value,
            "execution roots must not overlap",
        );
    }
    // Sibling names sharing a prefix do not overlap, and home is not checked.
    make_dir(&base.join("install-state"), 0o755);
    let value = with(&layout, "state_root", path(&base, "install-state"));
    let value = with(value.as_object().unwrap(), "home", path(&base, "install"));
    ExecutionLayout::from_dict(&value).unwrap();
}

#[test]
fn platform_must_be_linux_or_darwin_and_is_checked_before_the_port() {
    let (_base, layout) = linux_base("platform");
    for bad in [
        Json::from("Windows"),
        Json::from("linux"),
        Json::from(""),
        Json::from(1_i64),
    ] {
        let value = with(&layout, "platform", bad);
        let value = with(value.as_object().unwrap(), "port", 0_i64);
        assert_error(
            ExecutionLayout::from_dict(&value),
            ErrorClass::Value,
            PLATFORM,
        );
    }
}

#[test]
fn port_must_be_an_int_from_1_to_65535_and_is_checked_before_bind() {
    let (_base, layout) = linux_base("port");
    for bad in [
        Json::from(0_i64),
        Json::from(65536_i64),
        Json::from(-1_i64),
        Json::from(true),
        Json::from("7850"),
        Json::from(7850.0),
        Json::Null,
    ] {
        let value = with(&layout, "port", bad);
        let value = with(value.as_object().unwrap(), "bind", "");
        assert_error(ExecutionLayout::from_dict(&value), ErrorClass::Value, PORT);
    }
    for good in [1_i64, 65535] {
        let loaded = ExecutionLayout::from_dict(&with(&layout, "port", good)).unwrap();
        assert_eq!(loaded.public_port(), Some(good as u16));
    }
}

#[test]
fn bind_must_be_nonempty_text_without_control_characters() {
    let (_base, layout) = linux_base("bind");
    for bad in [
        Json::from(""),
        Json::from("127.0.0.1\n"),
        Json::from("\t"),
        Json::from(1_i64),
    ] {
        let value = with(&layout, "bind", bad);
        let value = with(value.as_object().unwrap(), "environment", Json::Null);
        assert_error(ExecutionLayout::from_dict(&value), ErrorClass::Value, TEXT);
    }
    // Not checked to be an address; DEL and non-ASCII pass `_text`.
    ExecutionLayout::from_dict(&with(&layout, "bind", "h\u{7f}ost-é")).unwrap();
}

#[test]
fn environment_must_map_names_to_strings_without_control_characters() {
    let (_base, layout) = linux_base("env");
    let cases: Vec<(Json, &str)> = vec![
        (Json::Array(vec![]), ENV_MAPPING),
        (Json::from("A=b"), ENV_MAPPING),
        (Json::Null, ENV_MAPPING),
        (json_object! {"1X" => "a"}.into(), ENV_NAME),
        (json_object! {"A-B" => "a"}.into(), ENV_NAME),
        (json_object! {"" => "a"}.into(), ENV_NAME),
        (json_object! {"É" => "a"}.into(), ENV_NAME),
        (json_object! {"A" => 5_i64}.into(), ENV_VALUE),
        (json_object! {"A" => Json::Null}.into(), ENV_VALUE),
        (json_object! {"A" => "a\nb"}.into(), ENV_VALUE),
        (json_object! {"A" => "\u{1f}"}.into(), ENV_VALUE),
        // Entries are checked in order, name before value.
        (json_object! {"A" => 5_i64, "1B" => "x"}.into(), ENV_VALUE),
        (json_object! {"1B" => 5_i64, "A" => "x"}.into(), ENV_NAME),
    ];
    for (environment, message) in cases {
        let value = with(&layout, "environment", environment.clone());
        assert_error(
            ExecutionLayout::from_dict(&value),
            ErrorClass::Value,
            message,
        );
    }
    let fine = json_object! {"_a1" => "", "B" => "x\u{7f} é $HOME %d"};
    let loaded = ExecutionLayout::from_dict(&with(&layout, "environment", fine)).unwrap();
    assert_eq!(
        loaded.environment_variables(),
        vec![("_a1", ""), ("B", "x\u{7f} é $HOME %d")]
    );
}

#[test]
fn releases_must_be_retained_versioned_directories() {
    let (base, layout) = linux_base("retained");
    make_dir(&base.join("install/other"), 0o755);
    base.release(".hidden");
    for bad in [
        path(&base, "install/other"),
        path(&base, "install/releases"),
        path(&base, "install/releases/.hidden"),
        path(&base, "config/releases/1.0.0"),
        path(&base, "install/releases/1.0.0/nested"),
    ] {
        let value = with(&layout, "worker_release", bad);
        assert_error(
            ExecutionLayout::from_dict(&value),
            ErrorClass::Value,
            NOT_RETAINED,
        );
    }
    link(
        &base.join("install/releases/1.0.0"),
        &base.join("install/releases/link"),
    );
    let value = with(
        &layout,
        "gateway_release",
        path(&base, "install/releases/link"),
    );
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Value,
        &format!(
            "execution path contains a symlink: {}",
            path(&base, "install/releases/link")
        ),
    );
    let value = with(
        &layout,
        "gateway_release",
        path(&base, "install/releases/2.0.0"),
    );
    assert_eq!(
        ExecutionLayout::from_dict(&value).unwrap_err().class(),
        ErrorClass::NotFound
    );
    set_mode(&base.join("install/releases"), 0o777);
    assert_error(
        ExecutionLayout::from_dict(&Json::Object(layout.clone())),
        ErrorClass::Permission,
        &format!(
            "execution directory permissions are unsafe: {}",
            path(&base, "install/releases")
        ),
    );
}

/// The manifest's `worker_version` after writing `content` into VERSION.
fn version_of(
    base: &InstallBase,
    layout: &JsonObject,
    content: &[u8],
) -> agents_common::Result<Json> {
    write_file(&base.join("install/releases/1.0.0/VERSION"), content, 0o644);
    let loaded = ExecutionLayout::from_dict(&Json::Object(layout.clone()))?;
    Ok(layout_manifest(&loaded)?
        .get("worker_version")
        .unwrap()
        .clone())
}

#[test]
fn version_file_is_stripped_bounded_text() {
    let (base, layout) = linux_base("version");
    let version = base.join("install/releases/1.0.0/VERSION");
    // Python str.strip() also strips U+001C..U+001F, U+0085, U+00A0, U+3000.
    let stripped = version_of(
        &base,
        &layout,
        "\u{1c}\u{a0} 2.0\u{3000}\u{85}\n".as_bytes(),
    );
    assert_eq!(stripped.unwrap(), Json::from("2.0"));
    let long = "é".repeat(120);
    assert_eq!(
        version_of(&base, &layout, long.as_bytes()).unwrap(),
        Json::from(long.as_str())
    );
    assert_error(
        version_of(&base, &layout, format!("{long}x\n").as_bytes()),
        ErrorClass::Value,
        "release version is too long",
    );
    assert_error(
        version_of(&base, &layout, b" \n\x1f\n"),
        ErrorClass::Value,
        TEXT,
    );
    assert_error(
        version_of(&base, &layout, b"1.\x010\n"),
        ErrorClass::Value,
        TEXT,
    );
    assert_error(
        version_of(&base, &layout, b"1.0\xff\n"),
        ErrorClass::UnicodeDecode,
        "'utf-8' codec can't decode byte 0xff in position 3: invalid start byte",
    );
    assert_error(
        version_of(&base, &layout, b"1.0\xe2\x82"),
        ErrorClass::UnicodeDecode,
        "'utf-8' codec can't decode bytes in position 3-4: unexpected end of data",
    );
    // VERSION is read with the guarded reader: mode, links and symlinks count.
    write_file(&version, b"1.0.0\n", 0o666);
    assert_error(
        ExecutionLayout::from_dict(&Json::Object(layout.clone())),
        ErrorClass::Permission,
        &format!("execution configuration is unsafe: {}", version.display()),
    );
    set_mode(&version, 0o644);
    fs::hard_link(&version, base.join("VERSION-copy")).unwrap();
    assert_error(
        ExecutionLayout::from_dict(&Json::Object(layout.clone())),
        ErrorClass::Permission,
        &format!("execution configuration is unsafe: {}", version.display()),
    );
    fs::remove_file(base.join("VERSION-copy")).unwrap();
    fs::rename(&version, base.join("VERSION-real")).unwrap();
    let error = ExecutionLayout::from_dict(&Json::Object(layout.clone())).unwrap_err();
    assert_eq!(
        error.class(),
        ErrorClass::NotFound,
        "{}",
        error.python_line()
    );
    assert!(error
        .message()
        .starts_with("[Errno 2] No such file or directory"));
    link(&base.join("VERSION-real"), &version);
    let error = ExecutionLayout::from_dict(&Json::Object(layout)).unwrap_err();
    assert_eq!((error.class(), error.errno()), (ErrorClass::Os, Some(40)));
}

#[test]
fn releases_must_be_complete() {
    let (base, layout) = linux_base("complete");
    let release = base.join("install/releases/1.0.0");
    let value = Json::Object(layout);
    let incomplete = |what: &str| format!("execution release is incomplete: {what}");

    let python = release.join(".venv/bin/python");
    set_mode(&python, 0o644);
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Value,
        &incomplete(".venv/bin/python"),
    );
    // uv's interpreter may be a symlink to an executable elsewhere.
    fs::remove_file(&python).unwrap();
    write_file(&base.join("python-real"), b"#!/bin/sh\n", 0o755);
    link(&base.join("python-real"), &python);
    ExecutionLayout::from_dict(&value).unwrap();
    fs::remove_file(base.join("python-real")).unwrap();
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Value,
        &incomplete(".venv/bin/python"),
    );
    fs::remove_file(&python).unwrap();
    make_dir(&python, 0o755);
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Value,
        &incomplete(".venv/bin/python"),
    );
    fs::remove_dir(&python).unwrap();
    write_file(&python, b"#!/bin/sh\n", 0o755);

    let service = release.join("execution_service.py");
    fs::remove_file(&service).unwrap();
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Value,
        &incomplete("execution_service.py"),
    );
    // is_file() follows the link, the guarded re-read does not.
    write_file(&base.join("service-real.py"), b"pass\n", 0o644);
    link(&base.join("service-real.py"), &service);
    let error = ExecutionLayout::from_dict(&value).unwrap_err();
    assert_eq!(
        (error.class(), error.errno()),
        (ErrorClass::Os, Some(40)),
        "{}",
        error.python_line()
    );
    fs::remove_file(&service).unwrap();
    write_file(&service, b"pass\n", 0o664);
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Permission,
        &format!("execution configuration is unsafe: {}", service.display()),
    );
    set_mode(&service, 0o644);
    ExecutionLayout::from_dict(&value).unwrap();
}

#[test]
fn service_directories_must_be_symlink_free_and_owned() {
    let (base, layout) = linux_base("services");
    let value = Json::Object(layout.clone());
    make_dir(&base.join("elsewhere"), 0o755);
    link(&base.join("elsewhere"), &base.join("home/.config"));
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Value,
        &format!(
            "execution path contains a symlink: {}",
            path(&base, "home/.config/systemd/user/agents-server.service")
        ),
    );
    fs::remove_file(base.join("home/.config")).unwrap();
    make_dir(&base.join("home/.config"), 0o755);
    chown(base.join("home/.config"), Some(NOBODY), None).unwrap();
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Permission,
        &format!(
            "execution directory is not an owned directory: {}",
            path(&base, "home/.config")
        ),
    );
    // The first existing ancestor is checked, not the whole chain.
    make_dir(&base.join("home/.config/systemd"), 0o755);
    ExecutionLayout::from_dict(&value).unwrap();
    fs::remove_dir(base.join("home/.config/systemd")).unwrap();
    fs::remove_dir(base.join("home/.config")).unwrap();
    write_file(&base.join("home/.config"), b"", 0o644);
    assert_error(
        ExecutionLayout::from_dict(&value),
        ErrorClass::Permission,
        &format!(
            "execution directory is not an owned directory: {}",
            path(&base, "home/.config")
        ),
    );

    // Darwin checks ~/Library/LaunchAgents instead.
    let darwin = with(&layout, "platform", "Darwin");
    ExecutionLayout::from_dict(&darwin).unwrap();
    link(&base.join("elsewhere"), &base.join("home/Library"));
    assert_error(
        ExecutionLayout::from_dict(&darwin),
        ErrorClass::Value,
        &format!(
            "execution path contains a symlink: {}",
            path(
                &base,
                "home/Library/LaunchAgents/com.agentsdock.server.plist"
            )
        ),
    );
}

#[test]
fn roles_other_than_worker_and_gateway_are_refused_after_validation() {
    let (base, layout) = linux_base("roles");
    let loaded = ExecutionLayout::from_dict(&Json::Object(layout)).unwrap();
    let unknown = "unknown execution service role";
    assert_error(loaded.service_path("server"), ErrorClass::Value, unknown);
    assert_error(
        render_service(&loaded, "Worker"),
        ErrorClass::Value,
        unknown,
    );
    // render_service validates first, so a broken layout wins over a bad role.
    fs::remove_file(base.join("install/releases/1.0.0/execution_service.py")).unwrap();
    assert_error(
        render_service(&loaded, "server"),
        ErrorClass::Value,
        "execution release is incomplete: execution_service.py",
    );
}

#[test]
fn unvalidated_layouts_keep_raw_values_and_any_platform_gets_systemd_paths() {
    let base = InstallBase::new("raw");
    let layout = ExecutionLayout {
        install_root: base.join("install"),
        config_root: base.join("config"),
        state_root: base.join("state"),
        home: base.join("home"),
        platform: PlatformName::parse("Windows"),
        worker_release: base.join("install/releases/1.0.0"),
        gateway_release: base.join("install/releases/1.0.0"),
        bind: "127.0.0.1".to_string(),
        port: Json::from(true),
        environment: Json::Object(JsonObject::new()),
    };
    assert_eq!(
        layout.service_path("gateway").unwrap(),
        base.join("home/.config/systemd/user/agents-server-gateway.service")
    );
    assert_eq!(layout.to_dict().get("port"), Some(&Json::from(true)));
    // The unsupported text is written back as given.
    assert_eq!(
        layout.to_dict().get("platform"),
        Some(&Json::from("Windows"))
    );
    assert_eq!(layout.public_port(), None);
    assert_error(layout.validate(), ErrorClass::Value, PLATFORM);
}

#[test]
fn working_directory_with_outer_whitespace_cannot_be_a_systemd_unit() {
    let base = InstallBase::new("whitespace");
    // Only the whole path's ends count, and a path starts with `/`.
    for name in ["1.0 ", "1.0\u{a0}", "1.0\u{3000}"] {
        base.release(name);
        let value = Json::Object(base.layout("Linux", name, "1.0 "));
        let loaded = ExecutionLayout::from_dict(&value).unwrap();
        assert_error(
            render_service(&loaded, "worker"),
            ErrorClass::Value,
            "systemd working directory cannot have outer whitespace",
        );
        // The gateway runs from install/current; launchd has no such rule.
        render_service(&loaded, "gateway").unwrap();
        let darwin = with(value.as_object().unwrap(), "platform", "Darwin");
        render_service(&ExecutionLayout::from_dict(&darwin).unwrap(), "worker").unwrap();
    }
    base.release("\u{a0}2.0");
    let inner =
        ExecutionLayout::from_dict(&Json::Object(base.layout("Linux", "\u{a0}2.0", "1.0 ")));
    render_service(&inner.unwrap(), "worker").unwrap();
}

#[test]
fn unit_words_escape_backslash_quote_percent_and_command_dollars() {
    let (_base, layout) = linux_base("words");
    let environment = json_object! {"COMPANY_API_KEY" => "a b\"c%d$e\\f"};
    let value = with(&layout, "environment", environment);
    let value = with(value.as_object().unwrap(), "bind", "h$o%s\"t");
    let unit = String::from_utf8(
        render_service(&ExecutionLayout::from_dict(&value).unwrap(), "worker").unwrap(),
    )
    .unwrap();
    assert!(
        unit.contains("\nEnvironment=\"COMPANY_API_KEY=a b\\\"c%%d$e\\\\f\"\n"),
        "{unit}"
    );
    assert!(
        unit.contains("\nEnvironment=\"AGENTSDOCK_AGENT_BIND=h$o%%s\\\"t\"\n"),
        "{unit}"
    );
    assert!(
        unit.contains(" \"AGENTSDOCK_AGENT_BIND=h$$o%%s\\\"t\" "),
        "{unit}"
    );
    assert!(unit.contains(" \"--bind\" \"h$$o%%s\\\"t\" "), "{unit}");
    // User variables never reach the ExecStart line.
    assert!(!unit
        .lines()
        .any(|l| l.starts_with("ExecStart=") && l.contains("COMPANY")));
}

#[test]
fn equality_is_field_wise_with_dict_environment() {
    let (_base, layout) = linux_base("equality");
    let first = with(
        &layout,
        "environment",
        json_object! {"A" => "1", "B" => "2"},
    );
    let reordered = with(
        &layout,
        "environment",
        json_object! {"B" => "2", "A" => "1"},
    );
    let changed = with(
        &layout,
        "environment",
        json_object! {"A" => "1", "B" => "3"},
    );
    let load = |value: &Json| ExecutionLayout::from_dict(value).unwrap();
    assert_eq!(load(&first), load(&reordered));
    assert_ne!(load(&first), load(&changed));
    assert_ne!(load(&first), load(&with(&layout, "port", 7851_i64)));
}
