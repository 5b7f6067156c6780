//! Python compatibility, in one place: the rules of the Python standard
//! library that decide what the seeds accept, refuse and print, reproduced
//! exactly because the files and messages are shared with Python code.
//!
//! - [`text`] — `str.isspace`/`strip`/`split`/`splitlines`, strict decoding
//!   with `UnicodeDecodeError`'s wording, `repr`;
//! - [`int`](mod@int) — `int(text)` (argparse's `type=int`) and `int(text, 16)`;
//! - [`values`] — `bool()`/`str()` of JSON values;
//! - [`path`] — `pathlib`/`posixpath` normalisation and `resolve`;
//! - [`ip`] — `ipaddress.ip_address`;
//! - [`base64`] — `base64.b64decode(validate=True)`;
//! - [`shlex`] — `shlex.split`;
//! - [`uuid`] — `uuid4`, `uuid5(NAMESPACE_URL)`, `uuid.UUID(text)`;
//! - [`hex`](mod@hex) — `bytes.hex()` and the seeds' lowercase-hex shape checks;
//! - [`random`] — `os.urandom` and `secrets.token_hex`.
//!
//! Exception class names live with the crate's error type
//! ([`crate::error::ErrorClass::python_name`]).

pub mod base64;
pub mod hex;
pub mod int;
pub mod ip;
pub mod number;
pub mod path;
pub mod random;
pub mod shlex;
pub mod text;
pub mod uuid;
pub mod values;

pub use hex::{hex, is_lower_hex, is_prefixed_hex};
pub use int::python_int as int;
pub use random::token_hex;
pub use shlex::shlex_split;
pub use text::{decode_utf8, repr, strip};
pub use uuid::{uuid4, uuid5_url, uuid_text};
pub use values::{str_or_empty, truthy};
