//! What the Poller is doing on the database side: a claim, a mark, or both where the database
//! runs them side by side (PostgreSQL's two firing connections); each answer is a message, and
//! between calls the Poller decides the next one. Elsewhere (SQLite's one writer) one call is at
//! Persistence at a time. A round of claims (what a tick, a wake-up or a settled batch asks for)
//! takes turns: in each, a fair claim if one is due (`fairness`), then a claim in `dueAt` order
//! if the hold limit has room; another turn while claims come back full. Marks (`marks`) go
//! between rounds, or beside them. After a failure nothing is claimed before the backoff ends.

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::marks::Marked;

pub struct Phase {
    /// A claim of this round is at Persistence.
    claiming: Option<Round>,
    /// A mark is at Persistence; the handle yields it to a stop, which reads no more messages.
    marking: Option<JoinHandle<Marked>>,
    /// A claim, a mark or a publish failed: no claim starts before this instant, nor a mark if
    /// a mark failed.
    backoff: Option<Instant>,
    /// A claim may be at Persistence while a mark is: the database serves them on connections
    /// of their own, so that neither waits for the other (`DatabaseTarget::firing_connections`).
    side_by_side: bool,
}

impl Phase {
    pub fn new(side_by_side: bool) -> Self {
        Self {
            claiming: None,
            marking: None,
            backoff: None,
            side_by_side,
        }
    }

    pub fn side_by_side(&self) -> bool {
        self.side_by_side
    }

    pub fn claiming(&self) -> bool {
        self.claiming.is_some()
    }

    pub fn marking(&self) -> bool {
        self.marking.is_some()
    }

    /// Whether the next call waits for an answer: one call at a time, or, side by side, a claim
    /// and a mark both under way.
    pub fn waits(&self) -> bool {
        match self.side_by_side {
            false => self.claiming() || self.marking(),
            true => self.claiming() && self.marking(),
        }
    }

    pub fn claim(&mut self, round: Round) {
        debug_assert!(self.claiming.is_none());
        self.claiming = Some(round);
    }

    /// The claim answered: its round.
    pub fn claimed(&mut self) -> Option<Round> {
        self.claiming.take()
    }

    pub fn mark(&mut self, answer: JoinHandle<Marked>) {
        debug_assert!(self.marking.is_none());
        self.marking = Some(answer);
    }

    /// The mark answered (or a stop takes it to wait for it).
    pub fn marked(&mut self) -> Option<JoinHandle<Marked>> {
        self.marking.take()
    }

    pub fn back_off(&mut self, until: Instant) {
        self.backoff = Some(until);
    }

    /// The backoff under way at `now`, if any (one that has ended is forgotten).
    pub fn backoff(&mut self, now: Instant) -> Option<Instant> {
        if self.backoff.is_some_and(|until| now >= until) {
            self.backoff = None;
        }
        self.backoff
    }
}

/// When the next claim in `dueAt` order is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextClaim {
    /// At the planned wake-up: the last claim came back short and planned it for the next
    /// `dueAt`.
    AtWakeUp,
    /// As batches settle: more may be due now (the last claim came back full, or a round
    /// stopped before its claim answered).
    AsBatchesSettle,
}

/// The claims of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// A share of each tenant's due timers, for the tenants with none held (`fairness`).
    Fair,
    /// The due timers in `dueAt` order, after the cursor (`run`).
    Due,
}

/// A round of claims under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Timers are backlogged: a turn may begin with a fair claim.
    backlog: bool,
    /// This turn's fair claim was made, or was not due: the claim in `dueAt` order is next.
    fair_done: bool,
}

impl Round {
    pub fn begin(backlog: bool) -> Self {
        Self {
            backlog,
            fair_done: false,
        }
    }

    /// This round's next claim: the turn's fair claim if `fair_due` says one is due (given
    /// whether timers are backlogged), then the claim in `dueAt` order if there is `room`.
    /// `None`: the round is over.
    pub fn next(&mut self, fair_due: impl FnOnce(bool) -> bool, room: bool) -> Option<Claim> {
        if !self.fair_done {
            self.fair_done = true;
            if fair_due(self.backlog) {
                return Some(Claim::Fair);
            }
        }
        room.then_some(Claim::Due)
    }

    /// The claim in `dueAt` order came back full: another turn, backlogged. While the broker
    /// fires what is held, the Poller may go on claiming as long as a backlog lasts, and the
    /// other tenants' turns must come all the same.
    pub fn next_turn(&mut self) {
        self.backlog = true;
        self.fair_done = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_without_backlog_claims_in_due_order_only() {
        let mut round = Round::begin(false);
        assert_eq!(round.next(|backlog| backlog, true), Some(Claim::Due));
    }

    #[test]
    fn a_backlogged_turn_makes_its_fair_claim_first_and_once() {
        let mut round = Round::begin(true);
        assert_eq!(round.next(|backlog| backlog, true), Some(Claim::Fair));
        // The fair claim answered: the claim in `dueAt` order, even if another fair one would
        // be due by then (a slow claim takes longer than `FAIR_EVERY`).
        assert_eq!(round.next(|_| true, true), Some(Claim::Due));
        // It came back full: the next turn begins with a fair claim again.
        round.next_turn();
        assert_eq!(round.next(|backlog| backlog, true), Some(Claim::Fair));
    }

    #[test]
    fn a_round_ends_when_the_hold_limit_has_no_room() {
        let mut round = Round::begin(true);
        assert_eq!(
            round.next(|_| false, false),
            None,
            "no fair claim due, no room"
        );
        let mut round = Round::begin(true);
        assert_eq!(
            round.next(|_| true, false),
            Some(Claim::Fair),
            "fair claims go on"
        );
        assert_eq!(round.next(|_| true, false), None);
    }

    #[test]
    fn a_turn_without_backlog_becomes_backlogged_after_a_full_claim() {
        let mut round = Round::begin(false);
        assert_eq!(round.next(|backlog| backlog, true), Some(Claim::Due));
        round.next_turn();
        assert_eq!(round.next(|backlog| backlog, true), Some(Claim::Fair));
    }

    #[tokio::test]
    async fn a_backoff_holds_until_its_instant() {
        let now = Instant::now();
        let until = now + std::time::Duration::from_millis(100);
        let mut phase = Phase::new(false);
        phase.back_off(until);
        assert_eq!(phase.backoff(now), Some(until));
        assert!(!phase.waits(), "a backoff is not a call under way");
        assert_eq!(phase.backoff(until), None);
        assert_eq!(phase.backoff(now), None, "an ended backoff is forgotten");
    }

    fn answered_mark() -> JoinHandle<Marked> {
        tokio::spawn(async {
            Marked {
                batches: Vec::new(),
                result: Ok(0),
            }
        })
    }

    #[tokio::test]
    async fn one_call_at_a_time_unless_claims_and_marks_run_side_by_side() {
        let mut one = Phase::new(false);
        one.mark(answered_mark());
        assert!(one.waits(), "a mark holds the claims back");
        assert!(one.marked().is_some());
        one.claim(Round::begin(false));
        assert!(one.waits(), "a claim holds the marks back");

        let mut two = Phase::new(true);
        two.claim(Round::begin(false));
        assert!(!two.waits(), "a mark may start beside the claim");
        two.mark(answered_mark());
        assert!(two.waits(), "both under way");
        assert_eq!(two.claimed(), Some(Round::begin(false)));
        assert!(!two.waits(), "a claim may start beside the mark");
        assert!(two.marking() && !two.claiming());
    }
}
