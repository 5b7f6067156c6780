//! SemVer precedence, tracks, transitions and release discovery against the
//! original's own functions on identical inputs.

use agents_tests::release_support;

use python_compat::{json::Json, json_object};
use release_support::python_oracle;
use update_runner::release::{
    normalized_release_track, release_candidates, release_transition_allowed,
    release_versions_from_html, version_key,
};

const VERSIONS: &[&str] = &[
    "0.0.0",
    "0.1.26-beta.66",
    "1.0.0-beta.1",
    "1.0.0-beta.2",
    "1.0.0-beta.10",
    "1.0.0-beta",
    "1.0.0-alpha.beta",
    "1.0.0-alpha.1",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.0+build.7",
    "01.0.0",
    "1.0.1",
    "1.0.7-beta.5",
    "1.0.7",
    "1.10.0",
    "1.9.0",
    "2.0.0-0",
    "2.0.0-a-b",
    "2.0.0-1a",
    "2.0.0-18446744073709551616",
    "2.0.0-18446744073709551617",
    "2.0.0-340282366920938463463374607431768211456",
    "340282366920938463463374607431768211456.0.0",
    "2.0.0-..",
    "2.0.0-a..b",
];

#[test]
fn precedence_and_transitions_match_the_original() {
    let originals = agents_tests::require_originals!();
    let script = r#"
versions = json.load(sys.stdin)
order = [[(update_runner.version_key(a) > update_runner.version_key(b)) - (update_runner.version_key(a) < update_runner.version_key(b)) for b in versions] for a in versions]
transitions = [[[update_runner.release_transition_allowed(a, b, t) for t in ("stable", "beta")] for b in versions] for a in versions]
print(json.dumps({"order": order, "transitions": transitions}))
"#;
    let input = python_compat::json::encode_compact(&Json::Array(
        VERSIONS.iter().map(|v| Json::from(*v)).collect(),
    ))
    .unwrap();
    let oracle = python_oracle(&originals, script, &input);
    let order = oracle.get("order").unwrap().as_array().unwrap();
    let transitions = oracle.get("transitions").unwrap().as_array().unwrap();
    for (i, a) in VERSIONS.iter().enumerate() {
        for (j, b) in VERSIONS.iter().enumerate() {
            let ours = version_key(a).unwrap().cmp(&version_key(b).unwrap()) as i128;
            let original = order[i].as_array().unwrap()[j].as_int().unwrap();
            assert_eq!(ours, original, "{a} vs {b}");
            for (k, track) in ["stable", "beta"].iter().enumerate() {
                let original = transitions[i].as_array().unwrap()[j].as_array().unwrap()[k]
                    .as_bool()
                    .unwrap();
                assert_eq!(
                    release_transition_allowed(a, b, track).unwrap(),
                    original,
                    "{a} -> {b} on {track}"
                );
            }
        }
    }
}

/// A GitHub release listing with entries of many shapes: drafts,
/// prereleases flagged with non-booleans, a tag without the `v`, bad tags
/// and entries that are not releases.
fn github_releases() -> Json {
    Json::Array(vec![
        Json::Object(json_object! {"tag_name" => "v1.0.7", "prerelease" => false}),
        Json::Object(json_object! {"tag_name" => "v1.0.8", "draft" => true}),
        Json::Object(json_object! {"tag_name" => "v1.0.9", "draft" => 1}),
        Json::Object(json_object! {"tag_name" => "v1.0.6", "prerelease" => true}),
        Json::Object(json_object! {"tag_name" => "v1.0.5", "prerelease" => 0}),
        Json::Object(json_object! {"tag_name" => "v1.0.5"}),
        Json::Object(json_object! {"tag_name" => "v1.1.0-beta.2", "prerelease" => true}),
        Json::Object(json_object! {"tag_name" => "v1.1.0-beta.10", "prerelease" => "yes"}),
        Json::Object(json_object! {"tag_name" => "v1.1.0-beta.3", "prerelease" => Json::Null}),
        Json::Object(json_object! {"tag_name" => "v1.1.0-beta.4", "prerelease" => ""}),
        Json::Object(json_object! {"tag_name" => "1.2.0"}),
        Json::Object(json_object! {"tag_name" => "vgarbage"}),
        Json::Object(json_object! {"tag_name" => 5}),
        Json::Object(json_object! {"name" => "no tag"}),
        Json::from("not an object"),
        Json::Array(vec![]),
        Json::Object(json_object! {"tag_name" => "v10.0.0", "prerelease" => Json::Array(vec![])}),
    ])
}

/// A releases page, for discovery without the API: tag links in both quote
/// styles, with a query or a fragment, run together, of another repository,
/// with a bad version, and repeated.
const RELEASES_PAGE: &[u8] = br#"<a href="/ZhengyiLuo/AgentsServer/releases/tag/v1.0.7">x</a>
        <a href='/ZhengyiLuo/AgentsServer/releases/tag/v1.0.10?x'>y</a>
        /ZhengyiLuo/AgentsServer/releases/tag/v1.1.0-beta.1#frag
        /ZhengyiLuo/AgentsServer/releases/tag/v/ZhengyiLuo/AgentsServer/releases/tag/v2.0.0
        /Other/AgentsServer/releases/tag/v9.9.9 /ZhengyiLuo/AgentsServer/releases/tag/vbad
        /ZhengyiLuo/AgentsServer/releases/tag/v1.0.7"#;

/// The original's candidates from the listing and from the page on each
/// track, and its refusal of a listing that is not a list.
const DISCOVERY_ORACLE: &str = r#"
data = json.load(sys.stdin)
html = base64.b64decode(data["html"])
out = {}
for track in ("stable", "beta"):
    out[track] = update_runner.release_candidates(data["releases"], track)
    out["html-" + track] = sorted(update_runner.release_versions_from_html(html, track), key=update_runner.version_key, reverse=True)
try:
    update_runner.release_candidates({"not": "a list"}, "stable")
except Exception as exc:
    out["refusal"] = str(exc)
print(json.dumps(out))
"#;

/// Versions as the oracle prints them.
fn json_list(versions: Vec<String>) -> Json {
    Json::Array(versions.into_iter().map(Json::from).collect())
}

#[test]
fn candidates_and_html_discovery_match_the_original() {
    let originals = agents_tests::require_originals!();
    let releases = github_releases();
    let input = Json::Object(json_object! {
        "releases" => releases.clone(),
        "html" => release_support::b64(RELEASES_PAGE),
    });
    let oracle = python_oracle(
        &originals,
        DISCOVERY_ORACLE,
        &python_compat::json::encode_compact(&input).unwrap(),
    );
    for track in ["stable", "beta"] {
        let ours = json_list(release_candidates(&releases, track).unwrap());
        assert_eq!(&ours, oracle.get(track).unwrap(), "{track}");
        let ours = json_list(release_versions_from_html(RELEASES_PAGE, track).unwrap());
        assert_eq!(
            &ours,
            oracle.get(&format!("html-{track}")).unwrap(),
            "html {track}"
        );
    }
    let refusal =
        release_candidates(&Json::Object(json_object! {"not" => "a list"}), "stable").unwrap_err();
    assert_eq!(
        Some(refusal.message()),
        oracle.get("refusal").and_then(Json::as_str)
    );
    assert!(!release_candidates(&releases, "stable").unwrap().is_empty());
    assert_eq!(
        normalized_release_track(Some("weekly"))
            .unwrap_err()
            .message(),
        "invalid release track: weekly"
    );
}
