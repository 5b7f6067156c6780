//! Which way a release-host request goes: straight to the host, through a
//! forward proxy, or through a `CONNECT` tunnel, decided from the
//! environment exactly as CPython 3.11's urllib decides it on Linux
//! (`getproxies_environment`, `proxy_bypass_environment`, `_parse_proxy` and
//! `ProxyHandler.proxy_open`), because the original fetched with `urlopen`.
//!
//! Only the decision lives here; `urllib` connects. Loopback
//! requests of the runner's own (the server's health) never ask: they are
//! always direct (docs/design/deviations.md: the original sends the one-time health
//! credential to the proxy).
//!
//! Not read, unlike Python on macOS: the system proxy settings that
//! `getproxies_macosx_sysconf` reads from SystemConfiguration when no
//! `*_proxy` variable is set (that framework cannot be linked here).

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::OnceLock;

use agents_common::{Error, Result};
use base64::Engine as _;

/// The scheme of the request being routed (urllib's `req.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestScheme {
    /// `http://`: sent to a proxy as an absolute-URI request.
    Http,
    /// `https://`: tunnelled through a proxy with `CONNECT`.
    Https,
}

impl RequestScheme {
    fn name(self) -> &'static str {
        match self {
            RequestScheme::Http => "http",
            RequestScheme::Https => "https",
        }
    }
}

/// A proxy to connect to: its `host[:port]` as urllib hands it to
/// `http.client` (unquoted), and the `Proxy-Authorization` value the proxy
/// URL's credentials make, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    /// `host[:port]`, unquoted, as urllib hands it to `http.client`.
    pub host_port: String,
    /// The `Proxy-Authorization` value the proxy URL's credentials make.
    pub authorization: Option<String>,
}

/// How urllib's `ProxyHandler` sends one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// No proxy applies: connect to the host itself.
    Direct,
    /// An `http://` request sent whole to the proxy (`GET http://host/path`);
    /// over TLS when the proxy URL's scheme is `https` (default port 443,
    /// else 80).
    Forward {
        /// The proxy.
        proxy: Proxy,
        /// TLS to the proxy itself.
        tls: bool,
    },
    /// An `https://` request through `CONNECT host:port` on a plain
    /// connection to the proxy (default port 443), whatever the proxy URL's
    /// scheme, as `http.client` tunnels.
    Tunnel {
        /// The proxy.
        proxy: Proxy,
    },
    /// An `http://` request whose proxy URL names another scheme
    /// (`socks5://...`): urllib has no handler for it.
    UnknownScheme(String),
}

/// The `<scheme>_proxy` variables as `getproxies_environment()` returns them:
/// scheme (lower case, `no` for `no_proxy`) to value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnvironment {
    proxies: HashMap<String, String>,
}

impl ProxyEnvironment {
    /// The runner's own environment, read once (urllib builds its opener,
    /// and so reads the proxies, at the first `urlopen`).
    pub(crate) fn of_process() -> &'static ProxyEnvironment {
        static ENVIRONMENT: OnceLock<ProxyEnvironment> = OnceLock::new();
        ENVIRONMENT.get_or_init(|| ProxyEnvironment::from_variables(std::env::vars_os()))
    }

    /// `getproxies_environment()` over `variables` in environment order.
    /// `os.environ` keeps the first of repeated names; values that are not
    /// UTF-8 are read lossily (Python's surrogate escapes name no usable
    /// proxy either).
    pub fn from_variables(variables: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        let mut environment: Vec<(String, String)> = Vec::new();
        for (name, value) in variables {
            let name = name.to_string_lossy().into_owned();
            if !environment.iter().any(|(seen, _)| *seen == name) {
                environment.push((name, value.to_string_lossy().into_owned()));
            }
        }
        let mut proxies = HashMap::new();
        // First pass: any case, so lower-case names can win in the second.
        for (name, value) in &environment {
            if let Some(scheme) = proxy_scheme(&name.to_lowercase()) {
                if !value.is_empty() {
                    proxies.insert(scheme, value.clone());
                }
            }
        }
        // CVE-2016-1000110: under CGI, HTTP_PROXY may come from a request header.
        if environment.iter().any(|(name, _)| name == "REQUEST_METHOD") {
            proxies.remove("http");
        }
        for (name, value) in &environment {
            if proxy_scheme(name).is_none() {
                continue;
            }
            let scheme = proxy_scheme(&name.to_lowercase()).unwrap_or_default();
            if value.is_empty() {
                proxies.remove(&scheme);
            } else {
                proxies.insert(scheme, value.clone());
            }
        }
        ProxyEnvironment { proxies }
    }

    /// Every scheme and its proxy value (`no` holds `no_proxy`).
    pub fn proxies(&self) -> &HashMap<String, String> {
        &self.proxies
    }

    /// `proxy_bypass_environment(host)`: whether `no_proxy` exempts `host`
    /// (`name[:port]` as the URL has it): `*`, or an entry equal to the host
    /// (with or without its port) or a DNS suffix of it.
    pub fn bypass(&self, host: &str) -> bool {
        let Some(no_proxy) = self.proxies.get("no") else {
            return false;
        };
        if no_proxy == "*" {
            return true;
        }
        let host = host.to_lowercase();
        let host_only = split_port(&host);
        for entry in no_proxy.split(',') {
            let entry = python_compat::strip(entry);
            if entry.is_empty() {
                continue;
            }
            let name = entry.trim_start_matches('.').to_lowercase();
            if host_only == name || host == name {
                return true;
            }
            let suffix = format!(".{name}");
            if host_only.ends_with(&suffix) || host.ends_with(&suffix) {
                return true;
            }
        }
        false
    }

    /// `ProxyHandler.proxy_open` for a request of `scheme` to `host` (the
    /// URL's `host[:port]`): the route, or the `ValueError` urllib raises for
    /// a proxy URL with a scheme but no authority.
    pub fn route(&self, scheme: RequestScheme, host: &str) -> Result<Route> {
        let Some(value) = self.proxies.get(scheme.name()) else {
            return Ok(Route::Direct);
        };
        let parsed = ProxyUrl::parse(value)?;
        if !host.is_empty() && self.bypass(host) {
            return Ok(Route::Direct);
        }
        let proxy = Proxy {
            host_port: unquote(&parsed.host_port),
            authorization: parsed.authorization(),
        };
        Ok(match (scheme, parsed.scheme.as_deref()) {
            (RequestScheme::Https, _) => Route::Tunnel { proxy },
            (RequestScheme::Http, None | Some("http")) => Route::Forward { proxy, tls: false },
            (RequestScheme::Http, Some("https")) => Route::Forward { proxy, tls: true },
            (RequestScheme::Http, Some(other)) => Route::UnknownScheme(other.to_string()),
        })
    }
}

/// The scheme of a variable name ending in `_proxy` (the last six
/// characters, compared exactly, as Python slices `name[-6:]`).
fn proxy_scheme(name: &str) -> Option<String> {
    let cut = name.char_indices().rev().nth(5)?.0;
    (&name[cut..] == "_proxy").then(|| name[..cut].to_string())
}

/// `_splitport(host)[0]`: the host without a trailing `:digits` port.
fn split_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|byte| byte.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `_parse_proxy(proxy)`: a proxy given as a URL (`scheme://[user[:password]@]host[:port][/...]`)
/// or as a bare authority (`host:port`, `user:password@host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProxyUrl {
    /// Lower case; `None` for a bare authority (the request's own applies).
    scheme: Option<String>,
    user: Option<String>,
    password: Option<String>,
    host_port: String,
}

impl ProxyUrl {
    fn parse(proxy: &str) -> Result<ProxyUrl> {
        let (scheme, rest) = split_type(proxy);
        let (scheme, authority) = if !rest.starts_with('/') {
            (None, proxy)
        } else {
            let Some(after) = rest.strip_prefix("//") else {
                return Err(Error::value(format!(
                    "proxy URL with no authority: {}",
                    python_compat::repr(proxy)
                )));
            };
            // The authority ends at the first `/` after the credentials.
            let from = after.find('@').unwrap_or(0);
            let end = after[from..]
                .find('/')
                .map_or(after.len(), |index| from + index);
            (scheme, &after[..end])
        };
        let (user_info, host_port) = match authority.rsplit_once('@') {
            Some((user_info, host_port)) => (Some(user_info), host_port),
            None => (None, authority),
        };
        let (user, password) = match user_info {
            Some(info) => match info.split_once(':') {
                Some((user, password)) => (Some(user), Some(password)),
                None => (Some(info), None),
            },
            None => (None, None),
        };
        Ok(ProxyUrl {
            scheme,
            user: user.map(str::to_string),
            password: password.map(str::to_string),
            host_port: host_port.to_string(),
        })
    }

    /// `Basic base64(unquote(user):unquote(password))`, only when both are
    /// non-empty, as `proxy_open` adds it.
    fn authorization(&self) -> Option<String> {
        let user = self.user.as_deref().filter(|user| !user.is_empty())?;
        let password = self
            .password
            .as_deref()
            .filter(|password| !password.is_empty())?;
        let pair = format!("{}:{}", unquote(user), unquote(password));
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair.as_bytes());
        Some(format!("Basic {encoded}"))
    }
}

/// `_splittype(url)`: the lower-cased scheme before the first `:` when it
/// holds no `/` or `:` (and is not empty), and the rest.
fn split_type(url: &str) -> (Option<String>, &str) {
    match url.split_once(':') {
        Some((scheme, rest)) if !scheme.is_empty() && !scheme.contains('/') => {
            (Some(scheme.to_lowercase()), rest)
        }
        _ => (None, url),
    }
}

/// `urllib.parse.unquote`: each run of ASCII characters has its `%XX`
/// escapes decoded as UTF-8 with replacement; other characters stay.
fn unquote(text: &str) -> String {
    if !text.contains('%') {
        return text.to_string();
    }
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        let ascii_end = rest.find(|c: char| !c.is_ascii()).unwrap_or(rest.len());
        let (ascii, after) = rest.split_at(ascii_end);
        out.push_str(&String::from_utf8_lossy(&unquote_to_bytes(ascii)));
        let other_end = after.find(|c: char| c.is_ascii()).unwrap_or(after.len());
        out.push_str(&after[..other_end]);
        rest = &after[other_end..];
    }
    out
}

/// `unquote_to_bytes` of ASCII text: `%` and two hex digits is one byte.
fn unquote_to_bytes(ascii: &str) -> Vec<u8> {
    let bytes = ascii.as_bytes();
    let digit = |index: usize| {
        bytes
            .get(index)
            .and_then(|byte| char::from(*byte).to_digit(16))
    };
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match (bytes[index], digit(index + 1), digit(index + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                index += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    out
}

/// `req.host` of an absolute URL as `Request` keeps it (`_splithost`, then
/// unquoted): everything between `//` and the first `/`, `?` or `#`,
/// credentials and port included.
pub fn request_host(url: &str) -> String {
    let (_, rest) = split_type(url);
    let Some(after) = rest.strip_prefix("//") else {
        return String::new();
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    unquote(&after[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment(pairs: &[(&str, &str)]) -> ProxyEnvironment {
        ProxyEnvironment::from_variables(
            pairs
                .iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value))),
        )
    }

    #[test]
    fn proxy_urls_split_like_parse_proxy() {
        let parsed = ProxyUrl::parse("HTTP://us%65r:p%40ss@proxy:3128/ignored").unwrap();
        assert_eq!(parsed.scheme.as_deref(), Some("http"));
        assert_eq!(parsed.user.as_deref(), Some("us%65r"));
        assert_eq!(parsed.password.as_deref(), Some("p%40ss"));
        assert_eq!(parsed.host_port, "proxy:3128");
        let bare = ProxyUrl::parse("alice:secret@proxy:8080").unwrap();
        assert_eq!(
            (bare.scheme, bare.user.as_deref(), bare.host_port.as_str()),
            (None, Some("alice"), "proxy:8080")
        );
        assert_eq!(
            ProxyUrl::parse("http:/proxy").unwrap_err().python_line(),
            "ValueError: proxy URL with no authority: 'http:/proxy'"
        );
    }

    #[test]
    fn credentials_need_a_user_and_a_password() {
        let with = ProxyUrl::parse("http://us%65r:p%40ss@proxy:3128").unwrap();
        // base64("user:p@ss")
        assert_eq!(with.authorization().as_deref(), Some("Basic dXNlcjpwQHNz"));
        for without in [
            "http://user@proxy",
            "http://user:@proxy",
            "http://:pw@proxy",
        ] {
            assert_eq!(ProxyUrl::parse(without).unwrap().authorization(), None);
        }
    }

    #[test]
    fn routes_follow_the_request_scheme() {
        let proxies = environment(&[
            ("http_proxy", "https://p:1"),
            ("https_proxy", "socks5://s:2"),
        ]);
        let tunnel = proxies.route(RequestScheme::Https, "example.com").unwrap();
        assert!(matches!(tunnel, Route::Tunnel { proxy } if proxy.host_port == "s:2"));
        let forward = proxies.route(RequestScheme::Http, "example.com").unwrap();
        assert!(matches!(forward, Route::Forward { tls: true, .. }));
        let socks = environment(&[("http_proxy", "socks5://s:2")]);
        assert_eq!(
            socks.route(RequestScheme::Http, "example.com").unwrap(),
            Route::UnknownScheme("socks5".into())
        );
        assert_eq!(
            environment(&[]).route(RequestScheme::Http, "x").unwrap(),
            Route::Direct
        );
    }

    #[test]
    fn request_hosts_keep_port_and_credentials() {
        assert_eq!(
            request_host("https://api.github.com/repos?x#y"),
            "api.github.com"
        );
        assert_eq!(request_host("http://127.0.0.1:8080?x"), "127.0.0.1:8080");
        assert_eq!(request_host("http://u%3A@h%2Ex:1/"), "u:@h.x:1");
    }

    #[test]
    fn unquote_decodes_ascii_runs() {
        assert_eq!(unquote("a%20b%zz%4"), "a b%zz%4");
        assert_eq!(unquote("%C3%A9é%FF"), "éé\u{fffd}");
    }
}
