//! A timer that may expire (docs/CONTRACT.md §3, §5): a ScheduleTimer's optional `expireAfter`,
//! an ISO 8601 duration, sets a deadline `dueAt + expireAfter`; a firing whose instant is past
//! it publishes `TimerExpired` instead of `DueTimeReached`.
//!
//! The deadline is stored with the timer (`expires_at`), and the decision is made once per
//! firing, by the instant the firing is stamped with (its `reachedAt`, which the mark stores):
//! the event published and the state the API shows afterwards (`Reached` or `Expired`) follow
//! from the same two stored instants, so they cannot disagree.

use chrono::{DateTime, Duration, SubsecRound, TimeZone, Utc};

/// The longest `expireAfter` accepted: ten years of days. Longer is no policy a timer needs,
/// and it keeps `dueAt + expireAfter` far from the end of what a timestamp can hold.
pub const MAX_EXPIRE_AFTER_DAYS: i64 = 3650;

/// Parses `expireAfter`: an ISO 8601 duration of whole days, hours, minutes and seconds
/// (`P1D`, `PT15M`, `PT1H30M`, `PT90S`), as JSON Schema's `duration` format (RFC 3339,
/// appendix A) writes them, at least a second and at most [`MAX_EXPIRE_AFTER_DAYS`] days.
/// Years, months and weeks are refused: a month has no fixed length, and a deadline must be
/// one instant.
pub fn parse_expire_after(text: &str) -> Result<Duration, String> {
    let refuse = |why: &str| {
        Err(format!(
            "expireAfter {text:?} {why}: expected an ISO 8601 duration of days, hours, minutes \
             and seconds such as \"PT15M\", \"PT1H30M\" or \"P1DT12H\""
        ))
    };
    let Some(rest) = text.strip_prefix('P') else {
        return refuse("does not start with P");
    };
    let (date, time) = match rest.split_once('T') {
        Some((_, "")) => return refuse("has T and no time after it"),
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut total_ms: i128 = 0;
    let mut any = false;
    for (part, units) in [
        (date, &[('D', 86_400_000)][..]),
        (time.unwrap_or(""), TIME_UNITS),
    ] {
        let mut part = part;
        let mut allowed = units;
        while !part.is_empty() {
            let end = part
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(part.len());
            let (number, tail) = part.split_at(end);
            let Some(unit) = tail.chars().next() else {
                return refuse("has a number without a unit");
            };
            let Some(at) = allowed.iter().position(|(u, _)| *u == unit) else {
                return refuse(&format!("has the unit {unit:?} out of place or unknown"));
            };
            let per_unit = allowed[at].1;
            if number.is_empty() || number.len() > 12 {
                return refuse(&format!("has {number:?} before {unit:?}"));
            }
            let Ok(amount) = number.parse::<i128>() else {
                return refuse(&format!("has {number:?} before {unit:?}"));
            };
            total_ms += amount * per_unit;
            any = true;
            allowed = &allowed[at + 1..];
            part = &tail[1..];
        }
    }
    if !any {
        return refuse("names no amount");
    }
    if total_ms < 1_000 {
        return refuse("is shorter than a second");
    }
    if total_ms > i128::from(MAX_EXPIRE_AFTER_DAYS) * 86_400_000 {
        return Err(format!(
            "expireAfter {text:?} is longer than {MAX_EXPIRE_AFTER_DAYS} days"
        ));
    }
    Ok(Duration::milliseconds(total_ms as i64))
}

/// The units after `T`, in the order ISO 8601 writes them, in milliseconds.
const TIME_UNITS: &[(char, i128)] = &[('H', 3_600_000), ('M', 60_000), ('S', 1_000)];

/// The deadline of a timer due at `due_at` that may fire at most `expire_after` late, kept
/// within what the fixed-width format can store.
pub fn expires_at(due_at: DateTime<Utc>, expire_after: Duration) -> DateTime<Utc> {
    let last = Utc
        .with_ymd_and_hms(9999, 12, 31, 23, 59, 59)
        .single()
        .map(|t| t + Duration::milliseconds(999));
    let deadline = due_at.checked_add_signed(expire_after);
    match (deadline, last) {
        (Some(deadline), Some(last)) => deadline.min(last),
        (None, Some(last)) => last,
        (deadline, None) => deadline.unwrap_or(due_at),
    }
}

/// Whether a firing stamped `reached_at` comes too late for a deadline: at the millisecond
/// the instant is stored and published with, strictly after it.
pub fn is_expired(expires_at: Option<DateTime<Utc>>, reached_at: DateTime<Utc>) -> bool {
    expires_at.is_some_and(|deadline| reached_at.trunc_subsecs(3) > deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        parse_expire_after(text).unwrap().num_milliseconds()
    }

    #[test]
    fn reads_days_hours_minutes_and_seconds() {
        assert_eq!(ms("PT15M"), 15 * 60_000);
        assert_eq!(ms("PT1H30M"), 90 * 60_000);
        assert_eq!(ms("P1DT12H"), 36 * 3_600_000);
        assert_eq!(ms("P2D"), 2 * 86_400_000);
        assert_eq!(ms("PT1S"), 1_000);
        assert_eq!(ms("PT90S"), 90_000);
        assert_eq!(ms("P3650D"), 3650 * 86_400_000);
    }

    #[test]
    fn refuses_what_is_not_one_fixed_length() {
        for bad in [
            "",
            "P",
            "PT",
            "15M",
            "PT15",
            "P1M",
            "P1Y",
            "P1W",
            "PT1M1H",
            "PT-1S",
            "PT0S",
            "PT0.5S",
            "PT1.5S",
            "PT1.5M",
            "P1.5D",
            "PTS",
            "P1DT",
            "pt15m",
            "PT15M ",
            "P3651D",
            "PT1H1H",
            "P99999999999999D",
        ] {
            let refused = parse_expire_after(bad);
            assert!(refused.is_err(), "{bad:?} gave {refused:?}");
            assert!(refused.unwrap_err().contains("expireAfter"), "{bad:?}");
        }
    }

    #[test]
    fn a_firing_expires_only_strictly_after_the_deadline_at_the_millisecond() {
        let due = Utc.timestamp_millis_opt(1_000_000).unwrap();
        let deadline = expires_at(due, Duration::milliseconds(500));
        let at = |offset_us: i64| due + Duration::microseconds(offset_us);
        assert!(!is_expired(None, at(10_000_000)));
        assert!(!is_expired(Some(deadline), at(500_000)));
        // Stored and published as …500 ms: not after the deadline.
        assert!(!is_expired(Some(deadline), at(500_999)));
        assert!(is_expired(Some(deadline), at(501_000)));
    }

    #[test]
    fn a_deadline_past_the_last_storable_instant_is_that_instant() {
        let due = Utc.with_ymd_and_hms(9999, 12, 31, 0, 0, 0).unwrap();
        let deadline = expires_at(due, Duration::days(3650));
        assert_eq!(
            crate::domain::timestamp::format_utc(deadline),
            "9999-12-31T23:59:59.999Z"
        );
    }
}
