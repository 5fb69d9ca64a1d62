//! The recovery figures: a `kill -9` in the middle of a burst of commands, and one tenant's
//! backlog of commands in front of another's at start-up, for this build and, with
//! `--baseline`, the earlier one measured beside it (their ratios are in `baseline`).

use std::fmt::Write as _;

use super::show;
use crate::Figures;
use crate::sections::BASELINE;
use crate::stats::{Lateness, Spread};
use crate::workloads::{BULK_N, CRASH_N, CRASH_RATE};

/// Each build with the prefix of its keys and its label in the tables.
const BUILDS: [(&str, &str); 2] = [("", "new"), (BASELINE, "old")];

/// One statistic of a lateness across the runs, `median (min–max)`, in ms.
fn late(f: &Figures, key: &str, pick: fn(&Lateness) -> f64) -> Option<String> {
    let runs = f.lateness.get(key)?;
    Some(Spread::of(&runs.iter().map(pick).collect::<Vec<_>>()).show(0))
}

pub(super) fn recovery(r: &mut String, f: &Figures) {
    let crash = |prefix: &str| format!("{prefix}crash.sqlite");
    let intake = |prefix: &str| format!("{prefix}intake.sqlite");
    if !BUILDS
        .iter()
        .any(|(p, _)| f.lateness.contains_key(&crash(p)) || f.lateness.contains_key(&intake(p)))
    {
        return;
    }
    let _ = writeln!(r, "\n## Crash and intake\n");
    if BUILDS
        .iter()
        .any(|(p, _)| f.lateness.contains_key(&crash(p)))
    {
        let _ = writeln!(
            r,
            "Crash: a client sends {CRASH_N} ScheduleTimers of one tenant, {CRASH_RATE} a \
             second, each due 3 s after it is sent; 1.5 s after the first, the daemon (SQLite) \
             gets `kill -9` and is started again 0.5 s later. Every acknowledged timer must fire; \
             lateness is its first event's receipt − `dueAt` (ms). \"held\" is the commands \
             delivered to the daemon and not acknowledged by it just before the kill.\n"
        );
        let _ = writeln!(
            r,
            "| build | acknowledged | fired | > 1 s late | p50 | p99 | max | held at the kill | \
             burst sent in (s) | duplicates |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for (prefix, label) in BUILDS {
            let key = crash(prefix);
            let (Some(p50), Some(p99), Some(max)) = (
                late(f, &key, |l| l.p50),
                late(f, &key, |l| l.p99),
                late(f, &key, |l| l.max),
            ) else {
                continue;
            };
            let n = |what: &str, decimals| show(f, &format!("{key}.{what}"), decimals);
            let _ = writeln!(
                r,
                "| {label} | {} | {} | {} | {p50} | {p99} | {max} | {} | {} | {} |",
                n("acked", 0),
                n("fired", 0),
                n("over_1s", 0),
                n("held", 0),
                n("send_s", 2),
                n("duplicates", 0),
            );
        }
    }
    if BUILDS
        .iter()
        .any(|(p, _)| f.lateness.contains_key(&intake(p)))
    {
        let _ = writeln!(
            r,
            "\nIntake: tenant `bulk` has {BULK_N} commands queued (timers due a day ahead) while \
             the daemon (SQLite) is stopped; the daemon starts, and right after, tenant `small` \
             schedules 20 timers, one every 50 ms, each due 2 s after it is sent. `small`'s \
             lateness (ms) and the seconds from the daemon's start until the command stream is \
             empty (drain).\n"
        );
        let _ = writeln!(
            r,
            "| build | `small` p50 | `small` max | missing | drain (s) |\n| --- | --- | --- | --- | --- |"
        );
        for (prefix, label) in BUILDS {
            let key = intake(prefix);
            let (Some(p50), Some(max), Some(runs)) = (
                late(f, &key, |l| l.p50),
                late(f, &key, |l| l.max),
                f.lateness.get(&key),
            ) else {
                continue;
            };
            let missing: usize = runs.iter().map(|l| l.missing).sum();
            let drain = show(f, &format!("{key}.drain"), 2);
            let _ = writeln!(r, "| {label} | {p50} | {max} | {missing} | {drain} |");
        }
    }
}
