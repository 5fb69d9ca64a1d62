//! Invariant (f), liveness: after each fault heals, every tenant's probe fires within
//! [`LIVENESS_BOUND`]; and the periods a fault disturbs, in which a command may lose to a firing
//! it was held up behind ((d), judged in `keys`).

use std::collections::{BTreeMap, HashMap};

use chrono::Duration;

use super::super::history::{Instant, Key, Run, Window};
use super::{DISTURBED_GRACE, Firing, Invariant, RACE_SLACK, Verdict};

/// How long after a fault heals every tenant's probe timer must have fired.
pub const LIVENESS_BOUND: Duration = Duration::seconds(20);

/// Per fault: the time from its heal until every probe had fired (`None`: some never did, or
/// the fault was skipped).
pub fn refire_times(
    run: &Run,
    firings: &BTreeMap<(Key, Instant), Firing>,
) -> Vec<Option<Duration>> {
    let mut dues: HashMap<&Key, Vec<Instant>> = HashMap::new();
    for op in &run.ops {
        if let Some(due) = op.due_at() {
            dues.entry(&op.key).or_default().push(due);
        }
    }
    run.faults
        .iter()
        .map(|fault| {
            if fault.skipped.is_some() || fault.probes.is_empty() {
                return None;
            }
            let mut worst = Duration::zero();
            for probe in &fault.probes {
                let fired = dues
                    .get(probe)?
                    .iter()
                    .filter_map(|due| firings.get(&(probe.clone(), *due)))
                    .map(|f| f.first)
                    .min()?;
                worst = worst.max(fired - fault.healed);
            }
            Some(worst)
        })
        .collect()
}

pub(super) fn check_liveness(run: &Run, verdict: &mut Verdict) {
    for (fault, refire) in run.faults.iter().zip(verdict.refire.clone()) {
        if fault.skipped.is_some() || fault.probes.is_empty() {
            continue;
        }
        match refire {
            Some(took) if took <= LIVENESS_BOUND => {}
            Some(took) => verdict.violate(
                Invariant::Liveness,
                fault.healed,
                fault.probes.first(),
                format!(
                    "after {}: the probes (and the fault's own timers) had all fired only {} s after the heal",
                    fault.name,
                    took.num_milliseconds() as f64 / 1000.0
                ),
            ),
            None => verdict.violate(
                Invariant::Liveness,
                fault.healed,
                fault.probes.first(),
                format!(
                    "after {}: a probe timer (or one of the fault's own) never fired (run ended {} s after the heal)",
                    fault.name,
                    run.ended
                        .map_or(0, |end| (end - fault.healed).num_seconds())
                ),
            ),
        }
    }
}

/// Periods in which a command may be held up: each fault that disturbs (not one tenant's heavy
/// reads, which the service must absorb) from its start until its probes fired (the whole rest
/// of the run if they never did), and at least until the commands the service held when it
/// broke are delivered again (the command consumer's ack wait after the heal), plus
/// [`DISTURBED_GRACE`]. Periods that overlap are one: a command held up by one fault (waiting
/// for its ack wait) may be held further by the next that begins meanwhile.
pub fn disturbed_windows(run: &Run, refire: &[Option<Duration>]) -> Vec<Window> {
    let end = run
        .ended
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
    let held_back = Duration::from_std(timer_service::ports::COMMAND_ACK_WAIT)
        .unwrap_or_else(|_| Duration::seconds(5));
    let mut windows: Vec<Window> = run
        .faults
        .iter()
        .zip(refire)
        .filter(|(fault, _)| fault.skipped.is_none() && fault.disturbs)
        .map(|(fault, refire)| Window {
            from: fault.started,
            to: refire.map_or(end, |took| {
                let healed = fault.healed + took.max(held_back);
                healed.max(fault.lingers_until.unwrap_or(healed)) + DISTURBED_GRACE
            }),
        })
        .collect();
    windows.sort_by_key(|w| w.from);
    let mut merged: Vec<Window> = Vec::with_capacity(windows.len());
    for window in windows {
        match merged.last_mut() {
            Some(last) if window.from <= last.to => last.to = last.to.max(window.to),
            _ => merged.push(window),
        }
    }
    merged
}

/// Whether a fault (its disturbed window `w`) may have held up a command acknowledged at
/// `acked` until after a firing at `fired`: the command was acknowledged while the fault was on
/// (or a moment before it began, not yet applied), and the firing came before the service was
/// shown to be processing commands again.
pub fn held_up(w: &Window, acked: Instant, fired: Instant) -> bool {
    w.from - RACE_SLACK <= acked && acked <= w.to && fired <= w.to + RACE_SLACK
}

/// The dueAts a cancel at `index` cancelled: those of the schedules since the last
#[cfg(test)]
mod tests {
    use super::super::super::history::FaultRecord;
    use super::super::tests::*;
    use super::super::*;

    #[test]
    fn a_command_that_lost_the_race_to_a_firing_is_allowed() {
        // The firing came (just) before the cancel was acknowledged.
        let raced = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 5_100),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert!(raced.violations.is_empty(), "{:?}", raced.violations);
        assert_eq!(raced.lost_races, 1);
        // A fault held the command up until after the firing.
        let mut held_up = run(
            vec![
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 1_000),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        );
        held_up.faults.push(FaultRecord {
            name: "daemon SIGSTOP".into(),
            started: t(500),
            healed: t(6_000),
            probes: vec![],
            skipped: None,
            notes: vec![],
            disturbs: true,
            lingers_until: None,
            heal_rule: None,
        });
        let verdict = check(&held_up);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    }

    #[test]
    fn a_fault_over_before_the_command_excuses_nothing() {
        let probe = key("probe-1");
        let mut history = run(
            vec![
                schedule("probe-1", 1_500, 600),
                schedule("k1", 12_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 9_000),
            ],
            vec![
                event("probe-1", 1_500, 1_501, 1_502),
                event("k1", 12_000, 12_001, 12_002),
            ],
            vec![
                row("probe-1", "Reached", Some(1_500)),
                row("k1", "Reached", Some(12_000)),
            ],
        );
        history.faults.push(FaultRecord {
            name: "daemon SIGKILL".into(),
            started: t(0),
            healed: t(500),
            probes: vec![probe],
            skipped: None,
            notes: vec![],
            disturbs: true,
            lingers_until: None,
            heal_rule: None,
        });
        // The fault's window ends 2 s after the commands it held are back (an ack wait, 4 s,
        // after the heal at 0.5 s): the cancel came later.
        let verdict = check(&history);
        assert_eq!(broken(&verdict), [Invariant::LastWins]);
    }

    #[test]
    fn a_command_held_by_a_killed_daemon_until_its_ack_wait_ran_out_is_excused() {
        let probe = key("probe-1");
        let mut history = run(
            vec![
                schedule("probe-1", 1_500, 600),
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 100),
            ],
            vec![
                event("probe-1", 1_500, 1_501, 1_502),
                event("k1", 5_000, 5_001, 5_002),
            ],
            vec![
                row("probe-1", "Reached", Some(1_500)),
                row("k1", "Reached", Some(5_000)),
            ],
        );
        history.faults.push(FaultRecord {
            name: "daemon SIGKILL".into(),
            started: t(0),
            healed: t(500),
            probes: vec![probe],
            skipped: None,
            notes: vec![],
            disturbs: true,
            lingers_until: None,
            heal_rule: None,
        });
        // The cancel was delivered to the daemon killed at 0 and came back an ack wait later,
        // after the timer fired at 5 s.
        let verdict = check(&history);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    }

    #[test]
    fn a_command_held_by_one_fault_and_then_by_the_next_is_excused_only_if_they_overlap() {
        let fault = |name: &str, started, healed, probe: &str| FaultRecord {
            name: name.into(),
            started: t(started),
            healed: t(healed),
            probes: vec![key(probe)],
            skipped: None,
            notes: vec![],
            disturbs: true,
            lingers_until: None,
            heal_rule: None,
        };
        // The cancel, acknowledged just before the broker was killed at 0, waits for its ack
        // wait (4 s after the heal at 0.5 s); the broker is frozen from `frozen` to 12 s, and
        // the timer fires at 15 s, as the broker is back, before the cancel comes again.
        let history = |frozen| {
            let mut history = run(
                vec![
                    schedule("k1", 14_000, 10),
                    op("k1", Command::Cancel, Outcome::Acked, 100),
                    schedule("probe-1", 1_500, 600),
                    schedule("probe-2", 13_000, 12_100),
                ],
                vec![
                    event("probe-1", 1_500, 1_501, 1_502),
                    event("probe-2", 13_000, 13_001, 13_002),
                    event("k1", 14_000, 15_000, 15_001),
                ],
                vec![
                    row("probe-1", "Reached", Some(1_500)),
                    row("probe-2", "Reached", Some(13_000)),
                    row("k1", "Reached", Some(14_000)),
                ],
            );
            history
                .faults
                .push(fault("broker SIGKILL", 0, 500, "probe-1"));
            history
                .faults
                .push(fault("broker SIGSTOP", frozen, 12_000, "probe-2"));
            history
        };
        // The first fault's period lasts until 6.5 s: the freeze began within it.
        let verdict = check(&history(6_000));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        // A freeze that began after it excuses nothing.
        let verdict = check(&history(9_000));
        assert_eq!(broken(&verdict), [Invariant::LastWins]);
    }

    #[test]
    fn a_fault_after_which_nothing_fires_breaks_f() {
        let probe = key("probe-1");
        let fault = |healed| FaultRecord {
            name: "broker SIGKILL".into(),
            started: t(0),
            healed: t(healed),
            probes: vec![probe.clone()],
            skipped: None,
            notes: vec![],
            disturbs: true,
            lingers_until: None,
            heal_rule: None,
        };
        let mut wedged = run(vec![schedule("probe-1", 2_000, 1_010)], vec![], vec![]);
        wedged.faults.push(fault(1_000));
        let verdict = check(&wedged);
        assert!(broken(&verdict).contains(&Invariant::Liveness));
        assert_eq!(verdict.refire, [None]);

        let mut live = run(
            vec![schedule("probe-1", 2_000, 1_010)],
            vec![event("probe-1", 2_000, 2_001, 2_003)],
            vec![row("probe-1", "Reached", Some(2_000))],
        );
        live.faults.push(fault(1_000));
        let verdict = check(&live);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert_eq!(verdict.refire, [Some(Duration::milliseconds(1_003))]);
    }

    #[test]
    fn a_dead_connection_the_broker_keeps_disturbs_until_it_is_dropped() {
        let silent = |lingers_until| FaultRecord {
            name: "broker path silent 8s".into(),
            started: t(0),
            healed: t(10_000),
            probes: vec![],
            skipped: None,
            notes: vec![],
            disturbs: true,
            lingers_until,
            heal_rule: None,
        };
        let mut history = run(vec![], vec![], vec![]);
        history.faults.push(silent(None));
        let refire = [Some(Duration::seconds(2))];
        // Healed at 10 s, the ack wait (4 s) past it, and the grace.
        let window = disturbed_windows(&history, &refire)[0];
        assert_eq!(window.to, t(16_000));
        history.faults[0] = silent(Some(t(20_000)));
        let window = disturbed_windows(&history, &refire)[0];
        assert_eq!(window.to, t(22_000));
    }
}
