//! A `Retry-After` date without a usable zone is naive in Python and read in
//! the local zone. `TZ` is read by the whole process (and the oracle it
//! starts), so the test runs alone in a child process started with it.

use agents_tests::release_support;

use python_compat::json::Json;
use release_support::{original_rate_limit_delays, RejectedResponse};

use crate::rate_limit_support::port_rate_limit_delay;

/// A POSIX rule needs no zone database: UTC-5, UTC-4 in summer.
const ZONE: &str = "EST5EDT,M3.2.0,M11.1.0";

#[test]
fn naive_retry_after_dates_are_local_time_like_the_original() {
    let originals = agents_tests::require_originals!();
    if !agents_tests::running_alone() {
        let test = agents_tests::test_name!();
        let output = agents_tests::alone(module_path!(), test)
            .env("TZ", ZONE)
            .output()
            .unwrap();
        agents_tests::assert_passed_alone(&output);
        return;
    }
    assert_eq!(std::env::var("TZ").as_deref(), Ok(ZONE));
    let dates = [
        // Naive: -0000, an unknown zone name, no zone at all.
        "Tue, 14 Nov 2023 22:15:00 -0000",
        "Tue, 14 Nov 2023 22:15:00 XYZ",
        "Tue, 14 Nov 2023 22:15:00",
        "Fri, 14 Jul 2023 22:15:00 -0000",
        // Aware, for contrast: +0000 and GMT are UTC wherever we are.
        "Tue, 14 Nov 2023 22:15:00 +0000",
        "Tue, 14 Nov 2023 22:15:00 GMT",
    ];
    let cases: Vec<RejectedResponse> = dates
        .iter()
        .map(|date| (429, vec![("Retry-After", *date)]))
        .collect();
    for now in [1_699_999_000.0_f64, 1_689_300_000.0] {
        let original = original_rate_limit_delays(&originals, &cases, now);
        let ours: Vec<Json> = cases
            .iter()
            .map(|case| port_rate_limit_delay(case, now))
            .collect();
        assert_eq!(ours, original, "now {now}");
        // The zone matters: the naive November date is five hours after the
        // same wall-clock time in UTC (unless both are in the past).
        if now < 1_700_000_000.0 {
            assert_eq!(
                ours[0].as_int().unwrap() - ours[4].as_int().unwrap(),
                5 * 3600
            );
        }
    }
}
