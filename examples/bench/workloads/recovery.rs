//! How soon the daemon recovers what it had not yet stored: a `kill -9` in the middle of a burst
//! of commands (the commands it held come back when the consumer's ack wait runs out), and a
//! backlog of one tenant's commands in front of another tenant's when the daemon starts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::message::PublishMessage;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use timer_service::nats::streams::ensure_command_stream;
use tokio::sync::Mutex;

use super::{LatenessRun, command, meter, schedule_steady, start_daemons, stop};
use crate::daemon::{Daemon, Settings};
use crate::raw::publish_pipelined;
use crate::world::World;

/// Timers of the crash burst.
pub const CRASH_N: usize = 38_000;
/// How fast the crash burst is sent: it lasts 3.8 s, so the kill lands while commands arrive
/// and are stored (sent as fast as the broker acknowledges them, it was all stored before).
pub const CRASH_RATE: u32 = 10_000;
/// How long after it is sent each timer of the crash burst is due.
const CRASH_LEAD: Duration = Duration::from_secs(3);
/// When the daemon is killed, from the burst's first command.
const KILL_AT: Duration = Duration::from_millis(1_500);
/// How long it stays dead.
const DOWN_FOR: Duration = Duration::from_millis(500);
/// PubAcks in flight while the backlog is sent.
const WINDOW: usize = 1_000;
/// How long after the last dueAt the crash workload waits for the last timer (the previous
/// version's ack wait was 30 s).
const FIRE_WITHIN: chrono::Duration = chrono::Duration::seconds(60);

/// Result of [`crash`].
pub struct Crash {
    /// Each timer's lateness (first receipt − dueAt, ms), once per timer.
    pub late: LatenessRun,
    /// Timers acknowledged by the broker (all of them, or the workload fails).
    pub acked: usize,
    /// Commands delivered to the daemon and not yet acknowledged by it just before the kill.
    pub held: u64,
    /// Seconds the burst took to send (every PubAck in).
    pub send_s: f64,
    /// Events received for a timer that had already fired.
    pub duplicates: usize,
}

/// A burst of [`CRASH_N`] ScheduleTimers of tenant `crash`, [`CRASH_RATE`] a second, each due
/// [`CRASH_LEAD`] after it is sent; [`KILL_AT`] after the first, the daemon gets SIGKILL and is
/// started again [`DOWN_FOR`] later. Every timer must fire.
pub async fn crash(world: &World, settings: &Settings) -> Crash {
    let first = FirstReceipts::start(&world.client, "timer.evt.due.crash").await;
    let daemon = world.daemon(settings);
    world.wait_for_command_stream().await;
    let sent_at = Instant::now();
    let js = world.js.clone();
    let sender = tokio::spawn(async move {
        schedule_steady(CRASH_RATE, CRASH_N, CRASH_LEAD, move |i, due| {
            let js = js.clone();
            async move {
                js.publish(
                    "timer.cmd.schedule.crash",
                    command("crash", &format!("c-{i}"), due),
                )
                .await
            }
        })
        .await;
        sent_at.elapsed()
    });
    tokio::time::sleep_until((sent_at + KILL_AT).into()).await;
    let held = held_commands(world).await;
    daemon.signal(libc::SIGKILL);
    drop(daemon);
    tokio::time::sleep(DOWN_FOR).await;
    let restarted = Daemon::start(
        &world.server.url(),
        &world.database,
        settings,
        &world.dir.join(format!("{}-restarted.log", settings.name)),
    );
    let cpu = meter(world, std::slice::from_ref(&restarted));
    let send = sender.await.expect("the burst's sender");
    let deadline = Utc::now() + chrono::Duration::seconds(3) + FIRE_WITHIN;
    while first.count().await < CRASH_N && Utc::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu = cpu.finish();
    let (samples, duplicates) = first.samples().await;
    Crash {
        late: LatenessRun {
            samples,
            expected: CRASH_N,
            peak_rss_mib: stop(vec![restarted]),
            cpu,
            api_answered: 0,
            api_failed: 0,
            metrics: None,
        },
        acked: CRASH_N,
        held,
        send_s: send.as_secs_f64(),
        duplicates,
    }
}

/// Commands waiting for tenant `bulk` in [`intake`].
pub const BULK_N: usize = 300_000;
/// `small`'s timers, one every [`SMALL_EVERY`] from the daemon's start, each due
/// [`SMALL_LEAD`] after it is sent.
const SMALL_N: usize = 20;
const SMALL_EVERY: Duration = Duration::from_millis(50);
const SMALL_LEAD: chrono::Duration = chrono::Duration::seconds(2);

/// Result of [`intake`].
pub struct Intake {
    /// `small`'s lateness (first receipt − dueAt, ms).
    pub small: LatenessRun,
    /// Seconds from the daemon's start until the command stream is empty.
    pub drain_s: f64,
}

/// Tenant `bulk` has [`BULK_N`] commands queued (timers due a day ahead) while no daemon runs;
/// the daemon starts; right after, tenant `small` schedules [`SMALL_N`] timers, each due
/// [`SMALL_LEAD`] after it is sent. With commands taken first in, first out, `small`'s wait
/// behind `bulk`'s backlog.
pub async fn intake(world: &World, daemons: &[Settings]) -> Intake {
    let mut stream = ensure_command_stream(&world.js, &daemons[0].broker_names())
        .await
        .expect("command stream");
    let due = Utc::now() + chrono::Duration::days(1);
    publish_pipelined(&world.js, BULK_N, WINDOW, |i| {
        (
            "timer.cmd.schedule.bulk".to_owned(),
            PublishMessage::build().payload(command(
                "bulk",
                &format!("bulk-{i}"),
                due + chrono::Duration::milliseconds(i as i64),
            )),
        )
    })
    .await;
    let first = FirstReceipts::start(&world.client, "timer.evt.due.small").await;
    let running = start_daemons(world, daemons);
    let cpu = meter(world, &running);
    let started = running[0].started;
    let mut next = tokio::time::Instant::now();
    for i in 0..SMALL_N {
        tokio::time::sleep_until(next).await;
        next += SMALL_EVERY;
        let due = Utc::now() + SMALL_LEAD;
        world
            .js
            .publish(
                "timer.cmd.schedule.small",
                command("small", &format!("s-{i}"), due),
            )
            .await
            .expect("publish")
            .await
            .expect("PubAck");
    }
    let mut drained = None;
    let deadline = started + Duration::from_secs(900);
    while drained.is_none() || first.count().await < SMALL_N {
        assert!(Instant::now() < deadline, "intake stalled");
        if drained.is_none() && stream.info().await.is_ok_and(|i| i.state.messages == 0) {
            drained = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu = cpu.finish();
    let (samples, _) = first.samples().await;
    Intake {
        small: LatenessRun {
            samples,
            expected: SMALL_N,
            peak_rss_mib: stop(running),
            cpu,
            api_answered: 0,
            api_failed: 0,
            metrics: None,
        },
        drain_s: drained.map_or(f64::NAN, |d| d.as_secs_f64()),
    }
}

/// How many commands the daemon has been delivered and not yet acknowledged, over every
/// consumer of the command stream.
async fn held_commands(world: &World) -> u64 {
    use futures::TryStreamExt;
    let Ok(stream) = world.js.get_stream("TIMER_COMMANDS").await else {
        return 0;
    };
    let names: Vec<String> = stream
        .consumer_names()
        .try_collect()
        .await
        .unwrap_or_default();
    let mut held = 0;
    for name in names {
        if let Ok(mut consumer) = stream
            .get_consumer::<async_nats::jetstream::consumer::pull::Config>(&name)
            .await
        {
            held += consumer
                .info()
                .await
                .map_or(0, |i| i.num_ack_pending as u64);
        }
    }
    held
}

/// The first receipt of each timer's event on one subject, as its lateness (ms), and how many
/// events came again for a timer already seen.
#[derive(Clone)]
struct FirstReceipts {
    seen: Arc<Mutex<(HashMap<String, f64>, usize)>>,
}

impl FirstReceipts {
    async fn start(client: &async_nats::Client, subject: &str) -> Self {
        let seen = Arc::new(Mutex::new((HashMap::new(), 0)));
        let mut subscriber = client
            .subscribe(subject.to_owned())
            .await
            .expect("subscribe");
        let sink = seen.clone();
        tokio::spawn(async move {
            while let Some(message) = subscriber.next().await {
                let received = Utc::now();
                let Ok(event) = serde_json::from_slice::<serde_json::Value>(&message.payload)
                else {
                    continue;
                };
                let payload = &event["payload"];
                let (Some(id), Some(due)) = (
                    payload["serviceCallId"].as_str(),
                    payload["dueAt"]
                        .as_str()
                        .and_then(|t| t.parse::<DateTime<Utc>>().ok()),
                ) else {
                    continue;
                };
                let late = (received - due).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e3;
                let mut seen = sink.lock().await;
                if seen.0.contains_key(id) {
                    seen.1 += 1;
                } else {
                    seen.0.insert(id.to_owned(), late);
                }
            }
        });
        client.flush().await.expect("flush");
        Self { seen }
    }

    async fn count(&self) -> usize {
        self.seen.lock().await.0.len()
    }

    async fn samples(&self) -> (Vec<f64>, usize) {
        let seen = self.seen.lock().await;
        (seen.0.values().copied().collect(), seen.1)
    }
}
