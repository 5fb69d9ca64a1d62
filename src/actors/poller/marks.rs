//! Published timers owed their `Reached` mark. One mark, one transaction, covers many batches:
//! a transaction per batch cost more than the marks themselves (on PostgreSQL, four round trips
//! each). So while batches are at the broker a mark waits for [`MARK_AT_LEAST`] timers, and once
//! none is, everything owed is marked, so that the run can end (`run`); never more than
//! [`MARK_AT_MOST`] in one mark, and a round of claims stops for a mark once that many are
//! owed. Timers the broker
//! acknowledged but that could not be marked stay owed, and nothing new is claimed before they
//! are marked: claimed again while still `Scheduled`, they would be published again.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::domain::DueTimer;

/// Published timers marked `Reached` together, at least, while batches are at the broker.
pub const MARK_AT_LEAST: usize = 1_000;

/// Published timers one mark covers at most, and owed at most before a round of claims stops
/// for a mark. A mark's time grows with its size: unbounded, a backlog claimed and published
/// in one long round came to a mark of 189,000 timers that outlasted PostgreSQL's operation
/// deadline (15 s), failed, and failed again at every retry, while nothing new was claimed.
pub const MARK_AT_MOST: usize = 5_000;

/// Timers of one batch the broker acknowledged, and what their mark needs.
#[derive(Clone)]
pub struct Fired {
    /// Shared, so that a mark can be retried without copying the batch.
    pub timers: Arc<[DueTimer]>,
    /// The batch's `reachedAt`.
    pub reached_at: DateTime<Utc>,
    /// When the earliest claim of its timers was asked: `timer_polling_duration_seconds` runs
    /// from there to the mark.
    pub started: std::time::Instant,
}

/// A mark's answer: the batches it was given, and how many rows it marked or why it failed.
#[derive(Clone)]
pub struct Marked {
    pub batches: Vec<Fired>,
    pub result: Result<u64, String>,
}

#[derive(Default)]
pub struct Marks {
    /// Acknowledged and not yet marked, oldest first (none empty).
    owed: Vec<Fired>,
    /// The last mark failed: nothing new is claimed before these are marked, and a retry waits
    /// for the backoff.
    failed: bool,
    /// The last call at Persistence was a mark: a round of claims asked for goes before the
    /// next one. Under a backlog a mark is due after every few batches, and on PostgreSQL a mark
    /// of thousands takes hundreds of milliseconds: marks one after another would keep every
    /// claim, the fair claims of the quiet tenants too, waiting behind them.
    marked_last: bool,
}

impl Marks {
    pub fn owe(&mut self, fired: Fired) {
        if !fired.timers.is_empty() {
            self.owed.push(fired);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.owed.is_empty()
    }

    /// Timers owed.
    pub fn timers(&self) -> usize {
        self.owed.iter().map(|f| f.timers.len()).sum()
    }

    pub fn failed(&self) -> bool {
        self.failed
    }

    /// Whether to mark now: [`MARK_AT_LEAST`] or more owed, or any once no batch is at the
    /// broker; after a failed mark, not before its backoff ends.
    pub fn due(&self, batches_at_broker: bool, backing_off: bool) -> bool {
        if self.failed && backing_off {
            return false;
        }
        let owed = self.timers();
        owed >= MARK_AT_LEAST || (owed > 0 && !batches_at_broker)
    }

    /// What is owed, oldest first, for one mark: whole batches, until they hold `at_most`
    /// timers (at least one batch); the rest stays owed for the next mark.
    pub fn take(&mut self, at_most: usize) -> Vec<Fired> {
        self.marked_last = true;
        let mut timers = 0;
        let count = self
            .owed
            .iter()
            .take_while(|fired| {
                let take = timers == 0 || timers + fired.timers.len() <= at_most;
                timers += fired.timers.len();
                take
            })
            .count();
        let rest = self.owed.split_off(count);
        std::mem::replace(&mut self.owed, rest)
    }

    /// Whether a round of claims asked for goes before the mark that is due: the last call was
    /// a mark (so marks and rounds take turns), and that mark did not fail.
    pub fn yields_to_claims(&self) -> bool {
        self.marked_last && !self.failed
    }

    /// A round of claims begins.
    pub fn claims_begin(&mut self) {
        self.marked_last = false;
    }

    /// The mark of `batches` succeeded.
    pub fn marked(&mut self) {
        self.failed = false;
    }

    /// The mark of `batches` failed: they are owed again, before what came since.
    pub fn not_marked(&mut self, mut batches: Vec<Fired>) {
        batches.append(&mut self.owed);
        self.owed = batches;
        self.failed = true;
    }
}

/// What `PersistenceClient::mark_reached` takes: each batch's timers and `reachedAt`.
pub fn keys(batches: &[Fired]) -> Vec<(Arc<[DueTimer]>, DateTime<Utc>)> {
    batches
        .iter()
        .map(|fired| (fired.timers.clone(), fired.reached_at))
        .collect()
}

/// The metrics of a mark that succeeded: rows marked, and each batch's time from claim to mark.
pub fn record(batches: &[Fired], marked: u64) {
    metrics::counter!(crate::telemetry::SCHEDULES_PROCESSED).increment(marked);
    let round = metrics::histogram!(crate::telemetry::POLLING_DURATION);
    for fired in batches {
        round.record(fired.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired(name: &str, count: usize) -> Fired {
        let timers: Vec<DueTimer> = (0..count)
            .map(|i| DueTimer {
                tenant_id: "acme".into(),
                service_call_id: format!("{name}-{i}"),
                correlation_id: String::new(),
                due_at: DateTime::UNIX_EPOCH,
                data: None,
                expires_at: None,
                trace: None,
            })
            .collect();
        Fired {
            timers: timers.into(),
            reached_at: DateTime::UNIX_EPOCH,
            started: std::time::Instant::now(),
        }
    }

    #[test]
    fn marks_wait_for_enough_timers_while_batches_are_at_the_broker() {
        let mut marks = Marks::default();
        assert!(!marks.due(false, false), "nothing owed");
        marks.owe(fired("a", MARK_AT_LEAST - 1));
        marks.owe(fired("empty", 0));
        assert_eq!(marks.timers(), MARK_AT_LEAST - 1);
        assert!(!marks.due(true, false));
        assert!(
            marks.due(false, false),
            "all once no batch is at the broker"
        );
        marks.owe(fired("b", 1));
        assert!(marks.due(true, false));
        assert!(
            marks.due(true, true),
            "a publish's backoff does not hold a mark up"
        );
    }

    #[test]
    fn marks_and_rounds_of_claims_take_turns() {
        let mut marks = Marks::default();
        assert!(!marks.yields_to_claims(), "no mark yet");
        marks.owe(fired("a", MARK_AT_LEAST));
        let batches = marks.take(usize::MAX);
        marks.marked();
        assert!(marks.yields_to_claims(), "after a mark, the round first");
        marks.claims_begin();
        assert!(!marks.yields_to_claims(), "after the round, the mark");
        marks.marked_last = true;
        marks.not_marked(batches);
        assert!(
            !marks.yields_to_claims(),
            "after a failed mark, nothing is claimed before the retry"
        );
    }

    #[test]
    fn a_failed_mark_is_owed_again_first_and_retried_after_the_backoff() {
        let mut marks = Marks::default();
        marks.owe(fired("a", 1));
        let batches = marks.take(usize::MAX);
        assert!(marks.is_empty());
        marks.owe(fired("b", 1));
        marks.not_marked(batches);
        assert!(marks.failed());
        let order: Vec<_> = marks
            .owed
            .iter()
            .map(|f| f.timers[0].service_call_id.clone())
            .collect();
        assert_eq!(order, ["a-0", "b-0"]);
        assert!(!marks.due(false, true), "not while backing off");
        assert!(marks.due(false, false));
        marks.take(usize::MAX);
        marks.marked();
        assert!(!marks.failed());
    }

    #[test]
    fn a_mark_takes_whole_batches_up_to_its_limit_and_leaves_the_rest_owed() {
        let mut marks = Marks::default();
        for name in ["a", "b", "c"] {
            marks.owe(fired(name, 300));
        }
        assert_eq!(marks.take(500).len(), 1, "a second batch would pass 500");
        assert_eq!(marks.take(700).len(), 2);
        assert!(marks.is_empty());
        marks.owe(fired("d", 800));
        assert_eq!(
            marks.take(500).len(),
            1,
            "at least one batch, however large"
        );
    }
}
