//! Bytes to code points as `json.loads(bytes)` does it: `detect_encoding`,
//! then `bytes.decode(encoding, "surrogatepass")`.
//!
//! The result is a sequence of code points rather than a `String` because the
//! `surrogatepass` handler lets lone surrogates through, and because Python
//! reports JSON error positions in code points.

use crate::exception::{ErrorClass, Exception, Result};

/// The codec `json.detect_encoding` picks. The byte-order-mark variants
/// decode like the explicit ones after skipping the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Utf8,
    Utf16 { big_endian: bool },
    Utf32 { big_endian: bool },
}

const BOM_UTF8: &[u8] = b"\xef\xbb\xbf";
const BOM_UTF16_LE: &[u8] = b"\xff\xfe";
const BOM_UTF16_BE: &[u8] = b"\xfe\xff";
const BOM_UTF32_LE: &[u8] = b"\xff\xfe\x00\x00";
const BOM_UTF32_BE: &[u8] = b"\x00\x00\xfe\xff";

/// `json.detect_encoding`: the encoding and how many byte-order-mark bytes to
/// skip.
fn detect_encoding(data: &[u8]) -> (Encoding, usize) {
    if data.starts_with(BOM_UTF32_BE) || data.starts_with(BOM_UTF32_LE) {
        let big_endian = data.starts_with(BOM_UTF32_BE);
        return (Encoding::Utf32 { big_endian }, 4);
    }
    if data.starts_with(BOM_UTF16_BE) || data.starts_with(BOM_UTF16_LE) {
        let big_endian = data.starts_with(BOM_UTF16_BE);
        return (Encoding::Utf16 { big_endian }, 2);
    }
    if data.starts_with(BOM_UTF8) {
        return (Encoding::Utf8, 3);
    }
    // Without a mark, the zero bytes around the first ASCII character of a
    // JSON text give the width and byte order away.
    let encoding = match *data {
        [0, second, _, _, ..] => {
            if second != 0 {
                Encoding::Utf16 { big_endian: true }
            } else {
                Encoding::Utf32 { big_endian: true }
            }
        }
        [_, 0, third, fourth, ..] => {
            if third != 0 || fourth != 0 {
                Encoding::Utf16 { big_endian: false }
            } else {
                Encoding::Utf32 { big_endian: false }
            }
        }
        [0, _] => Encoding::Utf16 { big_endian: true },
        [_, 0] => Encoding::Utf16 { big_endian: false },
        _ => Encoding::Utf8,
    };
    (encoding, 0)
}

/// Decodes a JSON document's bytes into code points. Failures are Python's
/// `UnicodeDecodeError` (a `ValueError`) with its message.
pub(super) fn decode_document(data: &[u8]) -> Result<Vec<u32>> {
    let (encoding, mark) = detect_encoding(data);
    match encoding {
        // `utf-8-sig` decodes the rest as `utf-8`, so positions in its
        // errors count from after the mark.
        Encoding::Utf8 => decode_utf8(&data[mark..]),
        // The UTF-16/32 codecs count positions from the first byte, mark
        // included.
        Encoding::Utf16 { big_endian } => decode_utf16(data, mark, big_endian),
        Encoding::Utf32 { big_endian } => decode_utf32(data, mark, big_endian),
    }
}

/// `UnicodeDecodeError.__str__` for the bytes `start..end` of `data`.
fn decode_error(codec: &str, data: &[u8], start: usize, end: usize, reason: &str) -> Exception {
    let message = if end - start == 1 {
        format!(
            "'{codec}' codec can't decode byte 0x{:02x} in position {start}: {reason}",
            data[start]
        )
    } else {
        format!(
            "'{codec}' codec can't decode bytes in position {start}-{}: {reason}",
            end - 1
        )
    };
    Exception::new(ErrorClass::UnicodeDecode, message)
}

fn is_continuation(byte: u8) -> bool {
    byte & 0xc0 == 0x80
}

/// UTF-8 with Python's error ranges (maximal invalid subparts) and the
/// `surrogatepass` exception for three-byte encoded surrogates.
fn decode_utf8(data: &[u8]) -> Result<Vec<u32>> {
    let mut points = Vec::with_capacity(data.len());
    let mut index = 0;
    while index < data.len() {
        let lead = data[index];
        if lead < 0x80 {
            points.push(u32::from(lead));
            index += 1;
            continue;
        }
        // Length and the allowed range of the second byte, which excludes
        // overlong forms, surrogates and values above U+10FFFF.
        let (length, second_range) = match lead {
            0xc2..=0xdf => (2, 0x80..=0xbf),
            0xe0 => (3, 0xa0..=0xbf),
            0xe1..=0xec | 0xee | 0xef => (3, 0x80..=0xbf),
            0xed => (3, 0x80..=0x9f),
            0xf0 => (4, 0x90..=0xbf),
            0xf1..=0xf3 => (4, 0x80..=0xbf),
            0xf4 => (4, 0x80..=0x8f),
            _ => {
                return Err(decode_error(
                    "utf-8",
                    data,
                    index,
                    index + 1,
                    "invalid start byte",
                ))
            }
        };
        if lead == 0xed
            && index + 2 < data.len()
            && (0xa0..=0xbf).contains(&data[index + 1])
            && is_continuation(data[index + 2])
        {
            // surrogatepass: an encoded surrogate passes through as itself.
            points.push(sequence_value(&data[index..index + 3]));
            index += 3;
            continue;
        }
        for offset in 1..length {
            let Some(&byte) = data.get(index + offset) else {
                return Err(decode_error(
                    "utf-8",
                    data,
                    index,
                    data.len(),
                    "unexpected end of data",
                ));
            };
            let valid = if offset == 1 {
                second_range.contains(&byte)
            } else {
                is_continuation(byte)
            };
            if !valid {
                return Err(decode_error(
                    "utf-8",
                    data,
                    index,
                    index + offset,
                    "invalid continuation byte",
                ));
            }
        }
        points.push(sequence_value(&data[index..index + length]));
        index += length;
    }
    Ok(points)
}

/// The code point of a validated multi-byte UTF-8 sequence.
fn sequence_value(sequence: &[u8]) -> u32 {
    let lead_bits = u32::from(sequence[0]) & (0x7f >> sequence.len());
    sequence[1..].iter().fold(lead_bits, |value, &byte| {
        (value << 6) | u32::from(byte & 0x3f)
    })
}

fn codec_name(bits: u32, big_endian: bool) -> String {
    format!("utf-{bits}-{}", if big_endian { "be" } else { "le" })
}

/// UTF-16 from byte `start` on; lone surrogates pass (`surrogatepass`).
fn decode_utf16(data: &[u8], start: usize, big_endian: bool) -> Result<Vec<u32>> {
    let unit_at = |index: usize| -> Option<u32> {
        let bytes = [*data.get(index)?, *data.get(index + 1)?];
        Some(u32::from(if big_endian {
            u16::from_be_bytes(bytes)
        } else {
            u16::from_le_bytes(bytes)
        }))
    };
    let mut points = Vec::with_capacity((data.len() - start) / 2);
    let mut index = start;
    while index < data.len() {
        let Some(unit) = unit_at(index) else {
            let codec = codec_name(16, big_endian);
            return Err(decode_error(
                &codec,
                data,
                index,
                data.len(),
                "truncated data",
            ));
        };
        index += 2;
        if (0xd800..0xdc00).contains(&unit) {
            if let Some(low @ 0xdc00..=0xdfff) = unit_at(index) {
                points.push(0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00));
                index += 2;
                continue;
            }
        }
        points.push(unit);
    }
    Ok(points)
}

/// UTF-32 from byte `start` on; surrogate code points pass (`surrogatepass`).
fn decode_utf32(data: &[u8], start: usize, big_endian: bool) -> Result<Vec<u32>> {
    let codec = || codec_name(32, big_endian);
    let mut points = Vec::with_capacity((data.len() - start) / 4);
    let mut index = start;
    while index < data.len() {
        let Some(&bytes) = data
            .get(index..index + 4)
            .and_then(|b| b.first_chunk::<4>())
        else {
            return Err(decode_error(
                &codec(),
                data,
                index,
                data.len(),
                "truncated data",
            ));
        };
        let point = if big_endian {
            u32::from_be_bytes(bytes)
        } else {
            u32::from_le_bytes(bytes)
        };
        if point > 0x10ffff {
            return Err(decode_error(
                &codec(),
                data,
                index,
                index + 4,
                "code point not in range(0x110000)",
            ));
        }
        points.push(point);
        index += 4;
    }
    Ok(points)
}
