//! The `console` section (this build only): the web console's pages with one tenant's
//! millions pending, and a steady load's lateness alone and while browsers refresh that
//! tenant's page every second, on SQLite and, with `--database`, on PostgreSQL.

use super::Ctx;
use crate::Figures;
use crate::stats::Spread;
use crate::workloads::{self, WhaleShape};

/// The whale's timers are due over a week from the start of the next hour: its week ahead by
/// hour and its next hour by minute are both full.
const DAYS: i64 = 7;
const HOURS_AHEAD: i64 = 1;

pub(super) async fn console(ctx: &Ctx<'_>, f: &mut Figures) {
    let args = ctx.args;
    for backend in ctx.stores() {
        let tag = backend.tag();
        let count = args.console_n;
        let (base, first_due) = backend
            .whale_base_over(ctx.cache, count, DAYS, HOURS_AHEAD)
            .await;
        eprintln!(
            "console: {count} pending of one tenant, {}; {} browsers",
            backend.label(),
            args.console_browsers
        );
        let w = ctx
            .world(&format!("console-{tag}"), backend, Some(&base))
            .await;
        let run = workloads::console(
            &w,
            &ctx.default("d"),
            WhaleShape { count, first_due },
            ctx.first_rate(),
            args.secs,
            args.console_browsers,
        )
        .await;
        let key = format!("console.{tag}");
        f.rate(format!("{key}.first_overview_ms"), run.first_overview_ms);
        f.rate(format!("{key}.counted_s"), run.counted_s);
        for (page, times, failed) in &run.pages {
            let spread = Spread::of(times);
            let page = format!("{key}.page.{}", page.key());
            f.rate(format!("{page}.p50"), spread.median);
            f.rate(format!("{page}.max"), spread.max);
            f.rate(format!("{page}.failed"), *failed as f64);
        }
        let browsers = crate::stats::Lateness::from_samples(run.browser_pages.clone(), 0);
        f.rate(format!("{key}.browsers.page_p50"), browsers.p50);
        f.rate(format!("{key}.browsers.page_p99"), browsers.p99);
        f.rate(
            format!("{key}.browsers.pages"),
            run.browser_pages.len() as f64,
        );
        f.rate(format!("{key}.browsers.failed"), run.browser_failed as f64);
        f.late(&format!("{key}.alone"), run.alone);
        f.late(&format!("{key}.browsers"), run.beside);
    }
}
