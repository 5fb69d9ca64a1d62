//! The `stats` forecast (docs/CONTRACT.md §6): how many of a tenant's pending timers fall due in
//! each of the next minutes. No I/O: this decides the ranges of `dueAt` to count, storage
//! counts each, and this puts the counts back on their minutes.
//!
//! The forecast counts what is still to come: timers due from now on. One whose `dueAt` has
//! passed is firing or overdue, and `stats` counts it already (`scheduled`, `overdue`); in the
//! forecast too it would be counted twice, and in a minute that is not ahead.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use schemars::JsonSchema;
use serde::Serialize;

use super::schema_types;
use super::timestamp::{ceil_to_millis, format_utc};

/// Longest forecast: a day of minutes.
pub const MAX_FORECAST_MINUTES: u32 = 1440;

/// Longest forecast by hour (the console's): a week.
pub const MAX_FORECAST_HOURS: u32 = 168;

/// The spans one forecast covers: `minutes` whole steps (minutes for `stats`, hours for the
/// console's week) from the one `now` is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForecastWindow {
    now: DateTime<Utc>,
    first_minute: DateTime<Utc>,
    minutes: u32,
    step: TimeDelta,
}

/// One minute of a forecast: timers due within it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ForecastMinute {
    /// The minute's first instant.
    #[serde(serialize_with = "instant")]
    #[schemars(with = "schema_types::UtcInstant")]
    pub minute: DateTime<Utc>,
    pub due: u64,
}

impl ForecastWindow {
    /// The window of `minutes` (1 to [`MAX_FORECAST_MINUTES`], checked by the request's parser)
    /// starting with the minute `now` is in.
    pub fn new(now: DateTime<Utc>, minutes: u32) -> Self {
        Self::of_steps(now, minutes, TimeDelta::minutes(1))
    }

    /// The window of `hours` (1 to [`MAX_FORECAST_HOURS`]) starting with the hour `now` is in;
    /// each entry's `minute` is its hour's first instant.
    pub fn hours(now: DateTime<Utc>, hours: u32) -> Self {
        Self::of_steps(now, hours.min(MAX_FORECAST_HOURS), TimeDelta::hours(1))
    }

    fn of_steps(now: DateTime<Utc>, steps: u32, step: TimeDelta) -> Self {
        let first_minute = now.duration_trunc(step).unwrap_or(now);
        Self {
            now,
            first_minute,
            minutes: steps,
            step,
        }
    }

    /// The range of `dueAt` each minute counts, in order: from its first instant (inclusive) to
    /// the next minute's (exclusive), except that the first starts now (to the millisecond
    /// `dueAt` is kept in), since what is already due is not forecast.
    pub fn ranges(&self) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        (0..self.minutes)
            .map(|i| {
                let start = self.minute(i);
                let from = if i == 0 {
                    ceil_to_millis(self.now)
                } else {
                    start
                };
                (from, self.minute(i + 1))
            })
            .collect()
    }

    /// One entry per minute, in order, each with the count storage found for its range (by the
    /// range's position in [`Self::ranges`]); zero for a range it did not name.
    pub fn fill(&self, counts: impl IntoIterator<Item = (usize, u64)>) -> Vec<ForecastMinute> {
        let mut minutes: Vec<ForecastMinute> = (0..self.minutes)
            .map(|i| ForecastMinute {
                minute: self.minute(i),
                due: 0,
            })
            .collect();
        for (index, due) in counts {
            if let Some(entry) = minutes.get_mut(index) {
                entry.due += due;
            }
        }
        minutes
    }

    /// The first instant of the `i`-th step.
    fn minute(&self, i: u32) -> DateTime<Utc> {
        self.first_minute + self.step * i as i32
    }
}

fn instant<S: serde::Serializer>(
    instant: &DateTime<Utc>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_utc(*instant))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::timestamp::parse_stored;

    fn at(text: &str) -> DateTime<Utc> {
        parse_stored(text).unwrap()
    }

    fn shown(ranges: &[(DateTime<Utc>, DateTime<Utc>)]) -> Vec<(String, String)> {
        ranges
            .iter()
            .map(|(from, to)| (format_utc(*from), format_utc(*to)))
            .collect()
    }

    #[test]
    fn a_forecast_by_hour_counts_from_now_then_whole_hours() {
        let window = ForecastWindow::hours(at("2026-11-24T23:58:42.123Z"), 2);
        assert_eq!(
            shown(&window.ranges()),
            [
                (
                    "2026-11-24T23:58:42.123Z".into(),
                    "2026-11-25T00:00:00.000Z".into()
                ),
                (
                    "2026-11-25T00:00:00.000Z".into(),
                    "2026-11-25T01:00:00.000Z".into()
                ),
            ]
        );
        assert_eq!(
            ForecastWindow::hours(at("2026-11-24T23:58:42.123Z"), 1000)
                .ranges()
                .len(),
            MAX_FORECAST_HOURS as usize
        );
    }

    #[test]
    fn the_first_minute_counts_from_now_the_others_whole() {
        let window = ForecastWindow::new(at("2026-11-24T23:58:42.1234567Z"), 3);
        assert_eq!(
            shown(&window.ranges()),
            [
                (
                    "2026-11-24T23:58:42.124Z".into(),
                    "2026-11-24T23:59:00.000Z".into()
                ),
                (
                    "2026-11-24T23:59:00.000Z".into(),
                    "2026-11-25T00:00:00.000Z".into()
                ),
                (
                    "2026-11-25T00:00:00.000Z".into(),
                    "2026-11-25T00:01:00.000Z".into()
                ),
            ]
        );
        let on_the_minute = ForecastWindow::new(at("2026-11-24T10:05:00Z"), 1);
        assert_eq!(
            shown(&on_the_minute.ranges()),
            [(
                "2026-11-24T10:05:00.000Z".into(),
                "2026-11-24T10:06:00.000Z".into()
            )]
        );
        assert_eq!(
            ForecastWindow::new(at("2026-11-24T10:05:00Z"), MAX_FORECAST_MINUTES)
                .ranges()
                .len(),
            1440
        );
    }

    #[test]
    fn each_minute_gets_its_count_and_a_minute_with_none_reads_zero() {
        let window = ForecastWindow::new(at("2026-11-24T23:58:30Z"), 4);
        let forecast = window.fill([(3, 5), (0, 2), (9, 7)]);
        let entries: Vec<(String, u64)> = forecast
            .iter()
            .map(|m| (format_utc(m.minute), m.due))
            .collect();
        assert_eq!(
            entries,
            [
                ("2026-11-24T23:58:00.000Z".to_owned(), 2),
                ("2026-11-24T23:59:00.000Z".to_owned(), 0),
                ("2026-11-25T00:00:00.000Z".to_owned(), 0),
                ("2026-11-25T00:01:00.000Z".to_owned(), 5),
            ]
        );
        assert_eq!(
            serde_json::to_value(&forecast[0]).unwrap(),
            serde_json::json!({ "minute": "2026-11-24T23:58:00.000Z", "due": 2 })
        );
    }
}
