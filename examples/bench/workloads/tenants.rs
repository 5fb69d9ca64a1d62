//! One tenant's load beside another tenant's timers (docs/CONTRACT.md §9): a burst of timers
//! due at one instant, and a flood of heavy API reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::{
    LatenessRun, collect_lateness, command, meter, schedule_steady, start_daemons, stop, wait_for,
    wait_for_api,
};
use crate::daemon::Settings;
use crate::support::http_get;
use crate::world::World;

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

/// Tenant `small`'s timers per second during the heavy reads.
const SMALL_RATE: u32 = 100;
/// How long before its `dueAt` each of `small`'s timers is scheduled.
const SMALL_LEAD: Duration = Duration::from_millis(500);
/// The forecast the whale asks for: a day, the most the contract allows.
const FORECAST_MINUTES: u32 = 1440;
/// How long one of the whale's requests may wait for its reply before it counts as unanswered.
const REPLY_WITHIN: Duration = Duration::from_secs(15);
/// How often every daemon's `/readyz` is asked during the reads, and how long one answer may take.
const READYZ_EVERY: Duration = Duration::from_millis(100);
const READYZ_WITHIN: Duration = Duration::from_secs(1);

/// How long the heavy reads last and how many clients send them.
#[derive(Debug, Clone, Copy)]
pub struct ReadsShape {
    pub secs: u32,
    pub requesters: usize,
}

/// Result of [`reads`].
pub struct Reads {
    /// `small`'s lateness, as received on a connection of its own.
    pub small: LatenessRun,
    /// The whale's requests by their reply: 200, 503, another code, or none within
    /// [`REPLY_WITHIN`].
    pub ok: u64,
    pub unavailable: u64,
    pub other: u64,
    pub unanswered: u64,
    /// `/readyz` asked during the reads (every daemon every 100 ms), and how often it did not
    /// answer 200 within a second.
    pub readyz_polls: u64,
    pub readyz_not_ok: u64,
}

/// The heavy-read neighbour: tenant `whale` holds many pending timers (the world's base) and asks
/// `timer.api.stats.whale` with a day's forecast from `shape.requesters` clients, each asking
/// again as soon as it is answered, for `shape.secs`; meanwhile tenant `small` schedules 100
/// timers/s, each due 0.5 s ahead, and `/readyz` is polled.
pub async fn reads(world: &World, daemons: &[Settings], shape: ReadsShape) -> Reads {
    let running = start_daemons(world, daemons);
    world.wait_for_command_stream().await;
    wait_for_api(world, "whale").await;
    let connect = || async_nats::connect(world.server.url());
    let quiet = connect().await.expect("connect");
    let received = collect_lateness(&quiet, "timer.evt.due.small".into()).await;
    let whale = connect().await.expect("connect");
    let cpu = meter(world, &running);
    let until = Instant::now() + Duration::from_secs(u64::from(shape.secs));
    let replies = Arc::new(Replies::default());
    let requesters: Vec<_> = (0..shape.requesters)
        .map(|_| tokio::spawn(ask_stats(whale.clone(), until, replies.clone())))
        .collect();
    let ports: Vec<u16> = running.iter().filter_map(|d| d.http_port).collect();
    let readyz = tokio::spawn(poll_readyz(ports, until));
    let expected = (SMALL_RATE * shape.secs) as usize;
    let js = world.js.clone();
    schedule_steady(SMALL_RATE, expected, SMALL_LEAD, move |i, due| {
        let js = js.clone();
        async move {
            js.publish(
                "timer.cmd.schedule.small",
                command("small", &format!("small-{i}"), due),
            )
            .await
        }
    })
    .await;
    for requester in requesters {
        requester.await.expect("a requester");
    }
    let (readyz_polls, readyz_not_ok) = readyz.await.expect("the readiness poller");
    let samples = wait_for(received, expected, Duration::from_secs(15)).await;
    let cpu = cpu.finish();
    let count = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    Reads {
        ok: count(&replies.ok),
        unavailable: count(&replies.unavailable),
        other: count(&replies.other),
        unanswered: count(&replies.unanswered),
        readyz_polls,
        readyz_not_ok,
        small: LatenessRun {
            samples,
            expected,
            peak_rss_mib: stop(running),
            cpu,
            api_answered: 0,
            api_failed: 0,
            metrics: None,
        },
    }
}

#[derive(Default)]
struct Replies {
    ok: AtomicU64,
    unavailable: AtomicU64,
    other: AtomicU64,
    unanswered: AtomicU64,
}

/// One of the whale's clients: `stats` with a day's forecast, again as soon as answered, until
/// `until`.
async fn ask_stats(client: async_nats::Client, until: Instant, replies: Arc<Replies>) {
    let body = serde_json::to_vec(&serde_json::json!({ "forecastMinutes": FORECAST_MINUTES }))
        .expect("json");
    while Instant::now() < until {
        let reply = tokio::time::timeout(
            REPLY_WITHIN,
            client.request("timer.api.stats.whale", body.clone().into()),
        )
        .await;
        let code = match reply {
            Ok(Ok(message)) => Some(
                message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("Nats-Service-Error-Code"))
                    .and_then(|code| code.as_str().parse::<u16>().ok())
                    .unwrap_or(200),
            ),
            _ => None,
        };
        let counter = match code {
            Some(200) => &replies.ok,
            Some(503) => &replies.unavailable,
            Some(_) => &replies.other,
            None => &replies.unanswered,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if code.is_none() {
            // No responder fails at once: do not spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Asks every port's `/readyz` every [`READYZ_EVERY`] until `until`: how many times in all,
/// and how many of those did not answer 200 within [`READYZ_WITHIN`].
async fn poll_readyz(ports: Vec<u16>, until: Instant) -> (u64, u64) {
    let mut tick = tokio::time::interval(READYZ_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut polls, mut not_ok) = (0, 0);
    while Instant::now() < until {
        tick.tick().await;
        for port in &ports {
            let answer = tokio::time::timeout(
                READYZ_WITHIN,
                http_get(&format!("127.0.0.1:{port}"), "/readyz"),
            )
            .await;
            polls += 1;
            not_ok += u64::from(!matches!(answer, Ok(Some((200, _)))));
        }
    }
    (polls, not_ok)
}
