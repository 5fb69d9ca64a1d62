//! The one timestamp format the service stores and puts on the wire: fixed-width ISO 8601 UTC
//! with millisecond precision (`YYYY-MM-DDTHH:MM:SS.sssZ`). Fixed width makes text order equal
//! time order, which is what lets SQLite compare `due_at` as text through an index.

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};

/// Formats an instant as `YYYY-MM-DDTHH:MM:SS.sssZ`.
pub fn format_utc(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Rounds up to the next whole millisecond (an instant already on one stays), so memory and
/// storage agree on every instant and a timer never fires before the instant the client named.
pub fn ceil_to_millis(instant: DateTime<Utc>) -> DateTime<Utc> {
    let nanos = instant.timestamp_subsec_nanos();
    let below_millis = nanos % 1_000_000;
    if below_millis == 0 {
        return instant;
    }
    instant + chrono::Duration::nanoseconds(i64::from(1_000_000 - below_millis))
}

/// Parses a timestamp written by [`format_utc`] (or any RFC 3339 text with a zone).
pub fn parse_stored(text: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(text).map(|t| t.with_timezone(&Utc))
}

/// Parses a client-supplied `dueAt`: RFC 3339 with a zone (`Z` or an offset), converted to UTC
/// and rounded up to the millisecond (docs/CONTRACT.md §3: `…:13.023999Z` is stored as `…:13.024Z`).
/// Years outside 0001–9999 are refused because they cannot be stored in the fixed-width format.
pub fn parse_due_at(text: &str) -> Result<DateTime<Utc>, String> {
    let parsed = DateTime::parse_from_rfc3339(text).map_err(|e| {
        format!("dueAt {text:?} is not an RFC 3339 timestamp with a zone (Z or ±HH:MM): {e}")
    })?;
    let utc = ceil_to_millis(parsed.with_timezone(&Utc));
    let lowest = Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).single();
    let highest = Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).single();
    match (lowest, highest) {
        (Some(lo), Some(hi)) if utc >= lo && utc <= hi + chrono::Duration::milliseconds(999) => {
            Ok(utc)
        }
        _ => Err(format!(
            "dueAt {text:?} is outside the years 0001–9999 once converted to UTC"
        )),
    }
}

/// Milliseconds since the Unix epoch, as the envelope's `timestampMs` carries them.
pub fn epoch_millis(instant: DateTime<Utc>) -> i64 {
    instant.timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_fixed_width_with_millis() {
        let t = parse_due_at("2026-11-22T10:00:00.123+01:00").unwrap();
        assert_eq!(format_utc(t), "2026-11-22T09:00:00.123Z");
        let whole = parse_due_at("2026-11-22T10:00:00Z").unwrap();
        assert_eq!(format_utc(whole), "2026-11-22T10:00:00.000Z");
    }

    #[test]
    fn rounds_a_finer_instant_up_to_the_next_millisecond() {
        let cases = [
            ("2026-11-22T09:30:13.023999Z", "2026-11-22T09:30:13.024Z"),
            ("2026-11-22T09:30:13.023000001Z", "2026-11-22T09:30:13.024Z"),
            ("2026-11-22T09:30:13.023000Z", "2026-11-22T09:30:13.023Z"),
            ("2026-11-22T09:30:13.9995Z", "2026-11-22T09:30:14.000Z"),
            ("2026-12-31T23:59:59.9999+00:00", "2027-01-01T00:00:00.000Z"),
        ];
        for (given, stored) in cases {
            assert_eq!(format_utc(parse_due_at(given).unwrap()), stored, "{given}");
        }
        // Rounding up must not carry an instant past the last storable one.
        assert!(parse_due_at("9999-12-31T23:59:59.9991Z").is_err());
    }

    #[test]
    fn refuses_a_timestamp_without_zone() {
        let err = parse_due_at("2026-11-22T10:00:00").unwrap_err();
        assert!(err.contains("zone"), "{err}");
    }

    #[test]
    fn refuses_years_that_do_not_fit() {
        assert!(parse_due_at("0000-01-01T00:30:00+01:00").is_err());
        assert!(parse_due_at("9999-12-31T23:59:59.999Z").is_ok());
    }

    #[test]
    fn stored_text_round_trips() {
        let t = parse_due_at("2026-01-02T03:04:05.006Z").unwrap();
        assert_eq!(parse_stored(&format_utc(t)).unwrap(), t);
    }

    proptest::proptest! {
        /// Never early: the stored `dueAt` is never before the instant the client wrote, and less
        /// than a millisecond after it, whatever the precision and the offset.
        #[test]
        fn a_stored_due_at_is_never_earlier_than_the_one_given(
            secs in 0i64..253_402_300_798,
            nanos in 0u32..1_000_000_000,
            offset_minutes in -1439i32..1439,
            digits in 0usize..=9,
        ) {
            let instant = Utc.timestamp_opt(secs, nanos).unwrap();
            let zone = chrono::FixedOffset::east_opt(offset_minutes * 60).unwrap();
            let format = match digits {
                0 => SecondsFormat::Secs,
                1..=3 => SecondsFormat::Millis,
                4..=6 => SecondsFormat::Micros,
                _ => SecondsFormat::Nanos,
            };
            let text = instant.with_timezone(&zone).to_rfc3339_opts(format, false);
            let given = parse_stored(&text).unwrap();
            if let Ok(stored) = parse_due_at(&text) {
                proptest::prop_assert!(stored >= given, "{text} stored as {}", format_utc(stored));
                proptest::prop_assert!(stored - given < chrono::Duration::milliseconds(1));
                proptest::prop_assert_eq!(parse_stored(&format_utc(stored)).unwrap(), stored);
            }
        }

        /// Text order of the stored format is time order: the property the polling index needs.
        #[test]
        fn text_order_is_time_order(a in 0i64..253_402_300_799_000, b in 0i64..253_402_300_799_000) {
            let ta = Utc.timestamp_millis_opt(a).unwrap();
            let tb = Utc.timestamp_millis_opt(b).unwrap();
            proptest::prop_assert_eq!(format_utc(ta).cmp(&format_utc(tb)), ta.cmp(&tb));
        }
    }
}
