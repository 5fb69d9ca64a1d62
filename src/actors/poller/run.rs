//! A run: from the first timer claimed to the moment no claimed timer is left (queued, at the
//! broker or owed its `Reached` mark). While a run lasts, the claim in `dueAt` order resumes
//! after the cursor and every claim is fenced, so that no timer is published twice; a timer
//! stored due at or before the cursor moves the claim's start back to it (`claim_after`). Once
//! the run ends, the next claim starts again from the first due timer and may take this
//! daemon's own earlier claims again: what is left of them was not published (a failed
//! publish, or a restart under the same name).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::DuePosition;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The cursor: the last timer claimed in `dueAt` order during this run. The next claim in
    /// `dueAt` order takes only timers after it, which keeps its scan short.
    cursor: Option<DuePosition>,
    /// The fence: this daemon's claims whose lease ends at or after this instant were made
    /// during this run, and no claim takes them again (`Store::claim_due_fenced`).
    fence: DateTime<Utc>,
    /// A claim of this run failed, its outcome unknown (a timeout may hide a commit), or a
    /// publish did: what it claimed is this daemon's, with a lease the fence keeps out of every
    /// claim of the run. No more claims in this run; once it ends, the next claim (unfenced)
    /// takes them again at once rather than after their lease.
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
            closed: false,
        }
    }

    /// Where the next claim in `dueAt` order starts, given the earliest `dueAt` stored since the
    /// last one was asked: after the cursor, or at that `dueAt` when it is not after the cursor.
    /// Such a timer (a command that reached the daemon late, its `dueAt` past) is not seen by a
    /// claim after the cursor, and under a steady load the run may not end for as long as the
    /// load lasts; the fence keeps this run's own claims out of the rows read again.
    pub fn claim_after(&self, stored: Option<DateTime<Utc>>) -> Option<DuePosition> {
        let cursor = self.cursor.as_ref()?;
        match stored {
            Some(at) if at <= cursor.due_at => Some(DuePosition {
                due_at: at,
                tenant_id: String::new(),
                service_call_id: String::new(),
            }),
            _ => Some(cursor.clone()),
        }
    }

    pub fn fence(&self) -> DateTime<Utc> {
        self.fence
    }

    /// A claim in `dueAt` order took timers up to `last`.
    pub fn claimed_up_to(&mut self, last: DuePosition) {
        self.cursor = Some(last);
    }

    /// A claim of this run failed, or a publish did (its timers stay `Scheduled`, claimed by
    /// this daemon, behind the cursor and inside the fence): no more claims in it, and one from
    /// the first due timer at once when it ends. Closing is what lets that end come: under a
    /// steady load something is always held, and a run that kept claiming would hold its failed
    /// timers back until their lease lapsed (30 s by default).
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Whether this run takes no more claims (see `closed`).
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// Whether the end of this run asks for a claim from the first due timer at once.
    pub fn rewinds(&self) -> bool {
        self.closed
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
        assert_eq!(run.claim_after(None), None);
    }

    #[test]
    fn a_timer_stored_due_at_or_before_the_cursor_moves_the_claims_start_back_to_it() {
        let mut run = Run::begin(at(0), Duration::from_secs(30));
        assert_eq!(
            run.claim_after(Some(at(5))),
            None,
            "no cursor yet: the next claim reads from the start"
        );
        run.claimed_up_to(position(10));
        assert_eq!(run.claim_after(None), Some(position(10)));
        assert_eq!(
            run.claim_after(Some(at(11))),
            Some(position(10)),
            "after the cursor: the claim after it sees it"
        );
        let back = run.claim_after(Some(at(10))).unwrap();
        assert_eq!((back.due_at, back.tenant_id.as_str()), (at(10), ""));
        assert!(
            back < position(10),
            "the start is before every timer due then"
        );
        assert!(!run.rewinds());
    }

    #[test]
    fn a_failure_closes_the_run_and_rewinds() {
        let mut run = Run::begin(at(0), Duration::from_secs(30));
        assert!(!run.closed());
        run.close();
        assert!(run.closed() && run.rewinds());
    }
}
