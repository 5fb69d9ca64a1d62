//! What the Poller is doing on the database side. One call at Persistence at a time, its answer
//! a message; between calls the Poller decides the next one. A round of claims (what a tick, a
//! wake-up or a settled batch asks for) takes turns: in each, a fair claim if one is due
//! (`fairness`), then a claim in `dueAt` order if the hold limit has room; another turn while
//! claims come back full. Marks (`marks`) go between rounds. After a failure nothing is claimed
//! before the backoff ends.

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::marks::Marked;

pub enum Phase {
    /// Nothing at Persistence: the next call waits for a message.
    Idle,
    /// A claim of this round is at Persistence.
    Claiming(Round),
    /// A mark is at Persistence. `answer` yields it to a stop, which reads no more messages;
    /// a backoff under way when it began goes on after it.
    Marking {
        answer: JoinHandle<Marked>,
        backoff: Option<Instant>,
    },
    /// A claim, a mark or a publish failed: no claim starts before `until`, nor a mark if a
    /// mark failed.
    BackingOff { until: Instant },
}

impl Phase {
    pub fn at_persistence(&self) -> bool {
        matches!(self, Phase::Claiming(_) | Phase::Marking { .. })
    }

    /// The backoff under way at `now`, if any.
    pub fn backoff(&self, now: Instant) -> Option<Instant> {
        match self {
            Phase::BackingOff { until } if now < *until => Some(*until),
            _ => None,
        }
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
        let phase = Phase::BackingOff { until };
        assert_eq!(phase.backoff(now), Some(until));
        assert_eq!(phase.backoff(until), None);
        assert!(!phase.at_persistence());
        assert!(Phase::Claiming(Round::begin(false)).at_persistence());
        let marking = Phase::Marking {
            answer: tokio::spawn(async {
                Marked {
                    batches: Vec::new(),
                    result: Ok(0),
                }
            }),
            backoff: None,
        };
        assert!(marking.at_persistence());
    }
}
