//! Proof that a connected TCP socket's far end belongs to one exact process,
//! before any credential leaves it.
//!
//! Linux reads the process's descriptor table and the kernel's TCP tables;
//! macOS asks `lsof`. Both compare the typed `(address, port)` pairs of the
//! connection from the server's side, with no IPv4-mapped normalisation, so a
//! dual-stack listener reached through `127.0.0.1` is never "owned".

use std::collections::HashSet;
use std::fs;
use std::net::SocketAddr;
use std::time::Duration;

use crate::error::Result;
use crate::services::{CommandRunner, SystemCommandRunner};
use python_compat::ipaddress::PyIp;

/// One side of the connection as Python's `ipaddress` compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) ip: PyIp,
    pub(crate) port: i128,
}

impl Endpoint {
    /// The endpoint of `getpeername`/`getsockname`. A non-zero IPv6 scope is
    /// kept (by number), so such a link-local connection never matches an
    /// unscoped `/proc` row, as in Python.
    pub(crate) fn from_socket(address: SocketAddr) -> Self {
        let scope = match address {
            SocketAddr::V6(v6) if v6.scope_id() != 0 => Some(v6.scope_id().to_string()),
            _ => None,
        };
        Endpoint {
            ip: PyIp::new(address.ip(), scope),
            port: i128::from(address.port()),
        }
    }
}

/// Runs `lsof` for the macOS ownership proof; injectable so the parser is
/// exercised on every platform with recorded output.
pub trait LsofRunner {
    /// Runs `argv` (the program first) with standard input from `/dev/null`,
    /// standard error discarded and only `PATH=/usr/bin:/bin:/usr/sbin:/sbin`
    /// and `LC_ALL=C` in the environment. Returns standard output when the
    /// program exited 0 within `timeout`; `None` when it could not start,
    /// timed out (it is then killed) or failed, all of which mean "not proven".
    fn run(&self, argv: &[String], timeout: Duration) -> Option<Vec<u8>>;
}

/// The real `lsof` process runner.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemLsof;

impl LsofRunner for SystemLsof {
    fn run(&self, argv: &[String], timeout: Duration) -> Option<Vec<u8>> {
        let capture = SystemCommandRunner::default()
            .with_clean_environment()
            .with_environment([("PATH", "/usr/bin:/bin:/usr/sbin:/sbin"), ("LC_ALL", "C")])
            .with_stderr_discarded()
            .run(argv, timeout)
            .ok()?;
        (capture.status == 0).then_some(capture.stdout)
    }
}

/// Linux: does process `pid` hold a socket whose ESTABLISHED row has
/// `server` as local and `client` as remote end?
pub(crate) fn linux_connection_owned(
    pid: i64,
    server: &Endpoint,
    client: &Endpoint,
) -> Result<bool> {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Ok(false);
    };
    let mut inodes = HashSet::new();
    for entry in entries {
        let Ok(entry) = entry else {
            // Python's iterdir raises on a failed listing: "not owned".
            return Ok(false);
        };
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_string());
        }
    }
    if inodes.is_empty() {
        return Ok(false);
    }
    for (table, ipv6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let Ok(data) = fs::read(table) else {
            continue;
        };
        if tcp_table_owns(
            python_compat::decode_ascii(&data)?,
            ipv6,
            &inodes,
            server,
            client,
        ) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Scans one `/proc/net/tcp{,6}` text (header line first) for an ESTABLISHED
/// row of one of `inodes` with exactly these ends.
pub(crate) fn tcp_table_owns(
    text: &str,
    ipv6: bool,
    inodes: &HashSet<String>,
    server: &Endpoint,
    client: &Endpoint,
) -> bool {
    python_compat::splitlines(text).iter().skip(1).any(|line| {
        let fields = python_compat::split_whitespace(line);
        if fields.len() < 10 || fields[3] != "01" || !inodes.contains(fields[9]) {
            return false;
        }
        let observed = |field: &str| -> Option<Endpoint> {
            let (address, port) = field.rsplit_once(':')?;
            Some(Endpoint {
                ip: address_from_proc(address, ipv6)?,
                port: python_compat::int_hex(port)?,
            })
        };
        matches!(
            (observed(fields[1]), observed(fields[2])),
            (Some(local), Some(remote)) if local == *server && remote == *client
        )
    })
}

/// Decodes a `/proc/net/tcp` address: the kernel prints each 32-bit word in
/// host (little-endian) order, so every 4-byte group is reversed. Like
/// Python, the byte count (not the table) picks IPv4 or IPv6.
fn address_from_proc(raw: &str, ipv6: bool) -> Option<PyIp> {
    let mut packed = from_hex(raw)?;
    if !ipv6 {
        packed.reverse();
    } else {
        // Python joins the reversed 4-byte groups of the first 16 bytes.
        packed.truncate(16);
        for word in packed.chunks_mut(4) {
            word.reverse();
        }
    }
    PyIp::from_packed(&packed)
}

/// `bytes.fromhex` of a whitespace-free field: pairs of hex digits.
fn from_hex(text: &str) -> Option<Vec<u8>> {
    text.as_bytes()
        .chunks(2)
        .map(|pair| match pair {
            [high, low] => Some((hex_digit(*high)? << 4) | hex_digit(*low)?),
            _ => None,
        })
        .collect()
}

fn hex_digit(byte: u8) -> Option<u8> {
    char::from(byte).to_digit(16).map(|digit| digit as u8)
}

/// The `lsof` command line of the macOS proof.
pub(crate) fn lsof_argv(pid: i64) -> Vec<String> {
    [
        "/usr/sbin/lsof",
        "-nP",
        "-a",
        "-p",
        &pid.to_string(),
        "-iTCP",
        "-sTCP:ESTABLISHED",
        "-Fn",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// macOS: does `lsof` list, for process `pid`, an ESTABLISHED connection
/// `server->client`? Non-ASCII output is a `ValueError` (Python decodes it
/// strictly, outside its per-line error handling); unparseable lines are skipped.
pub(crate) fn darwin_connection_owned(
    pid: i64,
    server: &Endpoint,
    client: &Endpoint,
    remaining: Duration,
    runner: &dyn LsofRunner,
) -> Result<bool> {
    let timeout = remaining.max(Duration::from_millis(50));
    let Some(output) = runner.run(&lsof_argv(pid), timeout) else {
        return Ok(false);
    };
    let text = python_compat::decode_ascii(&output)?;
    Ok(python_compat::splitlines(text).iter().any(|line| {
        let Some((local, remote)) = line
            .strip_prefix('n')
            .and_then(|name| name.split_once("->"))
        else {
            return false;
        };
        parse_lsof_endpoint(local).as_ref() == Some(server)
            && parse_lsof_endpoint(remote).as_ref() == Some(client)
    }))
}

/// One side of an `lsof` name: its first word, `[v6]:port` or `host:port`.
fn parse_lsof_endpoint(value: &str) -> Option<Endpoint> {
    // Python raises IndexError on an empty side; it is skipped here like any
    // other unparseable line (see the module report).
    let value = *python_compat::split_whitespace(value).first()?;
    let (host, port) = match value.strip_prefix('[') {
        Some(bracketed) => {
            let closing = bracketed.find("]:")?;
            (&bracketed[..closing], &bracketed[closing + 2..])
        }
        None => value.rsplit_once(':')?,
    };
    Some(Endpoint {
        ip: python_compat::ipaddress::ip_address(host).ok()?,
        port: python_compat::python_int(port)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use std::time::Instant;

    fn endpoint(ip: &str, port: i128) -> Endpoint {
        Endpoint {
            ip: PyIp::plain(ip.parse::<IpAddr>().unwrap()),
            port,
        }
    }

    #[test]
    fn proc_addresses_decode_word_by_word() {
        assert_eq!(
            address_from_proc("0100007F", false).unwrap().ip(),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        assert_eq!(
            address_from_proc("00000000000000000000000001000000", true)
                .unwrap()
                .ip(),
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        );
        assert_eq!(
            address_from_proc("0000000000000000FFFF00000100007F", true)
                .unwrap()
                .ip(),
            "::ffff:127.0.0.1".parse::<IpAddr>().unwrap()
        );
        assert!(address_from_proc("0100007", false).is_none());
        assert!(address_from_proc("01000000", true).unwrap().ip().is_ipv4());
    }

    // Recorded from a Linux 6.x host, trimmed to the interesting rows.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41001 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 41002 1 0000000000000000 20 4 30 10 -1\n\
   2: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 41003 1 0000000000000000 20 4 30 10 -1\n";

    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 41004 1 0000000000000000 20 4 30 10 -1\n\
   1: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:D432 01 00000000:00000000 00:00000000 00000000     0        0 41005 1 0000000000000000 20 4 30 10 -1\n";

    fn inodes(list: &[&str]) -> HashSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tcp_rows_must_be_established_owned_and_exact() {
        let server = endpoint("127.0.0.1", 8080);
        let client = endpoint("127.0.0.1", 54321);
        let v6_server = endpoint("::1", 8080);
        // (table, ipv6, owned inode, server, client, owned?)
        let cases = [
            (TCP, false, "41002", &server, &client, true),
            // The client's own socket row has the ends swapped.
            (TCP, false, "41003", &server, &client, false),
            // The listener row is not ESTABLISHED.
            (TCP, false, "41001", &server, &endpoint("0.0.0.0", 0), false),
            // Wrong client port.
            (
                TCP,
                false,
                "41002",
                &server,
                &endpoint("127.0.0.1", 1),
                false,
            ),
            // A dual-stack listener reached through 127.0.0.1 shows a mapped
            // address in tcp6 and is never taken for 127.0.0.1.
            (TCP6, true, "41004", &server, &client, false),
            (
                TCP6,
                true,
                "41005",
                &v6_server,
                &endpoint("::1", 54322),
                true,
            ),
        ];
        for (table, ipv6, inode, server, client, expected) in cases {
            assert_eq!(
                tcp_table_owns(table, ipv6, &inodes(&[inode]), server, client),
                expected,
                "inode {inode}: {server:?} -> {client:?}"
            );
        }
    }

    struct RecordedLsof {
        output: Option<Vec<u8>>,
        calls: RefCell<Vec<(Vec<String>, Duration)>>,
    }

    impl LsofRunner for RecordedLsof {
        fn run(&self, argv: &[String], timeout: Duration) -> Option<Vec<u8>> {
            self.calls.borrow_mut().push((argv.to_vec(), timeout));
            self.output.clone()
        }
    }

    fn lsof(output: Option<&[u8]>) -> RecordedLsof {
        RecordedLsof {
            output: output.map(<[u8]>::to_vec),
            calls: RefCell::new(Vec::new()),
        }
    }

    // Shaped like `lsof -nP -a -p PID -iTCP -sTCP:ESTABLISHED -Fn` on macOS 14.
    const LSOF_V4: &[u8] =
        b"p4242\nf9\nn127.0.0.1:8080->127.0.0.1:54321\nf11\nn127.0.0.1:8080->127.0.0.1:54400\n";
    const LSOF_V6: &[u8] = b"p4242\nf7\nn[::1]:8080->[::1]:54322\n";

    /// `darwin_connection_owned` for PID 4242 over recorded `lsof` output.
    fn lsof_owns(output: &[u8], server: &Endpoint, client: &Endpoint) -> bool {
        darwin_connection_owned(
            4242,
            server,
            client,
            Duration::from_secs(1),
            &lsof(Some(output)),
        )
        .unwrap()
    }

    #[test]
    fn lsof_output_proves_the_exact_connection() {
        let server = endpoint("127.0.0.1", 8080);
        let client = endpoint("127.0.0.1", 54321);
        let runner = lsof(Some(LSOF_V4));
        assert!(darwin_connection_owned(
            4242,
            &server,
            &client,
            Duration::from_millis(10),
            &runner
        )
        .unwrap());
        let calls = runner.calls.borrow();
        assert_eq!(
            calls[0].0,
            [
                "/usr/sbin/lsof",
                "-nP",
                "-a",
                "-p",
                "4242",
                "-iTCP",
                "-sTCP:ESTABLISHED",
                "-Fn"
            ]
        );
        // The subprocess timeout is never below 50 ms.
        assert_eq!(calls[0].1, Duration::from_millis(50));

        let v6 = lsof(Some(LSOF_V6));
        assert!(darwin_connection_owned(
            4242,
            &endpoint("::1", 8080),
            &endpoint("::1", 54322),
            Duration::from_secs(2),
            &v6
        )
        .unwrap());
        assert_eq!(v6.calls.borrow()[0].1, Duration::from_secs(2));
        // Swapped ends, other ports, other families: not owned.
        assert!(!lsof_owns(LSOF_V4, &client, &server));
        assert!(!lsof_owns(LSOF_V4, &server, &endpoint("127.0.0.1", 1)));
        assert!(!lsof_owns(
            LSOF_V4,
            &endpoint("::1", 8080),
            &endpoint("::1", 54321)
        ));
        // lsof failing (spawn error, timeout, non-zero exit) proves nothing.
        assert!(!darwin_connection_owned(
            4242,
            &server,
            &client,
            Duration::from_secs(1),
            &lsof(None)
        )
        .unwrap());
    }

    #[test]
    fn lsof_unparseable_lines_are_skipped() {
        let server = endpoint("127.0.0.1", 8080);
        let client = endpoint("127.0.0.1", 54321);
        let noisy: &[u8] = b"p4242\nn->\nn127.0.0.1->x\nn[::1->[::1]:1\nnlocalhost:8080->127.0.0.1:54321\nn127.0.0.01:8080->127.0.0.1:54321\nf9\nn127.0.0.1:8080->127.0.0.1:54321 (ESTABLISHED)\n";
        assert!(lsof_owns(noisy, &server, &client));
        let only_noise: &[u8] = b"p4242\nn->\nn :1->:2\nf9\n127.0.0.1:8080->127.0.0.1:54321\n";
        assert!(!lsof_owns(only_noise, &server, &client));
        // Python's int() spellings are accepted for the port.
        let spelled: &[u8] = b"n127.0.0.1:+8_080->127.0.0.1:054321\n";
        assert!(lsof_owns(spelled, &server, &client));
    }

    #[test]
    fn lsof_non_ascii_output_is_a_value_error() {
        let output: &[u8] = b"p4242\nf9\nn127.0.0.1:8080->127.0.0.1:54321\nn\xc3\xa9\n";
        let err = darwin_connection_owned(
            4242,
            &endpoint("127.0.0.1", 8080),
            &endpoint("127.0.0.1", 54321),
            Duration::from_secs(1),
            &lsof(Some(output)),
        )
        .unwrap_err();
        assert_eq!(err.class(), python_compat::ErrorClass::UnicodeDecode);
        assert_eq!(
            err.message(),
            "'ascii' codec can't decode byte 0xc3 in position 43: ordinal not in range(128)"
        );
    }

    #[test]
    fn system_lsof_runner_reports_exit_status_output_and_timeouts() {
        let argv = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let ok = SystemLsof.run(
            &argv(&["/bin/sh", "-c", "printf 'n%s' \"$PATH|$LC_ALL|$HOME\""]),
            Duration::from_secs(5),
        );
        assert_eq!(ok.unwrap(), b"n/usr/bin:/bin:/usr/sbin:/sbin|C|");
        assert!(SystemLsof
            .run(
                &argv(&["/bin/sh", "-c", "echo x; exit 1"]),
                Duration::from_secs(5)
            )
            .is_none());
        assert!(SystemLsof
            .run(&argv(&["/nonexistent/lsof"]), Duration::from_secs(5))
            .is_none());
        let started = Instant::now();
        assert!(SystemLsof
            .run(
                &argv(&["/bin/sh", "-c", "exec sleep 5"]),
                Duration::from_millis(100)
            )
            .is_none());
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
