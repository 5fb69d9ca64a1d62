//! The `link` section (SQLite, this build only): the daemon's broker reached through a TCP
//! proxy; a path silent both ways and one silent toward the broker only, each 14 s and then
//! healed; and a distant broker, 200 ms each way, with 400 timers due a second for 10 s.

use std::time::Duration;

use super::Ctx;
use crate::Figures;
use crate::stats::Lateness;
use crate::workloads::{self, Silence};

/// The distant broker: latency each way, timers due per second, for how long.
pub const DISTANT_LATENCY: Duration = Duration::from_millis(200);
pub const DISTANT_RATE: u32 = 400;
pub const DISTANT_SECS: u32 = 10;

pub(super) async fn link(ctx: &Ctx<'_>, f: &mut Figures) {
    for (silence, tag) in [(Silence::BothWays, "both"), (Silence::OneWay, "one_way")] {
        eprintln!(
            "broker link: a path silent ({tag}) for {} s, then healed",
            workloads::SILENCE.as_secs()
        );
        let w = ctx
            .world(&format!("link-silent-{tag}"), &ctx.sqlite, None)
            .await;
        let s = workloads::silent_path(&w, &ctx.default("d"), silence).await;
        let key = format!("link.silent.{tag}");
        for (what, value) in [
            ("noticed_s", s.noticed_s.unwrap_or(f64::NAN)),
            ("unnoticed", f64::from(u8::from(s.noticed_s.is_none()))),
            ("ready_polls", s.ready_polls as f64),
            ("ready_while_silent", s.ready_while_silent as f64),
            ("first_s", s.first_s),
            ("last_s", s.last_s),
            ("after_p50_s", s.after_p50_s),
            ("after_max_s", s.after_max_s),
            ("missing", s.missing as f64),
        ] {
            f.rate(format!("{key}.{what}"), value);
        }
    }
    eprintln!(
        "broker link: {} ms each way, {DISTANT_RATE} timers/s due for {DISTANT_SECS} s",
        DISTANT_LATENCY.as_millis()
    );
    let w = ctx.world("link-distant", &ctx.sqlite, None).await;
    let d = workloads::distant(
        &w,
        &ctx.default("d"),
        DISTANT_LATENCY,
        DISTANT_RATE,
        DISTANT_SECS,
    )
    .await;
    f.rate("link.distant.per_second", d.per_second);
    f.lateness
        .entry("link.distant".into())
        .or_default()
        .push(Lateness::from_samples(d.lateness_ms, d.expected));
}
