//! `email.utils.parsedate_to_datetime(text).timestamp()`: the lenient
//! RFC 2822 reader `urllib`'s callers use for HTTP dates (`Retry-After`).
//!
//! A date whose zone is `-0000` or a name email.utils does not know is
//! naive in Python, and `timestamp()` reads it in the local zone (`TZ`,
//! `/etc/localtime`); so does this reader, through `mktime(3)`.

use crate::int::python_int;

/// `parsedate_to_datetime(text).timestamp()` (email.utils' lenient RFC 2822
/// reader): `None` where Python raises `ValueError`.
pub fn parsedate_to_timestamp(text: &str) -> Option<f64> {
    const MONTHS: [&str; 24] = [
        "jan",
        "feb",
        "mar",
        "apr",
        "may",
        "jun",
        "jul",
        "aug",
        "sep",
        "oct",
        "nov",
        "dec",
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    let mut data: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    if data.is_empty() {
        return None;
    }
    // A leading day name, with or without its comma, is skipped.
    if data[0].ends_with(',') || DAYS.contains(&data[0].to_lowercase().as_str()) {
        data.remove(0);
    } else if let Some(comma) = data[0].rfind(',') {
        data[0] = data[0][comma + 1..].to_string();
    }
    if data.len() == 3 {
        // RFC 850: `dd-mon-yy hh:mm:ss zone`.
        let stuff: Vec<String> = data[0].split('-').map(str::to_string).collect();
        if stuff.len() == 3 {
            let rest = data.split_off(1);
            data = stuff.into_iter().chain(rest).collect();
        }
    }
    if data.len() == 4 {
        let last = data[3].clone();
        let sign = last.find('+').or_else(|| last.find('-'));
        match sign {
            Some(index) if index > 0 => {
                data[3] = last[..index].to_string();
                data.push(last[index..].to_string());
            }
            _ => data.push(String::new()),
        }
    }
    if data.len() < 5 {
        return None;
    }
    let [mut dd, mut mm, mut yy, mut tm, mut tz] =
        <[String; 5]>::try_from(data[..5].to_vec()).ok()?;
    if dd.is_empty() || mm.is_empty() || yy.is_empty() {
        return None;
    }
    mm = mm.to_lowercase();
    if !MONTHS.contains(&mm.as_str()) {
        (dd, mm) = (mm, dd.to_lowercase());
        if !MONTHS.contains(&mm.as_str()) {
            return None;
        }
    }
    let month = MONTHS.iter().position(|name| *name == mm)? % 12 + 1;
    if dd.ends_with(',') {
        dd.pop();
    }
    if yy.find(':').is_some_and(|index| index > 0) {
        std::mem::swap(&mut yy, &mut tm);
    }
    if yy.ends_with(',') {
        yy.pop();
        if yy.is_empty() {
            return None;
        }
    }
    if !yy.chars().next()?.is_ascii_digit() {
        std::mem::swap(&mut yy, &mut tz);
    }
    if tm.ends_with(',') {
        tm.pop();
    }
    let mut clock: Vec<&str> = tm.split(':').collect();
    if clock.len() == 1 && tm.contains('.') {
        clock = tm.split('.').collect();
        if !(2..=3).contains(&clock.len()) {
            return None;
        }
    }
    let (hour, minute, second) = match clock.as_slice() {
        [hour, minute] => (*hour, *minute, "0"),
        [hour, minute, second] => (*hour, *minute, *second),
        _ => return None,
    };
    let int = |text: &str| python_int(text);
    let mut year = int(&yy)?;
    let day = int(&dd)?;
    let (hour, minute, second) = (int(hour)?, int(minute)?, int(second)?);
    if year < 100 {
        year += if year > 68 { 1900 } else { 2000 };
    }
    let zone = zone_offset_seconds(&tz.to_uppercase());
    let month = month as i128;
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let valid = (1..=9999).contains(&year)
        && (1..=month_days[(month - 1) as usize]).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..60).contains(&second)
        && zone.is_none_or(|offset| offset.abs() < 86_400);
    if !valid {
        return None;
    }
    let Some(offset_seconds) = zone else {
        return local_timestamp(year, month, day, hour, minute, second);
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_seconds;
    Some(seconds as f64)
}

/// `datetime(...).timestamp()` of a naive date: the wall-clock time in the
/// local zone, daylight saving decided by the zone rules (`tm_isdst = -1`).
fn local_timestamp(
    year: i128,
    month: i128,
    day: i128,
    hour: i128,
    minute: i128,
    second: i128,
) -> Option<f64> {
    let field = |value: i128| libc::c_int::try_from(value).ok();
    // SAFETY: an all-zero `tm` is a valid value (its zone name pointer is
    // null, which mktime never reads); mktime only writes the struct we own.
    let mut broken_down: libc::tm = unsafe { std::mem::zeroed() };
    broken_down.tm_year = field(year - 1900)?;
    broken_down.tm_mon = field(month - 1)?;
    broken_down.tm_mday = field(day)?;
    broken_down.tm_hour = field(hour)?;
    broken_down.tm_min = field(minute)?;
    broken_down.tm_sec = field(second)?;
    broken_down.tm_isdst = -1;
    // SAFETY: `broken_down` is a valid, exclusively borrowed `tm`.
    let seconds = unsafe { libc::mktime(&mut broken_down) };
    // -1 is also a valid instant (one second before the epoch), which no
    // Retry-After date names; Python raises OverflowError where mktime fails.
    (seconds != -1).then_some(seconds as f64)
}

/// The zone of an RFC 2822 date in seconds east of UTC: the named zones
/// email.utils knows and `+hhmm`/`-hhmm`; `None` (a naive date) for `-0000`
/// and for anything else, as `_parsedate_tz` decides.
fn zone_offset_seconds(zone: &str) -> Option<i128> {
    let hhmm: i128 = match zone {
        "UT" | "UTC" | "GMT" | "Z" => 0,
        "AST" => -400,
        "ADT" => -300,
        "EST" => -500,
        "EDT" => -400,
        "CST" => -600,
        "CDT" => -500,
        "MST" => -700,
        "MDT" => -600,
        "PST" => -800,
        "PDT" => -700,
        other => match python_int(other) {
            Some(0) if other.starts_with('-') => return None,
            Some(hhmm) => hhmm,
            None => return None,
        },
    };
    let sign = hhmm.signum();
    let magnitude = hhmm.abs();
    Some(sign * ((magnitude / 100) * 3600 + (magnitude % 100) * 60))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm).
fn days_from_civil(year: i128, month: i128, day: i128) -> i128 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_parse_like_email_utils() {
        // Sun, 06 Nov 1994 08:49:37 GMT
        let exact = 784_111_777.0;
        for (text, expected) in [
            ("Sun, 06 Nov 1994 08:49:37 GMT", exact),
            ("Sunday, 06-Nov-94 08:49:37 GMT", exact),
            ("06 Nov 1994 08:49:37 +0000", exact),
            ("Sun,06 Nov 1994 08:49:37 GMT", exact),
            ("Nov 06 1994 08:49:37 GMT", exact),
            ("06 Nov 1994 09:49:37 +0100", exact),
            ("06 Nov 1994 03:49:37 EST", exact),
            ("06 November 1994 08:49 GMT", exact - 37.0),
        ] {
            assert_eq!(parsedate_to_timestamp(text), Some(expected), "{text}");
        }
        for bad in [
            "",
            "tomorrow",
            "32 Nov 1994 08:49:37 GMT",
            "06 Nov 1994 24:00:00 GMT",
            "06 Foo 1994 08:49:37",
        ] {
            assert_eq!(parsedate_to_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
    }
}
