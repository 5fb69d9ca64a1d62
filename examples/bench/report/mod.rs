//! The Markdown report: medians (with the range across runs) of every figure collected, the
//! targets each is measured against, and where the CPU went. `postgres` writes the PostgreSQL
//! figures, `tenants` one tenant's load beside another's, `recovery` a crash mid-burst and a
//! backlog at start-up, `backup` backups of a live file, `data` ingest and fire with data,
//! `link` a silent and a distant broker path, `peers` BullMQ and pg-boss beside the daemon,
//! `baseline` each compared figure beside the `--baseline` build's.

mod backup;
mod baseline;
mod cancel;
mod console;
mod data;
mod link;
mod peers;
mod postgres;
mod recovery;
mod spans;
mod tenants;

use std::fmt::Write as _;

use chrono::Utc;

use crate::sections::BASELINE;
use crate::stats::{Lateness, Spread};
use crate::{Args, DEFAULT_BATCH, Figures};

fn median(f: &Figures, key: &str) -> Option<f64> {
    f.rates
        .get(key)
        .map(|v| Spread::of(v).median)
        .filter(|m| m.is_finite())
}

fn show(f: &Figures, key: &str, decimals: usize) -> String {
    f.rates
        .get(key)
        .map_or("n/a".into(), |v| Spread::of(v).show(decimals))
}

/// The largest median among `keys` and the key it belongs to.
fn best<'a>(f: &Figures, keys: impl Iterator<Item = &'a str>) -> Option<(f64, String)> {
    keys.filter_map(|k| median(f, k).map(|m| (m, k.to_owned())))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

fn lateness_stat(f: &Figures, key: &str, pick: fn(&Lateness) -> f64) -> Option<f64> {
    let values: Vec<f64> = f.lateness.get(key)?.iter().map(pick).collect();
    Some(Spread::of(&values).median).filter(|m| m.is_finite())
}

fn lateness_row(f: &Figures, name: &str, key: &str) -> Option<String> {
    let runs = f.lateness.get(key)?;
    let s =
        |pick: fn(&Lateness) -> f64| Spread::of(&runs.iter().map(pick).collect::<Vec<_>>()).show(2);
    let early: usize = runs.iter().map(|x| x.early).sum();
    let missing: usize = runs.iter().map(|x| x.missing).sum();
    Some(format!(
        "| {name} | {} | {} | {} | {} | {early} | {missing} |",
        s(|x| x.p50),
        s(|x| x.p99),
        s(|x| x.p999),
        s(|x| x.max)
    ))
}

/// PostgreSQL's CPU per item of a run, in µs: the median of each run's cores ÷ rate.
fn postgres_us(f: &Figures, key: &str) -> String {
    let (Some(cpu), Some(rates)) = (f.cpu.get(key), f.rates.get(key)) else {
        return "n/a".into();
    };
    let per_item: Vec<f64> = cpu
        .iter()
        .zip(rates)
        .filter_map(|(run, rate)| {
            let cores = run.iter().find(|(n, _)| n == "postgres")?.1;
            Some(cores / rate * 1e6)
        })
        .collect();
    if per_item.is_empty() {
        return "n/a".into();
    }
    Spread::of(&per_item).show(0)
}

/// Median cores used per process group, e.g. `daemon 0.92 · nats-server 0.61 · …`.
fn cpu(f: &Figures, key: &str) -> String {
    let Some(runs) = f.cpu.get(key) else {
        return "n/a".into();
    };
    let mut groups: Vec<String> = runs
        .iter()
        .flat_map(|run| run.iter().map(|(name, _)| name.clone()))
        .collect();
    groups.dedup();
    groups.sort();
    groups.dedup();
    groups
        .iter()
        .map(|group| {
            let used: Vec<f64> = runs
                .iter()
                .filter_map(|run| run.iter().find(|(n, _)| n == group).map(|(_, c)| *c))
                .collect();
            format!("{group} {:.2}", Spread::of(&used).median)
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

pub fn report(args: &Args, f: &Figures) -> String {
    let mut r = String::new();
    let version = std::process::Command::new(crate::nats_server::nats_server_bin())
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let _ = writeln!(r, "# timer-service benchmark\n");
    let _ = writeln!(
        r,
        "{} · {version} · {} runs, medians with (min–max) · default configuration (`batch_size = {DEFAULT_BATCH}`, \
         `synchronous = {}`, metrics on) unless a row says otherwise\n",
        Utc::now().format("%Y-%m-%d"),
        args.runs,
        args.synchronous,
    );

    // The batch sizes of the sweep, as keys.
    let batches: Vec<String> = args.batches.iter().map(ToString::to_string).collect();
    let keys =
        |prefix: &str| -> Vec<String> { batches.iter().map(|b| format!("{prefix}.{b}")).collect() };
    let ingest_keys = keys("ingest");
    let fire_keys = keys("fire");
    let upsert_keys = keys("raw.upsert.SQLite");
    let mark_keys = keys("raw.mark.SQLite");
    let best_ingest = best(f, ingest_keys.iter().map(String::as_str));
    let best_fire = best(f, fire_keys.iter().map(String::as_str));
    let best_upsert = best(f, upsert_keys.iter().map(String::as_str));
    let best_mark = best(f, mark_keys.iter().map(String::as_str));
    let best_publish = best(f, ["raw.publish.1000", "raw.publish.4000"].into_iter());
    let default_ingest = median(f, &format!("ingest.{DEFAULT_BATCH}"));
    let default_fire = median(f, &format!("fire.{DEFAULT_BATCH}"));
    let batch_of = |key: &str| key.rsplit('.').next().unwrap_or_default().to_owned();

    let _ = writeln!(
        r,
        "## Targets\n\n| target | measured | |\n| --- | --- | --- |"
    );
    if let (Some(d), Some((b, key))) = (default_ingest, &best_ingest) {
        let ratio = d / b;
        let _ = writeln!(
            r,
            "| ingest at the default batch ≥ 90% of the best batch | {:.0}% ({d:.0}/s at {DEFAULT_BATCH}; best {b:.0}/s at {}) | {} |",
            100.0 * ratio,
            batch_of(key),
            verdict(ratio >= 0.9)
        );
    }
    if let (Some(d), Some((b, key))) = (default_fire, &best_fire) {
        let ratio = d / b;
        let _ = writeln!(
            r,
            "| fire at the default batch ≥ 90% of the best batch | {:.0}% ({d:.0}/s at {DEFAULT_BATCH}; best {b:.0}/s at {}) | {} |",
            100.0 * ratio,
            batch_of(key),
            verdict(ratio >= 0.9)
        );
    }
    if let (Some(d), Some((u, key))) = (default_ingest, &best_upsert) {
        let ratio = d / u;
        let _ = writeln!(
            r,
            "| ingest ≥ 80% of the best raw SQLite upsert | {:.0}% (best raw {u:.0}/s at batch {}) | {} |",
            100.0 * ratio,
            batch_of(key),
            verdict(ratio >= 0.8)
        );
    }
    if let (Some(d), Some((p, _)), Some((m, mkey))) = (default_fire, &best_publish, &best_mark) {
        let limit = p.min(*m);
        let ratio = d / limit;
        let _ = writeln!(
            r,
            "| fire ≥ 80% of min(best raw publish, best raw claim + mark) | {:.0}% (publish {p:.0}/s, claim + mark {m:.0}/s at batch {}) | {} |",
            100.0 * ratio,
            batch_of(mkey),
            verdict(ratio >= 0.8)
        );
    }
    for (rate, p50_max, p99_max) in [(1000u32, Some(2.0), 5.0), (10000, None, 20.0)] {
        let key = format!("lateness.{rate}");
        if let Some(p99) = lateness_stat(f, &key, |l| l.p99) {
            if let (Some(limit), Some(p50)) = (p50_max, lateness_stat(f, &key, |l| l.p50)) {
                let _ = writeln!(
                    r,
                    "| {rate}/s: lateness p50 ≤ {limit} ms | {p50:.2} ms | {} |",
                    verdict(p50 <= limit)
                );
            }
            let _ = writeln!(
                r,
                "| {rate}/s: lateness p99 ≤ {p99_max} ms | {p99:.2} ms | {} |",
                verdict(p99 <= p99_max)
            );
        }
    }
    let early: usize = f.lateness.values().flatten().map(|l| l.early).sum();
    let missing: usize = f
        .lateness
        .iter()
        .filter(|(k, _)| *k != "native")
        .flat_map(|(_, v)| v)
        .map(|l| l.missing)
        .sum();
    let _ = writeln!(
        r,
        "| no timer early, none missing (every steady load) | {early} early, {missing} missing | {} |",
        verdict(early == 0 && missing == 0)
    );

    if f.rates.keys().any(|k| k.starts_with("raw.")) {
        let _ = writeln!(
            r,
            "\n## Raw limits (same broker build, same disk, no daemon)\n"
        );
        let _ = writeln!(r, "| operation | per second |\n| --- | --- |");
        let _ = writeln!(
            r,
            "| JetStream pull (batch 1000) + ack each | {} |",
            show(f, "raw.consume", 0)
        );
        let _ = writeln!(
            r,
            "| the same on a work-queue stream (each ack removes its message, as the command stream's) | {} |",
            show(f, "raw.consume.workqueue", 0)
        );
        for lines in [1, 16] {
            let _ = writeln!(
                r,
                "| the same in {lines} line(s), a consumer for each, pulled at once | {} |",
                show(f, &format!("raw.consume.lines.{lines}"), 0)
            );
        }
        for window in [1000, 4000] {
            let _ = writeln!(
                r,
                "| JetStream publish + PubAck with Nats-Msg-Id, {window} in flight | {} |",
                show(f, &format!("raw.publish.{window}"), 0)
            );
        }
        for backend in ["SQLite", "PostgreSQL"] {
            for batch in &batches {
                let up = format!("raw.upsert.{backend}.{batch}");
                if f.rates.contains_key(&up) {
                    let _ = writeln!(
                        r,
                        "| {backend} upsert, {batch}-row batches (the service's store) | {} |",
                        show(f, &up, 0)
                    );
                    let _ = writeln!(
                        r,
                        "| {backend} claim due + mark Reached, {batch}-row batches | {} |",
                        show(f, &format!("raw.mark.{backend}.{batch}"), 0)
                    );
                }
            }
        }
    }

    if best_ingest.is_some() || best_fire.is_some() {
        let _ = writeln!(r, "\n## Ingest and fire by batch size (SQLite)\n");
        let _ = writeln!(
            r,
            "{} commands queued, then the daemon started; {} timers due at one instant. `batch_size` bounds the commands validated and the timers published together; one pull request and one claim carry several batches.\n",
            args.ingest_n, args.fire_n
        );
        let _ = writeln!(
            r,
            "| `batch_size` | ingest /s | fire /s | peak RSS ingest / fire (MiB) |\n| --- | --- | --- | --- |"
        );
        for batch in &batches {
            let mark = if batch == &DEFAULT_BATCH.to_string() {
                " (default)"
            } else {
                ""
            };
            let rss = |key: &str| {
                f.rss
                    .get(key)
                    .map_or("n/a".into(), |v| Spread::of(v).show(0))
            };
            let _ = writeln!(
                r,
                "| {batch}{mark} | {} | {} | {} / {} |",
                show(f, &format!("ingest.{batch}"), 0),
                show(f, &format!("fire.{batch}"), 0),
                rss(&format!("ingest.{batch}")),
                rss(&format!("fire.{batch}"))
            );
        }
        let default = DEFAULT_BATCH.to_string();
        let _ = writeln!(
            r,
            "\nCPU (cores of the machine's 2) at the default batch: ingest {}; fire {}.",
            cpu(f, &format!("ingest.{default}")),
            cpu(f, &format!("fire.{default}"))
        );
    }

    let late_keys: Vec<(String, String)> = args
        .rates
        .iter()
        .map(|rate| {
            (
                format!("timer-service, {rate} timers/s"),
                format!("lateness.{rate}"),
            )
        })
        .chain([
            (
                "NATS `Nats-Schedule: @at`, first rate".to_owned(),
                "native".to_owned(),
            ),
            (
                "floor: tokio's timer, a publish, its delivery (no daemon), first rate".to_owned(),
                "floor.tokio".to_owned(),
            ),
            (
                "floor: a thread's sleep, a publish, its delivery (no daemon), first rate"
                    .to_owned(),
                "floor.thread".to_owned(),
            ),
        ])
        .collect();
    if late_keys.iter().any(|(_, k)| f.lateness.contains_key(k)) {
        let _ = writeln!(
            r,
            "\n## Lateness (received − dueAt, ms; {} s of steady load, each timer scheduled {} ms ahead)\n",
            args.secs, args.lead_ms
        );
        let _ = writeln!(
            r,
            "| load | p50 | p99 | p99.9 | max | early | missing |\n| --- | --- | --- | --- | --- | --- | --- |"
        );
        for (name, key) in &late_keys {
            if let Some(row) = lateness_row(f, name, key) {
                let _ = writeln!(r, "{row}");
            }
        }
        for rate in &args.rates {
            let key = format!("lateness.{rate}");
            if f.cpu.contains_key(&key) {
                let _ = writeln!(r, "\nCPU at {rate}/s (cores): {}.", cpu(f, &key));
            }
            let baseline = format!("{BASELINE}{key}");
            if f.cpu.contains_key(&baseline) {
                let _ = writeln!(r, "Beside the baseline: {}.", cpu(f, &baseline));
            }
        }
    }

    if f.lateness.contains_key("cost.bare") {
        let rate = args.rates.first().copied().unwrap_or(1000);
        let _ = writeln!(r, "\n## The cost of the new parts ({rate} timers/s)\n");
        let _ = writeln!(
            r,
            "| daemon | p50 | p99 | p99.9 | max | early | missing |\n| --- | --- | --- | --- | --- | --- | --- |"
        );
        let api_note = format!(
            "metrics on, API {} requests/s ({} answered, {} failed)",
            args.api_rate,
            show(f, "cost.api.api_answered", 0),
            show(f, "cost.api.api_failed", 0)
        );
        let janitor_note = format!(
            "metrics on, Janitor deleting {} finished timers ({} rows/s)",
            args.retention_n,
            show(f, "cost.janitor.deleted", 0)
        );
        for (name, key) in [
            (
                "bare (no HTTP, no metrics recorder)".to_owned(),
                "cost.bare",
            ),
            (
                "metrics on, `/metrics` scraped each second".to_owned(),
                "cost.metrics",
            ),
            (api_note, "cost.api"),
            (janitor_note, "cost.janitor"),
            (
                "metrics on, the Janitor's run without its backlog".to_owned(),
                "cost.plain",
            ),
        ] {
            if let Some(row) = lateness_row(f, &name, key) {
                let _ = writeln!(r, "{row}");
            }
        }
        if let (Some(with), Some(without)) = (
            lateness_stat(f, "cost.janitor", |l| l.p99),
            lateness_stat(f, "cost.plain", |l| l.p99),
        ) {
            let _ = writeln!(
                r,
                "\nThe Janitor's backlog adds {:.2} ms to the p99 ({with:.2} against {without:.2} ms \
                 on an empty database, the same daemon and load).",
                with - without
            );
        }
        let _ = writeln!(
            r,
            "\nFire, {} timers due at once: bare {}/s, metrics on {}/s.",
            args.fire_n,
            show(f, "cost.fire.bare", 0),
            show(f, "cost.fire.metrics", 0)
        );
    }

    if f.rates.contains_key("api.get") {
        let _ = writeln!(r, "\n## The query API\n");
        let _ = writeln!(
            r,
            "100,000 timers stored; 64 requests in flight at all times, for 5 s each.\n"
        );
        let _ = writeln!(r, "| request | answered /s |\n| --- | --- |");
        let _ = writeln!(r, "| `get` of a random timer | {} |", show(f, "api.get", 0));
        let _ = writeln!(
            r,
            "| `list`, 100 timers a page | {} |",
            show(f, "api.list", 0)
        );
        let _ = writeln!(
            r,
            "| (beside: ingest at the default batch, commands/s) | {} |",
            show(f, &format!("ingest.{DEFAULT_BATCH}"), 0)
        );
    }

    postgres::postgres(&mut r, args, f);

    if f.rates.keys().any(|k| k.starts_with("scale.")) {
        let rate = args.rates.first().copied().unwrap_or(1000);
        let _ = writeln!(r, "\n## Scale\n");
        let _ = writeln!(
            r,
            "| pending timers | store | ingest /s | lateness p99 at {rate}/s (ms) | peak RSS ingest / lateness (MiB) |\n| --- | --- | --- | --- | --- |"
        );
        let rss = |key: &str| {
            f.rss
                .get(key)
                .map_or("n/a".into(), |v| Spread::of(v).show(0))
        };
        let p99 = |key: &str| {
            lateness_stat(f, key, |l| l.p99).map_or("n/a".into(), |v| format!("{v:.2}"))
        };
        let _ = writeln!(
            r,
            "| 0 | SQLite | {} | {} | {} / {} |",
            show(f, &format!("ingest.{DEFAULT_BATCH}"), 0),
            p99(&format!("lateness.{rate}")),
            rss(&format!("ingest.{DEFAULT_BATCH}")),
            rss(&format!("lateness.{rate}"))
        );
        for n in &args.scales {
            for (tag, label) in crate::world::STORES {
                let ingest = format!("scale.ingest.{tag}.{n}");
                if f.rates.contains_key(&ingest) {
                    let late = format!("scale.lateness.{tag}.{n}");
                    let _ = writeln!(
                        r,
                        "| {n} | {label} | {} | {} | {} / {} |",
                        show(f, &ingest, 0),
                        p99(&late),
                        rss(&ingest),
                        rss(&late)
                    );
                }
            }
        }
    }

    if f.rates.contains_key("catch_up.first") {
        let _ = writeln!(r, "\n## Restart with {} overdue timers\n", args.catch_up_n);
        let _ = writeln!(r, "| figure | value |\n| --- | --- |");
        let _ = writeln!(
            r,
            "| process start → first event (s) | {} |",
            show(f, "catch_up.first", 3)
        );
        let _ = writeln!(
            r,
            "| process start → last timer marked (s) | {} |",
            show(f, "catch_up.last", 1)
        );
        let _ = writeln!(
            r,
            "| peak RSS (MiB) | {} |",
            f.rss
                .get("catch_up")
                .map_or("n/a".into(), |v| Spread::of(v).show(0))
        );
    }

    tenants::tenants(&mut r, args, f);
    tenants::reads(&mut r, args, f);
    recovery::recovery(&mut r, f);
    backup::backup(&mut r, args, f);
    data::data(&mut r, args, f);
    cancel::cancel(&mut r, args, f);
    spans::spans(&mut r, args, f);
    link::link(&mut r, f);
    console::console(&mut r, args, f);
    peers::peers(&mut r, args, f);
    baseline::beside(&mut r, args, f);

    if let Some(metrics) = &f.metrics_sample {
        let _ = writeln!(
            r,
            "\n## `/metrics` at the end of the scraped run (histogram buckets left out)\n"
        );
        let _ = writeln!(r, "```text");
        for line in metrics
            .lines()
            .filter(|l| !l.contains("_bucket{") && !l.starts_with('#') && !l.is_empty())
        {
            let _ = writeln!(r, "{line}");
        }
        let _ = writeln!(r, "```");
    }
    r
}
