//! The `peers` section: timer-service (default configuration, one daemon) beside BullMQ (Redis
//! with AOF, `everysec` and `always`) and pg-boss (the bench's PostgreSQL, with `--database`),
//! on the same workloads in the same run: ingest of each `--peers-n` from a backlog and from a
//! live client (for this service both as one ScheduleTimer per timer and as ScheduleTimers of
//! 500, the `-many` figures), that many due at one instant, and the steady loads of `--rates`. The daemon's
//! backlog ingest also gives the time from its start to its first applied command.

use super::Ctx;
use crate::Figures;
use crate::workloads::{self, Carried, Driver, Intake, PeerLateness, PeerStore, Redis};
use crate::world::{Backend, Scratch};

/// The peers' systems, as figure keys name them, and in the report.
pub const PEERS: [(&str, &str); 3] = [
    ("bullmq-everysec", "BullMQ, Redis AOF everysec"),
    ("bullmq-always", "BullMQ, Redis AOF always"),
    ("pgboss", "pg-boss, same PostgreSQL"),
];

/// Timers in each ScheduleTimers of the `-many` ingests: as the peers' bulk calls take them
/// (BullMQ's `addBulk`, pg-boss's `insert()` of 1,000), within the 64 KiB a command may have.
const TIMERS_PER_MESSAGE: usize = 500;

pub(super) async fn peers(ctx: &Ctx<'_>, f: &mut Figures) {
    let args = ctx.args;
    let driver = Driver::install();
    for &n in &args.peers_n {
        for backend in ctx.stores() {
            ours(ctx, f, backend, n).await;
        }
        if let Some(driver) = &driver {
            for (system, _) in PEERS {
                theirs(ctx, f, driver, system, n).await;
            }
        }
    }
    for &rate in &args.rates {
        for backend in ctx.stores() {
            eprintln!("peers: timer-service ({}) at {rate}/s", backend.label());
            let daemons = [ctx.default("d")];
            let name = format!("peers-late-{}-{rate}", backend.tag());
            let run = ctx
                .steady(&name, backend, rate, &daemons, workloads::Load::default())
                .await;
            let late = crate::stats::Lateness::from_samples(run.samples, run.expected);
            let key = format!("peers.late.{rate}.{}", backend.tag());
            f.rate(format!("{key}.p50"), late.p50);
            f.rate(format!("{key}.p99"), late.p99);
            f.rate(format!("{key}.p999"), late.p999);
            f.rate(format!("{key}.max"), late.max);
            f.rate(format!("{key}.missing"), late.missing as f64);
            f.rate(format!("{key}.early"), late.early as f64);
        }
        if let Some(driver) = &driver {
            for (system, label) in PEERS {
                eprintln!("peers: {label} at {rate}/s");
                let workload = [
                    "lateness".into(),
                    "--rate".into(),
                    rate.to_string(),
                    "--secs".into(),
                    args.secs.to_string(),
                    "--lead-ms".into(),
                    args.lead_ms.to_string(),
                ];
                let figures = on_peer(ctx, driver, system, &workload).await;
                let key = format!("peers.late.{rate}.{system}");
                let Some(late) = figures.as_ref().and_then(PeerLateness::of) else {
                    // Said why above; counted, so that the report shows the load was not taken.
                    f.rate(format!("{key}.failed"), 1.0);
                    continue;
                };
                f.rate(format!("{key}.p50"), late.p50);
                f.rate(format!("{key}.p99"), late.p99);
                f.rate(format!("{key}.p999"), late.p999);
                f.rate(format!("{key}.max"), late.max);
                f.rate(format!("{key}.missing"), late.sent - late.received);
                f.rate(format!("{key}.early"), late.early);
            }
        }
    }
}

/// The daemon's ingest of `n` (backlog, live) and fire of `n` on `backend`.
async fn ours(ctx: &Ctx<'_>, f: &mut Figures, backend: &Backend, n: usize) {
    let tag = backend.tag();
    let daemons = [ctx.default("d")];
    let modes = [
        ("backlog", Intake::Backlog, 1),
        ("live", Intake::Live, 1),
        ("backlog-many", Intake::Backlog, TIMERS_PER_MESSAGE),
        ("live-many", Intake::Live, TIMERS_PER_MESSAGE),
    ];
    for (mode, intake, per_message) in modes {
        eprintln!(
            "peers: timer-service ({}) ingest {n}, {mode}",
            backend.label()
        );
        let w = ctx
            .world(&format!("peers-ingest-{tag}-{mode}-{n}"), backend, None)
            .await;
        let ingested =
            workloads::ingest_observed(&w, n, &daemons, Carried::default(), intake, per_message)
                .await;
        f.run(&format!("peers.ingest.{mode}.{n}.{tag}"), ingested.run);
        if let Some(first) = ingested.first_applied.filter(|_| per_message == 1) {
            f.rate(
                format!("peers.first.{n}.{tag}"),
                first.as_secs_f64() * 1000.0,
            );
        }
    }
    eprintln!("peers: timer-service ({}) fire {n}", backend.label());
    let w = ctx
        .world(&format!("peers-fire-{tag}-{n}"), backend, None)
        .await;
    let fire =
        workloads::fire_with(&w, n, &daemons, Carried::default(), workloads::fire_lead(n)).await;
    f.run(&format!("peers.fire.{n}.{tag}"), fire);
}

/// A peer's ingest of `n` (backlog, live) and fire of `n`.
async fn theirs(ctx: &Ctx<'_>, f: &mut Figures, driver: &Driver, system: &str, n: usize) {
    for mode in ["backlog", "live"] {
        eprintln!("peers: {system} ingest {n}, {mode}");
        let workload = [
            "ingest".into(),
            "--n".into(),
            n.to_string(),
            "--mode".into(),
            mode.into(),
        ];
        if let Some(rate) = per_second(on_peer(ctx, driver, system, &workload).await) {
            f.rate(format!("peers.ingest.{mode}.{n}.{system}"), rate);
        }
    }
    eprintln!("peers: {system} fire {n}");
    let workload = ["fire".into(), "--n".into(), n.to_string()];
    if let Some(rate) = per_second(on_peer(ctx, driver, system, &workload).await) {
        f.rate(format!("peers.fire.{n}.{system}"), rate);
    }
}

fn per_second(figures: Option<serde_json::Value>) -> Option<f64> {
    figures?.get("perSecond")?.as_f64()
}

/// `workload` on a fresh store of `system`: a Redis of its own, or a database of its own on the
/// bench's PostgreSQL (pg-boss is left out without `--database`).
async fn on_peer(
    ctx: &Ctx<'_>,
    driver: &Driver,
    system: &str,
    workload: &[String],
) -> Option<serde_json::Value> {
    match system.strip_prefix("bullmq-") {
        Some(appendfsync) => {
            let dir = ctx
                .dir
                .join(format!("peers-{system}-{}", uuid::Uuid::now_v7().simple()));
            let redis = Redis::start(&dir, appendfsync)?;
            driver.run(&PeerStore::Redis(&redis), workload).await
        }
        None => {
            let Some(Backend::Postgres { admin }) = &ctx.postgres else {
                return None;
            };
            let database = Scratch::create(admin, "peers_pgboss").await;
            driver
                .run(&PeerStore::Postgres(&database.url()), workload)
                .await
        }
    }
}
