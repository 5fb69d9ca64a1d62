//! A steady load of timers and their lateness, alone or with something beside it (API
//! requests, `/metrics` scraped, the Janitor deleting a backlog), and the broker's own
//! scheduler on the same load.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::stream;

use super::{
    collect_lateness, meter, schedule_late, schedule_steady, start_daemons, stop, wait_for,
};
use crate::daemon::Settings;
use crate::support::{http_get, rfc3339};
use crate::world::World;

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

impl LatenessRun {
    /// A run measured at the subscriber alone: no daemon whose memory, CPU or API is read.
    pub fn of_samples(samples: Vec<f64>, expected: usize) -> Self {
        Self {
            samples,
            expected,
            peak_rss_mib: f64::NAN,
            cpu: Vec::new(),
            api_answered: 0,
            api_failed: 0,
            metrics: None,
        }
    }
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
    let tenants = if load.tenants == 0 { 10 } else { load.tenants } as usize;
    schedule_late(&world.js, rate, expected, lead, |i| {
        format!("t{}", i % tenants)
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
    (!samples.is_empty()).then(|| LatenessRun::of_samples(samples, expected))
}
