//! A run: from the first timer claimed to the moment no claimed timer is left (queued, at the
//! broker or owed its `Reached` mark). While a run lasts, the claim in `dueAt` order resumes
//! after the cursor and every claim is fenced, so that no timer is published twice. Once it
//! ends, the next claim starts again from the first due timer and may take this daemon's own
//! earlier claims again: what is left of them was not published (a failed publish, or a
//! restart under the same name).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::DuePosition;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The cursor: the last timer claimed in `dueAt` order during this run. The next claim in
    /// `dueAt` order takes only timers after it, which keeps its scan short; a timer due before
    /// it is seen again once the run ends (see `rewind`).
    cursor: Option<DuePosition>,
    /// The fence: this daemon's claims whose lease ends at or after this instant were made
    /// during this run, and no claim takes them again (`Store::claim_due_fenced`).
    fence: DateTime<Utc>,
    /// A timer due before the cursor may be waiting (stored due before it, or its publish
    /// failed): once the run ends, claim again at once, from the first due timer.
    rewind: bool,
    /// A claim of this run failed, its outcome unknown (a timeout may hide a commit): what it
    /// claimed is this daemon's, with a lease the fence keeps out of every claim of the run.
    /// No more claims in this run; once it ends, the next claim (unfenced) takes them again
    /// at once rather than after their lease.
    closed: bool,
}

impl Run {
    /// The run begun by a claim decided at `decided_at`, whose lease is `lease`. A claim's
    /// lease ends at its instant plus the lease, to the millisecond, truncated: a millisecond
    /// less is below the lease of every claim of the run.
    pub fn begin(decided_at: DateTime<Utc>, lease: Duration) -> Self {
        let lease = chrono::Duration::from_std(lease).unwrap_or_default();
        Self {
            cursor: None,
            fence: decided_at + lease - chrono::Duration::milliseconds(1),
            rewind: false,
            closed: false,
        }
    }

    pub fn cursor(&self) -> Option<&DuePosition> {
        self.cursor.as_ref()
    }

    pub fn fence(&self) -> DateTime<Utc> {
        self.fence
    }

    /// A claim in `dueAt` order took timers up to `last`.
    pub fn claimed_up_to(&mut self, last: DuePosition) {
        self.cursor = Some(last);
    }

    /// A timer due at `at` was stored: one behind the cursor is not seen by a claim after it.
    pub fn stored_due_at(&mut self, at: DateTime<Utc>) {
        if self
            .cursor
            .as_ref()
            .is_some_and(|cursor| at <= cursor.due_at)
        {
            self.rewind = true;
        }
    }

    /// Timers of this run stay `Scheduled` behind the cursor (their publish failed).
    pub fn rewind(&mut self) {
        self.rewind = true;
    }

    /// A claim of this run failed: no more claims in it, and one from the first due timer once
    /// it ends.
    pub fn close(&mut self) {
        self.closed = true;
        self.rewind = true;
    }

    /// Whether this run takes no more claims (see `closed`).
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Whether the end of this run asks for a claim from the first due timer.
    pub fn rewinds(&self) -> bool {
        self.rewind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + chrono::Duration::seconds(seconds)
    }

    fn position(seconds: i64) -> DuePosition {
        DuePosition {
            due_at: at(seconds),
            tenant_id: "acme".into(),
            service_call_id: "a".into(),
        }
    }

    #[test]
    fn the_fence_is_a_millisecond_below_the_first_claims_lease() {
        let run = Run::begin(at(100), Duration::from_secs(30));
        assert_eq!(run.fence(), at(130) - chrono::Duration::milliseconds(1));
        assert_eq!(run.cursor(), None);
    }

    #[test]
    fn only_a_timer_stored_due_at_or_before_the_cursor_rewinds() {
        let mut run = Run::begin(at(0), Duration::from_secs(30));
        run.stored_due_at(at(5));
        assert!(
            !run.rewinds(),
            "no cursor yet: the next claim reads from the start"
        );
        run.claimed_up_to(position(10));
        run.stored_due_at(at(11));
        assert!(!run.rewinds(), "after the cursor: the next claim sees it");
        run.stored_due_at(at(10));
        assert!(run.rewinds());
    }

    #[test]
    fn a_failed_publish_rewinds() {
        let mut run = Run::begin(at(0), Duration::from_secs(30));
        run.rewind();
        assert!(run.rewinds());
    }

    #[test]
    fn a_failed_claim_closes_the_run_and_rewinds() {
        let mut run = Run::begin(at(0), Duration::from_secs(30));
        assert!(!run.closed());
        run.close();
        assert!(run.closed() && run.rewinds());
    }
}
