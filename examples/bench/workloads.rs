//! The daemon's figures, each driven through the public contract only: commands published to
//! `timer.cmd.schedule.<tenant>`, API requests on `timer.api.<verb>.<tenant>`, events read from
//! `timer.evt.due.<tenant>`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, message::PublishMessage, stream};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use timer_service::nats::BrokerNames;
use timer_service::nats::streams::ensure_command_stream;
use tokio::sync::Mutex;

use crate::daemon::{CpuMeter, Daemon, Settings};
use crate::raw::publish_pipelined;
use crate::support::{http_get, rfc3339};
use crate::world::World;

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

/// `n` commands queued while no daemon runs, then the daemons started: commands stored and
/// acknowledged per second, from the first process start to an empty work queue.
pub async fn ingest(world: &World, n: usize, daemons: &[Settings]) -> Run {
    let mut stream = ensure_command_stream(&world.js, &BrokerNames::default())
        .await
        .expect("command stream");
    let due = Utc::now() + chrono::Duration::days(1);
    publish_pipelined(&world.js, n, 1000, |i| {
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
    let running = start_daemons(world, daemons);
    let cpu = meter(world, &running);
    let started = running[0].started;
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
            started.elapsed() < Duration::from_secs(900),
            "ingest stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let cpu = cpu.finish();
    Run {
        per_second: n as f64 / elapsed.as_secs_f64(),
        peak_rss_mib: stop(running),
        cpu,
    }
}

/// `n` timers due at one instant: timers published, acknowledged and marked `Reached` per
/// second, from the instant to the last mark.
pub async fn fire(world: &World, n: usize, daemons: &[Settings]) -> Run {
    let observer = world.observer().await;
    let instant = Utc::now() + chrono::Duration::seconds(4);
    observer.prefill(n as u64, "fire", instant, 0, None).await;
    let running = start_daemons(world, daemons);
    while Utc::now() < instant {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let cpu = meter(world, &running);
    loop {
        if !observer.any_pending().await {
            break;
        }
        assert!(
            Utc::now() - instant < chrono::Duration::seconds(900),
            "firing stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = (Utc::now() - instant).num_microseconds().unwrap_or(1) as f64 / 1e6;
    let cpu = cpu.finish();
    observer.close().await;
    Run {
        per_second: n as f64 / elapsed,
        peak_rss_mib: stop(running),
        cpu,
    }
}

/// Result of [`noisy`].
pub struct Noisy {
    /// The quiet tenant's lateness, as received on a connection of its own.
    pub small: LatenessRun,
    /// Seconds from the burst's instant until nothing is pending.
    pub drain_s: f64,
}

/// Timers of the quiet tenant, due one every 5 ms over the second after the burst's instant
/// (from 200 ms after it).
const QUIET_TIMERS: u64 = 200;

/// The noisy neighbour (docs/CONTRACT.md §9): tenant `bulk` has `n` timers due at one instant,
/// tenant `small` 200 due over the next second.
pub async fn noisy(world: &World, n: usize, daemons: &[Settings]) -> Noisy {
    let observer = world.observer().await;
    let instant = Utc::now() + chrono::Duration::seconds(4);
    observer.prefill(n as u64, "bulk", instant, 0, None).await;
    observer
        .prefill(
            QUIET_TIMERS,
            "small",
            instant + chrono::Duration::milliseconds(200),
            5,
            None,
        )
        .await;
    let quiet = async_nats::connect(world.server.url())
        .await
        .expect("connect");
    let received = collect_lateness(&quiet, "timer.evt.due.small".into()).await;
    let running = start_daemons(world, daemons);
    while Utc::now() < instant {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let cpu = meter(world, &running);
    while observer.any_pending().await {
        assert!(
            Utc::now() - instant < chrono::Duration::seconds(900),
            "firing stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain_s = (Utc::now() - instant).num_microseconds().unwrap_or(0) as f64 / 1e6;
    let cpu = cpu.finish();
    let samples = wait_for(received, QUIET_TIMERS as usize, Duration::from_secs(5)).await;
    observer.close().await;
    Noisy {
        small: LatenessRun {
            samples,
            expected: QUIET_TIMERS as usize,
            peak_rss_mib: stop(running),
            cpu,
            api_answered: 0,
            api_failed: 0,
            metrics: None,
        },
        drain_s,
    }
}

/// How the first daemon fails in [`failover`].
#[derive(Debug, Clone, Copy)]
pub enum Failure {
    /// `kill -9`: its connections close, its claims stay until their lease lapses.
    Kill,
    /// SIGSTOP until the others have fired everything: its claims lapse the same way.
    Freeze,
}

/// Result of [`failover`]: seconds from the due instant, and from the fault, to the last
/// timer marked `Reached`.
pub struct Takeover {
    pub drain_s: f64,
    pub after_fault_s: f64,
}

/// `n` timers due at one instant, fired by several daemons sharing the database; 300 ms after
/// that instant, the first daemon fails. The others fire everything, its claimed share once its
/// claims lapse (`claim_lease`).
pub async fn failover(world: &World, n: usize, daemons: &[Settings], failure: Failure) -> Takeover {
    let observer = world.observer().await;
    let instant = Utc::now() + chrono::Duration::seconds(4);
    observer
        .prefill(n as u64, "failover", instant, 0, None)
        .await;
    let running = start_daemons(world, daemons);
    let deadline = Instant::now() + Duration::from_secs(600);
    // Mid-burst: the first events are out (counting what has fired would load the database
    // the figure is about).
    while Utc::now() < instant + chrono::Duration::milliseconds(300) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let fault_at = Utc::now();
    running[0].signal(match failure {
        Failure::Kill => libc::SIGKILL,
        Failure::Freeze => libc::SIGSTOP,
    });
    while observer.any_pending().await {
        assert!(
            Instant::now() < deadline,
            "the others never fired the failed daemon's share"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let done = Utc::now();
    if let Failure::Freeze = failure {
        running[0].signal(libc::SIGCONT);
    }
    observer.close().await;
    stop(running);
    let seconds = |d: chrono::Duration| d.num_microseconds().unwrap_or(0) as f64 / 1e6;
    Takeover {
        drain_s: seconds(done - instant),
        after_fault_s: seconds(done - fault_at),
    }
}

/// What else runs during a steady load.
#[derive(Debug, Clone, Copy, Default)]
pub struct Load {
    /// API requests per second (half `get`, half `list` of 100) during the load.
    pub api_rate: u32,
    /// `GET /metrics` of every daemon each second, as Prometheus would.
    pub scrape: bool,
    /// Tenants the timers are spread over (10 when 0).
    pub tenants: u32,
}

/// Result of a lateness workload.
pub struct LatenessRun {
    /// Lateness of each received event, in ms (received − dueAt).
    pub samples: Vec<f64>,
    pub expected: usize,
    pub peak_rss_mib: f64,
    pub cpu: Vec<(String, f64)>,
    /// API requests answered, and refused or failed, during the load.
    pub api_answered: u64,
    pub api_failed: u64,
    /// The last `/metrics` of the first daemon, when scraped.
    pub metrics: Option<String>,
}

/// Steady load: `rate` timers per second for `secs`, each scheduled `lead` before its `dueAt`
/// and due at its own instant; lateness measured at a subscriber.
pub async fn lateness(
    world: &World,
    rate: u32,
    secs: u32,
    lead: Duration,
    daemons: &[Settings],
    load: Load,
) -> LatenessRun {
    let running = start_daemons(world, daemons);
    world.wait_for_command_stream().await;
    let received = collect_lateness(&world.client, "timer.evt.due.>".into()).await;
    let expected = (rate * secs) as usize;
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let api = (load.api_rate > 0).then(|| {
        tokio::spawn(api_load(
            world.client.clone(),
            load.api_rate,
            lead + Duration::from_secs(u64::from(secs)),
            answered.clone(),
            failed.clone(),
        ))
    });
    let ports: Vec<u16> = running.iter().filter_map(|d| d.http_port).collect();
    let scrapes = load.scrape.then(|| {
        tokio::spawn(scrape_every_second(
            ports.clone(),
            lead + Duration::from_secs(u64::from(secs) + 1),
        ))
    });
    let cpu = meter(world, &running);
    let js = world.js.clone();
    let tenants = if load.tenants == 0 { 10 } else { load.tenants } as usize;
    schedule_steady(rate, expected, lead, move |i, due| {
        let js = js.clone();
        async move {
            let tenant = format!("t{}", i % tenants);
            js.publish(
                format!("timer.cmd.schedule.{tenant}"),
                command(&tenant, &format!("late-{i}"), due),
            )
            .await
        }
    })
    .await;
    let samples = wait_for(received, expected, Duration::from_secs(15)).await;
    let cpu = cpu.finish();
    if let Some(api) = api {
        let _ = api.await;
    }
    let metrics = match scrapes {
        Some(task) => task.await.ok().flatten(),
        None => None,
    };
    if samples.len() < expected {
        eprintln!(
            "{} of {expected} timers fired (logs in {})",
            samples.len(),
            world.dir.display()
        );
    }
    LatenessRun {
        samples,
        expected,
        peak_rss_mib: stop(running),
        cpu,
        api_answered: answered.load(Ordering::Relaxed),
        api_failed: failed.load(Ordering::Relaxed),
        metrics,
    }
}

/// `rate` API requests per second for `duration`, alternating a `get` of a timer of the load
/// and a `list` of the first 100.
async fn api_load(
    client: async_nats::Client,
    rate: u32,
    duration: Duration,
    answered: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) {
    let start = tokio::time::Instant::now();
    let step = Duration::from_secs_f64(1.0 / f64::from(rate));
    let mut tasks = Vec::new();
    let mut i: u64 = 0;
    while start.elapsed() < duration {
        tokio::time::sleep_until(start + step * i as u32).await;
        let (subject, body) = if i.is_multiple_of(2) {
            (
                "timer.api.get.t0".to_owned(),
                serde_json::json!({ "serviceCallId": format!("late-{}", (i / 2) * 10) }),
            )
        } else {
            (
                "timer.api.list.t1".to_owned(),
                serde_json::json!({ "limit": 100 }),
            )
        };
        let (client, answered, failed) = (client.clone(), answered.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let reply = client
                .request(subject, serde_json::to_vec(&body).expect("json").into())
                .await;
            let ok = reply.is_ok_and(|r| {
                r.headers
                    .as_ref()
                    .and_then(|h| h.get("Nats-Service-Error-Code"))
                    .is_none_or(|code| code.as_str() == "404")
            });
            if ok { &answered } else { &failed }.fetch_add(1, Ordering::Relaxed);
        }));
        i += 1;
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// `GET /metrics` of each port once a second for `duration`; the last answer of the first.
async fn scrape_every_second(ports: Vec<u16>, duration: Duration) -> Option<String> {
    let start = tokio::time::Instant::now();
    let mut last = None;
    while start.elapsed() < duration {
        for (i, port) in ports.iter().enumerate() {
            if let Some((200, body)) = http_get(&format!("127.0.0.1:{port}"), "/metrics").await
                && i == 0
            {
                last = Some(body);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    last
}

/// API requests answered per second with `in_flight` requests outstanding at all times: `get`
/// of random timers among `n` stored, then `list` of 100.
pub struct ApiRun {
    pub get_per_second: f64,
    pub list_per_second: f64,
}

pub async fn api_throughput(
    world: &World,
    settings: &Settings,
    n: u64,
    in_flight: usize,
    secs: f64,
) -> ApiRun {
    let observer = world.observer().await;
    let far = Utc::now() + chrono::Duration::days(365);
    observer.prefill(n, "api", far, 1, None).await;
    observer.close().await;
    let daemon = world.daemon(settings);
    let deadline = Instant::now() + Duration::from_secs(30);
    while world
        .client
        .request("timer.api.stats.api", "{}".into())
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the API never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let run = |verb: &'static str| {
        let client = world.client.clone();
        async move {
            let done = Arc::new(AtomicU64::new(0));
            let stop_at = Instant::now() + Duration::from_secs_f64(secs);
            let workers: Vec<_> = (0..in_flight)
                .map(|w| {
                    let (client, done) = (client.clone(), done.clone());
                    tokio::spawn(async move {
                        let mut x = w as u64 * 7919;
                        while Instant::now() < stop_at {
                            x = (x * 6364136223846793005 + 1442695040888963407) % n.max(1);
                            let body = match verb {
                                "get" => serde_json::json!({ "serviceCallId": format!("api-{x}") }),
                                _ => serde_json::json!({ "limit": 100 }),
                            };
                            let subject = format!("timer.api.{verb}.api");
                            if client
                                .request(subject, serde_json::to_vec(&body).expect("json").into())
                                .await
                                .is_ok()
                            {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            let started = Instant::now();
            for worker in workers {
                let _ = worker.await;
            }
            done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
        }
    };
    let get_per_second = run("get").await;
    let list_per_second = run("list").await;
    daemon.stop();
    ApiRun {
        get_per_second,
        list_per_second,
    }
}

/// Retention under load: `finished` timers that finished 30 days ago are in the database when
/// the daemon starts (retention 7 days, so all go), while a steady load fires: rows deleted per
/// second, and the lateness of the load meanwhile.
pub struct RetentionRun {
    pub deleted_per_second: f64,
    pub lateness: LatenessRun,
}

pub async fn retention_under_load(
    world: &World,
    finished: u64,
    rate: u32,
    secs: u32,
    lead: Duration,
    settings: &Settings,
) -> RetentionRun {
    let observer = world.observer().await;
    let remaining = "SELECT count(*) FROM timer_schedules WHERE tenant_id = 'old'";
    assert!(
        observer.count(remaining).await >= finished,
        "the base holds the finished timers"
    );
    // Watched with an index seek, not a count: counting a million rows ten times a second
    // took a core from the daemon and held a read snapshot that kept the WAL from restarting.
    let any_left =
        "SELECT count(*) FROM (SELECT 1 FROM timer_schedules WHERE tenant_id = 'old' LIMIT 1)";
    let started = Instant::now();
    let watcher = world.observer().await;
    let watch = tokio::spawn(async move {
        loop {
            if watcher.count(any_left).await == 0 {
                break started.elapsed();
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
    // The rate over the steady load: all rows by the time they were gone, or what was deleted
    // by the end of the load (the daemon stops with it).
    let elapsed = if watch.is_finished() {
        watch.await.expect("watcher")
    } else {
        watch.abort();
        started.elapsed()
    };
    let deleted = finished - observer.count(remaining).await.min(finished);
    RetentionRun {
        deleted_per_second: deleted as f64 / elapsed.as_secs_f64(),
        lateness,
    }
}

/// The broker's own scheduler (`Nats-Schedule: @at …`, nats-server ≥ 2.12) on the same load.
/// `None` when the server does not support it.
pub async fn native_lateness(
    world: &World,
    rate: u32,
    secs: u32,
    lead: Duration,
) -> Option<LatenessRun> {
    world
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
    let received = collect_lateness(&world.client, "native.out.>".into()).await;
    let expected = (rate * secs) as usize;
    let js = world.js.clone();
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
        cpu: Vec::new(),
        api_answered: 0,
        api_failed: 0,
        metrics: None,
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
    let step = Duration::from_secs_f64(1.0 / f64::from(rate));
    let mut acks = Vec::with_capacity(count);
    for i in 0..count {
        let offset = step.mul_f64(i as f64);
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

/// Overdue timers in the database when the daemon starts: time from process start to the
/// first `DueTimeReached`, and to the last timer marked `Reached`.
pub async fn catch_up(world: &World, settings: &Settings) -> CatchUp {
    let mut subscriber = world
        .client
        .subscribe("timer.evt.due.>")
        .await
        .expect("subscribe");
    world.client.flush().await.expect("flush");
    let daemon = world.daemon(settings);
    let first = tokio::time::timeout(Duration::from_secs(60), subscriber.next())
        .await
        .ok()
        .flatten()
        .map(|_| daemon.started.elapsed().as_secs_f64())
        .unwrap_or(f64::NAN);
    drop(subscriber);
    let observer = world.observer().await;
    while observer.any_pending().await {
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
