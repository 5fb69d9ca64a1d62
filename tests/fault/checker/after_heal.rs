//! Invariants (i), prompt after a heal, and (k), firing again after a broker path heals
//! (docs/CONTRACT.md §1): after the daemon was killed in the middle of a burst of commands, or
//! frozen while commands and due timers flowed, every timer the broker acknowledged fires within
//! [`HEAL_BOUND`] of the later of its dueAt and the heal (the restarted daemon ready, the
//! SIGCONT): the commands the daemon held come back within an ack wait. After its path to the
//! broker went silent (both ways or one way) or distant, with no reset, the same within
//! [`PATH_HEAL_BOUND`] of a path being there again: the daemon noticed the dead connection
//! while it lasted (its link timeout, 6 s) and reconnects.
//!
//! Which timers, for each such fault: every acknowledged ScheduleTimer that is its key's last
//! operation (none after it, whatever came of it), whose PubAck came before the heal, and that
//! had not fired before the fault began; each judged by its first firing. Not judged, and
//! counted in the report: one whose deadline fell after the next fault began and that fired
//! only after it (the next fault may have held it up); one that never fired ((a) judges it);
//! one acknowledged while unprocessed commands went with a deleted command stream (it counts
//! as never acknowledged, as in (a)).
//!
//! The margin of (i) is thin by design: a command delivered just before the kill comes back an
//! ack wait (4 s) after it, so a timer of it due by the heal has only the restart's 0.5 s and
//! the start-up left to be stored and fired. On a machine starved by other work that has been
//! missed, by 38 ms once (a load average of 8.8 on two cores).

use std::collections::BTreeMap;

use chrono::Duration;

use super::super::history::{HealRule, Instant, Key, Op, Outcome, Run};
use super::{Invariant, Verdict};

/// How soon after the later of its dueAt and the heal an acknowledged timer fires: the command
/// consumer's ack wait brings held commands back within 4 s of the kill or the freeze.
pub const HEAL_BOUND: Duration = Duration::seconds(5);
/// How soon after a path to the broker is there again an acknowledged timer fires: the attempt
/// to connect that the silence held up gives up within `connect_timeout` (3 s), the next
/// connects, and the Poller's backoff is at most 2 s.
pub const PATH_HEAL_BOUND: Duration = Duration::seconds(10);

impl HealRule {
    pub fn invariant(self) -> Invariant {
        match self {
            Self::HeldCommands => Invariant::PromptAfterHeal,
            Self::BrokerPath => Invariant::PathHeal,
        }
    }

    pub fn bound(self) -> Duration {
        match self {
            Self::HeldCommands => HEAL_BOUND,
            Self::BrokerPath => PATH_HEAL_BOUND,
        }
    }
}

/// What (i) or (k) found after one fault.
#[derive(Clone, Debug)]
pub struct AfterHeal {
    /// The fault's index in `Run::faults`.
    pub fault: usize,
    pub rule: HealRule,
    /// Timers judged that fired: from the later of dueAt and the heal to the first firing (zero
    /// when it fired before that), sorted.
    pub late: Vec<Duration>,
    /// The latest of them.
    pub latest: Option<Key>,
    /// Not judged: the deadline fell after the next fault began, and it fired only after that.
    pub after_next_fault: usize,
    /// Not judged: never fired (invariant (a) judges it).
    pub never_fired: usize,
    /// Not judged: acknowledged while unprocessed commands went with a deleted stream.
    pub destroyed: usize,
}

impl AfterHeal {
    /// How many fired later than the rule's bound.
    pub fn over(&self) -> usize {
        let bound = self.rule.bound();
        self.late.iter().filter(|l| **l > bound).count()
    }

    /// The `q`-quantile (0..=1) of the lateness of the judged timers.
    pub fn quantile(&self, q: f64) -> Duration {
        let Some(last) = self.late.len().checked_sub(1) else {
            return Duration::zero();
        };
        self.late[((last as f64) * q).round() as usize]
    }
}

pub(super) fn check_after_heal(run: &Run, verdict: &mut Verdict) {
    let mut last: BTreeMap<&Key, &Op> = BTreeMap::new();
    for op in &run.ops {
        last.insert(&op.key, op);
    }
    for (index, fault) in run.faults.iter().enumerate() {
        let Some(rule) = fault.heal_rule.filter(|_| fault.skipped.is_none()) else {
            continue;
        };
        let heal = fault.healed;
        let next = run
            .faults
            .get(index + 1)
            .map(|f| f.started)
            .or(run.ended)
            .unwrap_or(Instant::MAX_UTC);
        let mut found = AfterHeal {
            fault: index,
            rule,
            late: Vec::new(),
            latest: None,
            after_next_fault: 0,
            never_fired: 0,
            destroyed: 0,
        };
        let mut worst = Duration::MIN;
        for op in last.values() {
            let Some(due) = op.due_at() else { continue };
            if op.outcome != Outcome::Acked || op.completed > heal {
                continue;
            }
            let fired = verdict.firings.get(&(op.key.clone(), due)).map(|f| f.first);
            if fired.is_some_and(|at| at < fault.started) {
                continue;
            }
            if run.destroyed.iter().any(|w| w.contains(op.completed)) {
                found.destroyed += 1;
                continue;
            }
            let Some(at) = fired else {
                found.never_fired += 1;
                continue;
            };
            let from = due.max(heal);
            let deadline = from + rule.bound();
            if at > deadline && deadline > next {
                found.after_next_fault += 1;
                continue;
            }
            let late = (at - from).max(Duration::zero());
            found.late.push(late);
            if late > worst {
                worst = late;
                found.latest = Some(op.key.clone());
            }
            if at > deadline {
                verdict.violate(
                    rule.invariant(),
                    heal,
                    Some(&op.key),
                    format!(
                        "acknowledged at {} (the heal of {} at {heal}), due {due}, fired at {at}: \
                         {} ms after the later of its dueAt and the heal",
                        op.completed,
                        fault.name,
                        late.num_milliseconds()
                    ),
                );
            }
        }
        found.late.sort();
        verdict.after_heal.push(found);
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::history::FaultRecord;
    use super::super::tests::*;
    use super::super::*;
    use super::*;

    /// A daemon killed at 0 and started again at 500 ms; its probe fired at 1.5 s.
    fn killed(heal_rule: Option<HealRule>) -> FaultRecord {
        FaultRecord {
            name: "daemon SIGKILL mid-burst".into(),
            started: t(0),
            healed: t(500),
            probes: vec![key("probe")],
            skipped: None,
            notes: vec![],
            disturbs: true,
            lingers_until: None,
            heal_rule,
        }
    }

    /// `timers` (id, dueAt, PubAck, fired) with the probe, as a run with the kill.
    fn history(timers: &[(&str, i64, i64, Option<i64>)], fault: FaultRecord) -> Run {
        let mut ops = vec![schedule("probe", 1_500, 600)];
        let mut events = vec![event("probe", 1_500, 1_501, 1_502)];
        let mut rows = vec![row("probe", "Reached", Some(1_500))];
        for &(id, due, acked, fired) in timers {
            ops.push(schedule(id, due, acked));
            match fired {
                Some(at) => {
                    events.push(event(id, due, at - 1, at));
                    rows.push(row(id, "Reached", Some(due)));
                }
                None => rows.push(row(id, "Scheduled", Some(due))),
            }
        }
        let mut run = run(ops, events, rows);
        run.faults.push(fault);
        run
    }

    #[test]
    fn timers_held_a_whole_30_s_ack_wait_after_a_kill_break_i() {
        // Sent before the kill, due 3 s later; one came back within the 4 s ack wait, two only
        // after the broker's default of 30 s.
        let timers = [
            ("k1", 2_800, -200, Some(5_300)),
            ("k2", 2_900, -100, Some(30_100)),
            ("k3", 3_000, 0, Some(30_300)),
        ];
        let verdict = check(&history(&timers, killed(Some(HealRule::HeldCommands))));
        assert_eq!(broken(&verdict), [Invariant::PromptAfterHeal]);
        assert_eq!(verdict.violations.len(), 2);
        let found = &verdict.after_heal[0];
        assert_eq!(found.late.len(), 3);
        assert_eq!(found.over(), 2);
        assert_eq!(found.latest, Some(key("k3")));
        assert_eq!(found.quantile(1.0), Duration::milliseconds(27_300));
        // The same history after a fault (i) does not judge.
        let verdict = check(&history(&timers, killed(None)));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert!(verdict.after_heal.is_empty());
    }

    #[test]
    fn the_bound_runs_from_the_later_of_due_at_and_the_heal() {
        // Due during the kill: 5 s from the heal (5.5 s). Due after: 5 s from its dueAt.
        let within = [
            ("k1", 200, -300, Some(5_400)),
            ("k2", 4_000, 100, Some(8_900)),
        ];
        let verdict = check(&history(&within, killed(Some(HealRule::HeldCommands))));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        let past = [
            ("k1", 200, -300, Some(5_600)),
            ("k2", 4_000, 100, Some(9_100)),
        ];
        let verdict = check(&history(&past, killed(Some(HealRule::HeldCommands))));
        assert_eq!(broken(&verdict), [Invariant::PromptAfterHeal]);
        assert_eq!(verdict.violations.len(), 2);
    }

    #[test]
    fn after_a_broker_path_heals_k_allows_10_s_and_no_more() {
        // Due during the silence, acknowledged by the broker meanwhile; the path back at 500 ms.
        let silent = || FaultRecord {
            name: "broker path silent 8s".into(),
            ..killed(Some(HealRule::BrokerPath))
        };
        let within = [
            ("k1", 200, -300, Some(10_400)),
            ("k2", 4_000, 100, Some(13_900)),
        ];
        let verdict = check(&history(&within, silent()));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert_eq!(verdict.after_heal[0].rule, HealRule::BrokerPath);
        let past = [("k1", 200, -300, Some(10_600))];
        let verdict = check(&history(&past, silent()));
        assert_eq!(broken(&verdict), [Invariant::PathHeal]);
        assert_eq!(verdict.after_heal[0].over(), 1);
        // The same lateness after a kill breaks (i), whose bound is 5 s.
        let verdict = check(&history(&within, killed(Some(HealRule::HeldCommands))));
        assert_eq!(broken(&verdict), [Invariant::PromptAfterHeal]);
    }

    #[test]
    fn what_i_judges_and_what_it_leaves_to_a() {
        let mut run = history(
            &[
                ("judged", 2_000, 100, Some(2_100)),
                ("after-the-heal", 2_000, 700, Some(40_000)),
                ("fired-before", -1_000, -3_000, Some(-900)),
                ("never", 2_000, 100, None),
                ("held-by-the-next-fault", 9_000, 100, Some(16_000)),
                ("in-a-deleted-stream", 2_000, 300, None),
                ("rescheduled", 2_000, 100, Some(30_000)),
            ],
            killed(Some(HealRule::HeldCommands)),
        );
        // The key's last operation is a later schedule, acknowledged after the heal.
        run.ops.push(schedule("rescheduled", 50_000, 1_000));
        run.seen.push(event("rescheduled", 50_000, 50_001, 50_002));
        run.rows.retain(|r| r.key != key("rescheduled"));
        run.rows.push(row("rescheduled", "Reached", Some(50_000)));
        // The next fault began at 12 s; the run deleted the command stream's backlog once.
        run.faults.push(FaultRecord {
            name: "daemon SIGTERM".into(),
            started: t(12_000),
            healed: t(13_000),
            ..killed(None)
        });
        run.destroyed.push(super::super::super::history::Window {
            from: t(250),
            to: t(350),
        });
        let verdict = check(&run);
        let found = &verdict.after_heal[0];
        assert_eq!(found.late, [Duration::milliseconds(100)]);
        assert_eq!(found.latest, Some(key("judged")));
        assert_eq!(found.never_fired, 1);
        assert_eq!(found.after_next_fault, 1);
        assert_eq!(found.destroyed, 1);
        assert!(
            !broken(&verdict).contains(&Invariant::PromptAfterHeal),
            "{:?}",
            verdict.violations
        );
        // The one that never fired is (a)'s to report.
        assert!(
            verdict
                .violations
                .iter()
                .any(|v| v.invariant == Invariant::Fires && v.key == Some(key("never")))
        );
    }
}
