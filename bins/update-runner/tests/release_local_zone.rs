//! A `Retry-After` date without a usable zone is naive in Python and read in
//! the local zone. Its own test binary because it sets `TZ` for the whole
//! process (and so for the oracle it starts).

use agents_tests::release_support;

use python_compat::json::Json;
use release_support::{port_rate_limit_delay, seed_rate_limit_delays, RejectedResponse};

#[test]
fn naive_retry_after_dates_are_local_time_like_the_seed() {
    let originals = agents_tests::require_originals!();
    // A POSIX rule needs no zone database: UTC-5, UTC-4 in summer.
    std::env::set_var("TZ", "EST5EDT,M3.2.0,M11.1.0");
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
        let seed = seed_rate_limit_delays(&originals, &cases, now);
        let ours: Vec<Json> = cases
            .iter()
            .map(|case| port_rate_limit_delay(case, now))
            .collect();
        assert_eq!(ours, seed, "now {now}");
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
