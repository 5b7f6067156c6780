//! `server-update.log` helpers against the original's own `installer_log_tail`
//! and `trim_installer_log`, run by python3 on the very same files.

use crate::installer_support;

use std::path::PathBuf;

use agents_tests::TempDir;
use installer_support::{original, Random};
use python_compat::json::{Json, JsonObject};
use update_runner::installer::{installer_log_tail, trim_installer_log};

/// Pieces the generated logs are made of: secrets in every spelling the
/// original's patterns accept (including the non-ASCII letters Python's
/// IGNORECASE folds onto ASCII), near misses, every line boundary of
/// `str.splitlines`, Unicode whitespace and invalid UTF-8.
const PIECES: &[&[u8]] = &[
    b"useful diagnostic",
    b"step 3/9 ok",
    b" ",
    b"  ",
    b"\t",
    b"=",
    b":",
    b" = ",
    b"\"",
    b"'",
    b"x",
    b"_",
    b"9",
    b"Bearer ",
    b"bearer\t",
    b"BEARER",
    b"Bearer",
    b"xBearer ",
    b"_bearer ",
    b"Authorization",
    b"authorization :",
    b"Authorization: Bearer ",
    b"AUTHORIZATION\t:\tBEARER  ",
    "AUTHOR\u{130}ZAT\u{131}ON: bearer ".as_bytes(),
    b"access_token",
    b"ACCESS_TOKEN",
    "acce\u{17f}\u{17f}_token".as_bytes(),
    b"\"access_token\"",
    b"'access_token' : ",
    b"AGENTSDOCK_AGENT_TOKEN",
    "agentsdoc\u{212a}_agent_token".as_bytes(),
    b"agentsdock_publish_token=",
    b"ZENITHBOT_AGENT_TOKEN",
    b"ZENITHDOCK_AGENT_TOKEN=",
    b"AGENTSDOCK_PROVIDER_AUTHORITY_FILE",
    b"AGENTSDOCK_AGENT_TOKE",
    b"AGENTSDOCK_SETUP_RESULT=",
    b"agentsdock_setup_result=",
    b"secret-value",
    b"\n",
    b"\n",
    b"\n",
    b"\r\n",
    b"\r",
    b"\x0b",
    b"\x0c",
    b"\x1c",
    b"\x1d",
    b"\x1e",
    b"\x1f",
    "\u{85}".as_bytes(),
    "\u{2028}".as_bytes(),
    "\u{2029}".as_bytes(),
    "\u{a0}".as_bytes(),
    "\u{3000}".as_bytes(),
    "\u{2003}".as_bytes(),
    "\u{20ac}".as_bytes(),
    "\u{2014}".as_bytes(),
    b"\xff",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\xf0\x9f\x98",
    b"\xc3",
    b"\xc3\xa9 ",
    b"\x00",
];

fn generated_log(random: &mut Random) -> Vec<u8> {
    let mut log = Vec::new();
    let size_class = random.below(10);
    let target = match size_class {
        0 => 0,
        1..=6 => random.below(600),
        7 => 3_000 + random.below(6_000),
        _ => 60 * 1024 + random.below(80 * 1024),
    };
    while log.len() < target {
        if random.below(40) == 0 {
            // A long line: past the 4,000-character cap on its own.
            let filler = random.pick(&[b"x".as_slice(), "\u{e9}".as_bytes(), b"ab "]);
            for _ in 0..(500 + random.below(5_000)) {
                log.extend_from_slice(filler);
            }
        }
        log.extend_from_slice(random.pick(PIECES));
    }
    log
}

fn string(path: &std::path::Path) -> Json {
    Json::from(path.to_str().unwrap())
}

/// The original's `installer_log_tail` of the whole log at `path`.
fn original_tail_of(originals: &agents_tests::Originals, path: &std::path::Path) -> Json {
    let mut call = JsonObject::new();
    call.insert("tail", string(path));
    call.insert("start_offset", 0);
    original(originals, vec![Json::Object(call)]).remove(0)
}

#[test]
fn tail_matches_original_on_generated_logs() {
    let originals = agents_tests::require_originals!();
    let directory = TempDir::with_mode("installer-tail", 0o755);
    let mut random = Random::new(0x16_1e57);
    let mut cases: Vec<(PathBuf, u64)> = Vec::new();
    for index in 0..400 {
        let path = directory.path().join(format!("log-{index}"));
        let log = generated_log(&mut random);
        std::fs::write(&path, &log).unwrap();
        let size = log.len() as u64;
        let start_offset = match random.below(6) {
            0 | 1 => 0,
            2 => size,
            3 => size + 1 + random.below(100) as u64,
            _ => random.below(log.len() + 1) as u64,
        };
        cases.push((path, start_offset));
    }
    let calls = cases
        .iter()
        .map(|(path, start_offset)| {
            let mut call = JsonObject::new();
            call.insert("tail", string(path));
            call.insert("start_offset", *start_offset);
            Json::Object(call)
        })
        .collect();
    let expected = original(&originals, calls);
    let mut nonempty = 0;
    for ((path, start_offset), expected) in cases.iter().zip(expected) {
        let ours = installer_log_tail(path, *start_offset, &[]);
        let theirs = expected.get("tail").and_then(Json::as_str).unwrap();
        assert_eq!(ours, theirs, "{} from {start_offset}", path.display());
        nonempty += usize::from(!ours.is_empty());
    }
    // The generator must exercise the redactions, not only empty tails.
    assert!(nonempty > 200, "only {nonempty} non-empty tails");
}

#[test]
fn tail_redacts_what_the_original_redacts() {
    let originals = agents_tests::require_originals!();
    // Hand-written lines with the expected text spelled out, so the oracle
    // is not the only witness.
    let directory = TempDir::with_mode("installer-tail-redact", 0o755);
    let path = directory.path().join("server-update.log");
    let log = concat!(
        "AGENTSDOCK_SETUP_RESULT={\"token\":\"abc\"}\n",
        "curl -H 'Authorization: Bearer s3cr3t' http://127.0.0.1/\n",
        "retrying with bearer   t0ken and more\n",
        "export AGENTSDOCK_AGENT_TOKEN=agent-secret\n",
        "{\"access_token\": \"json-secret\", \"other\": 1}\n",
        "AGENTSDOCK_PROVIDER_AUTHORITY_FILE : /private/file\n",
        "useful diagnostic\n",
    );
    std::fs::write(&path, log).unwrap();
    let expected = concat!(
        "curl -H 'Authorization: Bearer [REDACTED] http://127.0.0.1/\n",
        "retrying with bearer   [REDACTED] and more\n",
        "export AGENTSDOCK_AGENT_TOKEN=[REDACTED]\n",
        "{\"access_token\": [REDACTED]\n",
        "AGENTSDOCK_PROVIDER_AUTHORITY_FILE : [REDACTED]\n",
        "useful diagnostic",
    );
    assert_eq!(installer_log_tail(&path, 0, &[]), expected);
    let original_tail = original_tail_of(&originals, &path);
    assert_eq!(
        original_tail.get("tail").and_then(Json::as_str),
        Some(expected)
    );
}

#[test]
fn tail_drops_the_partial_line_at_the_cut_and_keeps_twelve_lines() {
    let directory = TempDir::with_mode("installer-tail-cut", 0o755);
    let path = directory.path().join("server-update.log");
    // A secret whose key lies before the 64 KiB window: its end must not
    // surface, even though nothing marks it as a secret any more.
    let mut log = b"AGENTSDOCK_AGENT_TOKEN=".to_vec();
    log.extend(std::iter::repeat_n(b'k', 70 * 1024));
    log.extend_from_slice(b"\n");
    for line in 1..=20 {
        log.extend_from_slice(format!("line {line}\n").as_bytes());
    }
    std::fs::write(&path, &log).unwrap();
    let tail = installer_log_tail(&path, 0, &[]);
    let expected: Vec<String> = (9..=20).map(|line| format!("line {line}")).collect();
    assert_eq!(tail, expected.join("\n"));
    // Only twenty short lines: with the window inside this attempt there
    // is no cut, and the count limit alone applies.
    let attempt_start = (log.len() - 20 * 8 + 2) as u64;
    assert!(installer_log_tail(&path, attempt_start, &[]).ends_with("line 20"));
}

#[test]
fn tail_of_an_unreadable_log_is_empty() {
    let directory = TempDir::with_mode("installer-tail-missing", 0o755);
    assert_eq!(
        installer_log_tail(&directory.path().join("absent"), 0, &[]),
        ""
    );
    // A directory cannot be read as a log (IsADirectoryError in Python).
    assert_eq!(installer_log_tail(directory.path(), 0, &[]), "");
    let path = directory.path().join("server-update.log");
    std::fs::write(&path, "earlier attempt\n").unwrap();
    assert_eq!(installer_log_tail(&path, 16, &[]), "");
    assert_eq!(installer_log_tail(&path, 1_000, &[]), "");
}

#[test]
fn bearer_after_a_non_ascii_letter_is_redacted_where_python_is_not() {
    let originals = agents_tests::require_originals!();
    // The one documented deviation: Python's `\b` sees no boundary between
    // a non-ASCII letter and "Bearer" (its `\w` follows its Unicode
    // database); the port always redacts there, never the other way round.
    let directory = TempDir::with_mode("installer-tail-boundary", 0o755);
    let path = directory.path().join("server-update.log");
    std::fs::write(&path, "caf\u{e9}Bearer tok\n").unwrap();
    assert_eq!(
        installer_log_tail(&path, 0, &[]),
        "caf\u{e9}Bearer [REDACTED]"
    );
    let original_tail = original_tail_of(&originals, &path);
    assert_eq!(
        original_tail.get("tail").and_then(Json::as_str),
        Some("caf\u{e9}Bearer tok")
    );
}

#[test]
fn trim_matches_original_byte_for_byte() {
    let originals = agents_tests::require_originals!();
    let directory = TempDir::with_mode("installer-trim", 0o755);
    let mut random = Random::new(0x7e1a);
    let mut cases = Vec::new();
    for index in 0..120 {
        let mut log = generated_log(&mut random);
        if index % 10 == 0 {
            log.retain(|byte| *byte != b'\n');
        }
        let size = log.len() as u64;
        let limit = match random.below(7) {
            0 => 0,
            1 => size,
            2 => size.saturating_sub(1),
            3 => size + 1,
            _ => random.below(log.len() + 1) as u64,
        };
        let ours = directory.path().join(format!("ours-{index}"));
        let theirs = directory.path().join(format!("theirs-{index}"));
        std::fs::write(&ours, &log).unwrap();
        std::fs::write(&theirs, &log).unwrap();
        cases.push((ours, theirs, limit));
    }
    let calls = cases
        .iter()
        .map(|(_, theirs, limit)| {
            let mut call = JsonObject::new();
            call.insert("trim", string(theirs));
            call.insert("limit", *limit);
            Json::Object(call)
        })
        .collect();
    original(&originals, calls);
    let mut shortened = 0;
    for (ours, theirs, limit) in &cases {
        let before = std::fs::metadata(ours).unwrap().len();
        trim_installer_log(ours, *limit).unwrap();
        let trimmed = std::fs::read(ours).unwrap();
        assert_eq!(
            trimmed,
            std::fs::read(theirs).unwrap(),
            "{}",
            ours.display()
        );
        assert!(trimmed.len() as u64 <= (*limit).max(before));
        shortened += usize::from((trimmed.len() as u64) < before);
    }
    assert!(shortened > 40, "only {shortened} logs were trimmed");
}

#[test]
fn trim_keeps_whole_lines_and_ignores_a_missing_log() {
    let directory = TempDir::with_mode("installer-trim-lines", 0o755);
    let path = directory.path().join("server-update.log");
    std::fs::write(&path, "first line\nsecond\nthird\n").unwrap();
    trim_installer_log(&path, 10).unwrap();
    // The last ten bytes are "nd\nthird\n": the partial line goes.
    assert_eq!(std::fs::read(&path).unwrap(), b"third\n");
    std::fs::write(&path, "no newline at all").unwrap();
    trim_installer_log(&path, 5).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"");
    std::fs::write(&path, "small\n").unwrap();
    trim_installer_log(&path, 6).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"small\n");
    trim_installer_log(&directory.path().join("absent"), 0).unwrap();
    assert!(!directory.path().join("absent").exists());
}

#[test]
fn trim_of_a_directory_fails_like_python() {
    let directory = TempDir::with_mode("installer-trim-dir", 0o755);
    let error = trim_installer_log(directory.path(), 0).unwrap_err();
    // Python raises IsADirectoryError, an OSError with this text.
    assert!(error.is_os_error());
    assert_eq!(
        error.message(),
        format!(
            "[Errno 21] Is a directory: '{}'",
            directory.path().display()
        )
    );
}

/// A log whose every line carries `TOKEN` after something the original's
/// patterns do not recognise (`\x0b` even splits its line in two).
const TOKEN: &str = "tok-3f9c2e71";

fn leaky_log(directory: &TempDir) -> std::path::PathBuf {
    let path = directory.path().join("server-update.log");
    let mut log = Vec::new();
    for prefix in [
        &b"xBearer "[..],
        b"_Bearer ",
        b"1Bearer ",
        b"Bearer Bearer ",
        b"Bearer\xff",
        b"bearer\x0b",
        b"url=https://host/?t=",
        b"",
    ] {
        log.extend_from_slice(prefix);
        log.extend_from_slice(TOKEN.as_bytes());
        log.extend_from_slice(b" end\n");
    }
    std::fs::write(&path, &log).unwrap();
    path
}

#[test]
fn a_known_credential_is_redacted_wherever_it_appears() {
    let directory = TempDir::with_mode("installer-tail-values", 0o755);
    let path = leaky_log(&directory);
    // "tok" is a second secret inside the first: the longer goes first.
    let secrets = vec!["tok".to_string(), TOKEN.to_string()];
    let tail = installer_log_tail(&path, 0, &secrets);
    assert_eq!(
        tail,
        "xBearer [REDACTED] end\n\
         _Bearer [REDACTED] end\n\
         1Bearer [REDACTED] end\n\
         Bearer [REDACTED] [REDACTED] end\n\
         Bearer\u{fffd}[REDACTED] end\n\
         bearer\n\
         [REDACTED] end\n\
         url=https://host/?t=[REDACTED] end\n\
         [REDACTED] end"
    );
}

#[test]
fn without_known_values_the_tail_leaks_exactly_as_the_originals_does() {
    let originals = agents_tests::require_originals!();
    let directory = TempDir::with_mode("installer-tail-patterns", 0o755);
    let path = leaky_log(&directory);
    let unredacted = installer_log_tail(&path, 0, &[]);
    assert_eq!(unredacted.matches(TOKEN).count(), 8, "{unredacted}");
    let original_tail = original_tail_of(&originals, &path);
    assert_eq!(
        original_tail.get("tail").and_then(Json::as_str),
        Some(unredacted.as_str())
    );
}
