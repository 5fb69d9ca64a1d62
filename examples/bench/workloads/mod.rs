//! The daemon's figures, each driven through the public contract only: commands published to
//! `timer.cmd.schedule.<tenant>`, API requests on `timer.api.<verb>.<tenant>`, events read from
//! `timer.evt.due.<tenant>`.
//!
//! - `backlog`: work queued or due at once, and how fast it is worked off (ingest, fire, a
//!   failed daemon's share taken over, overdue timers at restart);
//! - `steady`: a steady load of timers and their lateness, alone or with something beside it
//!   (API requests, scraping, retention), and the broker's own scheduler on the same load;
//! - `api`: the query API's request rate;
//! - `tenants`: one tenant's load beside another's timers (a burst due at once, heavy reads);
//! - `recovery`: a `kill -9` in the middle of a burst of commands, and one tenant's backlog of
//!   commands in front of another's at start-up;
//! - `backup`: backups of a live SQLite file, and what they cost the daemon's writer;
//! - `cancel`: a CancelTimers of a million timers beside a steady load;
//! - `link`: the broker reached through a proxy whose path goes silent and heals, or moves
//!   away;
//! - `floor`: the same steady load published straight to the broker at each instant, with no
//!   daemon: the floor under every lateness figure;
//! - `peers`: BullMQ and pg-boss on the same workloads, driven from Node.
//!
//! This module holds what they share: starting and stopping the daemons, publishing a steady
//! stream of timers, and collecting the lateness of their events.

mod api;
mod backlog;
mod backup;
mod cancel;
mod console;
mod floor;
mod link;
mod peers;
mod recovery;
mod steady;
mod tenants;

pub use api::api_throughput;
pub use backlog::{
    Failure, Intake, catch_up, failover, fire, fire_lead, fire_with, ingest, ingest_observed,
    ingest_with,
};
pub use backup::{backups_under_load, writer_beside_backups};
pub use cancel::{BULK_TENANT, cancel_under_load};
pub use console::{LOADS, Page, WhaleShape, console};
pub use floor::{Waiter, floor_lateness};
pub use link::{SILENCE, Silence, distant, silent_path};
pub use peers::{Driver, PeerLateness, PeerStore, Redis};
pub use recovery::{BULK_N, CRASH_N, CRASH_RATE, crash, intake};
pub use steady::{LatenessRun, Load, lateness, native_lateness, retention_under_load};
pub use tenants::{ReadsShape, noisy, reads};

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::sync::Mutex;

use crate::daemon::{CpuMeter, Daemon, Settings};
use crate::support::rfc3339;
use crate::world::World;

/// A ScheduleTimer command of `tenant` for key `id`, due at `due`.
fn command(tenant: &str, id: &str, due: DateTime<Utc>) -> bytes::Bytes {
    command_with(tenant, id, due, None)
}

/// What each timer of a backlog carries besides its key and `dueAt`.
#[derive(Clone, Copy, Default)]
pub struct Carried<'a> {
    /// JSON data.
    pub data: Option<&'a serde_json::value::RawValue>,
    /// A sampled `traceparent` (a trace of its own per command).
    pub traced: bool,
}

/// The `traceparent` of the `i`th traced command: a trace of its own, sampled.
pub fn traceparent(i: usize) -> String {
    format!("00-{:032x}-{:016x}-01", i + 1, i + 1)
}

/// [`command`], carrying `data` (JSON text) when given.
fn command_with(
    tenant: &str,
    id: &str,
    due: DateTime<Utc>,
    data: Option<&serde_json::value::RawValue>,
) -> bytes::Bytes {
    let mut payload =
        serde_json::json!({ "tenantId": tenant, "serviceCallId": id, "dueAt": rfc3339(due) });
    if let Some(data) = data {
        payload["data"] = serde_json::from_str(data.get()).expect("data is JSON");
    }
    serde_json::to_vec(&serde_json::json!({
        "id": uuid::Uuid::now_v7(),
        "type": "ScheduleTimer",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "payload": payload,
    }))
    .expect("json")
    .into()
}

/// A ScheduleTimers of `tenant` holding `timers` (key, due).
fn schedule_timers(
    tenant: &str,
    timers: impl Iterator<Item = (String, DateTime<Utc>)>,
) -> bytes::Bytes {
    let timers: Vec<serde_json::Value> = timers
        .map(|(id, due)| serde_json::json!({ "serviceCallId": id, "dueAt": rfc3339(due) }))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "id": uuid::Uuid::now_v7(),
        "type": "ScheduleTimers",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "payload": { "tenantId": tenant, "timers": timers },
    }))
    .expect("json")
    .into()
}

/// A timer's data as a client might send it, `bytes` long as JSON text (at least 100): an
/// order with a few lines and a note filling the rest.
pub fn data_of(bytes: usize) -> Box<serde_json::value::RawValue> {
    let head = r#"{"orderId":"ord-000042","step":"reminder","lines":[{"sku":"a-1","qty":2},{"sku":"b-7","qty":1}],"note":""#;
    let tail = r#""}"#;
    let fill = bytes.saturating_sub(head.len() + tail.len());
    let text = format!("{head}{}{tail}", "n".repeat(fill));
    serde_json::value::RawValue::from_string(text).expect("data is JSON")
}

/// A throughput figure, with the memory and CPU it took.
pub struct Run {
    pub per_second: f64,
    pub peak_rss_mib: f64,
    /// Cores used by each process group during the run.
    pub cpu: Vec<(String, f64)>,
}

fn start_daemons(world: &World, daemons: &[Settings]) -> Vec<Daemon> {
    daemons.iter().map(|s| world.daemon(s)).collect()
}

fn meter(world: &World, daemons: &[Daemon]) -> CpuMeter {
    let pids: Vec<u32> = daemons.iter().map(Daemon::pid).collect();
    CpuMeter::start(&pids, world.server.pid(), world.is_postgres())
}

fn stop(daemons: Vec<Daemon>) -> f64 {
    let rss = daemons
        .iter()
        .map(Daemon::peak_rss_mib)
        .fold(0.0_f64, f64::max);
    for daemon in daemons {
        daemon.stop();
    }
    rss
}

/// Waits (up to 30 s) until the API answers a `stats` request of `tenant`.
async fn wait_for_api(world: &World, tenant: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while world
        .client
        .request(format!("timer.api.stats.{tenant}"), "{}".into())
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the API never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Publishes `count` timers at `rate` per second, each `lead` ahead of its own `dueAt`. The
/// PubAcks are awaited beside the loop ([`settle_acks`]): a publish is never held back by the
/// acknowledgements of those before it.
async fn schedule_steady<F, Fut>(rate: u32, count: usize, lead: Duration, publish: F)
where
    F: Fn(usize, DateTime<Utc>) -> Fut,
    Fut: std::future::Future<Output = Result<Ack, jetstream::context::PublishError>>,
{
    let start_wall = Utc::now() + chrono::Duration::from_std(lead).expect("lead");
    let start = tokio::time::Instant::now();
    let step = Duration::from_secs_f64(1.0 / f64::from(rate));
    let (acks, settled) = settle_acks();
    for i in 0..count {
        let offset = step.mul_f64(i as f64);
        tokio::time::sleep_until(start + offset).await;
        let due = start_wall + chrono::Duration::from_std(offset).expect("offset");
        let _ = acks.send(publish(i, due).await.expect("publish"));
    }
    drop(acks);
    settled.await.expect("acks");
}

type Ack = jetstream::context::PublishAckFuture;

/// A task awaiting each PubAck sent to it, in order; it ends once the sender is dropped and
/// every PubAck came.
fn settle_acks() -> (
    tokio::sync::mpsc::UnboundedSender<Ack>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Ack>();
    let task = tokio::spawn(async move {
        while let Some(ack) = rx.recv().await {
            ack.await.expect("PubAck");
        }
    });
    (tx, task)
}

/// A steady load ([`schedule_steady`]): timer `late-{i}` of tenant `tenant_of(i)`.
async fn schedule_late(
    js: &jetstream::Context,
    rate: u32,
    count: usize,
    lead: Duration,
    tenant_of: impl Fn(usize) -> String,
) {
    schedule_steady(rate, count, lead, |i, due| {
        let (js, tenant) = (js.clone(), tenant_of(i));
        async move {
            js.publish(
                format!("timer.cmd.schedule.{tenant}"),
                command(&tenant, &format!("late-{i}"), due),
            )
            .await
        }
    })
    .await;
}

type Samples = Arc<Mutex<Vec<f64>>>;

/// Subscribes to `subject` and records, for each event, its lateness in ms.
async fn collect_lateness(client: &async_nats::Client, subject: String) -> Samples {
    let samples: Samples = Arc::new(Mutex::new(Vec::new()));
    let mut subscriber = client.subscribe(subject).await.expect("subscribe");
    let sink = samples.clone();
    tokio::spawn(async move {
        while let Some(message) = subscriber.next().await {
            let received = Utc::now();
            let Ok(event) = serde_json::from_slice::<serde_json::Value>(&message.payload) else {
                continue;
            };
            let Some(due) = event["payload"]["dueAt"]
                .as_str()
                .and_then(|t| t.parse::<DateTime<Utc>>().ok())
            else {
                continue;
            };
            let late = (received - due).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0;
            sink.lock().await.push(late);
        }
    });
    client.flush().await.expect("flush");
    samples
}

/// Waits until `expected` samples arrived, or `grace` passed without a new one.
async fn wait_for(samples: Samples, expected: usize, grace: Duration) -> Vec<f64> {
    let mut last_len = 0;
    let mut last_change = Instant::now();
    loop {
        let len = samples.lock().await.len();
        if len >= expected {
            break;
        }
        if len != last_len {
            last_len = len;
            last_change = Instant::now();
        } else if last_change.elapsed() > grace {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    samples.lock().await.clone()
}
