//! `urllib.parse.urlsplit` (Python 3.11.7) and the `SplitResult` accessors the
//! pinned client and the worker receipt check read.
//!
//! Both callers refuse a URL by looking at these exact pieces (for example an
//! empty `username` passes because it is falsy), so the split is ported rule
//! for rule rather than delegated to a URL crate with WHATWG semantics.

use crate::error::{Error, Result};

/// The five pieces of a split URL, as Python's `SplitResult`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SplitUrl {
    pub(crate) scheme: String,
    pub(crate) netloc: String,
    pub(crate) path: String,
    pub(crate) query: String,
    pub(crate) fragment: String,
}

/// Characters urlsplit strips from the start of a URL (C0 controls and space).
fn is_c0_or_space(c: char) -> bool {
    c <= ' '
}

/// Characters whose NFKC form holds one of `/?#@:` (computed with Python
/// 3.11.7's `unicodedata`, Unicode 14): the only ones `_checknetloc` refuses.
const NFKC_DELIMITER_LOOKALIKES: [char; 19] = [
    '\u{2047}', '\u{2048}', '\u{2049}', '\u{2100}', '\u{2101}', '\u{2105}', '\u{2106}', '\u{2a74}',
    '\u{fe13}', '\u{fe16}', '\u{fe55}', '\u{fe56}', '\u{fe5f}', '\u{fe6b}', '\u{ff03}', '\u{ff0f}',
    '\u{ff1a}', '\u{ff1f}', '\u{ff20}',
];

fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

/// `urlsplit(url)` with the default empty scheme and fragments allowed.
pub(crate) fn url_split(url: &str) -> Result<SplitUrl> {
    let url: String = url
        .trim_start_matches(is_c0_or_space)
        .chars()
        .filter(|c| !matches!(c, '\t' | '\r' | '\n'))
        .collect();
    let mut scheme = String::new();
    let mut rest = url.as_str();
    if let Some(colon) = rest.find(':') {
        let candidate = &rest[..colon];
        let starts_alpha = candidate
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic());
        if colon > 0 && starts_alpha && candidate.chars().all(is_scheme_char) {
            scheme = candidate.to_ascii_lowercase();
            rest = &rest[colon + 1..];
        }
    }
    let mut netloc = "";
    if let Some(after) = rest.strip_prefix("//") {
        let end = after.find(['/', '?', '#']).unwrap_or(after.len());
        netloc = &after[..end];
        rest = &after[end..];
        let (open, close) = (netloc.contains('['), netloc.contains(']'));
        if open != close {
            return Err(Error::value("Invalid IPv6 URL"));
        }
        if open {
            let bracketed = netloc.split_once('[').map_or("", |(_, tail)| tail);
            let bracketed = bracketed
                .split_once(']')
                .map_or(bracketed, |(host, _)| host);
            check_bracketed_host(bracketed)?;
        }
    }
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    check_netloc(netloc)?;
    Ok(SplitUrl {
        scheme,
        netloc: netloc.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        fragment: fragment.to_string(),
    })
}

/// `_check_bracketed_host`: IPvFuture syntax or an IPv6 (not IPv4) literal.
fn check_bracketed_host(host: &str) -> Result<()> {
    if let Some(future) = host.strip_prefix('v') {
        // \Av[a-fA-F0-9]+\..+\Z
        let valid = future.split_once('.').is_some_and(|(version, tail)| {
            !version.is_empty()
                && version.bytes().all(|b| b.is_ascii_hexdigit())
                && !tail.is_empty()
                && !tail.contains('\n')
        });
        return if valid {
            Ok(())
        } else {
            Err(Error::value("IPvFuture address is invalid"))
        };
    }
    if python_compat::ipaddress::ip_address(host)?.ip().is_ipv4() {
        return Err(Error::value("An IPv4 address cannot be in brackets"));
    }
    Ok(())
}

/// `_checknetloc`: refuse a netloc that NFKC normalisation (as IDNA applies
/// it) would turn into one with URL delimiters.
fn check_netloc(netloc: &str) -> Result<()> {
    if netloc
        .chars()
        .any(|c| NFKC_DELIMITER_LOOKALIKES.contains(&c))
    {
        return Err(Error::value(format!(
            "netloc '{netloc}' contains invalid characters under NFKC normalization"
        )));
    }
    Ok(())
}

impl SplitUrl {
    /// Host and port text of the netloc (`_hostinfo`).
    fn host_info(&self) -> (&str, Option<&str>) {
        let host_info = self
            .netloc
            .rsplit_once('@')
            .map_or(self.netloc.as_str(), |(_, h)| h);
        let (hostname, port) = match host_info.split_once('[') {
            Some((_, bracketed)) => {
                let (hostname, after) = bracketed.split_once(']').unwrap_or((bracketed, ""));
                (hostname, after.split_once(':').map_or("", |(_, port)| port))
            }
            None => host_info.split_once(':').unwrap_or((host_info, "")),
        };
        (hostname, (!port.is_empty()).then_some(port))
    }

    /// `.hostname`: lowercased (except an IPv6 zone), `None` when empty.
    pub(crate) fn hostname(&self) -> Option<String> {
        let (hostname, _) = self.host_info();
        if hostname.is_empty() {
            return None;
        }
        Some(match hostname.split_once('%') {
            Some((address, zone)) => format!("{}%{zone}", address.to_lowercase()),
            None => hostname.to_lowercase(),
        })
    }

    /// `.port`: ASCII digits only, 0–65535, with Python's `ValueError`s.
    pub(crate) fn port(&self) -> Result<Option<u16>> {
        let Some(port) = self.host_info().1 else {
            return Ok(None);
        };
        if !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::value(format!(
                "Port could not be cast to integer value as {}",
                python_compat::repr(port)
            )));
        }
        let significant = port.trim_start_matches('0');
        match significant.parse::<u16>() {
            Ok(value) => Ok(Some(value)),
            Err(_) if significant.is_empty() => Ok(Some(0)),
            Err(_) => Err(Error::value("Port out of range 0-65535")),
        }
    }

    /// `(username, password)`: both `None` without `@`; the password is
    /// `None` without `:` in the user information.
    fn user_info(&self) -> (Option<&str>, Option<&str>) {
        match self.netloc.rsplit_once('@') {
            None => (None, None),
            Some((user_info, _)) => match user_info.split_once(':') {
                Some((username, password)) => (Some(username), Some(password)),
                None => (Some(user_info), None),
            },
        }
    }

    /// `.username`.
    pub(crate) fn username(&self) -> Option<&str> {
        self.user_info().0
    }

    /// `.password`.
    pub(crate) fn password(&self) -> Option<&str> {
        self.user_info().1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> SplitUrl {
        url_split(url).unwrap()
    }

    #[test]
    fn splits_like_python_urlsplit() {
        let parts = split("HTTP://User:Pw@127.0.0.1:8080/a/b?x=1?y#frag?z");
        assert_eq!(parts.scheme, "http");
        assert_eq!(parts.netloc, "User:Pw@127.0.0.1:8080");
        assert_eq!(parts.path, "/a/b");
        assert_eq!(parts.query, "x=1?y");
        assert_eq!(parts.fragment, "frag?z");
        assert_eq!(parts.username(), Some("User"));
        assert_eq!(parts.password(), Some("Pw"));
        assert_eq!(parts.hostname().as_deref(), Some("127.0.0.1"));
        assert_eq!(parts.port().unwrap(), Some(8080));

        // Leading C0/space stripped, tab/CR/LF removed anywhere.
        let parts = split(" \x01ht\ttp://127.0.0.1:8\n0/p\r");
        assert_eq!(
            (parts.scheme.as_str(), parts.netloc.as_str()),
            ("http", "127.0.0.1:80")
        );
        assert_eq!(parts.path, "/p");

        let parts = split("http://[FE80::1%Zone]:0080");
        assert_eq!(parts.hostname().as_deref(), Some("fe80::1%Zone"));
        assert_eq!(parts.port().unwrap(), Some(80));

        let parts = split("http://@127.0.0.1:");
        assert_eq!(parts.username(), Some(""));
        assert_eq!(parts.password(), None);
        assert_eq!(parts.port().unwrap(), None);

        // No scheme when the part before ":" does not start with a letter.
        let parts = split("127.0.0.1:80/x");
        assert_eq!(parts.scheme, "");
        assert_eq!(parts.path, "127.0.0.1:80/x");
        assert_eq!(split("http:").hostname(), None);
    }

    #[test]
    fn refuses_like_python_urlsplit() {
        let message = |url: &str| url_split(url).unwrap_err().message().to_string();
        assert_eq!(message("http://[::1:80/"), "Invalid IPv6 URL");
        assert_eq!(message("http://::1]:80/"), "Invalid IPv6 URL");
        assert_eq!(
            message("http://[127.0.0.1]:80/"),
            "An IPv4 address cannot be in brackets"
        );
        assert_eq!(message("http://[vz.1]/"), "IPvFuture address is invalid");
        assert!(url_split("http://[v1f.x]/").is_ok());
        assert_eq!(
            message("http://[::g]/"),
            "'::g' does not appear to be an IPv4 or IPv6 address"
        );
        assert_eq!(
            message("http://127.0.0.1\u{2100}:80/"),
            "netloc '127.0.0.1\u{2100}:80' contains invalid characters under NFKC normalization"
        );
        let port = |url: &str| split(url).port().unwrap_err().message().to_string();
        assert_eq!(
            port("http://h:+80"),
            "Port could not be cast to integer value as '+80'"
        );
        assert_eq!(port("http://h:65536"), "Port out of range 0-65535");
        assert_eq!(
            port("http://h:99999999999999999999"),
            "Port out of range 0-65535"
        );
        assert_eq!(split("http://h:0").port().unwrap(), Some(0));
    }
}
