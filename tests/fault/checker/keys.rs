//! Invariants (a), (c) and (d), judged key by key: an acknowledged schedule that is its key's
//! last command fires, a cancel that took effect holds, and the last command per key wins.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::super::history::{CancelAnswer, Command, Instant, Key, Op, Outcome, Row, Run, Window};
use super::liveness::held_up;
use super::{Invariant, RACE_SLACK, Verdict};

/// acknowledged one before it.
pub fn cancelled_dues(ops: &[&Op], index: usize) -> Vec<Instant> {
    let mut dues = Vec::new();
    for op in ops[..index].iter().rev() {
        if let Some(due) = op.due_at() {
            dues.push(due);
            if op.decisive() {
                break;
            }
        }
    }
    dues
}

pub(super) fn check_keys(run: &Run, disturbed: &[Window], verdict: &mut Verdict) {
    // A command still unprocessed in the command stream when an operator deleted it went with
    // the stream: it counts as never acknowledged.
    let rollbacks = super::rollback_windows(run);
    let destroyed: Vec<Op> = run
        .ops
        .iter()
        .map(|op| {
            let mut op = op.clone();
            if op.outcome == Outcome::Acked
                && run.destroyed.iter().any(|w| w.contains(op.completed))
            {
                op.outcome = Outcome::Unknown("in the command stream when it was deleted".into());
            }
            // The previous release rejects a CancelTimers: one it may have read cancelled
            // nothing.
            if op.command == Command::CancelMany
                && rollbacks
                    .iter()
                    .any(|w| w.overlaps(op.invoked, op.completed + chrono::Duration::seconds(5)))
            {
                op.outcome = Outcome::Unknown("published while the previous release ran".into());
            }
            op
        })
        .collect();
    let mut by_key: BTreeMap<&Key, Vec<&Op>> = BTreeMap::new();
    for op in &destroyed {
        by_key.entry(&op.key).or_default().push(op);
    }
    let rows: HashMap<&Key, &Row> = run.rows.iter().map(|r| (&r.key, r)).collect();
    for (key, ops) in by_key {
        let fired: BTreeMap<Instant, Instant> = verdict
            .firings
            .range((key.clone(), Instant::MIN_UTC)..=(key.clone(), Instant::MAX_UTC))
            .map(|((_, due), f)| (*due, f.first))
            .collect();
        let row = rows.get(key).copied();
        check_key(key, &ops, row, &fired, disturbed, verdict);
    }
}

fn describe_row(row: Option<&Row>) -> String {
    match row {
        None => "no row".into(),
        Some(row) => match row.due_at {
            Some(due) => format!("row {} due {due}", row.state),
            None => format!("row {} (tombstone)", row.state),
        },
    }
}

/// (a), (c) and (d) for one key: its operations in order, its final row, and its firings
/// (dueAt → first seen).
pub fn check_key(
    key: &Key,
    ops: &[&Op],
    row: Option<&Row>,
    fired: &BTreeMap<Instant, Instant>,
    disturbed: &[Window],
    verdict: &mut Verdict,
) {
    // (c) a cancel the API answered `cancelled` is never followed by the cancelled firing,
    // unless a later schedule of the key set that same dueAt again (a re-sent command).
    let mut api_cancelled = BTreeSet::new();
    for (index, op) in ops.iter().enumerate() {
        if op.outcome == Outcome::Answered(CancelAnswer::Cancelled) {
            let set_again = |due: Instant| {
                ops[index + 1..]
                    .iter()
                    .any(|later| later.due_at() == Some(due))
            };
            for due in cancelled_dues(ops, index)
                .into_iter()
                .filter(|&due| !set_again(due))
            {
                api_cancelled.insert(due);
                if let Some(&at) = fired.get(&due) {
                    verdict.violate(
                        Invariant::CancelHolds,
                        op.completed,
                        Some(key),
                        format!(
                            "the API answered `cancelled` at {}, yet the timer due {due} fired at {at}",
                            op.completed
                        ),
                    );
                }
            }
        }
    }
    let Some(last) = ops.iter().rposition(|op| op.decisive()) else {
        return; // nothing known to have taken effect: any outcome is possible
    };
    let trailing = &ops[last + 1..];
    let row_state = row.map(|r| r.state.as_str());
    let row_due = row.and_then(|r| r.due_at);
    // The schedule that set the row's dueAt, if any.
    let setter = row_due.and_then(|due| ops.iter().rposition(|op| op.due_at() == Some(due)));
    let lost_race = |verdict: &mut Verdict, setter: usize| {
        let Some(&fired_at) = row_due.and_then(|due| fired.get(&due)) else {
            return false;
        };
        for op in ops[setter + 1..=last].iter().filter(|op| op.decisive()) {
            match op.outcome {
                Outcome::Answered(CancelAnswer::AlreadyReached) => continue,
                Outcome::Answered(CancelAnswer::Cancelled) => return true, // reported as (c)
                _ => {}
            }
            let excused = fired_at <= op.completed + RACE_SLACK
                || disturbed.iter().any(|w| held_up(w, op.completed, fired_at));
            if !excused {
                verdict.violate(
                    Invariant::LastWins,
                    op.completed,
                    Some(key),
                    format!(
                        "{:?} acknowledged at {} was ignored: the timer due {} fired at {}, \
                         {} ms after the acknowledgement, with no fault in between ({})",
                        op.command,
                        op.completed,
                        row_due.map_or_else(String::new, |d| d.to_string()),
                        fired_at,
                        (fired_at - op.completed).num_milliseconds(),
                        describe_row(row)
                    ),
                );
                return true;
            }
        }
        verdict.lost_races += 1;
        true
    };
    let op = ops[last];
    match (&op.command, &op.outcome) {
        (Command::Schedule { due_at, .. }, _) => {
            if let Some(&fired_at) = fired.get(due_at) {
                if row_state != Some("Reached") || row_due != Some(*due_at) {
                    verdict.violate(
                        Invariant::LastWins,
                        fired_at,
                        Some(key),
                        format!(
                            "fired (due {due_at}) but the final row is not Reached with that dueAt: {}",
                            describe_row(row)
                        ),
                    );
                }
                return;
            }
            // A command that may have been stored after it explains the row.
            let trailing_explains = trailing.iter().any(|t| match t.command {
                Command::Schedule { due_at, .. } => fired.contains_key(&due_at),
                Command::Cancel | Command::ApiCancel | Command::CancelMany => {
                    row_state == Some("Cancelled")
                }
            });
            if trailing_explains {
                return;
            }
            if row_state == Some("Reached")
                && let Some(setter) = setter.filter(|&s| s < last)
                && lost_race(verdict, setter)
            {
                return;
            }
            verdict.violate(
                Invariant::Fires,
                op.completed,
                Some(key),
                format!(
                    "acknowledged at {} (its key's last command), due {due_at}, never fired; {}",
                    op.completed,
                    describe_row(row)
                ),
            );
        }
        (Command::Cancel | Command::ApiCancel | Command::CancelMany, outcome) => {
            if *outcome == Outcome::Answered(CancelAnswer::AlreadyReached) && fired.is_empty() {
                verdict.violate(
                    Invariant::LastWins,
                    op.completed,
                    Some(key),
                    "the API answered `already_reached`, but no event of this key exists".into(),
                );
            }
            match row_state {
                Some("Cancelled") => {
                    for due in cancelled_dues(ops, last) {
                        if let Some(&at) = fired.get(&due)
                            && !api_cancelled.contains(&due)
                        {
                            verdict.violate(
                                Invariant::CancelHolds,
                                op.completed,
                                Some(key),
                                format!(
                                    "the final row is Cancelled (cancel acknowledged at {}), \
                                     yet the timer due {due} fired at {at}",
                                    op.completed
                                ),
                            );
                        }
                    }
                }
                Some("Reached") => {
                    let explained = match setter {
                        Some(s) if s > last => fired.contains_key(&row_due.unwrap_or_default()),
                        Some(s) => lost_race(verdict, s),
                        None => false,
                    };
                    if !explained {
                        verdict.violate(
                            Invariant::LastWins,
                            op.completed,
                            Some(key),
                            format!(
                                "{:?} acknowledged at {}: {} without an event to show for it",
                                op.command,
                                op.completed,
                                describe_row(row)
                            ),
                        );
                    }
                }
                _ => {
                    let explained = trailing.iter().any(|t| t.due_at().is_some())
                        && row_state == Some("Scheduled");
                    if !explained {
                        verdict.violate(
                            Invariant::LastWins,
                            op.completed,
                            Some(key),
                            format!(
                                "{:?} acknowledged at {} (its key's last command), but {}",
                                op.command,
                                op.completed,
                                describe_row(row)
                            ),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;

    #[test]
    fn a_schedule_that_never_fires_breaks_a() {
        let verdict = check(&run(
            vec![schedule("k1", 5_000, 10)],
            vec![],
            vec![row("k1", "Scheduled", Some(5_000))],
        ));
        assert_eq!(broken(&verdict), [Invariant::Fires]);
    }

    #[test]
    fn a_lost_command_breaks_a_but_an_unacknowledged_one_does_not() {
        let lost = check(&run(vec![schedule("k1", 5_000, 10)], vec![], vec![]));
        assert_eq!(broken(&lost), [Invariant::Fires]);
        let unknown = check(&run(
            vec![op(
                "k1",
                Command::Schedule {
                    due_at: t(5_000),
                    expire_after: None,
                },
                Outcome::Unknown("timeout".into()),
                4_000,
            )],
            vec![],
            vec![],
        ));
        assert!(unknown.violations.is_empty(), "{:?}", unknown.violations);
    }

    #[test]
    fn an_event_after_an_api_cancelled_breaks_c() {
        let verdict = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                op(
                    "k1",
                    Command::ApiCancel,
                    Outcome::Answered(CancelAnswer::Cancelled),
                    1_000,
                ),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&verdict), [Invariant::CancelHolds]);
    }

    #[test]
    fn an_event_set_again_after_an_api_cancel_keeps_c() {
        let verdict = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                op(
                    "k1",
                    Command::ApiCancel,
                    Outcome::Answered(CancelAnswer::Cancelled),
                    1_000,
                ),
                schedule("k1", 5_000, 2_000),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    }

    #[test]
    fn an_event_for_a_key_left_cancelled_breaks_c() {
        let verdict = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 1_000),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Cancelled", Some(5_000))],
        ));
        assert_eq!(broken(&verdict), [Invariant::CancelHolds]);
    }

    #[test]
    fn an_ignored_cancel_or_reschedule_breaks_d() {
        let cancel = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 1_000),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&cancel), [Invariant::LastWins]);
        let reschedule = check(&run(
            vec![schedule("k1", 5_000, 10), schedule("k1", 9_000, 1_000)],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&reschedule), [Invariant::LastWins]);
    }

    #[test]
    fn a_command_destroyed_with_its_stream_is_not_held_against_the_service() {
        let mut history = run(vec![schedule("k1", 5_000, 1_000)], vec![], vec![]);
        assert_eq!(broken(&check(&history)), [Invariant::Fires]);
        history.destroyed.push(Window {
            from: t(900),
            to: t(1_200),
        });
        let verdict = check(&history);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    }
}
