//! The proxy decisions of `update_runner::proxy`, checked against CPython
//! itself: for each environment and release URL, one python3 process
//! computes `getproxies_environment()`, `proxy_bypass_environment(req.host)`
//! and what urllib's `ProxyHandler` does with the request (tunnel, forward,
//! a reopen under another scheme, or nothing), and the port must decide the
//! same. The environments cover upper/lower-case precedence, empty values,
//! CGI's `REQUEST_METHOD`, bare and URL proxies with and without
//! credentials, and the `no_proxy` forms.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::process::{Command, Stdio};

use python_compat::json::{parse_json, Json};
use update_runner::proxy::{request_host, ProxyEnvironment, RequestScheme, Route};

/// Runs each case under CPython 3.11's urllib; prints one result per case.
const ORACLE: &str = r#"
import json, os, sys, urllib.request

class Parent:
    """Where ProxyHandler reopens a request whose proxy has another scheme."""
    def open(self, request, timeout=None):
        self.reopened = request.type

def decide(env, url):
    os.environ.clear()
    for name, value in env:
        os.environ.setdefault(name, value)
    proxies = urllib.request.getproxies_environment()
    request = urllib.request.Request(url)
    request.timeout = 30  # OpenerDirector.open sets it before any handler runs
    result = {
        "proxies": proxies,
        "bypass": urllib.request.proxy_bypass_environment(request.host),
    }
    handler = urllib.request.ProxyHandler(proxies)
    handler.parent = Parent()
    opener = getattr(handler, request.type + "_open", None)
    if opener is None:
        result["route"] = {"kind": "direct"}
        return result
    original_host = request.host
    try:
        opener(request)
    except ValueError as exc:
        result["route"] = {"kind": "error", "message": str(exc)}
        return result
    reopened = getattr(handler.parent, "reopened", None)
    auth = request.headers.get("Proxy-authorization")
    if request._tunnel_host:
        route = {"kind": "tunnel", "proxy": request.host, "auth": auth}
    elif reopened not in (None, "http", "https"):
        route = {"kind": "unknown", "scheme": reopened}
    elif request.host != original_host or request.has_proxy():
        route = {"kind": "forward", "proxy": request.host, "auth": auth,
                 "tls": request.type == "https"}
    else:
        route = {"kind": "direct"}
    result["route"] = route
    return result

print(json.dumps([decide(case["env"], case["url"]) for case in json.load(sys.stdin)]))
"#;

fn environments() -> Vec<Vec<(&'static str, &'static str)>> {
    let proxied = |no_proxy: &'static str| {
        vec![
            ("http_proxy", "http://p:3128"),
            ("https_proxy", "http://p:3128"),
            ("no_proxy", no_proxy),
        ]
    };
    let mut environments = vec![
        vec![],
        vec![("http_proxy", "http://p:3128")],
        vec![("HTTP_PROXY", "http://P:1"), ("http_proxy", "http://p:2")],
        vec![("http_proxy", "http://p:2"), ("HTTP_PROXY", "http://P:1")],
        vec![("HTTP_PROXY", "http://P:1"), ("http_proxy", "")],
        vec![("HTTP_PROXY", "http://P:1"), ("REQUEST_METHOD", "GET")],
        vec![("http_proxy", "http://p:1"), ("REQUEST_METHOD", "GET")],
        vec![("HTTPS_proxy", "http://mixed:1"), ("https_proxy", "")],
        vec![("Http_Proxy", "http://mixed:1")],
        vec![("https_proxy", "p:3128"), ("http_proxy", "alice:pw@p:3128")],
        vec![("HTTPS_PROXY", "HTTPS://us%65r:p%40ss@proxy:8443/path@x/y")],
        vec![
            ("https_proxy", "socks5://s:1080"),
            ("http_proxy", "socks5h://s:1080"),
        ],
        vec![
            ("http_proxy", "https://tls-proxy"),
            ("https_proxy", "https://tls-proxy"),
        ],
        vec![
            ("http_proxy", "http:/broken"),
            ("https_proxy", "http:/broken"),
        ],
        vec![("http_proxy", "//p:1"), ("https_proxy", "//p:1")],
        vec![
            ("http_proxy", "http://user@p:1"),
            ("https_proxy", "http://:pw@p:1"),
        ],
        vec![("http_proxy", "http://u%3A:p%20w@p:1?x")],
        vec![("_proxy", "http://p:1"), ("proxy", "http://p:1")],
        vec![
            ("http_proxy", "http://p:1"),
            ("NO_PROXY", "*"),
            ("no_proxy", ""),
        ],
        vec![("http_proxy", "http://p:1"), ("NO_PROXY", "example.com")],
        vec![
            ("http_proxy", "http://p:1"),
            ("NO_PROXY", "other.com"),
            ("no_proxy", "example.com"),
        ],
    ];
    for no_proxy in [
        "*",
        " * ",
        "*,example.com",
        "example.com",
        ".example.com",
        "..EXAMPLE.com",
        "EXAMPLE.COM",
        "example.com:8080",
        "a.com, ,b.com , example.com",
        "ample.com",
        "127.0.0.1",
        "0.0.1",
        "127.0.0.1:8080",
        "[::1]",
        "::1",
        "[::1]:8443",
        "localhost",
        "github.com",
        ".",
        "",
    ] {
        environments.push(proxied(no_proxy));
    }
    environments
}

const URLS: [&str; 11] = [
    "http://example.com/x",
    "https://example.com/x",
    "http://EXAMPLE.com:8080/x",
    "https://sub.example.com:443/x",
    "http://notexample.com/",
    "http://127.0.0.1:8080/releases",
    "https://[::1]:8443/x",
    "http://user@example.com/",
    "https://api.github.com/repos/o/r/releases?per_page=100",
    "http://localhost/",
    "https://h%2Eexample.com/",
];

/// What the port decides, in the oracle's terms.
fn port_decision(environment: &ProxyEnvironment, url: &str) -> Json {
    let host = request_host(url);
    let scheme = if url.starts_with("https:") {
        RequestScheme::Https
    } else {
        RequestScheme::Http
    };
    let proxies: BTreeMap<&String, &String> = environment.proxies().iter().collect();
    let mut proxies_json = python_compat::json::JsonObject::new();
    for (name, value) in proxies {
        proxies_json.insert(name.as_str(), value.as_str());
    }
    let auth = |value: &Option<String>| value.clone().map_or(Json::Null, Json::from);
    let route = match environment.route(scheme, &host) {
        Err(error) => python_compat::json_object! {"kind" => "error", "message" => error.message()},
        Ok(Route::Direct) => python_compat::json_object! {"kind" => "direct"},
        Ok(Route::Tunnel { proxy }) => python_compat::json_object! {
            "kind" => "tunnel", "proxy" => proxy.host_port.as_str(), "auth" => auth(&proxy.authorization),
        },
        Ok(Route::Forward { proxy, tls }) => python_compat::json_object! {
            "kind" => "forward", "proxy" => proxy.host_port.as_str(),
            "auth" => auth(&proxy.authorization), "tls" => tls,
        },
        Ok(Route::UnknownScheme(scheme)) => {
            python_compat::json_object! {"kind" => "unknown", "scheme" => scheme.as_str()}
        }
    };
    Json::Object(python_compat::json_object! {
        "proxies" => proxies_json,
        "bypass" => environment.bypass(&host),
        "route" => route,
    })
}

#[test]
fn proxy_decisions_match_cpython() {
    let mut cases = Vec::new();
    let mut inputs = Vec::new();
    for environment in environments() {
        for url in URLS {
            let pairs: Vec<Json> = environment
                .iter()
                .map(|(name, value)| Json::Array(vec![Json::from(*name), Json::from(*value)]))
                .collect();
            inputs.push(Json::Object(python_compat::json_object! {
                "env" => pairs, "url" => url,
            }));
            cases.push((environment.clone(), url));
        }
    }
    let mut child = Command::new("python3")
        .args(["-B", "-c", ORACLE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs the oracle (scripts/setup.sh installs it)");
    let input = python_compat::json::encode_compact(&Json::Array(inputs)).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = parse_json(&output.stdout).unwrap();
    let expected = expected.as_array().unwrap();
    assert_eq!(expected.len(), cases.len());
    let mut routes_seen = std::collections::BTreeSet::new();
    for ((environment, url), cpython) in cases.iter().zip(expected) {
        let variables = environment
            .iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value)));
        let ours = port_decision(&ProxyEnvironment::from_variables(variables), url);
        assert_eq!(&ours, cpython, "{environment:?} {url}");
        let kind = cpython.get("route").and_then(|route| route.get("kind"));
        routes_seen.insert(kind.and_then(Json::as_str).unwrap_or("").to_string());
    }
    // Every kind of decision was exercised.
    let kinds: Vec<&str> = routes_seen.iter().map(String::as_str).collect();
    assert_eq!(kinds, ["direct", "error", "forward", "tunnel", "unknown"]);
}
