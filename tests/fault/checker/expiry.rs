//! Invariant (m), a timer that may expire (docs/CONTRACT.md §5): each firing of a timer
//! scheduled with `expireAfter` is published as one of its two events, never both, and the one
//! its instant dictates: `TimerExpired` (with `expiresAt = dueAt + expireAfter`) when its
//! `reachedAt` is past the deadline, `DueTimeReached` otherwise; a timer without `expireAfter`
//! never expires.
//!
//! A rollback to a release without expiry drops the deadlines stored (`migrate --to`), and
//! that release stores none: a timer scheduled before the rollback's heal and fired after its
//! start may fire late as DueTimeReached (the contract's rollback note says so); every other
//! rule holds for it.

use std::collections::BTreeMap;

use super::super::history::{Command, Instant, Key, Run};
use super::firings::{Message, parse_due};
use super::{Invariant, Verdict};

pub(super) fn check_expiry(run: &Run, messages: &[Message], verdict: &mut Verdict) {
    // A key's dueAt differs from every earlier one of the key: (key, dueAt) names one schedule.
    let deadlines: BTreeMap<(&Key, Instant), (Option<chrono::Duration>, Instant)> = run
        .ops
        .iter()
        .filter_map(|op| match op.command {
            Command::Schedule {
                due_at,
                expire_after,
            } => Some(((&op.key, due_at), (expire_after, op.invoked))),
            _ => None,
        })
        .collect();
    let rollbacks = super::rollback_windows(run);
    let deadline_dropped = |scheduled: Instant, fired: Instant| {
        rollbacks.iter().any(|w| scheduled < w.to && fired > w.from)
    };
    let mut kinds: BTreeMap<(Key, Instant), (bool, bool, Instant)> = BTreeMap::new();
    for message in messages {
        let Ok(event) = parse_due(&message.subject, &message.payload) else {
            continue;
        };
        let Some(&(after, scheduled)) = deadlines.get(&(&event.key, event.due_at)) else {
            continue;
        };
        let seen =
            kinds
                .entry((event.key.clone(), event.due_at))
                .or_insert((false, false, message.first));
        let problem = match (after, event.expires_at) {
            (None, Some(_)) => Some("a TimerExpired for a timer without expireAfter".to_owned()),
            (Some(after), Some(expires_at)) => {
                let deadline = event.due_at + after;
                if expires_at != deadline {
                    Some(format!(
                        "expiresAt {expires_at}, not dueAt + expireAfter {deadline}"
                    ))
                } else if event.reached_at <= deadline {
                    Some(format!(
                        "TimerExpired with reachedAt {} not past its deadline {deadline}",
                        event.reached_at
                    ))
                } else {
                    None
                }
            }
            (Some(after), None)
                if event.reached_at > event.due_at + after
                    && !deadline_dropped(scheduled, message.first) =>
            {
                Some(format!(
                    "DueTimeReached with reachedAt {} past its deadline {}",
                    event.reached_at,
                    event.due_at + after
                ))
            }
            _ => None,
        };
        if let Some(problem) = problem {
            verdict.violate(Invariant::Expiry, message.first, Some(&event.key), problem);
        }
        if event.expires_at.is_some() {
            seen.1 = true;
        } else {
            seen.0 = true;
        }
    }
    for ((key, due_at), (due, expired, first)) in kinds {
        if due && expired {
            verdict.violate(
                Invariant::Expiry,
                first,
                Some(&key),
                format!("both DueTimeReached and TimerExpired for the firing due {due_at}"),
            );
        }
    }
}

/// How many firings were published as TimerExpired.
pub fn expired_count(messages: &[Message]) -> usize {
    let mut firings = std::collections::BTreeSet::new();
    for message in messages {
        if let Ok(event) = parse_due(&message.subject, &message.payload)
            && event.expires_at.is_some()
        {
            firings.insert((event.key, event.due_at));
        }
    }
    firings.len()
}

#[cfg(test)]
mod tests {
    use super::super::super::history::{FaultRecord, Outcome, Run, Seen};
    use super::super::tests::*;
    use super::super::*;

    fn expiring(id: &str, due: i64, after_s: i64) -> Op {
        op(
            id,
            Command::Schedule {
                due_at: t(due),
                expire_after: Some(chrono::Duration::seconds(after_s)),
            },
            Outcome::Acked,
            10,
        )
    }

    fn expired(id: &str, due: i64, reached: i64, expires: i64) -> Seen {
        let mut seen = event(id, due, reached, reached + 1);
        let mut envelope: serde_json::Value = serde_json::from_slice(&seen.payload).unwrap();
        envelope["type"] = "TimerExpired".into();
        envelope["payload"]["expiresAt"] = crate::common::rfc3339(t(expires)).into();
        seen.payload = serde_json::to_vec(&envelope).unwrap();
        seen.subject = "timer.evt.expired.acme".into();
        seen
    }

    fn history(ops: Vec<Op>, events: Vec<Seen>) -> Run {
        let rows = ops
            .iter()
            .map(|op| {
                row(
                    &op.key.id,
                    "Reached",
                    op.due_at().map(|d| (d - t(0)).num_milliseconds()),
                )
            })
            .collect();
        run(ops, events, rows)
    }

    fn expiry_violations(ops: Vec<Op>, events: Vec<Seen>) -> usize {
        violations_in(&history(ops, events))
    }

    fn violations_in(history: &Run) -> usize {
        check(history)
            .violations
            .iter()
            .filter(|v| v.invariant == Invariant::Expiry)
            .count()
    }

    #[test]
    fn each_firing_is_the_event_its_instant_dictates_and_only_one() {
        // In time, and past the deadline: as they should be.
        assert_eq!(
            expiry_violations(
                vec![expiring("k1", 5_000, 5), expiring("k2", 5_000, 5)],
                vec![
                    event("k1", 5_000, 9_000, 9_001),
                    expired("k2", 5_000, 10_001, 10_000)
                ],
            ),
            0
        );
        // Late, but published as DueTimeReached.
        assert_eq!(
            expiry_violations(
                vec![expiring("k1", 5_000, 5)],
                vec![event("k1", 5_000, 10_001, 10_002)]
            ),
            1
        );
        // Expired in time, or with a wrong deadline.
        assert_eq!(
            expiry_violations(
                vec![expiring("k1", 5_000, 5), expiring("k2", 5_000, 5)],
                vec![
                    expired("k1", 5_000, 9_000, 10_000),
                    expired("k2", 5_000, 12_000, 11_000)
                ],
            ),
            2
        );
        // Both events for one firing.
        assert_eq!(
            expiry_violations(
                vec![expiring("k1", 5_000, 5)],
                vec![
                    event("k1", 5_000, 9_000, 9_001),
                    expired("k1", 5_000, 10_001, 10_000)
                ],
            ),
            1
        );
        // Its deadline dropped by a rollback to a release without expiry: late as DueTimeReached.
        let mut rolled_back = history(
            vec![expiring("k1", 5_000, 5)],
            vec![event("k1", 5_000, 10_001, 10_002)],
        );
        rolled_back.faults.push(FaultRecord {
            name: "rollback to the previous release".into(),
            started: t(8_000),
            healed: t(20_000),
            probes: vec![],
            skipped: None,
            notes: vec![],
            disturbs: true,
            lingers_until: None,
            heal_rule: None,
        });
        assert_eq!(violations_in(&rolled_back), 0);
        // A timer without expireAfter never expires.
        assert_eq!(
            expiry_violations(
                vec![schedule("k1", 5_000, 10)],
                vec![expired("k1", 5_000, 10_001, 10_000)]
            ),
            1
        );
    }
}
