//! One tenant's load beside another's: the noisy neighbour and a steady load over 50 tenants,
//! and the heavy-read neighbour, for this build and, with `--baseline`, the earlier one measured
//! beside it.

use std::fmt::Write as _;

use super::{lateness_row, lateness_stat, median, show, verdict};
use crate::sections::BASELINE;
use crate::{Args, Figures};

/// Each build with the prefix of its keys and its label in the tables.
const BUILDS: [(&str, &str); 2] = [("", "new"), (BASELINE, "old")];

pub(super) fn tenants(r: &mut String, args: &Args, f: &Figures) {
    if !f.lateness.keys().any(|k| k.contains("tenants.")) {
        return;
    }
    let _ = writeln!(r, "\n## Tenants\n");
    let _ = writeln!(
        r,
        "Noisy neighbour: tenant `bulk` has {} timers due at one instant, tenant `small` 200 due \
         one every 5 ms from 200 ms after it, received on a connection of their own. `small`'s \
         lateness (received − dueAt, ms) and the seconds from the instant until nothing is pending \
         (\"drain\"). `old` is the `--baseline` build, run alternately with this one (`new`).\n",
        args.noisy_n
    );
    let _ = writeln!(
        r,
        "| build, store | p50 | p99 | p99.9 | max | early | missing | drain (s) |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let most = args.daemons.iter().copied().max().unwrap_or(1);
    let stores = [
        ("sqlite", "SQLite, 1 daemon".to_owned()),
        ("pg", format!("PostgreSQL, {most} daemons")),
    ];
    for (store, name) in &stores {
        for (prefix, label) in BUILDS {
            let key = format!("{prefix}tenants.noisy.{store}");
            if let Some(row) = lateness_row(f, &format!("{label}, {name}"), &key) {
                let drain = show(f, &format!("{key}.drain"), 2);
                let _ = writeln!(r, "{row} {drain} |");
            }
        }
    }
    let _ = writeln!(r, "\n| target | result | |\n| --- | --- | --- |");
    for (store, name) in &stores {
        let key = format!("tenants.noisy.{store}");
        let (Some(p99), Some(max)) = (
            lateness_stat(f, &key, |l| l.p99),
            lateness_stat(f, &key, |l| l.max),
        ) else {
            continue;
        };
        let _ = writeln!(
            r,
            "| {name}: quiet tenant p99 ≤ 50 ms, max ≤ 100 ms | {p99:.2} / {max:.2} ms | {} |",
            verdict(p99 <= 50.0 && max <= 100.0)
        );
        if let (Some(new), Some(old)) = (
            median(f, &format!("{key}.drain")),
            median(f, &format!("{BASELINE}{key}.drain")),
        ) {
            let _ = writeln!(
                r,
                "| {name}: burst drain ≤ 110% of the baseline's | {:.0}% ({new:.2} s vs {old:.2} s) | {} |",
                100.0 * new / old,
                verdict(new <= 1.1 * old)
            );
        }
    }
    let rate = args.rates.first().copied().unwrap_or(1000);
    let _ = writeln!(
        r,
        "\nSteady {rate}/s over 50 tenants, SQLite, 1 daemon (ms):\n\n\
         | build | p50 | p99 | p99.9 | max | early | missing |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    for (prefix, label) in BUILDS {
        if let Some(row) = lateness_row(f, label, &format!("{prefix}tenants.steady50")) {
            let _ = writeln!(r, "{row}");
        }
    }
}

/// The heavy-read neighbour: `small`'s lateness while `whale` reads, what became of the whale's
/// requests, and `/readyz` meanwhile.
pub(super) fn reads(r: &mut String, args: &Args, f: &Figures) {
    if !f.lateness.keys().any(|k| k.contains("reads.")) {
        return;
    }
    let _ = writeln!(r, "\n## Heavy reads beside a quiet tenant\n");
    let _ = writeln!(
        r,
        "How much one tenant's heavy API reads delay another tenant's timers, and whether the \
         daemon stays ready meanwhile. Tenant `whale` holds {} pending timers (due evenly over a \
         day from the hour after next) and asks `timer.api.stats.whale` with \
         `{{\"forecastMinutes\":1440}}` from {} clients, each asking again as soon as it is \
         answered, for {} s; meanwhile tenant `small` schedules 100 timers/s, each due 0.5 s \
         ahead, received on a connection of its own, and every daemon's `/readyz` is asked every \
         100 ms. `small`'s lateness (received − dueAt, ms); the whale's requests by their reply \
         (none within 15 s: unanswered); `/readyz` answers other than 200 within 1 s, of all \
         asked. `old` is the `--baseline` build, run alternately with this one (`new`).\n",
        args.whale_n, args.reads_requesters, args.reads_secs
    );
    let _ = writeln!(
        r,
        "| build, store | p50 | p99 | p99.9 | max | early | missing | whale: 200 | 503 | other | unanswered | `/readyz` not 200 |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let most = args.daemons.iter().copied().max().unwrap_or(1);
    let stores = [
        ("sqlite", "SQLite, 1 daemon".to_owned()),
        ("pg", format!("PostgreSQL, {most} daemons")),
    ];
    for (store, name) in &stores {
        for (prefix, label) in BUILDS {
            let key = format!("{prefix}reads.{store}");
            let Some(row) = lateness_row(f, &format!("{label}, {name}"), &key) else {
                continue;
            };
            let count = |what: &str| show(f, &format!("{key}.{what}"), 0);
            let _ = writeln!(
                r,
                "{row} {} | {} | {} | {} | {} of {} |",
                count("200"),
                count("503"),
                count("other"),
                count("unanswered"),
                count("readyz_not_ok"),
                count("readyz_polls"),
            );
        }
    }
}
