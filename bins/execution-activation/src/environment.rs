//! `environment_file`: the runtime env file (`<config>/env`) as the split
//! units' environment.
//!
//! install.sh writes the file; the units receive its assignments as
//! `Environment=` lines. Generated values are historically unquoted, spaces
//! included, so only explicit quoting is decoded, and nothing is ever
//! evaluated (no substitutions, no code).

use std::path::Path;

use agents_common::{
    is_variable_name, read_guarded, Error, ReadPolicy, Result, ACTIVATION_CONFIG_LIMIT,
};
use python_compat::{decode_utf8, is_space, json::JsonObject, shlex, splitlines, strip};

/// `environment_file(path)`: the `KEY=value` assignments of the private
/// runtime env file, in file order (a repeated key keeps its first position
/// and its last value, like a dict).
pub fn runtime_environment(path: &Path) -> Result<JsonObject> {
    let data = read_guarded(path, ACTIVATION_CONFIG_LIMIT, ReadPolicy::PRIVATE)?.data;
    let mut result = JsonObject::new();
    for line in splitlines(decode_utf8(&data)?) {
        if strip(line).is_empty() || line.trim_start_matches(is_space).starts_with('#') {
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((key, value)) if is_variable_name(key) => (key, value),
            _ => {
                return Err(Error::value(
                    "runtime environment is not a supported assignment file",
                ))
            }
        };
        let value = if value.starts_with(['"', '\'']) {
            match shlex::split(value)?.as_slice() {
                [word] => word.clone(),
                _ => return Err(Error::value("runtime environment quoting is invalid")),
            }
        } else {
            value.to_string()
        };
        result.insert(key, value);
    }
    Ok(result)
}
