//! The peers figures: timer-service beside BullMQ and pg-boss on the same workloads, and the
//! ratios the targets are set in (ingest ≥ 1.5× the best peer's, fire ≥ 2×, p99 lateness ≥ 10×
//! lower).

use std::fmt::Write as _;

use super::{cpu, median, show};
use crate::sections::PEERS;
use crate::world::STORES;
use crate::{Args, Figures};

/// Every system with a figure in this run: the daemon on each store, then the peers.
fn systems(f: &Figures) -> Vec<(String, String)> {
    STORES
        .iter()
        .map(|(tag, label)| (tag.to_string(), format!("timer-service, {label}")))
        .chain(
            PEERS
                .iter()
                .map(|(tag, label)| (tag.to_string(), label.to_string())),
        )
        .filter(|(tag, _)| {
            f.rates.keys().any(|k| {
                k.starts_with("peers.")
                    && (k.ends_with(&format!(".{tag}")) || k.contains(&format!(".{tag}.")))
            })
        })
        .collect()
}

/// `ours ÷ best peer` of the medians of `what` (`{}` stands for the system's tag), and the best
/// peer's name; `invert` for figures where lower is better.
fn ratio(f: &Figures, what: &str, ours: &str, peers: &[&str], invert: bool) -> String {
    ratio_to(f, &what.replace("{}", ours), what, peers, invert)
}

/// [`ratio`] of the figure `mine` (ours, under another key than the peers').
fn ratio_to(f: &Figures, mine: &str, what: &str, peers: &[&str], invert: bool) -> String {
    let key = |tag: &str| what.replace("{}", tag);
    let Some(mine) = median(f, mine) else {
        return "n/a".into();
    };
    let theirs = peers
        .iter()
        .filter_map(|tag| median(f, &key(tag)).map(|v| (v, *tag)));
    let best = if invert {
        theirs.min_by(|a, b| a.0.total_cmp(&b.0))
    } else {
        theirs.max_by(|a, b| a.0.total_cmp(&b.0))
    };
    match best {
        Some((theirs, tag)) if invert => format!("{:.1}× lower than {tag}", theirs / mine),
        Some((theirs, tag)) => format!("{:.2}× {tag}", mine / theirs),
        None => "n/a".into(),
    }
}

pub(super) fn peers(r: &mut String, args: &Args, f: &Figures) {
    if !f.rates.keys().any(|k| k.starts_with("peers.")) {
        return;
    }
    let _ = writeln!(r, "\n## Beside BullMQ and pg-boss\n");
    let _ = writeln!(
        r,
        "The same machine and run; timer-service with its defaults and one daemon, BullMQ \
         6.7.0 on a Redis of its own with AOF, pg-boss 12.38.0 on the bench's PostgreSQL \
         (tuning: `examples/bench/peers/README.md`). Ingest: N stored from a backlog (ours: \
         commands queued, then the daemon started; theirs: bulk inserts) and from a live \
         client (1,000 awaiting their acknowledgement at once); ours one ScheduleTimer per \
         timer, and in ScheduleTimers of 500 (the `-many` columns). Fire: N due at one instant, \
         per second from the instant to the last (ours: the last marked `Reached`; theirs: \
         the last handler call). Lateness: `--rates` for {} s, each scheduled {} ms ahead \
         (ms; received − dueAt).\n",
        args.secs, args.lead_ms
    );
    let systems = systems(f);
    let mut header = String::from("| system |");
    let mut rule = String::from("| --- |");
    let mut columns: Vec<(String, usize)> = Vec::new();
    for n in &args.peers_n {
        for (what, label) in [
            ("ingest.backlog", "ingest backlog"),
            ("ingest.live", "ingest live"),
            (
                "ingest.backlog-many",
                "ingest backlog, ScheduleTimers of 500,",
            ),
            ("ingest.live-many", "ingest live, ScheduleTimers of 500,"),
            ("fire", "fire"),
        ] {
            let _ = write!(header, " {label} {n} /s |");
            rule.push_str(" --- |");
            columns.push((format!("peers.{what}.{n}"), 0));
        }
    }
    for rate in &args.rates {
        for p in ["p50", "p99"] {
            let _ = write!(header, " {p} at {rate}/s |");
            rule.push_str(" --- |");
            columns.push((format!("peers.late.{rate}.{{}}.{p}"), 1));
        }
    }
    let _ = writeln!(r, "{header}\n{rule}");
    for (tag, label) in &systems {
        let mut row = format!("| {label} |");
        for (column, decimals) in &columns {
            let key = if column.contains("{}") {
                column.replace("{}", tag)
            } else {
                format!("{column}.{tag}")
            };
            let _ = write!(row, " {} |", show(f, &key, *decimals));
        }
        let _ = writeln!(r, "{row}");
    }
    let _ = writeln!(
        r,
        "\nRatios of the medians, against the best peer (all peers for SQLite, pg-boss for PostgreSQL):\n"
    );
    let all: Vec<&str> = PEERS.iter().map(|(tag, _)| *tag).collect();
    for (ours, peers) in [("sqlite", all.clone()), ("pg", vec!["pgboss"])] {
        if median(f, &format!("peers.fire.{}.{ours}", args.peers_n[0])).is_none() {
            continue;
        }
        for n in &args.peers_n {
            for (what, target) in [
                ("ingest.backlog", "≥ 1.5×"),
                ("ingest.live", "≥ 1.5×"),
                ("fire", "≥ 2×"),
            ] {
                let _ = writeln!(
                    r,
                    "- {ours}, {what} {n}: {} (target {target})",
                    ratio(f, &format!("peers.{what}.{n}.{{}}"), ours, &peers, false)
                );
            }
            // The peers' ingest is in bulk calls: beside it, ours in ScheduleTimers too.
            for what in ["ingest.backlog", "ingest.live"] {
                let _ = writeln!(
                    r,
                    "- {ours}, {what} {n} as ScheduleTimers of 500: {} (target ≥ 1.5×)",
                    ratio_to(
                        f,
                        &format!("peers.{what}-many.{n}.{ours}"),
                        &format!("peers.{what}.{n}.{{}}"),
                        &peers,
                        false
                    )
                );
            }
        }
        for rate in &args.rates {
            let _ = writeln!(
                r,
                "- {ours}, p99 at {rate}/s: {} (target ≥ 10× lower)",
                ratio(
                    f,
                    &format!("peers.late.{rate}.{{}}.p99"),
                    ours,
                    &peers,
                    true
                )
            );
        }
    }
    let _ = writeln!(
        r,
        "\nThe daemon's start-up with a backlog (process start to its first command applied, ms):\n"
    );
    for (tag, label) in STORES {
        for n in &args.peers_n {
            let key = format!("peers.first.{n}.{tag}");
            if f.rates.contains_key(&key) {
                let _ = writeln!(
                    r,
                    "- {label}, backlog of {n}: {} (target ≤ 300)",
                    show(f, &key, 0)
                );
            }
        }
    }
    cores(r, args, f);
    let _ = writeln!(
        r,
        "\nTimers not received / received early in the lateness runs:\n"
    );
    for (tag, label) in &systems {
        for rate in &args.rates {
            let key = format!("peers.late.{rate}.{tag}");
            if let Some(failed) = f.rates.get(&format!("{key}.failed")) {
                let _ = writeln!(
                    r,
                    "- {label} at {rate}/s: the load failed in {} of {} runs (the driver's \
                     reason is in the bench's log)",
                    failed.len(),
                    args.runs
                );
            }
            if f.rates.contains_key(&format!("{key}.missing")) {
                let _ = writeln!(
                    r,
                    "- {label} at {rate}/s: {} / {}",
                    show(f, &format!("{key}.missing"), 0),
                    show(f, &format!("{key}.early"), 0)
                );
            }
        }
    }
}

/// Where the time of each of ours' ingests and fires went: the cores each process used over
/// the run (medians), the daemon, the broker and, on PostgreSQL, the server's backends.
fn cores(r: &mut String, args: &Args, f: &Figures) {
    let _ = writeln!(
        r,
        "\nCores used by each process while the daemon took in or fired the timers (medians):\n"
    );
    for (tag, label) in STORES {
        for n in &args.peers_n {
            for what in [
                "ingest.backlog",
                "ingest.live",
                "ingest.backlog-many",
                "ingest.live-many",
                "fire",
            ] {
                let key = format!("peers.{what}.{n}.{tag}");
                if f.cpu.contains_key(&key) {
                    let _ = writeln!(r, "- {label}, {what} {n}: {}", cpu(f, &key));
                }
            }
        }
    }
}
