//! The report: one row per fault (what was sent, acknowledged and fired while it was on and
//! until the next one, what broke, how long until new timers fired again), then the violations
//! with a few examples each.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::checker::{self, Invariant, Verdict};
use super::fairness;
use super::history::{Command, Instant, Outcome, Run};

/// The row a moment belongs to: the last fault started at or before it (0 = before any).
fn phase(run: &Run, t: Instant) -> usize {
    run.faults.iter().take_while(|f| f.started <= t).count()
}

fn phase_name(run: &Run, phase: usize) -> String {
    match phase {
        0 => "(no fault yet)".into(),
        n => run.faults[n - 1].name.clone(),
    }
}

#[derive(Default, Clone)]
struct Row {
    sent: usize,
    acked: usize,
    fired: usize,
    early: usize,
    duplicates: usize,
    /// The latest firing: after its dueAt, or after its PubAck when that came later.
    late: chrono::Duration,
    broken: BTreeMap<Invariant, usize>,
}

/// The table and the list of violations, as printed.
pub fn render(run: &Run, verdict: &Verdict, elapsed: std::time::Duration) -> String {
    let mut rows = vec![Row::default(); run.faults.len() + 1];
    for op in &run.ops {
        let row = &mut rows[phase(run, op.invoked)];
        row.sent += 1;
        row.acked += usize::from(op.decisive());
    }
    let acked: std::collections::HashMap<(&super::history::Key, Instant), Instant> = run
        .ops
        .iter()
        .filter_map(|op| op.due_at().map(|due| ((&op.key, due), op.completed)))
        .collect();
    for ((key, due), firing) in &verdict.firings {
        let row = &mut rows[phase(run, firing.first)];
        row.fired += 1;
        let since = acked.get(&(key, *due)).map_or(*due, |a| (*a).max(*due));
        row.late = row.late.max(firing.first - since);
    }
    for (_, _, at) in &verdict.early {
        rows[phase(run, *at)].early += 1;
    }
    for (_, _, at) in &verdict.duplicates {
        rows[phase(run, *at)].duplicates += 1;
    }
    for violation in &verdict.violations {
        *rows[phase(run, violation.at)]
            .broken
            .entry(violation.invariant)
            .or_default() += 1;
    }

    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nfault-injection run: {} s, {} operations, {} events stored, {} rows at the end, {} \
         commands left in the command stream",
        elapsed.as_secs(),
        run.ops.len(),
        run.stream.len(),
        run.rows.len(),
        run.commands_left
            .map_or_else(|| "unknown".to_owned(), |n| n.to_string())
    );
    let letters: Vec<&str> = Invariant::ALL.iter().map(|i| i.letter()).collect();
    let _ = writeln!(
        out,
        "{:<28} {:>6} {:>6} {:>6} {:>7} {:>5} {:>4}  {}  {:>12}",
        "fault",
        "sent",
        "acked",
        "fired",
        "late",
        "early",
        "dup",
        letters
            .iter()
            .map(|l| format!("{l:>4}"))
            .collect::<String>(),
        "fires again"
    );
    for (index, row) in rows.iter().enumerate() {
        let refire = match index
            .checked_sub(1)
            .map(|i| (&run.faults[i], verdict.refire[i]))
        {
            None => String::new(),
            Some((fault, _)) if fault.skipped.is_some() => "skipped".into(),
            Some((_, Some(took))) => format!("{} ms", took.num_milliseconds()),
            Some((_, None)) => "never".into(),
        };
        let broken: String = Invariant::ALL
            .iter()
            .map(|i| match row.broken.get(i) {
                Some(n) => format!("{n:>4}"),
                None => format!("{:>4}", "."),
            })
            .collect();
        let _ = writeln!(
            out,
            "{:<28} {:>6} {:>6} {:>6} {:>6.1}s {:>5} {:>4}  {broken}  {refire:>12}",
            phase_name(run, index),
            row.sent,
            row.acked,
            row.fired,
            row.late.num_milliseconds() as f64 / 1000.0,
            row.early,
            row.duplicates
        );
    }
    let _ = writeln!(out, "invariants:");
    for invariant in Invariant::ALL {
        let _ = writeln!(out, "  ({}) {}", invariant.letter(), invariant.describe());
    }
    for fault in &run.faults {
        if let Some(why) = &fault.skipped {
            let _ = writeln!(out, "  {}: skipped: {why}", fault.name);
        }
        for note in &fault.notes {
            let _ = writeln!(out, "  {}: {note}", fault.name);
        }
    }
    let disturbed = checker::disturbed_windows(run, &verdict.refire);
    for busy in fairness::busy_periods(run, &disturbed, verdict) {
        let mut late: Vec<_> = busy.others.iter().map(|o| o.late).collect();
        late.sort();
        let worst = busy.others.iter().max_by_key(|other| other.late);
        let bound = busy.bound();
        let over = late.iter().filter(|l| **l > bound).count();
        let _ = writeln!(
            out,
            "  while {} ({} ms): {} other tenants' timers due meanwhile, {over} more than {} ms \
             late; median {} ms, the latest {}",
            busy.load.describe(),
            (busy.during.to - busy.during.from).num_milliseconds(),
            late.len(),
            bound.num_milliseconds(),
            late.get(late.len() / 2).map_or(0, |l| l.num_milliseconds()),
            worst.map_or("-".into(), |w| format!(
                "{} ms late ({})",
                w.late.num_milliseconds(),
                w.key
            ))
        );
    }
    for found in &verdict.after_heal {
        let fault = &run.faults[found.fault];
        let ms = |d: chrono::Duration| d.num_milliseconds();
        let _ = writeln!(
            out,
            "  ({}) after {}: {} timers acknowledged before the heal judged, {} more than {} s \
             late; from the later of dueAt and the heal: median {} ms, p99 {} ms, the latest {} \
             ms ({}); not judged: {} held past the next fault's start, {} never fired (judged \
             by (a) and (d)), {} in a deleted command stream",
            found.rule.invariant().letter(),
            fault.name,
            found.late.len(),
            found.over(),
            found.rule.bound().num_seconds(),
            ms(found.quantile(0.5)),
            ms(found.quantile(0.99)),
            ms(found.quantile(1.0)),
            found.latest.as_ref().map_or("-".into(), |k| k.to_string()),
            found.after_next_fault,
            found.never_fired,
            found.destroyed
        );
    }
    for (flood, found) in run.quota_floods.iter().zip(&verdict.quota_floods) {
        let _ = writeln!(
            out,
            "  ({}) {} schedules of {} past its quota, {} acknowledged: {} stored, {} refused, \
             {} both, {} acknowledged and neither",
            Invariant::RefusalFinal.letter(),
            flood.sent.len(),
            flood.tenant,
            found.acknowledged,
            found.stored,
            found.refused,
            found.both,
            found.neither
        );
    }
    let _ = writeln!(
        out,
        "  commands re-sent after a failed publish: {}; commands that lost a race to a \
         firing (allowed): {}; duplicates: {}; firings published as TimerExpired: {}",
        run.ops.iter().filter(|op| op.attempts > 1).count(),
        verdict.lost_races,
        verdict.duplicates.len(),
        verdict.expired
    );
    let summary = summary(run, verdict);
    if !summary.is_empty() {
        out.push_str(&summary);
    }
    out
}

/// Each violated invariant with its count and a few examples (empty when none was violated).
pub fn summary(run: &Run, verdict: &Verdict) -> String {
    let mut out = String::new();
    for invariant in Invariant::ALL {
        let found: Vec<_> = verdict
            .violations
            .iter()
            .filter(|v| v.invariant == invariant)
            .collect();
        if found.is_empty() {
            continue;
        }
        let mut by_phase: BTreeMap<usize, usize> = BTreeMap::new();
        for v in &found {
            *by_phase.entry(phase(run, v.at)).or_default() += 1;
        }
        let phases: Vec<String> = by_phase
            .iter()
            .map(|(p, n)| format!("{n} during/after {}", phase_name(run, *p)))
            .collect();
        let _ = writeln!(
            out,
            "VIOLATED ({}) {}: {} times ({})",
            invariant.letter(),
            invariant.describe(),
            found.len(),
            phases.join(", ")
        );
        // Examples from each phase where it broke, a few per phase; the first with its key's
        // whole story.
        for p in by_phase.keys() {
            for (n, v) in found
                .iter()
                .filter(|v| phase(run, v.at) == *p)
                .take(3)
                .enumerate()
            {
                let key = v.key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default();
                let _ = writeln!(out, "    [{}] {key}{}", phase_name(run, *p), v.detail);
                if let Some(key) = v.key.as_ref().filter(|_| n == 0) {
                    out.push_str(&story(run, verdict, key));
                }
            }
        }
    }
    out
}

/// Everything recorded about one key: its operations, its firings and its final row.
fn story(run: &Run, verdict: &Verdict, key: &super::history::Key) -> String {
    let time = |t: Instant| t.format("%H:%M:%S%.3f").to_string();
    let mut out = String::new();
    for op in run.ops.iter().filter(|op| &op.key == key) {
        let command = match &op.command {
            Command::Schedule { due_at, .. } => format!("schedule due {}", time(*due_at)),
            Command::Cancel => "cancel".into(),
            Command::ApiCancel => "API cancel".into(),
            Command::CancelMany => "cancel-many (by correlation id)".into(),
        };
        let outcome = match &op.outcome {
            Outcome::Acked => "acked".into(),
            Outcome::Answered(answer) => format!("answered {answer:?}"),
            Outcome::Unknown(why) => format!("unknown ({why})"),
        };
        let _ = writeln!(
            out,
            "        {} {command}: {outcome} at {}",
            time(op.invoked),
            time(op.completed)
        );
    }
    for ((k, due), firing) in &verdict.firings {
        if k == key {
            let _ = writeln!(
                out,
                "        fired due {} first seen {} ({} stored)",
                time(*due),
                time(firing.first),
                firing.stored
            );
        }
    }
    let row = run.rows.iter().find(|r| &r.key == key);
    let _ = writeln!(
        out,
        "        final row: {}",
        row.map_or("none".into(), |r| format!(
            "{} due {}",
            r.state,
            r.due_at.map_or("-".into(), time)
        ))
    );
    for line in logged_of(run, verdict, key) {
        let _ = writeln!(out, "        log: {line}");
    }
    out
}

/// Lines the daemons logged of `key` while its story lasted: those naming it, and its
/// tenant's CancelTimers (a group's cancel names its correlation id, not its keys). At most
/// [`LOGGED_LINES`].
fn logged_of<'a>(run: &'a Run, verdict: &Verdict, key: &super::history::Key) -> Vec<&'a str> {
    let ops = run.ops.iter().filter(|op| &op.key == key);
    let Some(from) = ops.clone().map(|op| op.invoked).min() else {
        return Vec::new();
    };
    let fired = verdict
        .firings
        .iter()
        .filter(|((k, _), _)| k == key)
        .map(|(_, firing)| firing.first);
    let to = ops
        .map(|op| op.completed)
        .chain(fired)
        .max()
        .unwrap_or(from);
    let (from, to) = (
        from - chrono::Duration::seconds(1),
        to + chrono::Duration::seconds(1),
    );
    let tenant = format!("tenant_id={} ", key.tenant);
    let id = format!("service_call_id={}", key.id);
    let names_key = |line: &str| {
        line.match_indices(&id).any(|(at, _)| {
            line[at + id.len()..].starts_with([' ', ',', '}']) || line.len() == at + id.len()
        })
    };
    let during: Vec<&str> = run
        .daemon_log
        .iter()
        .filter(|line| {
            line.split_whitespace()
                .next()
                .and_then(|stamp| stamp.parse::<Instant>().ok())
                .is_some_and(|at| from <= at && at <= to)
        })
        .map(String::as_str)
        .collect();
    // Every line naming the key; its tenant's CancelTimers fill what is left of the limit (a
    // busy tenant logs dozens, which must not crowd the key's own lines out).
    let named = during.iter().filter(|line| names_key(line)).count();
    let mut cancels = LOGGED_LINES.saturating_sub(named);
    during
        .into_iter()
        .filter(|line| {
            names_key(line)
                || (cancels > 0 && line.contains(&tenant) && line.contains("CancelTimers") && {
                    cancels -= 1;
                    true
                })
        })
        .take(LOGGED_LINES)
        .collect()
}

/// The most daemon log lines a key's story shows.
const LOGGED_LINES: usize = 40;

#[cfg(test)]
mod tests {
    use super::super::checker::check;
    use super::super::checker::tests::{event, run, schedule, t};
    use super::{LOGGED_LINES, logged_of};

    #[test]
    fn a_keys_story_shows_the_lines_naming_it_and_its_tenants_cancels_while_it_lasted() {
        let mut history = run(
            vec![schedule("k1", 5_000, 1_000)],
            vec![event("k1", 5_000, 5_010, 5_020)],
            vec![],
        );
        let at = |ms: i64| t(ms).to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        history.daemon_log = vec![
            format!(
                "{} DEBUG command accepted tenant_id=acme service_call_id=k1 sequence=3",
                at(900)
            ),
            format!(
                "{} DEBUG command accepted tenant_id=acme service_call_id=k10 sequence=4",
                at(950)
            ),
            format!(
                "{} INFO CancelTimers begins tenant_id=acme sequence=9",
                at(2_000)
            ),
            format!(
                "{} INFO CancelTimers begins tenant_id=globex sequence=10",
                at(2_000)
            ),
            format!(
                "{} DEBUG DueTimeReached published tenant_id=acme service_call_id=k1",
                at(5_015)
            ),
            format!(
                "{} DEBUG command accepted tenant_id=acme service_call_id=k1 sequence=30",
                at(9_000)
            ),
        ];
        let verdict = check(&history);
        let key = &history.ops[0].key;
        let lines = logged_of(&history, &verdict, key);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines[0].ends_with("sequence=3"));
        assert!(lines[1].contains("CancelTimers begins tenant_id=acme"));
        assert!(lines[2].contains("DueTimeReached published"));
    }

    #[test]
    fn a_busy_tenants_cancels_do_not_crowd_the_keys_own_lines_out() {
        let mut history = run(
            vec![schedule("k1", 5_000, 1_000)],
            vec![event("k1", 5_000, 5_010, 5_020)],
            vec![],
        );
        let at = |ms: i64| t(ms).to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        history.daemon_log = (0..100)
            .map(|n| {
                format!(
                    "{} INFO CancelTimers begins tenant_id=acme sequence={n}",
                    at(2_000)
                )
            })
            .chain([format!(
                "{} DEBUG DueTimeReached published tenant_id=acme service_call_id=k1",
                at(5_015)
            )])
            .collect();
        let verdict = check(&history);
        let lines = logged_of(&history, &verdict, &history.ops[0].key);
        assert_eq!(lines.len(), LOGGED_LINES);
        assert!(
            lines[LOGGED_LINES - 1].contains("service_call_id=k1"),
            "{lines:#?}"
        );
    }
}
