//! The web console's figures: each page's time with one tenant's millions pending, and a
//! steady load's lateness while browsers refresh that tenant's page every second.

use std::fmt::Write as _;

use super::{lateness_row, lateness_stat, show};
use crate::workloads::{LOADS, Page};
use crate::{Args, Figures};

/// Each page: its key and what it is.
const PAGES: [(Page, &str); 7] = [
    (Page::Overview, "overview (every tenant, the daemon)"),
    (
        Page::TenantFirst,
        "the tenant's page, first load (activity with the week ahead, timers)",
    ),
    (
        Page::TenantRefresh,
        "the tenant's page, refresh (activity, timers)",
    ),
    (Page::DueRange, "timers filtered by a day's `dueAt` range"),
    (Page::Correlation, "timers filtered by correlation id"),
    (Page::Timer, "one timer's detail"),
    (
        Page::DryRun,
        "cancel-many's dry run over a day's `dueAt` range",
    ),
];

const STORES: [(&str, &str); 2] = [("sqlite", "SQLite"), ("pg", "PostgreSQL")];

pub(super) fn console(r: &mut String, args: &Args, f: &Figures) {
    let stores: Vec<_> = STORES
        .iter()
        .filter(|(tag, _)| f.rates.contains_key(&format!("console.{tag}.counted_s")))
        .collect();
    if stores.is_empty() {
        return;
    }
    let _ = writeln!(
        r,
        "\n## The web console beside a tenant with millions pending\n"
    );
    let _ = writeln!(
        r,
        "One daemon, default configuration, the console on. Tenant `whale` holds {} pending \
         timers due evenly over a week from the start of the next hour. Each page is its \
         requests as the console's script sends them, at once, until the last is answered \
         (ms; median of {} loads in each run, then the median and range over the runs), after \
         the background count of every tenant is in. A load fails when a request is not \
         answered 200 or a figure says it could not be read.\n",
        args.console_n, LOADS
    );
    let head: String = stores
        .iter()
        .map(|(_, name)| format!(" {name} |"))
        .collect();
    let rule: String = stores.iter().map(|_| " --- |").collect();
    let _ = writeln!(r, "| page |{head}\n| --- |{rule}");
    let row = |name: &str, what: &str, decimals: usize| {
        let cells: String = stores
            .iter()
            .map(|(tag, _)| format!(" {} |", show(f, &format!("console.{tag}.{what}"), decimals)))
            .collect();
        format!("| {name} |{cells}")
    };
    for (page, name) in PAGES {
        let _ = writeln!(r, "{}", row(name, &format!("page.{}.p50", page.key()), 1));
        let _ = writeln!(
            r,
            "{}",
            row("… its slowest load", &format!("page.{}.max", page.key()), 1)
        );
        let _ = writeln!(
            r,
            "{}",
            row(
                "… loads that failed",
                &format!("page.{}.failed", page.key()),
                0
            )
        );
    }
    let _ = writeln!(
        r,
        "{}",
        row(
            "the first overview after the start (while every tenant is first counted)",
            "first_overview_ms",
            1
        )
    );
    let _ = writeln!(
        r,
        "{}",
        row(
            "from the start until the tenant's count is in (s)",
            "counted_s",
            1
        )
    );

    let rate = args.rates.first().copied().unwrap_or(1000);
    let _ = writeln!(
        r,
        "\nA steady {rate} timers/s over ten other tenants for {} s, each due a second after it \
         is sent, alone and then while {} browsers refresh the whale's page every second \
         (activity and the first page of timers; the week ahead at a browser's first load and \
         once a minute): lateness (received − dueAt, ms).\n",
        args.secs, args.console_browsers
    );
    let _ = writeln!(
        r,
        "| store, load | p50 | p99 | p99.9 | max | early | missing |\n\
         | --- | --- | --- | --- | --- | --- | --- |"
    );
    for (tag, name) in &stores {
        for (what, label) in [("alone", "alone"), ("browsers", "beside the browsers")] {
            let key = format!("console.{tag}.{what}");
            if let Some(row) = lateness_row(f, &format!("{name}, {label}"), &key) {
                let _ = writeln!(r, "{row}");
            }
        }
    }
    let _ = writeln!(
        r,
        "\n| store | browsers' page p50 (ms) | p99 (ms) | pages loaded | not answered 200 | \
         p99 beside them / alone |\n| --- | --- | --- | --- | --- | --- |"
    );
    for (tag, name) in &stores {
        let p99 = |what: &str| lateness_stat(f, &format!("console.{tag}.{what}"), |l| l.p99);
        let ratio = match (p99("browsers"), p99("alone")) {
            (Some(beside), Some(alone)) if alone > 0.0 => format!("{:.2}", beside / alone),
            _ => "n/a".into(),
        };
        let _ = writeln!(
            r,
            "| {name} | {} | {} | {} | {} | {ratio} |",
            show(f, &format!("console.{tag}.browsers.page_p50"), 1),
            show(f, &format!("console.{tag}.browsers.page_p99"), 1),
            show(f, &format!("console.{tag}.browsers.pages"), 0),
            show(f, &format!("console.{tag}.browsers.failed"), 0),
        );
    }
}
