//! Decoding a source whose coding cookie names a codec other than UTF-8,
//! as `PyUnicode_Decode(source, len, name, NULL)` does: the fast paths for
//! the common names, else the codec registry (`encodings` package and its
//! aliases), then the codec's strict decoder.

use super::tables::{CHARMAPS, CODECS, CODEC_ALIASES};
use super::utf8;

/// How a codec module of the `encodings` package decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CodecKind {
    /// `ascii`: bytes below 0x80.
    Ascii,
    /// `latin_1`: every byte is its code point.
    Latin1,
    /// `charmap` without a table: Latin-1 under the name `charmap`.
    Latin1Charmap,
    /// `utf_8`.
    Utf8,
    /// `utf_8_sig`: UTF-8 after an optional leading BOM.
    Utf8Sig,
    /// A single-byte codec with a 256-entry decoding table.
    Charmap,
    /// `undefined`: always raises `UnicodeError("undefined encoding")`.
    Undefined,
    /// A bytes-to-bytes or text-to-text codec (`hex`, `rot13`, ...).
    NotText,
    /// A codec Python has but this port does not implement (multi-byte East
    /// Asian codecs, UTF-7, UTF-16/32, IDNA, punycode, escape codecs).
    Unsupported,
}

/// Why the source could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DecodeFailure {
    /// Python's exception text; `ast.parse` turns it into a `SyntaxError`
    /// with the same text.
    Python(String),
    /// The codec exists in Python but not in this port.
    Unsupported(String),
}

/// `_Py_normalize_encoding`: lower case, every run of characters other than
/// ASCII letters, digits and `.` becomes one `_` (none at the ends).
fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut punct = false;
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'.' {
            if punct && !out.is_empty() {
                out.push('_');
            }
            punct = false;
            out.push(byte.to_ascii_lowercase() as char);
        } else {
            punct = true;
        }
    }
    out
}

/// The codec module the registry finds for `name`, as
/// `encodings.search_function` looks it up.
fn lookup(name: &str) -> Option<(&'static str, CodecKind)> {
    let normalized = normalize(name);
    let alias = |key: &str| {
        CODEC_ALIASES
            .binary_search_by_key(&key, |&(alias, _)| alias)
            .ok()
            .map(|index| CODEC_ALIASES[index].1)
    };
    let aliased = alias(&normalized).or_else(|| alias(&normalized.replace('.', "_")));
    let candidates = aliased
        .into_iter()
        .chain(std::iter::once(normalized.as_str()));
    for module in candidates {
        if module.is_empty() || module.contains('.') {
            continue;
        }
        if let Some(&(found, kind)) = CODECS.iter().find(|(codec, _)| *codec == module) {
            return Some((found, kind));
        }
    }
    None
}

/// Decodes `data` with the codec `name` (the cookie's spelling), returning
/// UTF-8 bytes.
pub(super) fn decode(name: &str, data: &[u8]) -> Result<Vec<u8>, DecodeFailure> {
    // PyUnicode_Decode's fast paths, for names that normalize to at most
    // ten characters.
    let fast = normalize(name);
    if fast.len() <= 10 {
        let utf = fast
            .strip_prefix("utf")
            .map(|rest| rest.strip_prefix('_').unwrap_or(rest));
        match (utf, fast.as_str()) {
            (Some("8"), _) => return decode_utf8(data),
            (Some("16" | "32"), _) => return Err(DecodeFailure::Unsupported(name.to_string())),
            (None, "ascii" | "us_ascii") => return decode_ascii(data),
            (None, "latin1" | "latin_1" | "iso_8859_1" | "iso8859_1") => {
                return Ok(decode_latin1(data))
            }
            _ => {}
        }
    }
    let Some((module, kind)) = lookup(name) else {
        return Err(DecodeFailure::Python(format!("unknown encoding: {name}")));
    };
    match kind {
        CodecKind::NotText => Err(DecodeFailure::Python(format!(
            "'{name}' is not a text encoding; use codecs.decode() to handle arbitrary codecs"
        ))),
        CodecKind::Unsupported => Err(DecodeFailure::Unsupported(name.to_string())),
        CodecKind::Undefined => Err(DecodeFailure::Python("undefined encoding".to_string())),
        CodecKind::Ascii => decode_ascii(data),
        CodecKind::Latin1 | CodecKind::Latin1Charmap => Ok(decode_latin1(data)),
        CodecKind::Utf8 => decode_utf8(data),
        CodecKind::Utf8Sig => match data.strip_prefix(b"\xef\xbb\xbf") {
            Some(rest) => decode_utf8(rest),
            None => decode_utf8(data),
        },
        CodecKind::Charmap => {
            let index = CHARMAPS
                .binary_search_by_key(&module, |&(codec, _)| codec)
                .expect("every charmap codec has a table");
            decode_charmap(CHARMAPS[index].1, data)
        }
    }
}

fn decode_utf8(data: &[u8]) -> Result<Vec<u8>, DecodeFailure> {
    utf8::decode(data)
        .map(|text| text.as_bytes().to_vec())
        .map_err(DecodeFailure::Python)
}

fn decode_ascii(data: &[u8]) -> Result<Vec<u8>, DecodeFailure> {
    match data.iter().position(|&byte| byte >= 0x80) {
        None => Ok(data.to_vec()),
        Some(position) => Err(DecodeFailure::Python(utf8::decode_error_text(
            "ascii",
            data,
            position,
            position + 1,
            "ordinal not in range(128)",
        ))),
    }
}

fn decode_latin1(data: &[u8]) -> Vec<u8> {
    data.iter()
        .map(|&byte| byte as char)
        .collect::<String>()
        .into_bytes()
}

fn decode_charmap(table: &str, data: &[u8]) -> Result<Vec<u8>, DecodeFailure> {
    let table: Vec<char> = table.chars().collect();
    let mut out = String::with_capacity(data.len());
    for (position, &byte) in data.iter().enumerate() {
        let c = table[byte as usize];
        if c == '\u{fffe}' {
            return Err(DecodeFailure::Python(utf8::decode_error_text(
                "charmap",
                data,
                position,
                position + 1,
                "character maps to <undefined>",
            )));
        }
        out.push(c);
    }
    Ok(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected texts: bytes.decode(name) / codecs.lookup(name) on CPython 3.11.
    #[test]
    fn names_and_errors_follow_the_registry() {
        assert_eq!(decode("latin-1", b"\xe9").unwrap(), "é".as_bytes());
        assert_eq!(decode("Latin_1", b"\xe9").unwrap(), "é".as_bytes());
        assert_eq!(decode("koi8-r", b"\xc1").unwrap(), "а".as_bytes());
        assert_eq!(decode("cp1252", b"\x80").unwrap(), "€".as_bytes());
        assert_eq!(
            decode("cp1252", b"ab\x81"),
            Err(DecodeFailure::Python(
                "'charmap' codec can't decode byte 0x81 in position 2: character maps to <undefined>"
                    .into()
            ))
        );
        assert_eq!(
            decode("ascii", b"a\xe9"),
            Err(DecodeFailure::Python(
                "'ascii' codec can't decode byte 0xe9 in position 1: ordinal not in range(128)"
                    .into()
            ))
        );
        assert_eq!(
            decode("uft-8", b""),
            Err(DecodeFailure::Python("unknown encoding: uft-8".into()))
        );
        assert_eq!(
            decode("hex", b""),
            Err(DecodeFailure::Python(
                "'hex' is not a text encoding; use codecs.decode() to handle arbitrary codecs"
                    .into()
            ))
        );
        assert!(matches!(
            decode("shift_jis", b""),
            Err(DecodeFailure::Unsupported(_))
        ));
        assert_eq!(decode("utf8", b"x").unwrap(), b"x");
        assert_eq!(decode("windows-1252", b"\x80").unwrap(), "€".as_bytes());
        assert_eq!(decode("macroman", b"\x80").unwrap(), "Ä".as_bytes());
        for unknown in ["U.T.F-8", "cp-1252", "utf8_sig"] {
            assert_eq!(
                decode(unknown, b""),
                Err(DecodeFailure::Python(format!(
                    "unknown encoding: {unknown}"
                )))
            );
        }
    }
}
