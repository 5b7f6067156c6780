//! `update-handoff`: releases a split worker's sealed maintenance handoff
//! after a failed update, before the installer runs (the port of
//! `update_handoff.py`).
//!
//! Success prints the result object on one line (sorted keys) and exits 0;
//! a refusal prints one `Class: message` line on stderr and exits 1. Neither
//! changes a file, a status or a process; only a release whose reply was lost
//! may have taken effect in the worker (`retry-failed` then acknowledges it).
//!
//! # Map by concern
//!
//! - `cli`: the two subcommands ([`Args`], [`SPEC`]) and where the expected
//!   status comes from; the release itself is the shared handoff of
//!   `agents_common` (`release_existing_handoff`, `retry_failed_handoff`).

mod cli;

use std::io::{self, Read, Write};
use std::path::Path;

use agents_common::{
    read_regular_file, release_existing_handoff, retry_failed_handoff, BoundedRead, Error, Leaf,
    Result, MAX_CONFIG_BYTES,
};
use python_compat::json::{encode_line, parse_json, Json};

pub use cli::{Args, SPEC};

use cli::StatusSource;

/// Runs one command and prints its result line; the error is the one line
/// `exit_status` prints.
pub fn run(args: Args) -> Result<()> {
    let released = match args {
        Args::Release { root, handoff_file } => {
            release_existing_handoff(&root, &handoff_file, None, None)?
        }
        Args::RetryFailed {
            root,
            status_file,
            expected_status,
        } => {
            let expected = expected_status_json(&expected_status)?;
            retry_failed_handoff(&root, &status_file, &expected, None, None)?
        }
    };
    let line = encode_line(&released.to_json(), true) + "\n";
    let mut stdout = io::stdout().lock();
    stdout.write_all(line.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// The caller's snapshot of the failed status: JSON from a file or stdin,
/// bounded like every status file the helpers read. A FIFO or device path
/// is refused rather than waited on.
fn expected_status_json(source: &StatusSource) -> Result<Json> {
    let too_large = || Error::value("expected failed status exceeds 1 MiB");
    let data = match source {
        StatusSource::Stdin => {
            let mut data = Vec::new();
            io::stdin()
                .lock()
                .take(MAX_CONFIG_BYTES + 1)
                .read_to_end(&mut data)
                .map_err(|err| Error::from_io_path(&err, Path::new("-")))?;
            if data.len() as u64 > MAX_CONFIG_BYTES {
                return Err(too_large());
            }
            data
        }
        StatusSource::File(path) => {
            match read_regular_file(path, MAX_CONFIG_BYTES, Leaf::Follow)? {
                BoundedRead::Contents(data) => data,
                BoundedRead::NotRegular => {
                    return Err(Error::value("expected failed status is not a regular file"))
                }
                BoundedRead::TooLarge => return Err(too_large()),
            }
        }
    };
    Ok(parse_json(&data)?)
}
