//! One tenant's load beside another's: the noisy neighbour and a steady load over 50 tenants, for
//! this build and, with `--baseline`, the earlier one measured beside it.

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
