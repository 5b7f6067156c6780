//! Python's `json` module: `json.loads` and the `json.dumps` styles the
//! originals use.
//!
//! The helpers share files and HTTP bodies with Python code that stays
//! (install.sh's journal writer, the server, the worker), and several files
//! are hashed, so both directions must match CPython 3.11's `json` module
//! byte for byte: what `json.loads` accepts and how it refuses, and the exact
//! bytes of each `json.dumps` style the originals use. `serde_json` differs on
//! both sides (no `NaN`, no UTF-16/32 input, raw non-ASCII output), hence this
//! module. [`json_object!`](crate::json_object) builds a [`JsonObject`]
//! literal (it lives at the crate root, as every exported macro does).

mod decode;
mod encode;
mod text;
mod value;

pub use decode::{parse_json, parse_json_str, parse_json_unique};
pub use encode::{encode_compact, encode_compact_sorted, encode_indented, encode_line};
pub use value::{BigInt, Json, JsonObject, WideStr};
