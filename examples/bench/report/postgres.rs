//! PostgreSQL with several daemons: ingest, fire and lateness, where the CPU goes, PostgreSQL's
//! CPU per item, and failover.

use std::fmt::Write as _;

use super::{cpu, lateness_stat, postgres_us, show};
use crate::stats::Lateness;
use crate::{Args, DEFAULT_BATCH, Figures};

pub(super) fn postgres(r: &mut String, args: &Args, f: &Figures) {
    if !f.rates.keys().any(|k| k.starts_with("pg.")) {
        return;
    }
    let rate = args.rates.first().copied().unwrap_or(1000);
    let _ = writeln!(r, "\n## PostgreSQL and several daemons\n");
    let _ = writeln!(
        r,
        "Same workloads, default configuration; lateness at {rate}/s. Daemons, broker and PostgreSQL share the 2 cores.\n"
    );
    let _ = writeln!(
        r,
        "| store, daemons | ingest /s | fire /s | lateness p50 | p99 | missing |\n| --- | --- | --- | --- | --- | --- |"
    );
    let row = |name: &str, ingest: &str, fire: &str, late: &str| {
        let s = |pick: fn(&Lateness) -> f64| {
            lateness_stat(f, late, pick).map_or("n/a".into(), |v| format!("{v:.2}"))
        };
        let missing: usize = f
            .lateness
            .get(late)
            .map_or(0, |v| v.iter().map(|l| l.missing).sum());
        format!(
            "| {name} | {} | {} | {} | {} | {missing} |",
            show(f, ingest, 0),
            show(f, fire, 0),
            s(|l| l.p50),
            s(|l| l.p99)
        )
    };
    let _ = writeln!(
        r,
        "{}",
        row(
            "SQLite, 1",
            &format!("ingest.{DEFAULT_BATCH}"),
            &format!("fire.{DEFAULT_BATCH}"),
            &format!("lateness.{rate}")
        )
    );
    for n in &args.daemons {
        let _ = writeln!(
            r,
            "{}",
            row(
                &format!("PostgreSQL, {n}"),
                &format!("pg.ingest.{n}"),
                &format!("pg.fire.{n}"),
                &format!("pg.lateness.{n}")
            )
        );
    }
    let _ = writeln!(r, "\nCPU (cores of 2), where the time goes:\n");
    let _ = writeln!(r, "| store, daemons | ingest | fire |\n| --- | --- | --- |");
    let _ = writeln!(
        r,
        "| SQLite, 1 | {} | {} |",
        cpu(f, &format!("ingest.{DEFAULT_BATCH}")),
        cpu(f, &format!("fire.{DEFAULT_BATCH}"))
    );
    for n in &args.daemons {
        let _ = writeln!(
            r,
            "| PostgreSQL, {n} | {} | {} |",
            cpu(f, &format!("pg.ingest.{n}")),
            cpu(f, &format!("pg.fire.{n}"))
        );
    }
    let _ = writeln!(
        r,
        "\nPostgreSQL's CPU per command stored and per timer fired (its cores ÷ the rate):\n"
    );
    let _ = writeln!(
        r,
        "| daemons | µs per command | µs per timer |\n| --- | --- | --- |"
    );
    for n in &args.daemons {
        let _ = writeln!(
            r,
            "| {n} | {} | {} |",
            postgres_us(f, &format!("pg.ingest.{n}")),
            postgres_us(f, &format!("pg.fire.{n}"))
        );
    }
    for tag in ["kill", "freeze"] {
        let key = format!("pg.failover.{tag}.after_fault");
        if f.rates.contains_key(&key) {
            let most = args.daemons.iter().max().copied().unwrap_or(1);
            let _ = writeln!(
                r,
                "\nFailover, {most} daemons, {} timers due at once, the first daemon {} 300 ms after \
                 that instant: the last timer marked {} s after the fault ({} s after the due instant; \
                 claim lease 30 s).",
                args.failover_n,
                if tag == "kill" {
                    "killed (`kill -9`)"
                } else {
                    "frozen (SIGSTOP)"
                },
                show(f, &key, 1),
                show(f, &format!("pg.failover.{tag}.drain"), 1)
            );
        }
    }
}
