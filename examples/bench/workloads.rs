//! The daemon's figures, each driven through the public contract only: commands published to
//! `timer.cmd.schedule.<tenant>`, events read from `timer.evt.due.<tenant>`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, message::PublishMessage, stream};
use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt;
use timer_service::nats::BrokerNames;
use timer_service::nats::streams::ensure_command_stream;
use tokio::sync::Mutex;

use crate::daemon::{Daemon, Observer, prefill};
use crate::nats_server::NatsServer;
use crate::raw::publish_pipelined;

/// One workload's private world: a fresh broker and a database file in `dir`.
pub struct Bench {
    pub server: NatsServer,
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub dir: PathBuf,
    pub batch: usize,
    /// SQLite `synchronous` level the daemon runs with.
    pub synchronous: String,
}

impl Bench {
    pub async fn new(dir: &Path, batch: usize, synchronous: &str) -> Self {
        let server = NatsServer::start();
        let client = async_nats::connect(server.url()).await.expect("connect");
        let js = jetstream::new(client.clone());
        std::fs::create_dir_all(dir).expect("dir");
        Self {
            server,
            client,
            js,
            dir: dir.to_owned(),
            batch,
            synchronous: synchronous.to_owned(),
        }
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.join("timers.db")
    }

    /// A database to run on: a copy of `base` (pending timers already in it) or a new file.
    pub async fn prepare_db(&self, base: Option<&Path>) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.db_path().display()));
        }
        if let Some(base) = base {
            std::fs::copy(base, self.db_path()).expect("copy base database");
            // On disk before the daemon starts, as a long-lived database would be: otherwise
            // the copy's dirty pages are flushed by the daemon's first fsyncs.
            std::fs::File::open(self.db_path())
                .and_then(|f| f.sync_all())
                .expect("sync copy");
        }
    }

    pub fn start_daemon(&self, name: &str) -> Daemon {
        Daemon::start(
            &self.server.url(),
            &self.db_path(),
            self.batch,
            &self.synchronous,
            &self.dir.join(format!("{name}.log")),
        )
    }

    async fn wait_for_command_stream(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.js.get_stream("TIMER_COMMANDS").await.is_err() {
            assert!(
                Instant::now() < deadline,
                "the daemon never created its streams"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn command(tenant: &str, id: &str, due: DateTime<Utc>) -> bytes::Bytes {
    serde_json::to_vec(&serde_json::json!({
        "id": uuid::Uuid::now_v7(),
        "type": "ScheduleTimer",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "payload": { "tenantId": tenant, "serviceCallId": id, "dueAt": rfc3339(due) },
    }))
    .expect("json")
    .into()
}

/// Result of the ingest workload.
pub struct Ingest {
    pub per_second: f64,
    pub peak_rss_mib: f64,
}

/// `n` commands queued while the daemon is stopped, then the daemon started: commands stored
/// and acknowledged per second, from process start to an empty work queue.
pub async fn ingest(bench: &Bench, n: usize, base: Option<&Path>) -> Ingest {
    bench.prepare_db(base).await;
    let stream = ensure_command_stream(&bench.js, &BrokerNames::default())
        .await
        .expect("command stream");
    let due = Utc::now() + chrono::Duration::days(1);
    publish_pipelined(&bench.js, n, 1000, |i| {
        (
            format!("timer.cmd.schedule.t{}", i % 10),
            PublishMessage::build().payload(command(
                &format!("t{}", i % 10),
                &format!("ingest-{i}"),
                due + chrono::Duration::milliseconds(i as i64),
            )),
        )
    })
    .await;
    let daemon = bench.start_daemon("ingest");
    let mut stream = stream;
    loop {
        let left = stream
            .info()
            .await
            .map(|i| i.state.messages)
            .unwrap_or(u64::MAX);
        if left == 0 {
            break;
        }
        assert!(
            daemon.started.elapsed() < Duration::from_secs(600),
            "ingest stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = daemon.started.elapsed();
    let peak_rss_mib = daemon.peak_rss_mib();
    daemon.stop();
    Ingest {
        per_second: n as f64 / elapsed.as_secs_f64(),
        peak_rss_mib,
    }
}

/// `n` timers due at one instant: timers published, PubAck'd and marked `Reached` per second,
/// from the instant to the last mark.
pub async fn fire(bench: &Bench, n: usize) -> f64 {
    bench.prepare_db(None).await;
    timer_service::persistence::db::migrate(&bench.db_path(), &Default::default())
        .await
        .expect("migrate");
    let instant = Utc::now() + chrono::Duration::seconds(3);
    prefill(&bench.db_path(), n as u64, "fire", instant, 0).await;
    let daemon = bench.start_daemon("fire");
    let observer = Observer::open(&bench.db_path()).await;
    loop {
        let pending = observer
            .count("SELECT count(*) FROM timer_schedules WHERE state = 'Scheduled'")
            .await;
        if pending == 0 && Utc::now() > instant {
            break;
        }
        assert!(
            daemon.started.elapsed() < Duration::from_secs(600),
            "firing stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = (Utc::now() - instant).num_microseconds().unwrap_or(1) as f64 / 1e6;
    observer.close().await;
    daemon.stop();
    n as f64 / elapsed
}

/// Result of a lateness workload.
pub struct LatenessRun {
    /// Lateness of each received event, in ms (received − dueAt).
    pub samples: Vec<f64>,
    pub expected: usize,
    pub peak_rss_mib: f64,
}

/// Steady load: `rate` timers per second for `secs`, each scheduled `lead` before its `dueAt`
/// and due at its own millisecond; lateness measured at a subscriber.
pub async fn lateness(
    bench: &Bench,
    rate: u32,
    secs: u32,
    lead: Duration,
    base: Option<&Path>,
) -> LatenessRun {
    bench.prepare_db(base).await;
    let daemon = bench.start_daemon("lateness");
    bench.wait_for_command_stream().await;
    let received = collect_lateness(&bench.client, "timer.evt.due.>".into()).await;
    let expected = (rate * secs) as usize;
    let js = bench.js.clone();
    schedule_steady(rate, expected, lead, move |i, due| {
        let js = js.clone();
        async move {
            let tenant = format!("t{}", i % 10);
            js.publish(
                format!("timer.cmd.schedule.{tenant}"),
                command(&tenant, &format!("late-{i}"), due),
            )
            .await
        }
    })
    .await;
    let samples = wait_for(received, expected, Duration::from_secs(15)).await;
    let peak_rss_mib = daemon.peak_rss_mib();
    daemon.stop();
    if samples.len() < expected {
        let log = std::fs::read_to_string(bench.dir.join("lateness.log")).unwrap_or_default();
        eprintln!(
            "{} of {expected} timers fired; daemon log:\n{log}",
            samples.len()
        );
    }
    LatenessRun {
        samples,
        expected,
        peak_rss_mib,
    }
}

/// The broker's own scheduler (`Nats-Schedule: @at …`, nats-server ≥ 2.12) on the same load.
/// `None` when the server does not support it.
pub async fn native_lateness(
    bench: &Bench,
    rate: u32,
    secs: u32,
    lead: Duration,
) -> Option<LatenessRun> {
    bench
        .js
        .create_stream(stream::Config {
            name: "NATIVE".into(),
            subjects: vec!["native.sched.>".into(), "native.fired.>".into()],
            allow_message_schedules: true,
            // Messages a schedule produces are stored in the stream, not published to core
            // subscribers; republish makes them visible like any published event.
            republish: Some(stream::Republish {
                source: "native.fired.>".into(),
                destination: "native.out.>".into(),
                headers_only: false,
            }),
            ..Default::default()
        })
        .await
        .map_err(|e| eprintln!("native scheduler unavailable: {e}"))
        .ok()?;
    let received = collect_lateness(&bench.client, "native.out.>".into()).await;
    let expected = (rate * secs) as usize;
    let js = bench.js.clone();
    schedule_steady(rate, expected, lead, move |i, due| {
        let js = js.clone();
        async move {
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Schedule", format!("@at {}", rfc3339(due)).as_str());
            headers.insert("Nats-Schedule-Target", format!("native.fired.{i}").as_str());
            let payload = serde_json::to_vec(&serde_json::json!({
                "payload": { "dueAt": rfc3339(due) }
            }))
            .expect("json");
            js.publish_with_headers(format!("native.sched.{i}"), headers, payload.into())
                .await
        }
    })
    .await;
    let samples = wait_for(received, expected, Duration::from_secs(15)).await;
    (!samples.is_empty()).then_some(LatenessRun {
        samples,
        expected,
        peak_rss_mib: f64::NAN,
    })
}

/// Publishes `count` timers at `rate` per second, each `lead` ahead of its own `dueAt`.
async fn schedule_steady<F, Fut>(rate: u32, count: usize, lead: Duration, publish: F)
where
    F: Fn(usize, DateTime<Utc>) -> Fut,
    Fut: std::future::Future<
            Output = Result<jetstream::context::PublishAckFuture, jetstream::context::PublishError>,
        >,
{
    let start_wall = Utc::now() + chrono::Duration::from_std(lead).expect("lead");
    let start = tokio::time::Instant::now();
    let step = Duration::from_secs_f64(1.0 / rate as f64);
    let mut acks = Vec::with_capacity(count);
    for i in 0..count {
        let offset = step * i as u32;
        tokio::time::sleep_until(start + offset).await;
        let due = start_wall + chrono::Duration::from_std(offset).expect("offset");
        acks.push(publish(i, due).await.expect("publish"));
        if acks.len() >= 500 {
            for ack in acks.drain(..) {
                ack.await.expect("PubAck");
            }
        }
    }
    for ack in acks {
        ack.await.expect("PubAck");
    }
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

/// Result of the restart catch-up workload.
pub struct CatchUp {
    pub first_event_s: f64,
    pub last_event_s: f64,
    pub peak_rss_mib: f64,
}

/// `n` overdue timers in the database when the daemon starts: time from process start to the
/// first `DueTimeReached`, and to the last timer marked `Reached`.
pub async fn catch_up(bench: &Bench, base: &Path) -> CatchUp {
    bench.prepare_db(Some(base)).await;
    let mut subscriber = bench
        .client
        .subscribe("timer.evt.due.>")
        .await
        .expect("subscribe");
    bench.client.flush().await.expect("flush");
    let daemon = bench.start_daemon("catch-up");
    let first = tokio::time::timeout(Duration::from_secs(60), subscriber.next())
        .await
        .ok()
        .flatten()
        .map(|_| daemon.started.elapsed().as_secs_f64())
        .unwrap_or(f64::NAN);
    drop(subscriber);
    let observer = Observer::open(&bench.db_path()).await;
    while observer
        .count("SELECT count(*) FROM timer_schedules WHERE state = 'Scheduled'")
        .await
        > 0
    {
        assert!(
            daemon.started.elapsed() < Duration::from_secs(1200),
            "catch-up stalled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let last = daemon.started.elapsed().as_secs_f64();
    observer.close().await;
    let peak_rss_mib = daemon.peak_rss_mib();
    daemon.stop();
    CatchUp {
        first_event_s: first,
        last_event_s: last,
        peak_rss_mib,
    }
}
