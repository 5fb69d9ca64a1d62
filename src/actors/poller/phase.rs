//! What the Poller is doing on the database side. One claim in `dueAt` order or one mark at
//! Persistence at a time, its answer a message; between calls the Poller decides the next one.
//! A round of claims (what a tick, a wake-up or a settled batch asks for) claims in `dueAt`
//! order while the hold limit has room and claims come back full. Marks (`marks`) go between
//! rounds. The fair claims of a backlog (`fairness`) go beside these calls, one at a time, so
//! that they wait for the one write under way on their connection at most. After a failure
//! nothing is claimed before the backoff ends.

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::marks::Marked;

pub enum Phase {
    /// Nothing at Persistence: the next call waits for a message.
    Idle,
    /// A claim in `dueAt` order is at Persistence. (A fair claim goes beside whatever is
    /// there: `fairness`.)
    Claiming,
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
        matches!(self, Phase::Claiming | Phase::Marking { .. })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_backoff_holds_until_its_instant() {
        let now = Instant::now();
        let until = now + std::time::Duration::from_millis(100);
        let phase = Phase::BackingOff { until };
        assert_eq!(phase.backoff(now), Some(until));
        assert_eq!(phase.backoff(until), None);
        assert!(!phase.at_persistence());
        assert!(Phase::Claiming.at_persistence());
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
