//! The backup figures: how long a backup of a live SQLite file takes, and what it costs the
//! daemon (its lateness under a steady load) and a writer's commits.

use std::fmt::Write as _;

use super::{lateness_row, show};
use crate::stats::Lateness;
use crate::{Args, Figures};

pub(super) fn backup(r: &mut String, args: &Args, f: &Figures) {
    if !f.lateness.contains_key("backup.running") {
        return;
    }
    let rate = args.rates.first().copied().unwrap_or(1000);
    let _ = writeln!(r, "\n## Backup of a live SQLite file\n");
    let _ = writeln!(
        r,
        "{} pending timers (due in 2099) in the file; a steady load of {rate} timers/s for {} s, \
         each scheduled {} ms ahead, without backups and with `timer-service backup` taken back \
         to back for the whole load ({} per run).\n",
        args.backup_n,
        args.secs,
        args.lead_ms,
        show(f, "backup.count", 0)
    );
    let _ = writeln!(
        r,
        "| one backup | copy (`VACUUM INTO`), s | the command, start to exit, s | size, MB |\n\
         | --- | --- | --- | --- |\n| | {} | {} | {} |",
        show(f, "backup.copy_s", 3),
        show(f, "backup.total_s", 3),
        show(f, "backup.mb", 1)
    );
    let _ = writeln!(
        r,
        "\n| lateness (ms) | p50 | p99 | p99.9 | max | early | missing |\n\
         | --- | --- | --- | --- | --- | --- | --- |"
    );
    for (name, key) in [
        ("no backup", "backup.none"),
        ("backups back to back", "backup.running"),
    ] {
        if let Some(row) = lateness_row(f, name, key) {
            let _ = writeln!(r, "{row}");
        }
    }
    let _ = writeln!(
        r,
        "\nA writer's commit (one-row upsert, `synchronous = FULL`, a connection of its own, no \
         daemon), ms:\n\n| writer | commits | p50 | p99 | p99.9 | max |\n| --- | --- | --- | --- | --- | --- |"
    );
    for (name, key) in [
        ("alone", "backup.writer.alone"),
        ("beside backups back to back", "backup.writer.beside"),
    ] {
        let Some(runs) = f.lateness.get(key) else {
            continue;
        };
        let s = |pick: fn(&Lateness) -> f64| {
            crate::stats::Spread::of(&runs.iter().map(pick).collect::<Vec<_>>()).show(2)
        };
        let _ = writeln!(
            r,
            "| {name} | {} | {} | {} | {} | {} |",
            show(f, &format!("{key}.commits"), 0),
            s(|x| x.p50),
            s(|x| x.p99),
            s(|x| x.p999),
            s(|x| x.max)
        );
    }
}
