//! The broker link, as `tests/broker_link.rs` drives it: the daemon's broker reached through a
//! TCP proxy of the benchmark's own (`tests/common/net_proxy.rs`), whose path goes silent (both
//! ways, or toward the broker only, the sockets kept open) and heals, or moves away (latency
//! each way). Firing is measured to when the broker stored each `DueTimeReached`, read back
//! from the event stream; the client reaches the broker directly.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::consumer;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::time::Instant;

use super::command;
use crate::daemon::{Daemon, Settings};
use crate::net_proxy::NetProxy;
use crate::world::World;

/// How long the path stays silent: longer than the 10 s bound, so that the daemon's
/// reconnection attempts meet the silent path too.
pub const SILENCE: Duration = Duration::from_secs(14);
/// How long after the heal the timers due during and after the silence may take to fire
/// before the run stops waiting (those not fired by then are counted missing).
const FIRE_WITHIN: Duration = Duration::from_secs(60);
/// How often `/readyz` is asked while the silence is not noticed yet.
const NOTICE_POLL: Duration = Duration::from_millis(50);

/// Which way the path goes silent.
#[derive(Clone, Copy)]
pub enum Silence {
    /// Nothing either way. The timers due during it begin 7 s in, so nothing is being published
    /// when it begins: the client's pings, or the intake's unanswered requests, must tell.
    BothWays,
    /// Daemon to broker only; the timers due during it begin with it.
    OneWay,
}

impl Silence {
    fn quiet(self) -> Duration {
        match self {
            Silence::BothWays => Duration::from_secs(7),
            Silence::OneWay => Duration::ZERO,
        }
    }
}

/// Result of [`silent_path`]; times in seconds.
pub struct SilentPath {
    /// From the silence's start to `/readyz` not answering 200; `None`: not within the silence.
    pub noticed_s: Option<f64>,
    /// `/readyz` asked every 250 ms from then to the heal, and how often it answered 200.
    pub ready_polls: usize,
    pub ready_while_silent: usize,
    /// From the heal to the first and to the last of the timers due during the silence
    /// stored (each timer's first firing).
    pub first_s: f64,
    pub last_s: f64,
    /// Lateness of the timers due 1–4 s after the heal: median and latest.
    pub after_p50_s: f64,
    pub after_max_s: f64,
    /// Timers due during or after the silence not fired within [`FIRE_WITHIN`] of the heal.
    pub missing: usize,
}

/// Result of [`distant`].
pub struct Distant {
    /// Each timer's lateness to its first `DueTimeReached` stored, ms.
    pub lateness_ms: Vec<f64>,
    pub expected: usize,
    /// Timers fired per second, from the first `dueAt` to the last event stored.
    pub per_second: f64,
}

/// A daemon whose broker is reached through a proxy, ready.
struct Link {
    proxy: NetProxy,
    daemon: Daemon,
    http: String,
}

impl Link {
    async fn start(world: &World, settings: &Settings) -> Self {
        let port = settings.http_port.expect("the link workloads read /readyz");
        let proxy = NetProxy::start(world.server.port).await;
        let log = world.dir.join(format!("{}.log", settings.name));
        let daemon = Daemon::start(&proxy.url(), &world.database, settings, &log);
        let link = Self {
            proxy,
            daemon,
            http: format!("127.0.0.1:{port}"),
        };
        world.wait_for_command_stream().await;
        let ready = until(
            Duration::from_secs(30),
            Duration::from_millis(50),
            || async { link.readyz().await == Some(200) },
        )
        .await;
        assert!(ready.is_some(), "the daemon was not ready within 30 s");
        link
    }

    /// `/readyz`'s status, `None` when it does not answer within a second.
    async fn readyz(&self) -> Option<u16> {
        let answer = tokio::time::timeout(
            Duration::from_secs(1),
            crate::support::http_get(&self.http, "/readyz"),
        )
        .await;
        answer.ok().flatten().map(|(status, _)| status)
    }
}

/// Asks `done` every `every` until it holds, for at most `within`: how long that took.
async fn until<F, Fut>(within: Duration, every: Duration, mut done: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if done().await {
            return Some(start.elapsed());
        }
        if start.elapsed() >= within {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

async fn wait_until(at: DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

fn seconds(d: chrono::Duration) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

/// Schedules `count` timers of `tenant` due evenly from `first` over `over`, and waits (at most
/// 20 s) until the daemon has taken every command from the broker.
async fn schedule_spread(
    world: &World,
    tenant: &str,
    count: usize,
    first: DateTime<Utc>,
    over: Duration,
) -> Vec<String> {
    let ids: Vec<String> = (0..count).map(|i| format!("{tenant}-{i:05}")).collect();
    let step = over / count as u32;
    let subject = format!("timer.cmd.schedule.{tenant}");
    let mut acks = Vec::with_capacity(count);
    for (i, id) in ids.iter().enumerate() {
        let due = first + step * i as u32;
        let ack = world.js.publish(subject.clone(), command(tenant, id, due));
        acks.push(ack.await.expect("publish"));
    }
    for ack in acks {
        tokio::time::timeout(Duration::from_secs(10), ack)
            .await
            .expect("a PubAck within 10 s")
            .expect("PubAck");
    }
    let taken = until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async {
            let stream = world.js.get_stream("TIMER_COMMANDS").await;
            match stream {
                Ok(mut stream) => stream.info().await.is_ok_and(|i| i.state.messages == 0),
                Err(_) => false,
            }
        },
    )
    .await;
    assert!(
        taken.is_some(),
        "the daemon did not take {tenant}'s commands"
    );
    ids
}

/// Each timer of `tenant` with a `DueTimeReached` stored: its `dueAt` and when the broker
/// stored its first event (a redelivered duplicate is not a second firing).
async fn stored(world: &World, tenant: &str) -> BTreeMap<String, (DateTime<Utc>, DateTime<Utc>)> {
    let mut first = BTreeMap::new();
    let Ok(stream) = world.js.get_stream("TIMER_EVENTS").await else {
        return first;
    };
    let Ok(reader) = stream
        .create_consumer(consumer::pull::Config {
            filter_subject: format!("timer.evt.due.{tenant}"),
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(5),
            ..Default::default()
        })
        .await
    else {
        return first;
    };
    loop {
        let Ok(batch) = reader.fetch().max_messages(1000).messages().await else {
            break;
        };
        let messages: Vec<_> = batch.collect().await;
        if messages.is_empty() {
            break;
        }
        for message in messages.into_iter().flatten() {
            let Ok(info) = message.info() else { continue };
            let at = DateTime::from_timestamp_nanos(info.published.unix_timestamp_nanos() as i64);
            let Ok(event) = serde_json::from_slice::<serde_json::Value>(&message.payload) else {
                continue;
            };
            let payload = &event["payload"];
            let (Some(id), Some(due)) = (
                payload["serviceCallId"].as_str(),
                payload["dueAt"].as_str().and_then(|t| t.parse().ok()),
            ) else {
                continue;
            };
            first.entry(id.to_owned()).or_insert((due, at));
        }
    }
    first
}

/// [`stored`] once every one of `ids` has fired, or as it stands after `within`.
async fn await_fired(
    world: &World,
    tenant: &str,
    ids: &[String],
    within: Duration,
) -> BTreeMap<String, (DateTime<Utc>, DateTime<Utc>)> {
    let deadline = Instant::now() + within;
    loop {
        let fired = stored(world, tenant).await;
        if ids.iter().all(|id| fired.contains_key(id)) || Instant::now() >= deadline {
            return fired;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// 100 timers a second from before a [`SILENCE`] to after it; the path goes silent as `silence`
/// says 6 s after the start, then heals (a new path; the connections it caught stay dead).
pub async fn silent_path(world: &World, settings: &Settings, silence: Silence) -> SilentPath {
    let link = Link::start(world, settings).await;
    let start = Utc::now();
    let silent_at = start + chrono::Duration::seconds(6);
    let heal_at = silent_at + chrono::Duration::from_std(SILENCE).expect("short");
    let quiet = silence.quiet();
    let (second, three) = (chrono::Duration::seconds(1), Duration::from_secs(3));
    schedule_spread(world, "before", 300, start + second * 3, three).await;
    let during = schedule_spread(world, "during", 1000, silent_at + quiet, SILENCE - quiet).await;
    let after = schedule_spread(world, "after", 300, heal_at + second, three).await;
    assert!(Utc::now() < silent_at, "scheduling took past the silence");

    wait_until(silent_at).await;
    match silence {
        Silence::BothWays => link.proxy.silent(),
        Silence::OneWay => link.proxy.one_way(),
    }
    let notice_within = SILENCE - Duration::from_millis(300);
    let noticed = until(notice_within, NOTICE_POLL, || async {
        link.readyz().await != Some(200)
    })
    .await;
    // Not ready for as long as the path is silent.
    let (mut ready_polls, mut ready_while_silent) = (0, 0);
    while Utc::now() < heal_at - chrono::Duration::milliseconds(300) {
        ready_polls += 1;
        if link.readyz().await == Some(200) {
            ready_while_silent += 1;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    wait_until(heal_at).await;
    link.proxy.heal();
    let healed = Utc::now();

    let fired = await_fired(world, "during", &during, FIRE_WITHIN).await;
    let within = FIRE_WITHIN.saturating_sub((Utc::now() - healed).to_std().unwrap_or_default());
    let fired_after = await_fired(world, "after", &after, within).await;
    let since_heal = |at: &DateTime<Utc>| seconds(*at - healed);
    let stored_during: Vec<f64> = fired.values().map(|(_, at)| since_heal(at)).collect();
    let mut late_after: Vec<f64> = fired_after
        .values()
        .map(|(due, at)| seconds(*at - *due))
        .collect();
    late_after.sort_by(f64::total_cmp);
    let pick = |v: &[f64], q: f64| {
        v.get(((v.len().max(1) - 1) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    let result = SilentPath {
        noticed_s: noticed.map(|d| d.as_secs_f64()),
        ready_polls,
        ready_while_silent,
        first_s: stored_during.iter().copied().fold(f64::NAN, f64::min),
        last_s: stored_during.iter().copied().fold(f64::NAN, f64::max),
        after_p50_s: pick(&late_after, 0.5),
        after_max_s: pick(&late_after, 1.0),
        missing: (during.len() - fired.len()) + (after.len() - fired_after.len()),
    };
    link.daemon.stop();
    result
}

/// `rate × secs` timers stored with the broker near, due evenly over `secs` from 14 s on; then
/// the proxy delays every chunk by `latency` each way (10 s before the first is due, so the
/// round trip the Poller's window remembers from before is gone by then).
pub async fn distant(
    world: &World,
    settings: &Settings,
    latency: Duration,
    rate: u32,
    secs: u32,
) -> Distant {
    let link = Link::start(world, settings).await;
    let n = (rate * secs) as usize;
    let first = Utc::now() + chrono::Duration::seconds(14);
    let over = Duration::from_secs(u64::from(secs));
    let ids = schedule_spread(world, "distant", n, first, over).await;
    link.proxy.latency(latency);
    assert!(
        Utc::now() + chrono::Duration::seconds(10) < first,
        "the timers were not stored 10 s before the first is due"
    );
    // Reading the events takes cores the proxy needs: not before the last timer is due.
    wait_until(first + chrono::Duration::from_std(over).expect("short")).await;
    let fired = await_fired(world, "distant", &ids, FIRE_WITHIN).await;
    let lateness_ms: Vec<f64> = fired
        .values()
        .map(|(due, at)| seconds(*at - *due) * 1000.0)
        .collect();
    let last = fired.values().map(|(_, at)| *at).max();
    let per_second = last.map_or(f64::NAN, |last| fired.len() as f64 / seconds(last - first));
    link.daemon.stop();
    Distant {
        lateness_ms,
        expected: n,
        per_second,
    }
}
