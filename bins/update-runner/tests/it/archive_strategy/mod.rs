//! Generated release archives for the extraction property tests: members
//! with hostile names (`..`, absolute, empty components, names past the
//! ustar field carried in PAX records), every member type tarfile knows,
//! odd modes and short data, around a release layout that is sometimes
//! complete, so both acceptance and each refusal are reached.

use agents_tests::release_support::Member;
use proptest::prelude::*;

/// The legacy release root.
pub(crate) const ROOT: &str = "agents-server-1.0.7";

/// How many generated archives go through the original in one batch.
pub(crate) fn differential_cases() -> usize {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse::<usize>().ok())
        .map_or(64, |cases| cases.max(1))
}

fn arb_name() -> impl Strategy<Value = String> {
    let component = prop::sample::select(vec![
        ROOT.to_string(),
        "package".to_string(),
        "server".to_string(),
        "install.sh".to_string(),
        "a".to_string(),
        "..".to_string(),
        ".".to_string(),
        String::new(),
        "n".repeat(120),
    ]);
    let prefix = prop::sample::select(vec!["", "", "", "/", "//", "./"]);
    (prefix, prop::collection::vec(component, 1..4))
        .prop_map(|(prefix, parts)| format!("{prefix}{}", parts.join("/")))
}

/// One member, preceded by a GNU long-name member when its name is past
/// the 100-byte ustar field and `gnu_long_name` is drawn (else PAX).
fn arb_member() -> impl Strategy<Value = Vec<Member>> {
    let typeflag = prop::sample::select(b"000000555512346777\0".to_vec());
    let mode = prop::sample::select(vec![0o644, 0o755, 0o4755, 0o2775, 0o777, 0, 0o600, 0o1777]);
    (
        arb_name(),
        typeflag,
        mode,
        prop::collection::vec(any::<u8>(), 0..48),
        arb_name(),
        any::<bool>(),
        prop::sample::select(vec!["", "/", "//"]),
    )
        .prop_map(
            |(name, typeflag, mode, data, link, gnu_long_name, slashes)| {
                let name = format!("{name}{slashes}");
                let mut member = match typeflag {
                    b'0' | b'7' | b'\0' => Member {
                        typeflag,
                        ..Member::file(&name, &data)
                    },
                    b'5' => Member::dir(&name),
                    b'1' | b'2' => Member::link(&name, typeflag, &link),
                    other => Member::special(&name, other),
                };
                member = member.mode(mode);
                if name.len() <= 100 {
                    return vec![member];
                }
                // Names past the 100-byte ustar field travel in a PAX record or
                // a GNU long-name member.
                if !gnu_long_name {
                    member.pax_path = Some(name.into_bytes());
                    return vec![member];
                }
                let mut long_name = name.into_bytes();
                long_name.push(0);
                let header = Member {
                    data: long_name,
                    ..Member::special("././@LongLink", b'L')
                };
                vec![header, member]
            },
        )
}

/// The members of a legacy (or, when the flag is set, npm) release with
/// generated members mixed in, and whether it is an npm release.
pub(crate) fn arb_release() -> impl Strategy<Value = (Vec<Member>, bool)> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(arb_member(), 0..6),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(npm, complete, extra, at)| {
            let mut members = if npm {
                vec![
                    Member::file(
                        "package/package.json",
                        br#"{"name": "@agentsdock/server", "version": "1.0.8"}"#,
                    ),
                    Member::file("package/server/VERSION", b"1.0.8\n"),
                ]
            } else {
                vec![
                    Member::dir(ROOT),
                    Member::file(&format!("{ROOT}/VERSION"), b"1.0.7\n"),
                ]
            };
            if complete {
                let install = if npm {
                    "package/server/install.sh".to_string()
                } else {
                    format!("{ROOT}/install.sh")
                };
                members.push(Member::file(&install, b"#!/bin/sh\n").mode(0o755));
            }
            let position = at.index(members.len() + 1);
            members.splice(position..position, extra.into_iter().flatten());
            (members, npm)
        })
}
