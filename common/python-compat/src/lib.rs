//! What the helpers reproduce of CPython 3.11 and its standard library.
//!
//! The helpers replace Python programs whose files, messages and exit
//! statuses stay shared with Python code (install.sh's journal writer, the
//! server, the worker), so wherever an original leans on a Python rule (which
//! text `int()` accepts, how `json.dumps` escapes, what argparse prints, how
//! `http.client` reads a response), the helpers must follow the same rule
//! byte for byte. This crate holds those rules and nothing of the helpers'
//! own domain: it knows Python, not AgentsServer.
//!
//! # Map by concern
//!
//! The exception model:
//! - [`Exception`], [`ErrorClass`], [`DefinedClass`]: a raised exception,
//!   its class and `isinstance` among the classes, `str(exc)`, the errno of
//!   an `OSError` and the traceback's last line; [`exit_status`], how a
//!   Python program ends on an uncaught exception. [`Exception::from_socket`]
//!   and [`Exception::into_url_error`] word socket failures as `socket` and
//!   `urllib` do.
//!
//! Built-in types and functions, at the root:
//! - text (`str.isspace`/`strip`/`split`/`splitlines`, strict decoding with
//!   `UnicodeDecodeError`'s words, `repr`): [`strip`], [`splitlines`],
//!   [`decode_utf8`], [`repr`], ...;
//! - numbers (`int(text)`, `int(text, 16)`, `float(text)`, `f"{x:g}"`):
//!   [`python_int`], [`PythonInt`], [`int_hex`], [`float`], [`format_g`];
//! - `bool()` and `str()` of JSON values: [`truthy`], [`str_or_empty`], ...;
//! - `bytes.hex()` and the originals' lowercase-hex checks: [`hex`],
//!   [`is_lower_hex`]; `secrets.token_hex` over `os.urandom`: [`token_hex`].
//!
//! Standard-library modules, each under its Python name:
//! - [`json`]: `json.loads` and the `json.dumps` styles ([`json_object!`]
//!   builds an object literal);
//! - [`argparse`]: the originals' command lines, their usage and error lines;
//! - [`os`]: the `os` and `stat` functions the originals call, with their
//!   exception classes and words (`os.replace`'s two-path message);
//! - [`path`]: `os.path`/`posixpath` and `pathlib.PurePosixPath`;
//! - [`ipaddress`], [`shlex`], [`uuid`], [`base64`]: the functions of those
//!   modules the originals call;
//! - [`socket`]: `socket.getaddrinfo` with `socket.gaierror`'s code, and a
//!   failed socket operation as Python's socket layer and urllib word it;
//! - [`http_client`]: how `http.client` reads a response (status line,
//!   headers, `Content-Length` and chunked bodies, `IncompleteRead`) and
//!   splits `host:port`;
//! - [`email_utils`]: `parsedate_to_datetime(text).timestamp()`, for HTTP
//!   dates.
//!
//! # Why some modules are public
//!
//! A Python module whose name is part of how the originals spell the call
//! (`json.loads`, `shlex.split`, `uuid.uuid4`, `os.unlink`, `http.client`,
//! `email.utils`, `socket.getaddrinfo`) is a public module of the same name, so a reader finds the
//! original by the path and names like `split` or `resolve` keep the
//! meaning their module gives them. Built-in functions and methods of
//! built-in types (`int()`, `str.strip`, `bytes.hex()`) and the exception
//! model have no module in Python and sit at the root. Every other module is
//! private.

mod exception;
mod hex;
mod int;
mod number;
pub mod os;
mod random;
pub mod socket;
mod text;
mod values;

pub mod argparse;
pub mod base64;
pub mod email_utils;
pub mod http_client;
pub mod ipaddress;
pub mod json;
pub mod path;
pub mod shlex;
pub mod uuid;

pub use exception::{
    exit_status, DefinedClass, ErrorClass, Exception, Result, INJECTED_WRONG_CLASS_ENV,
};
pub use hex::{hex, is_lower_hex, is_prefixed_hex};
pub use int::{int_hex, python_int, PythonInt};
pub use number::{float, format_g, header_int};
pub use random::token_hex;
pub use text::{
    decode_ascii, decode_latin1, decode_utf8, is_space, repr, repr_list, repr_surrogateescape,
    split_whitespace, splitlines, strip, strip_bytes, text_mode,
};
pub use values::{
    equals_bool, in_str_set, loose_int, member_truthy, str_or_empty, strict_int, to_str, truthy,
};
