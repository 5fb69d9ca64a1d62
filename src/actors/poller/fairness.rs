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
//! A fair claim goes to Persistence beside the Poller's other call (a claim in `dueAt` order or
//! a mark), one fair claim at a time, while a run is under way: every claim of a run is fenced,
//! so the two never take the same timer, and the run does not end while a fair claim may still
//! bring timers. So a fair claim waits for the one write under way on its connection at most,
//! not for the Poller's whole turn of claims and marks. While other tenants are served beside a
//! backlog (a fair claim took timers, or found another tenant's due, within [`SHARING_MEMORY`]),
//! the Poller's writes stay short for them: a claim in `dueAt` order takes [`SHARING_CLAIM`]
//! timers instead of thousands, and a mark and a fair claim as many (`marks`). With nothing to
//! share, claims and marks stay large, which drains a burst fastest.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// How often, at most, a fair claim looks for tenants with nothing waiting while a backlog lasts.
pub const FAIR_EVERY: Duration = Duration::from_millis(10);

/// Timers one fair claim takes at most, shared equally among the tenants it serves.
pub const FAIR_CLAIM: usize = 1_000;

/// Timers a claim in `dueAt` order, a mark or a fair claim takes at most while other tenants
/// are served beside a backlog: in the bench's noisy neighbour (release, SQLite), a claim of
/// 2,000 held the writer 25–50 ms and a fair claim waited for one; a claim of 500 holds it 5–10.
pub const SHARING_CLAIM: usize = 500;

/// How long after a fair claim took timers, or found another tenant's timer due within this
/// long, the Poller keeps its writes short ([`SHARING_CLAIM`]): a quiet tenant's next timer is
/// likely due within it.
pub const SHARING_MEMORY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct Fairness {
    /// When the last fair claim was asked for.
    last: Option<Instant>,
    /// The walk's resume point: the last tenant the previous fair claim reached when it could not
    /// reach them all. `None`: the next walk starts from the first tenant.
    resume_after: Option<String>,
    /// When a fair claim last took timers.
    served: Option<Instant>,
    /// A fair claim is at Persistence.
    in_flight: bool,
    /// The tenants the last claim in `dueAt` order took timers of: it serves them, and a fair
    /// claim skips them. (With several daemons on PostgreSQL, a burst's tenant is often held by
    /// the others only, and a share of it is found past every row they hold: a fair claim of
    /// 60–200 ms on the firing connection.)
    serving: BTreeSet<String>,
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
        !self.in_flight
            && backlog
            && held < 2 * hold_limit
            && self
                .last
                .is_none_or(|at| now.saturating_duration_since(at) >= FAIR_EVERY)
    }

    /// A fair claim is asked for at `now`, skipping `held_tenants` and those the claims in
    /// `dueAt` order serve. `fence` is the run's
    /// (`run::Run::fence`); between runs none of this daemon's claims is taken again by a fair
    /// claim: the claim in `dueAt` order, which follows, takes those.
    pub fn start(
        &mut self,
        now: Instant,
        mut held_tenants: BTreeSet<String>,
        fence: Option<DateTime<Utc>>,
    ) -> FairClaim {
        held_tenants.extend(self.serving.iter().cloned());
        self.last = Some(now);
        self.in_flight = true;
        // While sharing, a fair claim that finds a backlogged tenant with nothing held (its
        // queue just went out) is kept as short as the other writes.
        let limit = match self.sharing(now) {
            true => SHARING_CLAIM,
            false => FAIR_CLAIM,
        };
        FairClaim {
            skip: held_tenants,
            resume_after: self.resume_after.clone(),
            limit,
            fence: fence.unwrap_or(DateTime::UNIX_EPOCH),
        }
    }

    /// The fair claim answered at `now`: the next walk goes on after `resume_after`. `shared`:
    /// it took timers, or found another tenant's due within [`SHARING_MEMORY`].
    pub fn answered(&mut self, now: Instant, resume_after: Option<String>, shared: bool) {
        self.in_flight = false;
        self.resume_after = resume_after;
        if shared {
            self.served = Some(now);
        }
    }

    /// The fair claim under way failed.
    pub fn failed(&mut self) {
        self.in_flight = false;
    }

    /// A fair claim is at Persistence: the run it may bring timers into does not end yet.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// When the next fair claim may be asked for, the last one answered.
    pub fn next_at(&self) -> Option<Instant> {
        self.last.map(|at| at + FAIR_EVERY)
    }

    /// Whether other tenants are served beside a backlog at `now`: the Poller's writes are
    /// kept to [`SHARING_CLAIM`] timers.
    pub fn sharing(&self, now: Instant) -> bool {
        self.served
            .is_some_and(|at| now.saturating_duration_since(at) < SHARING_MEMORY)
    }

    /// A claim in `dueAt` order took timers of these tenants.
    pub fn serving(&mut self, tenants: BTreeSet<String>) {
        self.serving = tenants;
    }

    /// A run ended: the next walk starts from the first tenant.
    pub fn run_ended(&mut self) {
        self.resume_after = None;
        self.serving.clear();
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
        fairness.answered(t0, None, false);
        assert!(!fairness.due(t0 + FAIR_EVERY / 2, true, 0, LIMIT));
        assert!(fairness.due(t0 + FAIR_EVERY, true, 0, LIMIT));
    }

    #[test]
    fn one_fair_claim_at_a_time() {
        let t0 = Instant::now();
        let mut fairness = Fairness::default();
        fairness.start(t0, BTreeSet::new(), None);
        assert!(fairness.in_flight());
        assert!(!fairness.due(t0 + 2 * FAIR_EVERY, true, 0, LIMIT));
        fairness.answered(t0 + 2 * FAIR_EVERY, None, false);
        assert!(fairness.due(t0 + 2 * FAIR_EVERY, true, 0, LIMIT));
        fairness.start(t0 + 2 * FAIR_EVERY, BTreeSet::new(), None);
        fairness.failed();
        assert!(!fairness.in_flight());
        assert_eq!(fairness.next_at(), Some(t0 + 3 * FAIR_EVERY));
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
        fairness.answered(now, Some("m".into()), false);
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
    fn the_tenants_the_claims_in_due_order_serve_are_skipped_until_the_run_ends() {
        let mut fairness = Fairness::default();
        let now = Instant::now();
        fairness.serving(["bulk".to_owned()].into());
        let claim = fairness.start(now, ["held".to_owned()].into(), None);
        assert_eq!(claim.skip, ["bulk".to_owned(), "held".to_owned()].into());
        fairness.answered(now, None, false);
        fairness.run_ended();
        let claim = fairness.start(now + FAIR_EVERY, BTreeSet::new(), None);
        assert!(claim.skip.is_empty());
    }

    #[test]
    fn writes_stay_short_for_a_while_after_a_fair_claim_took_timers() {
        let mut fairness = Fairness::default();
        let now = Instant::now();
        assert!(!fairness.sharing(now));
        fairness.answered(now, None, false);
        assert!(!fairness.sharing(now), "a fair claim that found no one");
        fairness.answered(now, None, true);
        assert!(fairness.sharing(now + SHARING_MEMORY / 2));
        assert!(!fairness.sharing(now + SHARING_MEMORY));
    }
}
