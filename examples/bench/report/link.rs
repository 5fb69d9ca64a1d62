//! The broker link figures: how soon a silent path is noticed and firing resumes after it
//! heals, and the lateness and firing rate with a distant broker.

use std::fmt::Write as _;

use super::show;
use crate::Figures;
use crate::sections::{DISTANT_LATENCY, DISTANT_RATE, DISTANT_SECS};
use crate::stats::{Lateness, Spread};
use crate::workloads::SILENCE;

/// The two silences: key tag and column head.
const SILENCES: [(&str, &str); 2] = [("both", "both ways"), ("one_way", "daemon to broker only")];

pub(super) fn link(r: &mut String, f: &Figures) {
    let silent = |tag: &str, what: &str| format!("link.silent.{tag}.{what}");
    if !SILENCES
        .iter()
        .any(|(tag, _)| f.rates.contains_key(&silent(tag, "first_s")))
        && !f.lateness.contains_key("link.distant")
    {
        return;
    }
    let _ = writeln!(r, "\n## The broker link\n");
    let _ = writeln!(
        r,
        "SQLite, one daemon, default configuration, its broker reached through a TCP proxy \
         (`tests/common/net_proxy.rs`). A silent path: 100 timers due a second from before a \
         {} s silence to after it; the proxy stops forwarding (both ways, or daemon to broker \
         only; sockets kept open), then a new path is there (connections the silence caught \
         stay dead). Both ways, the timers due during the silence begin 7 s into it; one way, \
         with it. Seconds; firing is when the broker stored each timer's first \
         `DueTimeReached`.\n",
        SILENCE.as_secs()
    );
    let _ = writeln!(
        r,
        "| figure | {} | {} |\n| --- | --- | --- |",
        SILENCES[0].1, SILENCES[1].1
    );
    // Each row: its figure, and the decimals of its median (range), or `None` for a count
    // summed over the runs.
    let rows = [
        ("noticed (`/readyz` not 200)", "noticed_s", Some(2)),
        ("runs not noticed within the silence", "unnoticed", None),
        (
            "`/readyz` 200 after that, of the polls until the heal",
            "ready_while_silent",
            None,
        ),
        (
            "first timer due during the silence fired, after the heal",
            "first_s",
            Some(2),
        ),
        (
            "last timer due during the silence fired, after the heal",
            "last_s",
            Some(2),
        ),
        (
            "timers due 1–4 s after the heal: lateness p50",
            "after_p50_s",
            Some(2),
        ),
        (
            "timers due 1–4 s after the heal: latest",
            "after_max_s",
            Some(2),
        ),
        ("timers not fired within 60 s of the heal", "missing", None),
    ];
    for (name, what, decimals) in rows {
        let cells: Vec<String> = SILENCES
            .iter()
            .map(|(tag, _)| {
                let key = silent(tag, what);
                let total = |key: &str| {
                    f.rates.get(key).map_or("n/a".into(), |runs| {
                        format!("{:.0}", runs.iter().sum::<f64>())
                    })
                };
                match (decimals, what) {
                    (Some(decimals), _) => show(f, &key, decimals),
                    (None, "ready_while_silent") => {
                        format!("{} of {}", total(&key), total(&silent(tag, "ready_polls")))
                    }
                    (None, _) => total(&key),
                }
            })
            .collect();
        let _ = writeln!(r, "| {name} | {} | {} |", cells[0], cells[1]);
    }
    let Some(runs) = f.lateness.get("link.distant") else {
        return;
    };
    let _ = writeln!(
        r,
        "\nA distant broker: {} timers stored, then the proxy delays every chunk {} ms each way; \
         from 10 s later the timers fall due evenly over {DISTANT_SECS} s ({DISTANT_RATE}/s). \
         Lateness to when the broker stored each `DueTimeReached`, ms; fired per second from \
         the first `dueAt` to the last event stored.\n",
        DISTANT_RATE * DISTANT_SECS,
        DISTANT_LATENCY.as_millis()
    );
    let s =
        |pick: fn(&Lateness) -> f64| Spread::of(&runs.iter().map(pick).collect::<Vec<_>>()).show(0);
    let missing: usize = runs.iter().map(|l| l.missing).sum();
    let _ = writeln!(
        r,
        "| p50 | p99 | max | fired /s | missing |\n| --- | --- | --- | --- | --- |\n\
         | {} | {} | {} | {} | {missing} |",
        s(|l| l.p50),
        s(|l| l.p99),
        s(|l| l.max),
        show(f, "link.distant.per_second", 0)
    );
}
