//! The value model behaves like the Python objects the originals handle: dicts
//! keep insertion order and replace in place, compare without order, and
//! numbers compare across bool/int/float as Python's `==` does.

use python_compat::{
    json::{encode_line, parse_json, Json, JsonObject},
    json_object,
};

#[test]
fn object_keeps_insertion_order_and_replaces_in_place() {
    let mut object = json_object! {"b" => 1, "a" => 2, "c" => 3};
    assert_eq!(object.insert("a", "two"), Some(Json::Int(2)));
    assert_eq!(object.insert("d", Json::Null), None);
    let keys: Vec<&String> = object.keys().collect();
    assert_eq!(keys, ["b", "a", "c", "d"]);
    assert_eq!(object.get("a"), Some(&Json::from("two")));
    assert_eq!(object.len(), 4);

    assert_eq!(object.remove("a"), Some(Json::from("two")));
    assert_eq!(object.remove("a"), None);
    let keys: Vec<&String> = object.keys().collect();
    assert_eq!(keys, ["b", "c", "d"]);
    // Positions stay right after a removal.
    assert_eq!(object.get("d"), Some(&Json::Null));
    *object.get_mut("c").unwrap() = Json::Bool(false);
    assert_eq!(
        encode_line(&Json::Object(object), false),
        r#"{"b": 1, "c": false, "d": null}"#
    );
}

#[test]
fn objects_compare_without_order_like_dicts() {
    let forward = json_object! {"a" => 1, "b" => vec![Json::Null]};
    let backward = json_object! {"b" => vec![Json::Null], "a" => 1};
    assert_eq!(forward, backward);
    assert_ne!(forward, json_object! {"a" => 1});
    assert_ne!(forward, json_object! {"a" => 1, "b" => Vec::<Json>::new()});
    // Arrays keep order.
    assert_ne!(Json::from(vec![1, 2]), Json::from(vec![2, 1]));
}

#[test]
fn numbers_compare_like_python() {
    // True == 1 == 1.0, False == 0 == -0.0.
    assert_eq!(Json::Bool(true), Json::Int(1));
    assert_eq!(Json::Int(1), Json::Float(1.0));
    assert_eq!(Json::Bool(false), Json::Float(-0.0));
    assert_ne!(Json::Bool(true), Json::Int(2));
    // int/float comparison is exact: 2**53 + 1 != float(2**53).
    assert_ne!(
        Json::Int((1 << 53) + 1),
        Json::Float(9_007_199_254_740_992.0)
    );
    assert_eq!(Json::Int(1 << 53), Json::Float(9_007_199_254_740_992.0));
    assert_eq!(Json::Int(i128::MIN), Json::Float(-(2f64.powi(127))));
    assert_ne!(Json::Int(i128::MAX), Json::Float(2f64.powi(127)));
    assert_ne!(Json::Int(1), Json::Float(1.5));
    assert_ne!(Json::Int(0), Json::Null);
    assert_ne!(Json::from("1"), Json::Int(1));
    // NaN from json.loads is one shared object, so parsed NaNs compare equal
    // inside containers.
    assert_eq!(parse_json(b"[NaN]").unwrap(), parse_json(b"[NaN]").unwrap());
}

#[test]
fn accessors_keep_pythons_type_distinctions() {
    let value =
        parse_json(br#"{"i": 1, "b": true, "f": 1.0, "s": "x", "n": null, "a": [], "o": {}}"#)
            .unwrap();
    assert_eq!(value.get("i").and_then(Json::as_int), Some(1));
    // `type(x) is int` rejects booleans.
    assert_eq!(value.get("b").and_then(Json::as_int), None);
    assert_eq!(value.get("b").and_then(Json::as_bool), Some(true));
    assert_eq!(value.get("i").and_then(Json::as_bool), None);
    assert_eq!(value.get("f").and_then(Json::as_int), None);
    assert_eq!(value.get("f").and_then(Json::as_float), Some(1.0));
    assert_eq!(value.get("s").and_then(Json::as_str), Some("x"));
    assert!(value.get("n").is_some_and(Json::is_null));
    assert!(value.get("missing").is_none());
    assert!(value
        .get("a")
        .and_then(Json::as_array)
        .is_some_and(Vec::is_empty));
    assert!(value
        .get("o")
        .and_then(Json::as_object)
        .is_some_and(JsonObject::is_empty));
    // `get` on a non-object is None, like `.get` guarded by isinstance.
    assert!(Json::from(vec![1]).get("0").is_none());
}

#[test]
fn conversions_build_the_expected_values() {
    let object = json_object! {
        "str" => "text",
        "string" => String::from("owned"),
        "bool" => true,
        "i32" => -5,
        "i64" => i64::MIN,
        "u32" => u32::MAX,
        "u64" => u64::MAX,
        "i128" => i128::MAX,
        "float" => 0.5,
        "none" => Option::<i64>::None,
        "some" => Some("x"),
        "list" => vec!["a", "b"],
        "nested" => json_object! {},
    };
    assert_eq!(
        encode_line(&Json::Object(object), false),
        format!(
            r#"{{"str": "text", "string": "owned", "bool": true, "i32": -5, "i64": {}, "u32": 4294967295, "u64": {}, "i128": {}, "float": 0.5, "none": null, "some": "x", "list": ["a", "b"], "nested": {{}}}}"#,
            i64::MIN,
            u64::MAX,
            i128::MAX
        )
    );
    let collected: JsonObject = [("k", 1), ("k", 2)].into_iter().collect();
    assert_eq!(collected, json_object! {"k" => 2});
}
