//! The data figures: ingest and fire with `--data-bytes` of JSON on each timer beside none,
//! and their ratio.

use std::fmt::Write as _;

use super::{cpu, median, show};
use crate::{Args, DEFAULT_BATCH, Figures};

pub(super) fn data(r: &mut String, args: &Args, f: &Figures) {
    let stores: Vec<(&str, &str)> = [("sqlite", "SQLite"), ("pg", "PostgreSQL, 1 daemon")]
        .into_iter()
        .filter(|(tag, _)| f.rates.contains_key(&format!("data.ingest.{tag}.none")))
        .collect();
    if stores.is_empty() {
        return;
    }
    let _ = writeln!(r, "\n## Data with a timer\n");
    let _ = writeln!(
        r,
        "{} commands queued, then the daemon started (ingest); {} timers due at one instant \
         (fire); `batch_size = {DEFAULT_BATCH}`. Each timer with no data, or with {} bytes of \
         JSON data (an order with two lines and a note), measured one after the other in each \
         run. Ratio: data ÷ none, of the medians.\n",
        args.ingest_n, args.fire_n, args.data_bytes
    );
    let _ = writeln!(
        r,
        "| store | data | ingest /s | fire /s | stored after ingest (table, indexes), MB | peak RSS ingest / fire (MiB) |\n\
         | --- | --- | --- | --- | --- | --- |"
    );
    let rss = |key: &str| {
        f.rss
            .get(key)
            .map_or("n/a".into(), |v| crate::stats::Spread::of(v).show(0))
    };
    for (tag, label) in &stores {
        for (which, bytes) in [
            ("none", "none".to_owned()),
            ("data", format!("{} B", args.data_bytes)),
        ] {
            let ingest = format!("data.ingest.{tag}.{which}");
            let fire = format!("data.fire.{tag}.{which}");
            let _ = writeln!(
                r,
                "| {label} | {bytes} | {} | {} | {} | {} / {} |",
                show(f, &ingest, 0),
                show(f, &fire, 0),
                show(f, &format!("data.mb.{tag}.{which}"), 1),
                rss(&ingest),
                rss(&fire)
            );
        }
        let ratio = |what: &str| match (
            median(f, &format!("data.{what}.{tag}.data")),
            median(f, &format!("data.{what}.{tag}.none")),
        ) {
            (Some(with), Some(without)) => format!("{:.2}", with / without),
            _ => "n/a".into(),
        };
        let _ = writeln!(
            r,
            "| {label} | ratio | {} | {} | | |",
            ratio("ingest"),
            ratio("fire")
        );
    }
    let _ = writeln!(r, "\nCPU (cores of the machine's 2):\n");
    for (tag, label) in &stores {
        for what in ["ingest", "fire"] {
            for which in ["none", "data"] {
                let _ = writeln!(
                    r,
                    "- {label}, {what}, {which}: {}",
                    cpu(f, &format!("data.{what}.{tag}.{which}"))
                );
            }
        }
    }
}
