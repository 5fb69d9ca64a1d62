//! The one timestamp format the service stores and puts on the wire: fixed-width ISO 8601 UTC
//! with millisecond precision (`YYYY-MM-DDTHH:MM:SS.sssZ`). Fixed width makes text order equal
//! time order, which is what lets SQLite compare `due_at` as text through an index.

use chrono::{DateTime, SecondsFormat, TimeZone, Timelike, Utc};

/// Formats an instant as `YYYY-MM-DDTHH:MM:SS.sssZ`.
pub fn format_utc(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Drops everything below the millisecond, so memory and storage agree on every instant.
pub fn truncate_to_millis(instant: DateTime<Utc>) -> DateTime<Utc> {
    let millis = instant.nanosecond() / 1_000_000 * 1_000_000;
    instant.with_nanosecond(millis).unwrap_or(instant)
}

/// Parses a timestamp written by [`format_utc`] (or any RFC 3339 text with a zone).
pub fn parse_stored(text: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    DateTime::parse_from_rfc3339(text).map(|t| t.with_timezone(&Utc))
}

/// Parses a client-supplied `dueAt`: RFC 3339 with a zone (`Z` or an offset), converted to UTC
/// and truncated to the millisecond. Years outside 0001–9999 are refused because they cannot be
/// stored in the fixed-width format.
pub fn parse_due_at(text: &str) -> Result<DateTime<Utc>, String> {
    let parsed = DateTime::parse_from_rfc3339(text).map_err(|e| {
        format!("dueAt {text:?} is not an RFC 3339 timestamp with a zone (Z or ±HH:MM): {e}")
    })?;
    let utc = parsed.with_timezone(&Utc);
    let lowest = Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).single();
    let highest = Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).single();
    match (lowest, highest) {
        (Some(lo), Some(hi)) if utc >= lo && utc <= hi + chrono::Duration::milliseconds(999) => {
            Ok(truncate_to_millis(utc))
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
        let t = parse_due_at("2026-11-22T10:00:00.1234+01:00").unwrap();
        assert_eq!(format_utc(t), "2026-11-22T09:00:00.123Z");
        let whole = parse_due_at("2026-11-22T10:00:00Z").unwrap();
        assert_eq!(format_utc(whole), "2026-11-22T10:00:00.000Z");
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
        /// Text order of the stored format is time order: the property the polling index needs.
        #[test]
        fn text_order_is_time_order(a in 0i64..253_402_300_799_000, b in 0i64..253_402_300_799_000) {
            let ta = Utc.timestamp_millis_opt(a).unwrap();
            let tb = Utc.timestamp_millis_opt(b).unwrap();
            proptest::prop_assert_eq!(format_utc(ta).cmp(&format_utc(tb)), ta.cmp(&tb));
        }
    }
}
