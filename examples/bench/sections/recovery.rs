//! The recovery sections, on SQLite, for this build and then the baseline in each run: `crash`
//! (a `kill -9` in the middle of a burst of commands) and `intake` (one tenant's backlog of
//! commands in front of another tenant's at start-up).

use super::Ctx;
use crate::{Figures, workloads};

/// Lateness (ms) past which a timer of the crash burst counts as late.
pub const LATE_MS: f64 = 1_000.0;

pub(super) async fn crash(ctx: &Ctx<'_>, f: &mut Figures) {
    for build in &ctx.builds {
        let label = build.label;
        eprintln!(
            "crash ({label}): {} commands, kill -9 1.5 s in",
            workloads::CRASH_N
        );
        let w = ctx
            .world(&format!("crash-{label}"), &ctx.sqlite, None)
            .await;
        let settings = build.runs(vec![ctx.default("d")]).remove(0);
        let crash = workloads::crash(&w, &settings).await;
        let key = build.key("crash.sqlite");
        let over = crash.late.samples.iter().filter(|l| **l > LATE_MS).count();
        for (what, value) in [
            ("acked", crash.acked as f64),
            ("fired", crash.late.samples.len() as f64),
            ("over_1s", over as f64),
            ("held", crash.held as f64),
            ("send_s", crash.send_s),
            ("duplicates", crash.duplicates as f64),
        ] {
            f.rate(format!("{key}.{what}"), value);
        }
        f.late(&key, crash.late);
    }
}

pub(super) async fn intake(ctx: &Ctx<'_>, f: &mut Figures) {
    for build in &ctx.builds {
        let label = build.label;
        eprintln!(
            "intake ({label}): {} of bulk's commands queued, then small's timers",
            workloads::BULK_N
        );
        let w = ctx
            .world(&format!("intake-{label}"), &ctx.sqlite, None)
            .await;
        let intake = workloads::intake(&w, &build.runs(vec![ctx.default("d")])).await;
        let key = build.key("intake.sqlite");
        f.rate(format!("{key}.drain"), intake.drain_s);
        f.late(&key, intake.small);
    }
}
