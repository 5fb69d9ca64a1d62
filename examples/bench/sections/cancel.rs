//! The `cancel` section: one CancelTimers of `--cancel-n` pending timers beside a steady load
//! of `--rates`' first rate for `--cancel-secs`, and the same load on the same base without it
//! (SQLite, and PostgreSQL with `--database`; this build only: a release before it has no
//! CancelTimers).

use super::Ctx;
use crate::Figures;
use crate::workloads;

pub(super) async fn cancel(ctx: &Ctx<'_>, f: &mut Figures) {
    let args = ctx.args;
    let rate = args.rates.first().copied().unwrap_or(1000);
    let Some(build) = ctx.builds.iter().find(|b| !b.is_baseline()) else {
        return;
    };
    let daemon = &build.runs(vec![ctx.default("d")])[0];
    for (backend, base) in &ctx.bases.cancel {
        let (tag, store) = (backend.tag(), backend.label());
        eprintln!(
            "cancel of {} beside {rate}/s, and the same load without it, {store}",
            args.cancel_n
        );
        let w = ctx
            .world(&format!("cancel-many-{tag}"), backend, Some(base))
            .await;
        let run = workloads::cancel_under_load(
            &w,
            args.cancel_n,
            rate,
            args.cancel_secs,
            ctx.lead(),
            daemon,
        )
        .await;
        f.rate(format!("cancel.{tag}.per_second"), run.cancelled_per_second);
        if let Some(took) = run.took {
            f.rate(format!("cancel.{tag}.took_s"), took.as_secs_f64());
        }
        f.late(&format!("cancel.{tag}.load"), run.lateness);
        drop(w);
        let w = ctx
            .world(&format!("cancel-plain-{tag}"), backend, Some(base))
            .await;
        let plain = workloads::lateness(
            &w,
            rate,
            args.cancel_secs,
            ctx.lead(),
            std::slice::from_ref(daemon),
            workloads::Load::default(),
        )
        .await;
        f.late(&format!("cancel.{tag}.plain"), plain);
    }
}
