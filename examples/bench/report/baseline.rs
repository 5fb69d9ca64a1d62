//! Beside the baseline: every figure a target compares with the previous version, for this build
//! and for the `--baseline` build measured alternately with it in the same runs, and their
//! ratio (the median of each run's ratio, so that a slower hour of the machine cancels out).

use std::fmt::Write as _;

use crate::sections::BASELINE;
use crate::stats::{Lateness, Spread};
use crate::{Args, DEFAULT_BATCH, Figures, TUNED_BATCH};

/// A figure as it is found among the [`Figures`], run by run.
enum Figure {
    /// A rate, a duration or a count.
    Rate(String),
    /// One statistic of a run's lateness.
    Late(String, fn(&Lateness) -> f64),
    /// One figure divided by another, in each run.
    Ratio(Box<Figure>, Box<Figure>),
    /// One figure less another, in each run.
    Less(Box<Figure>, Box<Figure>),
    /// The daemons' CPU per item of a throughput figure, µs (cores ÷ rate): what the work
    /// costs the daemon, whatever the disk and the machine's other work made it wait.
    CpuPer(String),
}

fn rate(key: impl Into<String>) -> Figure {
    Figure::Rate(key.into())
}

fn p50(key: impl Into<String>) -> Figure {
    Figure::Late(key.into(), |l| l.p50)
}

fn p99(key: impl Into<String>) -> Figure {
    Figure::Late(key.into(), |l| l.p99)
}

fn max(key: impl Into<String>) -> Figure {
    Figure::Late(key.into(), |l| l.max)
}

impl Figure {
    /// Its value in each run, for the build whose keys begin with `prefix`.
    fn per_run(&self, f: &Figures, prefix: &str) -> Vec<f64> {
        let pair = |a: &Figure, b: &Figure, op: fn(f64, f64) -> f64| {
            let (a, b) = (a.per_run(f, prefix), b.per_run(f, prefix));
            a.iter().zip(&b).map(|(a, b)| op(*a, *b)).collect()
        };
        match self {
            Figure::Rate(key) => f
                .rates
                .get(&format!("{prefix}{key}"))
                .cloned()
                .unwrap_or_default(),
            Figure::Late(key, pick) => f
                .lateness
                .get(&format!("{prefix}{key}"))
                .map(|runs| runs.iter().map(pick).collect())
                .unwrap_or_default(),
            Figure::CpuPer(key) => {
                let key = format!("{prefix}{key}");
                let (Some(cpu), Some(rates)) = (f.cpu.get(&key), f.rates.get(&key)) else {
                    return Vec::new();
                };
                cpu.iter()
                    .zip(rates)
                    .map(|(run, rate)| {
                        let cores = run.iter().find(|(n, _)| n == "daemon").map(|(_, c)| *c);
                        cores.map_or(f64::NAN, |cores| cores / rate * 1e6)
                    })
                    .collect()
            }
            Figure::Ratio(a, b) => pair(a, b, |a, b| a / b),
            Figure::Less(a, b) => pair(a, b, |a, b| a - b),
        }
    }
}

/// The rows of the table: what is shown, the figure, and its decimals.
fn rows(args: &Args) -> Vec<(String, Figure, usize)> {
    let most = args.daemons.iter().copied().max().unwrap_or(1);
    let stores = [
        ("sqlite", "SQLite, 1 daemon".to_owned()),
        ("pg", format!("PostgreSQL, {most} daemons")),
    ];
    let mut rows = Vec::new();
    for (tag, store) in &stores {
        let key = format!("reads.{tag}");
        let what = format!("heavy reads, {store}");
        rows.push((format!("{what}: `small` p50 (ms)"), p50(&key), 2));
        rows.push((format!("{what}: `small` p99 (ms)"), p99(&key), 2));
        rows.push((format!("{what}: `small` max (ms)"), max(&key), 2));
        rows.push((
            format!("{what}: whale's requests answered 200"),
            rate(format!("{key}.200")),
            0,
        ));
        rows.push((
            format!("{what}: answered 503"),
            rate(format!("{key}.503")),
            0,
        ));
        rows.push((
            format!("{what}: `/readyz` not 200"),
            rate(format!("{key}.readyz_not_ok")),
            0,
        ));
    }
    for (tag, store) in &stores {
        let key = format!("tenants.noisy.{tag}");
        let what = format!("noisy neighbour, {store}");
        rows.push((format!("{what}: `small` p99 (ms)"), p99(&key), 2));
        rows.push((format!("{what}: `small` max (ms)"), max(&key), 2));
        rows.push((
            format!("{what}: drain (s)"),
            rate(format!("{key}.drain")),
            2,
        ));
    }
    for rate in &args.rates {
        let key = format!("lateness.{rate}");
        let what = format!("{rate}/s, SQLite");
        rows.push((format!("{what}: p50 (ms)"), p50(&key), 2));
        rows.push((format!("{what}: p99 (ms)"), p99(&key), 2));
        rows.push((format!("{what}: max (ms)"), max(&key), 2));
    }
    let first = args.rates.first().copied().unwrap_or(1000);
    for n in &args.daemons {
        let key = format!("pg.lateness.{n}");
        let what = format!("{first}/s, PostgreSQL, {n} daemon(s)");
        rows.push((format!("{what}: p50 (ms)"), p50(&key), 2));
        rows.push((format!("{what}: p99 (ms)"), p99(&key), 2));
    }
    for work in ["ingest", "fire"] {
        let (default, tuned) = (
            format!("{work}.{DEFAULT_BATCH}"),
            format!("{work}.{TUNED_BATCH}"),
        );
        rows.push((
            format!("{work}, SQLite, batch {DEFAULT_BATCH} (/s)"),
            rate(&default),
            0,
        ));
        rows.push((
            format!("{work}, SQLite, batch {DEFAULT_BATCH}: daemon CPU per item (µs)"),
            Figure::CpuPer(default.clone()),
            1,
        ));
        rows.push((
            format!("{work}, SQLite, batch {TUNED_BATCH} (/s)"),
            rate(&tuned),
            0,
        ));
        rows.push((
            format!("{work}: batch {DEFAULT_BATCH} ÷ batch {TUNED_BATCH}"),
            Figure::Ratio(Box::new(rate(default)), Box::new(rate(tuned))),
            2,
        ));
    }
    let what = format!(
        "{first}/s beside the Janitor's backlog of {}",
        args.retention_n
    );
    rows.push((format!("{what}: p99 (ms)"), p99("cost.janitor"), 2));
    rows.push((
        format!("{first}/s, the same without it: p99 (ms)"),
        p99("cost.plain"),
        2,
    ));
    rows.push((
        "the backlog's cost: difference of the p99s (ms)".to_owned(),
        Figure::Less(Box::new(p99("cost.janitor")), Box::new(p99("cost.plain"))),
        2,
    ));
    let crash = "crash.sqlite";
    rows.push((
        "crash mid-burst, SQLite: timers more than 1 s late".to_owned(),
        rate(format!("{crash}.over_1s")),
        0,
    ));
    rows.push(("crash mid-burst: p99 (ms)".to_owned(), p99(crash), 0));
    rows.push(("crash mid-burst: max (ms)".to_owned(), max(crash), 0));
    rows.push((
        "intake behind a backlog, SQLite: `small` p50 (ms)".to_owned(),
        p50("intake.sqlite"),
        0,
    ));
    rows.push((
        "intake: `small` max (ms)".to_owned(),
        max("intake.sqlite"),
        0,
    ));
    rows.push((
        "intake: drain (s)".to_owned(),
        rate("intake.sqlite.drain"),
        2,
    ));
    for n in &args.daemons {
        rows.push((
            format!("ingest, PostgreSQL, {n} daemon(s) (/s)"),
            rate(format!("pg.ingest.{n}")),
            0,
        ));
        rows.push((
            format!("fire, PostgreSQL, {n} daemon(s) (/s)"),
            rate(format!("pg.fire.{n}")),
            0,
        ));
    }
    rows
}

/// The median of `new[i] ÷ old[i]` over the runs that have both, with their range.
fn ratio(new: &[f64], old: &[f64]) -> String {
    let each: Vec<f64> = new.iter().zip(old).map(|(n, o)| n / o).collect();
    Spread::of(&each).show(2)
}

pub(super) fn beside(r: &mut String, args: &Args, f: &Figures) {
    let measured = |prefix: &str, figure: &Figure| !figure.per_run(f, prefix).is_empty();
    let rows: Vec<_> = rows(args)
        .into_iter()
        .filter(|(_, figure, _)| measured(BASELINE, figure) && measured("", figure))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(r, "\n## Beside the baseline\n");
    let _ = writeln!(
        r,
        "Each figure a target compares with the previous version: this build (`new`) and the \
         `--baseline` build (`old`), measured one after the other for each figure within every \
         run. The last column is the median of each run's ratio (their range).\n"
    );
    let _ = writeln!(
        r,
        "| figure | new | old | new ÷ old |\n| --- | --- | --- | --- |"
    );
    for (what, figure, decimals) in rows {
        let (new, old) = (figure.per_run(f, ""), figure.per_run(f, BASELINE));
        let _ = writeln!(
            r,
            "| {what} | {} | {} | {} |",
            Spread::of(&new).show(decimals),
            Spread::of(&old).show(decimals),
            ratio(&new, &old)
        );
    }
}
