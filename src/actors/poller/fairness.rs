//! When the Poller makes a fair claim, and for whom (docs/CONTRACT.md §9). The claim in `dueAt`
//! order serves tenants by `dueAt`, so one tenant's burst due at one instant would stand in front
//! of every other tenant's timers. While a backlog lasts, a fair claim (`storage::fair`) takes,
//! at most every [`FAIR_EVERY`], an equal share of [`FAIR_CLAIM`] due timers among the tenants
//! that have none held (queued or at the broker), each tenant's earliest first: the burst makes
//! its own tenant late, not another's timer due a moment after. Tenants with timers held are
//! skipped (the claim would only step over their claimed rows). The walk over the tenants is
//! bounded per claim, so the next one goes on where the last stopped, and from the first tenant
//! again once a run ends (`run`).
//!
//! A fair claim waits for the one write under way on its connection. While other tenants are
//! served beside a backlog (a fair claim took timers within [`SHARING_MEMORY`]), the Poller's
//! other writes stay short for them where a write's time grows with its rows: a claim in
//! `dueAt` order takes [`SHARING_CLAIM`] timers instead of thousands, and a mark as many
//! (`marks`). That is always so on PostgreSQL (`DatabaseTarget::short_writes_while_sharing`),
//! and elsewhere when the claims in `dueAt` order show that a full one holds the writer longer
//! than [`LONG_WRITE`] ([`WritePace`]: a SQLite file on a slow or busy machine). With nothing to
//! share, claims and marks stay large, which drains a burst fastest.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// How often, at most, a fair claim looks for tenants with nothing waiting while a backlog lasts.
pub const FAIR_EVERY: Duration = Duration::from_millis(10);

/// Timers one fair claim takes at most, shared equally among the tenants it serves.
pub const FAIR_CLAIM: usize = 1_000;

/// Timers a claim in `dueAt` order, or a mark, takes at most while other tenants are served
/// beside a backlog: a write of 2,000 held the SQLite writer 15–30 ms (release), and every fair
/// claim waited for one.
pub const SHARING_CLAIM: usize = 500;

/// How long after a fair claim took timers the Poller keeps its writes short
/// ([`SHARING_CLAIM`]): a quiet tenant's next timer is likely due within it.
pub const SHARING_MEMORY: Duration = Duration::from_secs(1);

/// How long a full claim may hold the writer before writes are kept short while tenants share,
/// on a database whose writes are mostly their commit (SQLite: a claim of 2,000 took 15–30 ms
/// in a release build, where short writes made the quiet tenant later, and 290–370 ms in a test
/// build beside a burst, where a fair claim waited for all of it). Well above the first, so
/// that a release build's claims, a commit's wait included, stay large.
pub const LONG_WRITE: Duration = Duration::from_millis(100);

/// Claims smaller than this say little about the time per row: their fixed cost dominates.
const PACE_ROWS: usize = 200;

/// The time per row of the claims in `dueAt` order, from call to answer (what a fair claim
/// asked meanwhile waits for), smoothed over the last few.
#[derive(Debug, Default)]
pub struct WritePace {
    per_row: Option<Duration>,
}

impl WritePace {
    /// A claim of `rows` timers took `took`.
    pub fn observe(&mut self, rows: usize, took: Duration) {
        if rows < PACE_ROWS {
            return;
        }
        let this = took / rows as u32;
        self.per_row = Some(match self.per_row {
            Some(before) => (before * 3 + this) / 4,
            None => this,
        });
    }

    /// Whether a write of `rows` would hold the writer longer than [`LONG_WRITE`].
    pub fn long(&self, rows: usize) -> bool {
        self.per_row
            .is_some_and(|per_row| per_row * rows as u32 > LONG_WRITE)
    }
}

#[derive(Debug, Default)]
pub struct Fairness {
    /// When the last fair claim was asked for.
    last: Option<Instant>,
    /// The walk's resume point: the last tenant the previous fair claim reached when it could not
    /// reach them all. `None`: the next walk starts from the first tenant.
    resume_after: Option<String>,
    /// When a fair claim last took timers.
    served: Option<Instant>,
    /// How long the claims in `dueAt` order hold the writer.
    pub pace: WritePace,
}

/// What one fair claim asks Persistence for (`PersistenceClient::claim_fair`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairClaim {
    pub skip: BTreeSet<String>,
    pub resume_after: Option<String>,
    pub limit: usize,
    pub fence: DateTime<Utc>,
}

impl Fairness {
    /// Whether a fair claim is due at `now`: during a backlog, [`FAIR_EVERY`] after the last one,
    /// and while fewer than two hold limits are held. A fair claim may go beyond the hold limit
    /// (the claims in `dueAt` order fill it during a backlog, and the other tenants' turns must
    /// come all the same); twice the limit still bounds memory.
    pub fn due(&self, now: Instant, backlog: bool, held: usize, hold_limit: usize) -> bool {
        backlog
            && held < 2 * hold_limit
            && self
                .last
                .is_none_or(|at| now.saturating_duration_since(at) >= FAIR_EVERY)
    }

    /// A fair claim is asked for at `now`, skipping `held_tenants`. `fence` is the run's
    /// (`run::Run::fence`); between runs none of this daemon's claims is taken again by a fair
    /// claim: the claim in `dueAt` order, which follows, takes those.
    pub fn start(
        &mut self,
        now: Instant,
        held_tenants: BTreeSet<String>,
        fence: Option<DateTime<Utc>>,
    ) -> FairClaim {
        self.last = Some(now);
        FairClaim {
            skip: held_tenants,
            resume_after: self.resume_after.clone(),
            limit: FAIR_CLAIM,
            fence: fence.unwrap_or(DateTime::UNIX_EPOCH),
        }
    }

    /// The fair claim answered at `now` with `claimed` timers: the next walk goes on after
    /// `resume_after`.
    pub fn answered(&mut self, now: Instant, resume_after: Option<String>, claimed: usize) {
        self.resume_after = resume_after;
        if claimed > 0 {
            self.served = Some(now);
        }
    }

    /// Whether other tenants are served beside a backlog at `now`.
    pub fn sharing(&self, now: Instant) -> bool {
        self.served
            .is_some_and(|at| now.saturating_duration_since(at) < SHARING_MEMORY)
    }

    /// Whether the Poller's writes are kept to [`SHARING_CLAIM`] timers at `now`: while others
    /// are served beside a backlog, where the database says writes grow with their rows
    /// (`always`) or a full write of `full` timers would be long ([`WritePace`]).
    pub fn short_writes(&self, now: Instant, always: bool, full: usize) -> bool {
        self.sharing(now) && (always || self.pace.long(full))
    }

    /// A run ended: the next walk starts from the first tenant.
    pub fn run_ended(&mut self) {
        self.resume_after = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 4_000;

    #[test]
    fn a_fair_claim_is_due_during_a_backlog_at_most_every_fair_every() {
        let t0 = Instant::now();
        let mut fairness = Fairness::default();
        assert!(
            !fairness.due(t0, false, 0, LIMIT),
            "no backlog, no fair claim"
        );
        assert!(fairness.due(t0, true, 0, LIMIT), "the first one at once");
        fairness.start(t0, BTreeSet::new(), None);
        assert!(!fairness.due(t0 + FAIR_EVERY / 2, true, 0, LIMIT));
        assert!(fairness.due(t0 + FAIR_EVERY, true, 0, LIMIT));
    }

    #[test]
    fn a_fair_claim_goes_beyond_the_hold_limit_but_not_twice_over() {
        let fairness = Fairness::default();
        let now = Instant::now();
        assert!(fairness.due(now, true, LIMIT, LIMIT));
        assert!(fairness.due(now, true, 2 * LIMIT - 1, LIMIT));
        assert!(!fairness.due(now, true, 2 * LIMIT, LIMIT));
    }

    #[test]
    fn it_skips_the_tenants_held_and_resumes_the_walk_until_a_run_ends() {
        let mut fairness = Fairness::default();
        let now = Instant::now();
        let held: BTreeSet<String> = ["bulk".to_owned()].into();
        let fence = DateTime::UNIX_EPOCH + chrono::Duration::seconds(30);
        let first = fairness.start(now, held.clone(), Some(fence));
        assert_eq!(
            first,
            FairClaim {
                skip: held,
                resume_after: None,
                limit: FAIR_CLAIM,
                fence,
            }
        );
        fairness.answered(now, Some("m".into()), 0);
        let next = fairness.start(now + FAIR_EVERY, BTreeSet::new(), None);
        assert_eq!(next.resume_after.as_deref(), Some("m"));
        assert_eq!(
            next.fence,
            DateTime::UNIX_EPOCH,
            "between runs, none of this daemon's claims is taken again"
        );
        fairness.run_ended();
        let after_run = fairness.start(now + 2 * FAIR_EVERY, BTreeSet::new(), None);
        assert_eq!(after_run.resume_after, None);
    }

    #[test]
    fn writes_stay_short_while_sharing_where_a_full_claim_is_long() {
        let mut fairness = Fairness::default();
        let now = Instant::now();
        fairness.answered(now, None, 3);
        assert!(
            fairness.short_writes(now, true, 2_000),
            "PostgreSQL: always"
        );
        assert!(
            !fairness.short_writes(now, false, 2_000),
            "nothing measured yet"
        );
        // 2,000 in 20 ms: a release build's SQLite claim.
        fairness.pace.observe(2_000, Duration::from_millis(20));
        assert!(!fairness.short_writes(now, false, 2_000));
        // Small claims say nothing of the time per row.
        fairness.pace.observe(10, Duration::from_millis(20));
        assert!(!fairness.short_writes(now, false, 2_000));
        // 2,000 in 290 ms, a few times: the writer is slow, keep writes short.
        for _ in 0..3 {
            fairness.pace.observe(2_000, Duration::from_millis(290));
        }
        assert!(fairness.short_writes(now, false, 2_000));
        assert!(
            !fairness.short_writes(now + SHARING_MEMORY, false, 2_000),
            "only while sharing"
        );
        // Short claims of 500 that stay quick bring the long ones back.
        for _ in 0..8 {
            fairness.pace.observe(500, Duration::from_millis(5));
        }
        assert!(!fairness.short_writes(now, false, 2_000));
    }

    #[test]
    fn writes_stay_short_for_a_while_after_a_fair_claim_took_timers() {
        let mut fairness = Fairness::default();
        let now = Instant::now();
        assert!(!fairness.sharing(now));
        fairness.answered(now, None, 0);
        assert!(!fairness.sharing(now), "a fair claim that found no one");
        fairness.answered(now, None, 3);
        assert!(fairness.sharing(now + SHARING_MEMORY / 2));
        assert!(!fairness.sharing(now + SHARING_MEMORY));
    }
}
