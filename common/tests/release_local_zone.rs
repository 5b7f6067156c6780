//! A `Retry-After` date without a usable zone is naive in Python and read in
//! the local zone. Its own test binary because it sets `TZ` for the whole
//! process (and so for the oracle it starts).

mod release_support;

use agents_common::{release_rate_limit_delay, HttpStatusError, Json};
use release_support::python_oracle;

#[test]
fn naive_retry_after_dates_are_local_time_like_the_seed() {
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
    for now in [1_699_999_000.0_f64, 1_689_300_000.0] {
        let input: Vec<Json> = dates.iter().map(|date| Json::from(*date)).collect();
        let seed = python_oracle(
            &format!(
                r#"
from email.message import Message
from urllib.error import HTTPError
update_runner.time.time = lambda: {now:?}
out = []
for date in json.load(sys.stdin):
    headers = Message()
    headers["Retry-After"] = date
    out.append(update_runner.release_rate_limit_delay(
        HTTPError("http://127.0.0.1/", 429, "reason", headers, None)))
print(json.dumps(out))
"#
            ),
            &agents_common::encode_compact(&Json::Array(input)).unwrap(),
        );
        let ours: Vec<Json> = dates
            .iter()
            .map(|date| {
                let status = HttpStatusError {
                    code: 429,
                    reason: "reason".to_string(),
                    headers: vec![("retry-after".to_string(), date.to_string())],
                };
                Json::Int(i128::from(release_rate_limit_delay(&status, now).unwrap()))
            })
            .collect();
        assert_eq!(Json::Array(ours.clone()), seed, "now {now}");
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
