//! `ipaddress.ip_address` as `execution_http` and the journal validators use
//! it: which spellings are addresses, how they compare, and the exact
//! `ValueError` message otherwise. Rust's parsers accept other spellings.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::exception::{Exception, Result};
use crate::text::repr;

/// An `ipaddress.IPv4Address` or `IPv6Address`: IPv6 keeps its `%scope`
/// because Python compares it, and a v4 address never equals a v6 one (no
/// IPv4-mapped normalisation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyIp {
    ip: IpAddr,
    scope: Option<String>,
}

impl PyIp {
    /// An address and its IPv6 `%scope` (`fe80::1%2`).
    pub fn new(ip: IpAddr, scope: Option<String>) -> Self {
        PyIp { ip, scope }
    }

    /// An address without scope, as `/proc` rows and `getpeername` give.
    pub fn plain(ip: IpAddr) -> Self {
        PyIp { ip, scope: None }
    }

    /// The address without its scope.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// The IPv6 `%scope`, if the address has one.
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// `ipaddress.ip_address(bytes)`: 4 bytes are IPv4, 16 are IPv6, anything
    /// else is refused.
    pub fn from_packed(packed: &[u8]) -> Option<Self> {
        let ip = match packed.len() {
            4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(packed).ok()?)),
            16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(packed).ok()?)),
            _ => return None,
        };
        Some(Self::plain(ip))
    }
}

/// `str(address)`: IPv6 always in hex groups (IPv4-mapped too, as Python
/// 3.11), a `%scope` suffix kept as Python 3.9+ keeps it.
impl fmt::Display for PyIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V4(ip) => write!(f, "{ip}")?,
            IpAddr::V6(ip) => f.write_str(&ipv6_text(&ip))?,
        }
        if let Some(scope) = &self.scope {
            write!(f, "%{scope}")?;
        }
        Ok(())
    }
}

/// `ipaddress.ip_address(text)`, with its exact `ValueError` message.
pub fn ip_address(text: &str) -> Result<PyIp> {
    if let Some(ip) = ipv4_address(text) {
        return Ok(PyIp::plain(IpAddr::V4(ip)));
    }
    if let Some(address) = ipv6_address(text) {
        return Ok(address);
    }
    Err(Exception::value(format!(
        "{} does not appear to be an IPv4 or IPv6 address",
        repr(text)
    )))
}

/// `IPv4Address(text)`: exactly four decimal octets of 1–3 ASCII digits, no
/// leading zero (as strict as glibc's `inet_pton`), each at most 255.
fn ipv4_address(text: &str) -> Option<Ipv4Addr> {
    let octets: Vec<&str> = text.split('.').collect();
    if octets.len() != 4 {
        return None;
    }
    let mut bytes = [0u8; 4];
    for (slot, octet) in bytes.iter_mut().zip(&octets) {
        let digits_only = !octet.is_empty() && octet.bytes().all(|b| b.is_ascii_digit());
        if !digits_only || octet.len() > 3 || (octet.len() > 1 && octet.starts_with('0')) {
            return None;
        }
        *slot = octet.parse::<u16>().ok()?.try_into().ok()?;
    }
    Some(Ipv4Addr::from(bytes))
}

/// `IPv6Address(text)`, including an optional `%scope` (any non-empty text
/// without another `%`) and an IPv4-style tail.
fn ipv6_address(text: &str) -> Option<PyIp> {
    if text.contains('/') {
        return None;
    }
    let (address, scope) = match text.split_once('%') {
        None => (text, None),
        Some((_, scope)) if scope.is_empty() || scope.contains('%') => return None,
        Some((address, scope)) => (address, Some(scope.to_string())),
    };
    let ip = ipv6_bits(address)?;
    Some(PyIp {
        ip: IpAddr::V6(Ipv6Addr::from(ip)),
        scope,
    })
}

const HEXTET_COUNT: usize = 8;

fn ipv6_bits(text: &str) -> Option<u128> {
    if text.is_empty() {
        return None;
    }
    let mut parts: Vec<String> = text.split(':').map(str::to_string).collect();
    if parts.len() < 3 {
        return None;
    }
    if parts.last()?.contains('.') {
        let tail = u32::from(ipv4_address(&parts.pop()?)?);
        parts.push(format!("{:x}", tail >> 16));
        parts.push(format!("{:x}", tail & 0xffff));
    }
    if parts.len() > HEXTET_COUNT + 1 {
        return None;
    }
    // One "::" (an empty part that is not an endpoint) stands for skipped zeros.
    let mut skip_index = None;
    for (index, part) in parts.iter().enumerate().take(parts.len() - 1).skip(1) {
        if part.is_empty() {
            if skip_index.is_some() {
                return None;
            }
            skip_index = Some(index);
        }
    }
    let (parts_hi, parts_lo, skipped) = match skip_index {
        Some(index) => {
            let mut hi = index;
            let mut lo = parts.len() - index - 1;
            if parts[0].is_empty() {
                hi -= 1;
                if hi > 0 {
                    return None;
                }
            }
            if parts[parts.len() - 1].is_empty() {
                lo -= 1;
                if lo > 0 {
                    return None;
                }
            }
            let skipped = HEXTET_COUNT.checked_sub(hi + lo).filter(|n| *n >= 1)?;
            (hi, lo, skipped)
        }
        None => {
            if parts.len() != HEXTET_COUNT || parts[0].is_empty() || parts[7].is_empty() {
                return None;
            }
            (parts.len(), 0, 0)
        }
    };
    let mut bits: u128 = 0;
    for part in &parts[..parts_hi] {
        bits = (bits << 16) | u128::from(hextet(part)?);
    }
    bits <<= 16 * skipped;
    for part in &parts[parts.len() - parts_lo..] {
        bits = (bits << 16) | u128::from(hextet(part)?);
    }
    Some(bits)
}

fn hextet(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 4 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(text, 16).ok()
}

/// Python 3.11's IPv6 text: hex groups with the longest run of two or more
/// zero groups compressed (the first run on a tie).
fn ipv6_text(address: &Ipv6Addr) -> String {
    let groups = address.segments();
    let (mut best_start, mut best_length) = (usize::MAX, 0);
    let mut index = 0;
    while index < 8 {
        if groups[index] == 0 {
            let start = index;
            while index < 8 && groups[index] == 0 {
                index += 1;
            }
            if index - start > best_length {
                (best_start, best_length) = (start, index - start);
            }
        } else {
            index += 1;
        }
    }
    let render = |range: &[u16]| {
        range
            .iter()
            .map(|group| format!("{group:x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    if best_length < 2 {
        return render(&groups);
    }
    format!(
        "{}::{}",
        render(&groups[..best_start]),
        render(&groups[best_start + best_length..])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_address_follows_python_ipaddress() {
        let v4 = |s: &str| ip_address(s).map(|a| a.ip.to_string());
        assert_eq!(v4("127.0.0.1").unwrap(), "127.0.0.1");
        assert_eq!(v4("0.0.0.0").unwrap(), "0.0.0.0");
        assert_eq!(v4("::1").unwrap(), "::1");
        assert_eq!(v4("::ffff:127.0.0.1").unwrap(), "::ffff:127.0.0.1");
        assert_eq!(v4("1:2:3:4:5:6:7::").unwrap(), "1:2:3:4:5:6:7:0");
        assert_eq!(v4("::2:3:4:5:6:7:8").unwrap(), "0:2:3:4:5:6:7:8");
        assert_eq!(v4("FE80::1").unwrap(), "fe80::1");
        let scoped = ip_address("fe80::1%eth0").unwrap();
        assert_eq!(scoped.scope.as_deref(), Some("eth0"));
        assert_ne!(scoped, ip_address("fe80::1").unwrap());
        for bad in [
            "127.0.0.01",
            "127.1",
            "256.0.0.1",
            "1.2.3.4.",
            "localhost",
            "",
            "1.2.3.+4",
            "1.2.3.٤",
            "::1%",
            "::1%a%b",
            "1:2:3:4:5:6:7:8:9",
            "1::2::3",
            ":1::2",
            "1::2:",
            "1:2:3:4:5:6:7:8::",
            "::1/128",
            "12345::",
            "::ffff:127.0.0.01",
            "1:2:3:4:5:6:7",
        ] {
            let err = ip_address(bad).unwrap_err();
            assert_eq!(err.class(), crate::exception::ErrorClass::Value, "{bad}");
        }
        assert_eq!(
            ip_address("127.0.0.01").unwrap_err().message(),
            "'127.0.0.01' does not appear to be an IPv4 or IPv6 address"
        );
    }
}
