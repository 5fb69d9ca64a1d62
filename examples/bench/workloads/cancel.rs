//! A cancel of many timers beside a steady load: `pending` timers of the tenant `bulk`, due in
//! a month, are in the database when the daemon starts; once it runs, one `CancelTimers` of
//! them all is published while a steady load of other tenants fires. Timers cancelled per
//! second (all of them by the time none was left, or what was cancelled by the end of the
//! load), and the lateness of the load meanwhile. The same load on the same base without the
//! cancel (`lateness` alone) is the figure it is held against.

use std::time::{Duration, Instant};

use chrono::Utc;

use super::steady::{LatenessRun, Load, lateness};
use crate::daemon::Settings;
use crate::world::World;

/// The tenant whose timers are cancelled.
pub const BULK_TENANT: &str = "bulk";

pub struct CancelRun {
    pub cancelled_per_second: f64,
    /// From the publish to no pending timer of the tenant left, if that came within the load.
    pub took: Option<Duration>,
    pub lateness: LatenessRun,
}

pub async fn cancel_under_load(
    world: &World,
    pending: u64,
    rate: u32,
    secs: u32,
    lead: Duration,
    settings: &Settings,
) -> CancelRun {
    let left = format!(
        "SELECT count(*) FROM timer_schedules WHERE tenant_id = '{BULK_TENANT}' \
         AND state = 'Scheduled'"
    );
    // Watched with an index seek, not a count (see `retention_under_load`).
    let any_left = format!(
        "SELECT count(*) FROM (SELECT 1 FROM timer_schedules WHERE tenant_id = '{BULK_TENANT}' \
         AND state = 'Scheduled' LIMIT 1) AS one"
    );
    let observer = world.observer().await;
    assert!(
        observer.count(&left).await >= pending,
        "the base holds the pending timers"
    );
    let watcher = world.observer().await;
    let js = world.js.clone();
    let watch = tokio::spawn(async move {
        let subject = format!("timer.cmd.cancel-many.{BULK_TENANT}");
        let command = serde_json::json!({
            "id": uuid::Uuid::now_v7(),
            "type": "CancelTimers",
            "tenantId": BULK_TENANT,
            "timestampMs": Utc::now().timestamp_millis(),
            "correlationId": null,
            "causationId": null,
            "aggregateId": null,
            "payload": { "tenantId": BULK_TENANT, "all": true },
        });
        let bytes = serde_json::to_vec(&command).expect("json");
        // The daemon creates the command stream as it starts: published once it took it.
        let started = loop {
            if let Ok(ack) = js.publish(subject.clone(), bytes.clone().into()).await
                && ack.await.is_ok()
            {
                break Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        loop {
            if watcher.count(&any_left).await == 0 {
                return (started, Some(started.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let lateness = lateness(
        world,
        rate,
        secs,
        lead,
        std::slice::from_ref(settings),
        Load::default(),
    )
    .await;
    let (elapsed, took) = if watch.is_finished() {
        let (started, took) = watch.await.expect("watcher");
        (took.unwrap_or_else(|| started.elapsed()), took)
    } else {
        watch.abort();
        // The load ran `secs` after the daemon started; the cancel began a moment after.
        (Duration::from_secs(u64::from(secs)), None)
    };
    let cancelled = pending - observer.count(&left).await.min(pending);
    CancelRun {
        cancelled_per_second: cancelled as f64 / elapsed.as_secs_f64(),
        took,
        lateness,
    }
}
