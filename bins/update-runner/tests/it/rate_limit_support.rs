//! The port's side of the rate-limit comparisons with the original: the
//! runner's own `release_rate_limit_delay`, the code under test, in the shape
//! the oracle (`release_support::original_rate_limit_delays`) prints.

use agents_tests::release_support::RejectedResponse;
use python_compat::json::Json;
use update_runner::release::{release_rate_limit_delay, HttpStatusError};

/// The port's `release_rate_limit_delay` of one response at `now`: an int or
/// null, as the oracle prints it.
pub(crate) fn port_rate_limit_delay((code, headers): &RejectedResponse<'_>, now: f64) -> Json {
    let status = HttpStatusError {
        code: *code,
        reason: "reason".to_string(),
        headers: headers
            .iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value.to_string()))
            .collect(),
    };
    release_rate_limit_delay(&status, now).map_or(Json::Null, |delay| Json::Int(i128::from(delay)))
}
