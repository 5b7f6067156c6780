//! What CPython 3.11 does to source *bytes* before tokenizing them
//! (`compile(bytes)`, hence `ast.parse(bytes)`): refuse NUL bytes, turn
//! `\r\n` and `\r` into `\n` and end the text with a newline, skip a UTF-8
//! BOM, honour a coding cookie on line 1 or 2 by decoding the whole text
//! with that codec. Without a cookie (or with a UTF-8 one) the bytes are
//! *not* validated here: the tokenizer and the parser check UTF-8 only where
//! they read text (identifiers, string literals), so a comment may hold any
//! byte.

use super::codecs::{self, DecodeFailure};
use super::{syntax_error, Refusal};

/// The text the tokenizer reads (not necessarily valid UTF-8).
pub(super) fn decode_source(input: &[u8]) -> Result<Vec<u8>, Refusal> {
    if input.contains(&0) {
        return Err(Refusal::Python(syntax_error(
            "source code string cannot contain null bytes",
        )));
    }
    let text = translate_newlines(input);
    let (body, bom) = match text.strip_prefix(b"\xef\xbb\xbf") {
        Some(rest) => (rest, true),
        None => (&text[..], false),
    };
    let mut lines = body.split_inclusive(|&byte| byte == b'\n');
    let mut cookie = None;
    if let Some(first) = lines.next() {
        let (spec, normal) = coding_spec(first);
        cookie = spec;
        if cookie.is_none() && !normal {
            if let Some(second) = lines.next() {
                cookie = coding_spec(second).0;
            }
        }
    }
    match cookie {
        Some(name) if bom && name != "utf-8" => Err(Refusal::Python(syntax_error(format!(
            "encoding problem: {name} with BOM"
        )))),
        Some(name) if name != "utf-8" => {
            codecs::decode(&name, body).map_err(|failure| match failure {
                DecodeFailure::Python(message) => Refusal::Python(syntax_error(message)),
                DecodeFailure::Unsupported(name) => Refusal::UnsupportedEncoding(name),
            })
        }
        _ => Ok(body.to_vec()),
    }
}

/// `translate_newlines`: `\r\n` and lone `\r` become `\n`, and a final `\n`
/// is added when the text does not end with one (a text ending in `\r\n`
/// gets one more, as CPython's loop leaves its last character unset).
fn translate_newlines(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + 2);
    let mut skip_next_lf = false;
    let mut last = 0u8;
    let mut index = 0;
    while index < input.len() {
        let mut c = input[index];
        if skip_next_lf {
            skip_next_lf = false;
            if c == b'\n' {
                index += 1;
                if index >= input.len() {
                    last = 0;
                    break;
                }
                c = input[index];
            }
        }
        if c == b'\r' {
            skip_next_lf = true;
            c = b'\n';
        }
        out.push(c);
        last = c;
        index += 1;
    }
    if last != b'\n' {
        out.push(b'\n');
    }
    out
}

/// `check_coding_spec` on one line (with its `\n`): the cookie's encoding
/// name, normalized as `get_normal_name` does, and whether cookie search
/// stops after this line (it holds something other than a comment).
fn coding_spec(line: &[u8]) -> (Option<String>, bool) {
    let size = line.len();
    let limit = size.saturating_sub(6);
    // The cookie must be in a comment that is the only thing on the line.
    let mut comment = true;
    for &byte in &line[..limit] {
        if byte == b'#' {
            break;
        }
        if !matches!(byte, b' ' | b'\t' | b'\x0c') {
            comment = false;
            break;
        }
    }
    if comment {
        for start in 0..limit {
            if &line[start..start + 6] != b"coding" {
                continue;
            }
            let mut at = start + 6;
            if !matches!(line[at], b':' | b'=') {
                continue;
            }
            at += 1;
            while matches!(line.get(at), Some(b' ' | b'\t')) {
                at += 1;
            }
            let begin = at;
            while line.get(at).is_some_and(|&byte| {
                byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.')
            }) {
                at += 1;
            }
            if at > begin {
                let name = String::from_utf8_lossy(&line[begin..at]).into_owned();
                return (Some(normal_name(name)), true);
            }
        }
    }
    // No cookie: keep looking on line 2 only after a blank or comment line.
    let mut normal = false;
    for &byte in line {
        if matches!(byte, b'#' | b'\n' | b'\r') {
            break;
        }
        if !matches!(byte, b' ' | b'\t' | b'\x0c') {
            normal = true;
            break;
        }
    }
    (None, normal)
}

/// `get_normal_name`: the UTF-8 and Latin-1 spellings the tokenizer knows,
/// judged on the first 12 characters (lower case, `_` as `-`).
fn normal_name(name: String) -> String {
    let head: String = name
        .bytes()
        .take(12)
        .map(|byte| match byte {
            b'_' => '-',
            other => other.to_ascii_lowercase() as char,
        })
        .collect();
    if head == "utf-8" || head.starts_with("utf-8-") {
        return "utf-8".to_string();
    }
    let latin = ["latin-1", "iso-8859-1", "iso-latin-1"];
    if latin.contains(&head.as_str())
        || latin
            .iter()
            .any(|spelling| head.starts_with(&format!("{spelling}-")))
    {
        return "iso-8859-1".to_string();
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(input: &[u8]) -> Result<Vec<u8>, String> {
        decode_source(input).map_err(|refusal| match refusal {
            Refusal::Python(error) => error.message().to_string(),
            Refusal::UnsupportedEncoding(name) => format!("unsupported {name}"),
        })
    }

    // Expected results: ast.parse(bytes) on CPython 3.11.
    #[test]
    fn cookies_boms_and_newlines() {
        assert_eq!(decoded(b"x\r\ny\rz").unwrap(), b"x\ny\nz\n");
        assert_eq!(decoded(b"x\r\n").unwrap(), b"x\n\n");
        assert_eq!(decoded(b"").unwrap(), b"\n");
        assert_eq!(decoded(b"\xef\xbb\xbfx").unwrap(), b"x\n");
        assert_eq!(
            decoded(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n").unwrap(),
            "# -*- coding: latin-1 -*-\nx = 'é'\n".as_bytes()
        );
        assert_eq!(
            decoded(b"#!/usr/bin/python\n# vim: set fileencoding=latin-1 :\n\xe9\n").unwrap(),
            "#!/usr/bin/python\n# vim: set fileencoding=latin-1 :\né\n".as_bytes()
        );
        // Line 2 counts only after a comment or blank line 1.
        assert_eq!(
            decoded(b"x=1\n# coding: latin-1\n\xe9\n").unwrap(),
            b"x=1\n# coding: latin-1\n\xe9\n"
        );
        // A UTF-8 cookie decodes nothing: bytes stay for the tokenizer.
        assert_eq!(
            decoded(b"# coding: utf-8\n# \xe9\n").unwrap(),
            b"# coding: utf-8\n# \xe9\n"
        );
        assert_eq!(
            decoded(b"# coding: utf8\n# \xe9\n").unwrap_err(),
            "'utf-8' codec can't decode byte 0xe9 in position 17: invalid continuation byte"
        );
        assert_eq!(
            decoded(b"# coding: uft-8\n").unwrap_err(),
            "unknown encoding: uft-8"
        );
        assert_eq!(
            decoded(b"\xef\xbb\xbf# coding: latin-1\n").unwrap_err(),
            "encoding problem: iso-8859-1 with BOM"
        );
        assert_eq!(
            decoded(b"\xef\xbb\xbf# coding: utf8\n").unwrap_err(),
            "encoding problem: utf8 with BOM"
        );
        assert!(decoded(b"\xef\xbb\xbf# coding: utf-8\nx\n").is_ok());
        assert_eq!(
            decoded(b"x = 1 # \x00\n").unwrap_err(),
            "source code string cannot contain null bytes"
        );
    }
}
