//! The cancel figures: one CancelTimers of `--cancel-n` pending timers beside a steady load,
//! and the same load on the same base without it.

use std::fmt::Write as _;

use super::{lateness_row, lateness_stat, show};
use crate::{Args, Figures};

pub(super) fn cancel(r: &mut String, args: &Args, f: &Figures) {
    for (tag, store) in crate::world::STORES {
        store_cancel(r, args, f, tag, store);
    }
}

/// The figures of one store, keyed `cancel.<tag>.…`.
fn store_cancel(r: &mut String, args: &Args, f: &Figures, tag: &str, store: &str) {
    let key = |name: &str| format!("cancel.{tag}.{name}");
    if !f.lateness.contains_key(&key("load")) {
        return;
    }
    let rate = args.rates.first().copied().unwrap_or(1000);
    let _ = writeln!(r, "\n## Cancel many, {store}\n");
    let _ = writeln!(
        r,
        "{} pending timers of one tenant in the database ({store}) when the daemon starts; one \
         CancelTimers of them all published as it runs, beside a steady load of {rate} timers/s \
         of other tenants for {} s; then the same load on the same base without it. Cancelled: \
         {} timers/s ({} s for all of them, when that came within the load).\n",
        args.cancel_n,
        args.cancel_secs,
        show(f, &key("per_second"), 0),
        show(f, &key("took_s"), 1),
    );
    let _ = writeln!(
        r,
        "| daemon | p50 | p99 | p99.9 | max | early | missing |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    for (name, which) in [
        ("beside the CancelTimers", key("load")),
        ("the same load alone", key("plain")),
    ] {
        if let Some(row) = lateness_row(f, name, &which) {
            let _ = writeln!(r, "{row}");
        }
    }
    if let (Some(with), Some(without)) = (
        lateness_stat(f, &key("load"), |l| l.p99),
        lateness_stat(f, &key("plain"), |l| l.p99),
    ) {
        let _ = writeln!(
            r,
            "\np99 beside the cancel ÷ alone: {:.2} ({with:.2} against {without:.2} ms).",
            with / without
        );
    }
}
