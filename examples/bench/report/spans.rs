//! The spans figures: ingest and fire with traced commands, without and with an exporter,
//! beside untraced ones; the spans the collector received.

use std::fmt::Write as _;

use super::{cpu, median, show};
use crate::{Args, DEFAULT_BATCH, Figures};

pub(super) fn spans(r: &mut String, args: &Args, f: &Figures) {
    if !f.rates.contains_key("spans.ingest.plain") {
        return;
    }
    let _ = writeln!(r, "\n## Spans\n");
    let _ = writeln!(
        r,
        "SQLite. {} commands queued, then the daemon started (ingest); {} timers due at one \
         instant (fire); `batch_size = {DEFAULT_BATCH}`. `plain`: no trace context, no exporter; \
         `carried`: every command with a sampled `traceparent`, no exporter (the events carry \
         it on); `exported`: the same with `OTEL_EXPORTER_OTLP_ENDPOINT` set to a collector in \
         the benchmark's process (OTLP/HTTP protobuf, default batching); `exported-tls`: the \
         same collector over TLS (`https:`, its CA in `OTEL_EXPORTER_OTLP_CERTIFICATE`). \
         Ratio: ÷ plain, of the medians. Spans received: median per run, of the 2 per command (process, store) and 2 \
         per timer (claim, publish) recorded.\n",
        args.ingest_n, args.fire_n
    );
    let _ = writeln!(
        r,
        "| variant | ingest /s | ratio | fire /s | ratio | spans received ingest / fire |\n\
         | --- | --- | --- | --- | --- | --- |"
    );
    let ratio = |key: &str, label: &str| match (
        median(f, &format!("spans.{key}.{label}")),
        median(f, &format!("spans.{key}.plain")),
    ) {
        (Some(with), Some(without)) => format!("{:.2}", with / without),
        _ => "n/a".into(),
    };
    for (label, _, _) in crate::sections::SPAN_VARIANTS {
        let _ = writeln!(
            r,
            "| {label} | {} | {} | {} | {} | {} / {} |",
            show(f, &format!("spans.ingest.{label}"), 0),
            ratio("ingest", label),
            show(f, &format!("spans.fire.{label}"), 0),
            ratio("fire", label),
            show(f, &format!("spans.received.ingest.{label}"), 0),
            show(f, &format!("spans.received.fire.{label}"), 0),
        );
    }
    let _ = writeln!(r, "\nCPU (cores of the machine's 2):\n");
    for what in ["ingest", "fire"] {
        for (label, _, _) in crate::sections::SPAN_VARIANTS {
            let _ = writeln!(
                r,
                "- {what}, {label}: {}",
                cpu(f, &format!("spans.{what}.{label}"))
            );
        }
    }
}
