//! `candidate_api_contract`: the `API_CONTRACT_VERSION` a candidate's
//! `agent_server.py` declares, read without ever running its code.
//!
//! The original reads the file's bytes and collects, from
//! `ast.parse(source).body`, every module-level `Assign` with a target that
//! is the bare name `API_CONTRACT_VERSION` and a value that is an
//! `ast.Constant`, and requires exactly one, a positive int, which it
//! prints. Assignments with any other value (`-1`, `f()`, `1 + 1`, an
//! f-string) are not collected at all. [`python_source`] reproduces
//! `ast.parse` on bytes (decoding, tokenizer, grammar, literal checks), so a
//! source Python refuses is refused here with the same `Class: message`
//! line, and the `SyntaxWarning` lines Python prints while parsing are
//! printed on stderr first.

use std::path::Path;

use agents_common::{read_owned_config, Error, Result, ACTIVATION_CONFIG_LIMIT};
use python_compat::ErrorClass;

use python_source::{Constant, Refusal};

const NAME: &str = "API_CONTRACT_VERSION";
const REFUSAL: &str = "candidate API contract is not one positive literal integer";
/// `sys.get_int_max_str_digits()`: `print` refuses longer integers.
const MAX_STR_DIGITS: usize = 4300;

/// `candidate-api-contract`: the one literal `API_CONTRACT_VERSION` a
/// candidate's `agent_server.py` declares (in decimal, as `print` writes
/// it), read without running it, so install.sh can refuse a candidate the
/// running server cannot talk to. Ports `candidate_api_contract(candidate)`.
pub(crate) fn candidate_api_contract(candidate: &Path) -> Result<String> {
    let source = read_owned_config(&candidate.join("agent_server.py"), ACTIVATION_CONFIG_LIMIT)?;
    let parsed = parse_or_refuse(&source);
    for line in &parsed.warnings {
        eprintln!("{line}");
    }
    contract(parsed.outcome)
}

/// The refusal a parser bug ends the process with.
const PARSER_FAILED: &str =
    "RuntimeError: candidate API contract could not be read: the port's parser failed on this source";

/// [`python_source::module_constants`], with any panic of the parser (a bug
/// a hostile `agent_server.py` could reach) ending the process as every
/// refusal does: one line on stderr and exit 1. Under `panic = "abort"` the
/// hook runs before the abort would, so SIGABRT never happens; nothing has
/// been written or printed yet that a half-finished exit could leave.
fn parse_or_refuse(source: &[u8]) -> python_source::Parsed {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{PARSER_FAILED}");
        std::process::exit(1);
    }));
    let parsed = python_source::module_constants(source, NAME);
    std::panic::set_hook(previous);
    parsed
}

fn contract(outcome: std::result::Result<Vec<Constant>, Refusal>) -> Result<String> {
    let values = match outcome {
        Ok(values) => values,
        Err(Refusal::Python(error)) => return Err(error.into()),
        Err(Refusal::UnsupportedEncoding(name)) => {
            return Err(Error::value(format!(
                "candidate agent_server.py declares the source encoding '{name}', which this port does not decode"
            )))
        }
    };
    match values.as_slice() {
        [Constant::Int(digits)] if digits != "0" => {
            if digits.len() > MAX_STR_DIGITS {
                return Err(Error::new(
                    ErrorClass::Value,
                    format!("Exceeds the limit ({MAX_STR_DIGITS} digits) for integer string conversion; use sys.set_int_max_str_digits() to increase the limit"),
                ));
            }
            Ok(digits.clone())
        }
        _ => Err(Error::runtime(REFUSAL)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(source: &[u8]) -> std::result::Result<String, String> {
        let parsed = python_source::module_constants(source, NAME);
        contract(parsed.outcome).map_err(|error| error.python_line())
    }

    // Expected values: the original's `ast` comprehension and its refusal on
    // CPython 3.11, for the same source.
    #[test]
    fn only_constant_module_level_assignments_count() {
        let refused = || Err(format!("RuntimeError: {REFUSAL}"));
        for (source, expected) in [
            ("API_CONTRACT_VERSION = 3\n", Ok("3")),
            ("API_CONTRACT_VERSION = 0x1_0  # c\n", Ok("16")),
            ("A = API_CONTRACT_VERSION = (4)\n", Ok("4")),
            ("(API_CONTRACT_VERSION) = 5\n", Ok("5")),
            ("x = 1; API_CONTRACT_VERSION = 6\n", Ok("6")),
            ("API_CONTRACT_VERSION = ((5))\n", Ok("5")),
            ("API_CONTRACT_VERSION = 1_000\n", Ok("1000")),
            ("API_CONTRACT_VERSION = 0b11\n", Ok("3")),
            ("API_CONTRACT_VERSION = 0o17\n", Ok("15")),
            ("ＡPI_CONTRACT_VERSION = 9\n", Ok("9")),
            (
                "API_CONTRACT_VERSION = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF\n",
                Ok("87112285931760246646623899502532662132735"),
            ),
            ("API_CONTRACT_VERSION = \\\n  7\n", Ok("7")),
            ("match = 1\nAPI_CONTRACT_VERSION = 8\n", Ok("8")),
            (
                "match x:\n    case 1:\n        API_CONTRACT_VERSION = 9\nAPI_CONTRACT_VERSION = 10\n",
                Ok("10"),
            ),
            ("\u{feff}API_CONTRACT_VERSION = 2\r\n", Ok("2")),
        ] {
            assert_eq!(outcome(source.as_bytes()), expected.map(String::from), "{source:?}");
        }
        for source in [
            "API_CONTRACT_VERSION = 3.0\n",
            "API_CONTRACT_VERSION = True\n",
            "API_CONTRACT_VERSION = 'a' \"b\"\n",
            "API_CONTRACT_VERSION = 2j\n",
            "API_CONTRACT_VERSION = b'x'\n",
            "API_CONTRACT_VERSION = ...\n",
            "API_CONTRACT_VERSION = 0\n",
            "API_CONTRACT_VERSION = 3\nAPI_CONTRACT_VERSION = 4\n",
            "API_CONTRACT_VERSION = -1\n",
            "API_CONTRACT_VERSION = f'{3}'\n",
            "API_CONTRACT_VERSION = f'3'\n",
            "API_CONTRACT_VERSION = int('3')\n",
            "API_CONTRACT_VERSION = 1 + 1\n",
            "API_CONTRACT_VERSION = (3,)\n",
            "API_CONTRACT_VERSION: int = 3\n",
            "API_CONTRACT_VERSION += 3\n",
            "API_CONTRACT_VERSION, B = 3, 4\n",
            "if True:\n    API_CONTRACT_VERSION = 3\n",
            "if True: API_CONTRACT_VERSION = 3\n",
            "def f(): API_CONTRACT_VERSION = 3\n",
            "class C:\n    API_CONTRACT_VERSION = 3\n",
            "x = '''\nAPI_CONTRACT_VERSION = 3\n'''\n",
            "# API_CONTRACT_VERSION = 3\n",
            "API_CONTRACT_VERSION == 3\n",
            "[API_CONTRACT_VERSION] = [3]\n",
            "API_CONTRACT_VERSION = ()\n",
        ] {
            assert_eq!(outcome(source.as_bytes()), refused(), "{source:?}");
        }
    }

    // CPython 3.11.7, ast.parse called three Python frames deep as the original
    // calls it: 2985 nested unary minus pass, 2986 do not.
    #[test]
    fn nesting_stops_where_python_does() {
        let run = |depth: usize| {
            let source = format!("x = {}1\nAPI_CONTRACT_VERSION = 7\n", "-".repeat(depth));
            contract(python_source::module_constants(source.as_bytes(), NAME).outcome)
                .map_err(|error| error.python_line())
        };
        assert_eq!(run(2985), Ok("7".into()));
        assert_eq!(
            run(2986),
            Err("RecursionError: maximum recursion depth exceeded during ast construction".into())
        );
    }

    #[test]
    fn codecs_the_port_lacks_are_named() {
        assert_eq!(
            outcome(b"# -*- coding: shift_jis -*-\nAPI_CONTRACT_VERSION = 7\n"),
            Err("ValueError: candidate agent_server.py declares the source encoding 'shift_jis', which this port does not decode".into())
        );
    }

    #[test]
    fn huge_contracts_print_as_python_would() {
        let digits = "9".repeat(4300);
        assert_eq!(
            outcome(format!("API_CONTRACT_VERSION = {digits}\n").as_bytes()),
            Ok(digits.clone())
        );
        // 0x1 followed by 3572 zero nibbles is above 10**4300.
        let hex = format!("API_CONTRACT_VERSION = 0x1{}\n", "0".repeat(3572));
        assert_eq!(
            outcome(hex.as_bytes()),
            Err("ValueError: Exceeds the limit (4300 digits) for integer string conversion; use sys.set_int_max_str_digits() to increase the limit".into())
        );
    }
}
