//! The checker: pure functions from a recorded [`Run`] to the violations of the contract's
//! invariants (docs/CONTRACT.md §1, §3, §5, §6). Nothing here does I/O, so each rule is shown on
//! small hand-made histories in the tests beside it. One file per concern: `firings` (what fired,
//! and (b)), `keys` ((a), (c), (d)), `hostile` ((e), (g)), `liveness` ((f), and the periods a
//! fault disturbs), `fairness` beside the checker ((h)), `after_heal` ((i), (k)), `leftovers` ((j)),
//! `refusals` ((l)), `expiry` ((m)).
//!
//! The invariants:
//! - (a) every acknowledged ScheduleTimer that is its key's last command fires: an event for
//!   (tenant, key, dueAt) exists;
//! - (b) nothing fires early: `reachedAt ≥ dueAt` always, and the time an event was received (or
//!   stored) is not before its `dueAt` — except while the daemon's clock ran ahead, when only
//!   `reachedAt` is judged (on SQLite the contract judges by the daemon's own clock);
//! - (c) a cancel the API answered `cancelled`, or one that left the key's final row
//!   `Cancelled`, is never followed by an event for the `dueAt` it cancelled;
//! - (d) the last command per key wins: the final row agrees with the last acknowledged
//!   command. A command may lose to a firing only when the firing came first: the event was
//!   out before the command was acknowledged (plus a moment), or a fault held the command up
//!   (the command's acknowledgement and the firing are separated by a disturbed period;
//!   periods that overlap, a fault begun while the last one's commands waited for their ack
//!   wait, count as one);
//! - (e) isolation: every message on `timer.evt.due.<t>` is a DueTimeReached of tenant t (on
//!   `timer.evt.expired.<t>` a TimerExpired) for a
//!   (key, dueAt) tenant t scheduled; rejections appear only for tenants that sent invalid
//!   commands; every message on `timer.cmd.<verb>.<t>` is a command of that verb and tenant;
//!   nothing else appears on `timer.evt.>`;
//! - (f) liveness: after each fault heals, a probe timer (due about a second later) of every
//!   tenant fires within [`LIVENESS_BOUND`];
//! - (g) hostile input: every API request is answered, and an invalid command is rejected,
//!   never stored;
//! - (h) fairness: while one tenant loads the service (a burst fired with no fault on, a flood
//!   of heavy reads), the other tenants' timers due meanwhile fire within a second (in
//!   `fairness`);
//! - (j) nothing acknowledged is stranded: once the workload has ended and every fault has
//!   healed, the command stream holds nothing (every command was applied or rejected, whatever
//!   its subject; in `leftovers`);
//! - (i) prompt after a heal: after the daemon was killed in the middle of a burst of commands
//!   or frozen under load, every timer acknowledged before the heal (its key's last operation)
//!   fires within 5 s of the later of its dueAt and the heal (in `after_heal`, which says
//!   exactly which timers it judges);
//! - (k) firing again after a broker path heals: after the path between daemon and broker went
//!   silent (both ways, or daemon to broker only) or distant with no reset, every timer
//!   acknowledged before a path was there again fires within 10 s of the later of its dueAt
//!   and the heal (in `after_heal`, as (i));
//! - (l) a refusal is final: of the schedules sent past a tenant's quota while the daemon was
//!   frozen again and again, no key is both rejected for the quota and stored, and each one
//!   acknowledged is one of the two (in `refusals`);
//! - (m) expiry: each firing of a timer with `expireAfter` is one event, never both, and the
//!   one its `reachedAt` dictates: TimerExpired past `dueAt + expireAfter`, DueTimeReached
//!   otherwise; a timer without it never expires (in `expiry`). The workload's timers 10 s
//!   overdue with 5 s to spare always expire (an (a) firing like any other).
//!
//! Duplicates (one firing stored more than once) are allowed and counted.

mod after_heal;
mod expiry;
mod firings;
mod hostile;
mod keys;
mod leftovers;
mod liveness;
mod refusals;

use std::collections::BTreeMap;

use chrono::Duration;

use super::fairness::check_fairness;
use super::history::{Instant, Key, Run};

pub use after_heal::AfterHeal;
pub use firings::{clock_ahead, parse_due, preview};
pub use liveness::{LIVENESS_BOUND, disturbed_windows};
pub use refusals::FloodVerdict;

/// A firing this soon after a command's PubAck may have won the race against it.
pub const RACE_SLACK: Duration = Duration::milliseconds(1500);
/// A fault disturbs from its start until its probes fired, plus this.
pub const DISTURBED_GRACE: Duration = Duration::seconds(2);
/// After the daemon's clock is set right again, events it published just before still arrive.
pub const CLOCK_GRACE: Duration = Duration::seconds(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    Fires,
    NotEarly,
    CancelHolds,
    LastWins,
    Isolation,
    Liveness,
    HostileInput,
    Fairness,
    PromptAfterHeal,
    Consumed,
    PathHeal,
    RefusalFinal,
    Expiry,
}

impl Invariant {
    pub const ALL: [Invariant; 13] = [
        Self::Fires,
        Self::NotEarly,
        Self::CancelHolds,
        Self::LastWins,
        Self::Isolation,
        Self::Liveness,
        Self::HostileInput,
        Self::Fairness,
        Self::PromptAfterHeal,
        Self::Consumed,
        Self::PathHeal,
        Self::RefusalFinal,
        Self::Expiry,
    ];

    pub fn letter(self) -> &'static str {
        match self {
            Self::Fires => "a",
            Self::NotEarly => "b",
            Self::CancelHolds => "c",
            Self::LastWins => "d",
            Self::Isolation => "e",
            Self::Liveness => "f",
            Self::HostileInput => "g",
            Self::Fairness => "h",
            Self::PromptAfterHeal => "i",
            Self::Consumed => "j",
            Self::PathHeal => "k",
            Self::RefusalFinal => "l",
            Self::Expiry => "m",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Fires => "an acknowledged schedule (its key's last command) fires",
            Self::NotEarly => "no event before its dueAt",
            Self::CancelHolds => "a cancel that took effect is never followed by its event",
            Self::LastWins => "the last command per key wins",
            Self::Isolation => "a tenant's subjects carry only its own events",
            Self::Liveness => "after a fault heals, new timers fire within the bound",
            Self::HostileInput => "every API request is answered, invalid commands rejected",
            Self::Fairness => {
                "one tenant's burst or heavy reads do not hold up the others' timers (1 s, or a third of a burst's time)"
            }
            Self::PromptAfterHeal => {
                "after a kill mid-burst or a freeze under load, every timer acknowledged before \
                 the heal fires within 5 s of the later of its dueAt and the heal"
            }
            Self::Consumed => {
                "once the workload ends and faults heal, the command stream holds nothing"
            }
            Self::PathHeal => {
                "after a silent or distant broker path heals, every timer acknowledged before \
                 fires within 10 s of the later of its dueAt and the heal"
            }
            Self::RefusalFinal => {
                "a command refused for its quota is never stored from a later copy, nor a stored \
                 one refused; each acknowledged one is one or the other"
            }
            Self::Expiry => {
                "a timer with expireAfter fires as one event, TimerExpired exactly when past its \
                 deadline; one without it never expires"
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub invariant: Invariant,
    /// When it happened (or was seen), to place it in the fault that was on then.
    pub at: Instant,
    pub key: Option<Key>,
    pub detail: String,
}

/// One firing: a (key, dueAt) as seen by the subscriber or stored in the stream.
#[derive(Clone, Debug)]
pub struct Firing {
    /// The earliest moment it was seen (received, or stored when no subscriber saw it).
    pub first: Instant,
    pub reached_at: Option<Instant>,
    /// Copies stored in the event stream (more than one is a duplicate).
    pub stored: usize,
}

#[derive(Debug, Default)]
pub struct Verdict {
    pub violations: Vec<Violation>,
    pub firings: BTreeMap<(Key, Instant), Firing>,
    /// Extra stored copies of one firing: (key, dueAt, when the copy was stored).
    pub duplicates: Vec<(Key, Instant, Instant)>,
    /// Early events (also among the violations): (key, dueAt, when seen).
    pub early: Vec<(Key, Instant, Instant)>,
    /// Per fault (in order): how long after the heal every probe had fired.
    pub refire: Vec<Option<Duration>>,
    /// Commands that lost a race against a firing the contract allows.
    pub lost_races: usize,
    /// Per fault (i) or (k) judges, in order: the lateness of the timers acknowledged before its
    /// heal.
    pub after_heal: Vec<AfterHeal>,
    /// Per flood past a quota, in order: what (l) found.
    pub quota_floods: Vec<FloodVerdict>,
    /// Firings published as TimerExpired.
    pub expired: usize,
}

impl Verdict {
    pub(super) fn violate(
        &mut self,
        invariant: Invariant,
        at: Instant,
        key: Option<&Key>,
        detail: String,
    ) {
        self.violations.push(Violation {
            invariant,
            at,
            key: key.cloned(),
            detail,
        });
    }
}

/// While the rollback to the previous release ran (from its start to this release being back):
/// that release knows neither `expireAfter` nor `CancelTimers` (it rejects the latter).
pub fn rollback_windows(run: &Run) -> Vec<super::history::Window> {
    run.faults
        .iter()
        .filter(|f| f.name.contains("rollback") && f.skipped.is_none())
        .map(|f| super::history::Window {
            from: f.started,
            to: f.healed,
        })
        .collect()
}

/// Judges a whole run.
pub fn check(run: &Run) -> Verdict {
    let mut verdict = Verdict::default();
    let messages = firings::distinct_messages(run);
    firings::collect_firings(run, &messages, &mut verdict);
    firings::check_not_early(run, &messages, &mut verdict);
    hostile::check_isolation(run, &messages, &mut verdict);
    verdict.refire = liveness::refire_times(run, &verdict.firings);
    liveness::check_liveness(run, &mut verdict);
    let disturbed = disturbed_windows(run, &verdict.refire);
    keys::check_keys(run, &disturbed, &mut verdict);
    hostile::check_hostile(run, &messages, &disturbed, &mut verdict);
    check_fairness(run, &disturbed, &mut verdict);
    after_heal::check_after_heal(run, &mut verdict);
    leftovers::check_leftovers(run, &mut verdict);
    refusals::check_refusals(run, &messages, &mut verdict);
    expiry::check_expiry(run, &messages, &mut verdict);
    verdict.expired = expiry::expired_count(&messages);
    verdict.violations.sort_by_key(|v| v.at);
    verdict
}

#[cfg(test)]
pub(crate) mod tests {
    pub(crate) use super::super::history::{CancelAnswer, Command, Op, Outcome, Row, Seen, Window};
    use super::*;

    pub(crate) fn t(ms: i64) -> Instant {
        Instant::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    pub(crate) fn key(id: &str) -> Key {
        Key::new("acme", id)
    }

    pub(crate) fn op(id: &str, command: Command, outcome: Outcome, completed: i64) -> Op {
        Op {
            key: key(id),
            command,
            outcome,
            invoked: t(completed - 5),
            completed: t(completed),
            attempts: 1,
        }
    }

    pub(crate) fn schedule(id: &str, due: i64, acked_at: i64) -> Op {
        op(
            id,
            Command::Schedule {
                due_at: t(due),
                expire_after: None,
            },
            Outcome::Acked,
            acked_at,
        )
    }

    pub(crate) fn event(id: &str, due: i64, reached: i64, seen: i64) -> Seen {
        let payload = serde_json::json!({
            "id": "0",
            "type": "DueTimeReached",
            "tenantId": "acme",
            "timestampMs": 0,
            "aggregateId": id,
            "payload": {
                "tenantId": "acme",
                "serviceCallId": id,
                "dueAt": crate::common::rfc3339(t(due)),
                "reachedAt": crate::common::rfc3339(t(reached)),
            }
        });
        Seen {
            subject: "timer.evt.due.acme".into(),
            payload: serde_json::to_vec(&payload).unwrap(),
            at: t(seen),
        }
    }

    pub(crate) fn row(id: &str, state: &str, due: Option<i64>) -> Row {
        Row {
            key: key(id),
            state: state.into(),
            due_at: due.map(t),
        }
    }

    /// A run whose events were seen by the subscriber and stored in the stream alike.
    pub(crate) fn run(ops: Vec<Op>, events: Vec<Seen>, rows: Vec<Row>) -> Run {
        Run {
            ops,
            stream: events.clone(),
            seen: events,
            rows,
            commands_left: Some(0),
            ended: Some(t(100_000)),
            ..Run::default()
        }
    }

    pub(crate) fn broken(verdict: &Verdict) -> Vec<Invariant> {
        let mut found: Vec<Invariant> = verdict.violations.iter().map(|v| v.invariant).collect();
        found.dedup();
        found
    }

    #[test]
    fn a_history_that_keeps_every_promise_passes() {
        let verdict = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                schedule("k1", 8_000, 1_000), // a reschedule
                schedule("k2", 6_000, 20),
                op("k2", Command::Cancel, Outcome::Acked, 1_000),
                schedule("k3", 7_000, 30),
                op(
                    "k3",
                    Command::ApiCancel,
                    Outcome::Answered(CancelAnswer::Cancelled),
                    1_000,
                ),
            ],
            vec![event("k1", 8_000, 8_002, 8_004)],
            vec![
                row("k1", "Reached", Some(8_000)),
                row("k2", "Cancelled", Some(6_000)),
                row("k3", "Cancelled", Some(7_000)),
            ],
        ));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert_eq!(verdict.firings.len(), 1);
        assert!(verdict.duplicates.is_empty());
    }

    #[test]
    fn duplicates_are_counted_not_condemned() {
        let verdict = check(&run(
            vec![schedule("k1", 5_000, 10)],
            vec![
                event("k1", 5_000, 5_001, 5_002),
                event("k1", 5_000, 5_900, 5_901), // republished after a crash
            ],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert_eq!(verdict.duplicates.len(), 1);
    }
}
