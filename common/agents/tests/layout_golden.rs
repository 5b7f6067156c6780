//! Every case of the golden `layouts.json` (tests/fixtures/golden): units, plists, service
//! paths and the `execution-layout.json` bytes the Python reference produced,
//! compared byte for byte over a real tree built as the file describes.

use std::path::Path;

use agents_common::{layout_manifest, render_service, ExecutionLayout};
use agents_tests::InstallBase;
use python_compat::json::{encode_indented, parse_json, Json, JsonObject};

/// `value` with `{BASE}` replaced in every string value.
fn substitute(value: &Json, base: &str) -> Json {
    match value {
        Json::Str(text) => Json::Str(text.replace("{BASE}", base)),
        Json::Array(items) => Json::Array(items.iter().map(|i| substitute(i, base)).collect()),
        Json::Object(object) => {
            let mut copy = JsonObject::new();
            for (key, item) in object.iter() {
                copy.insert(key.as_str(), substitute(item, base));
            }
            Json::Object(copy)
        }
        other => other.clone(),
    }
}

fn text<'a>(case: &'a Json, key: &str) -> &'a str {
    case.get(key)
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("golden case lacks {key}"))
}

fn check_case(case: &Json) {
    let name = text(case, "name");
    let fixed = case.get("fixed_base").and_then(Json::as_bool).unwrap();
    let base = if fixed {
        InstallBase::at(Path::new(text(case, "base_example")))
    } else {
        InstallBase::new(name)
    };
    let base_text = base.text();
    for release in case.get("releases").and_then(Json::as_array).unwrap() {
        base.release(release.as_str().unwrap());
    }
    let expect = |key: &str| text(case, key).replace("{BASE}", &base_text);
    let layout_value = substitute(case.get("layout").unwrap(), &base_text);
    let layout = ExecutionLayout::from_dict(&layout_value)
        .unwrap_or_else(|e| panic!("{name}: from_dict: {}", e.python_line()));

    let worker = render_service(&layout, "worker").unwrap();
    assert_eq!(
        String::from_utf8(worker).unwrap(),
        expect("worker_service"),
        "{name}: worker"
    );
    let gateway = render_service(&layout, "gateway").unwrap();
    assert_eq!(
        String::from_utf8(gateway).unwrap(),
        expect("gateway_service"),
        "{name}: gateway"
    );

    let paths = substitute(case.get("service_paths").unwrap(), &base_text);
    for role in ["worker", "gateway"] {
        let path = layout.service_path(role).unwrap();
        assert_eq!(
            Some(path.to_str().unwrap()),
            paths.get(role).and_then(Json::as_str),
            "{name}: {role} service path"
        );
    }

    let manifest = encode_indented(&layout_manifest(&layout).unwrap());
    assert_eq!(
        String::from_utf8(manifest).unwrap(),
        expect("layout_manifest_file"),
        "{name}: execution-layout.json"
    );
    // The stored layout reads back to an equal layout (dataclass equality).
    let stored = parse_json(expect("layout_manifest_file").as_bytes()).unwrap();
    let reloaded = ExecutionLayout::from_dict(stored.get("layout").unwrap()).unwrap();
    assert_eq!(reloaded, layout, "{name}: manifest layout round trip");
    assert_eq!(
        reloaded.to_dict(),
        *stored.get("layout").unwrap(),
        "{name}: to_dict"
    );
}

#[test]
fn every_golden_layout_renders_byte_for_byte() {
    let data = agents_tests::golden_bytes("layouts.json");
    let golden = parse_json(&data).unwrap();
    let cases = golden.get("cases").and_then(Json::as_array).unwrap();
    assert!(cases.len() >= 5, "golden file lost its cases");
    for case in cases {
        check_case(case);
    }
}
