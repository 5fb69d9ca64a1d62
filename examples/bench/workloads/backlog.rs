//! Backlogs and how fast they are worked off: commands queued before the daemon starts, timers
//! due at one instant, a failed daemon's share taken over by the others, overdue timers at a
//! restart.

use std::time::{Duration, Instant};

use async_nats::jetstream::message::PublishMessage;
use chrono::Utc;
use futures::StreamExt;
use timer_service::nats::streams::ensure_command_stream;

use super::{
    Carried, Run, command_with, meter, schedule_timers, start_daemons, stop, traceparent,
    wait_for_api,
};
use crate::daemon::Settings;
use crate::raw::publish_pipelined;
use crate::world::World;

/// `n` commands queued while no daemon runs, then the daemons started: commands stored and
/// acknowledged per second, from the first process start to an empty work queue.
pub async fn ingest(world: &World, n: usize, daemons: &[Settings]) -> Run {
    ingest_with(world, n, daemons, Carried::default()).await
}

/// [`ingest`], each command carrying what `carried` says.
pub async fn ingest_with(
    world: &World,
    n: usize,
    daemons: &[Settings],
    carried: Carried<'_>,
) -> Run {
    ingest_observed(world, n, daemons, carried, Intake::Backlog, 1)
        .await
        .run
}

/// Where the commands of an ingest come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// Queued while no daemon runs; timed from the first process start.
    Backlog,
    /// Published as fast as one client can (1,000 PubAcks awaited at once) while the daemons
    /// run; timed from the first publish.
    Live,
}

/// An ingest's rate, and how soon the first command was applied.
pub struct Ingested {
    pub run: Run,
    /// From the first process start to the first command acknowledged (applied), with a
    /// backlog: the start-up a backlog waits for.
    pub first_applied: Option<Duration>,
}

/// `n` commands taken in from `intake`: commands stored and acknowledged per second, until the
/// work queue is empty. With `per_message` above 1 they come as ScheduleTimers of that many
/// timers each (the rate is still of timers), `carried` aside.
pub async fn ingest_observed(
    world: &World,
    n: usize,
    daemons: &[Settings],
    carried: Carried<'_>,
    intake: Intake,
    per_message: usize,
) -> Ingested {
    let mut stream = ensure_command_stream(&world.js, &daemons[0].broker_names())
        .await
        .expect("command stream");
    let due = Utc::now() + chrono::Duration::days(1);
    let messages = n.div_ceil(per_message.max(1));
    let publish = || {
        publish_pipelined(&world.js, messages, 1000, |m| {
            if per_message > 1 {
                let tenant = format!("t{}", m % 10);
                let first = m * per_message;
                let ids = (first..n.min(first + per_message)).map(|i| format!("ingest-{i}"));
                let timers = ids
                    .enumerate()
                    .map(|(k, id)| (id, due + chrono::Duration::milliseconds((first + k) as i64)));
                let message = PublishMessage::build().payload(schedule_timers(&tenant, timers));
                return (format!("timer.cmd.schedule-many.{tenant}"), message);
            }
            let i = m;
            let mut message = PublishMessage::build().payload(command_with(
                &format!("t{}", i % 10),
                &format!("ingest-{i}"),
                due + chrono::Duration::milliseconds(i as i64),
                carried.data,
            ));
            if carried.traced {
                message = message.header("traceparent", traceparent(i).as_str());
            }
            (format!("timer.cmd.schedule.t{}", i % 10), message)
        })
    };
    let (running, cpu, started) = match intake {
        Intake::Backlog => {
            publish().await;
            let running = start_daemons(world, daemons);
            let cpu = meter(world, &running);
            let started = running[0].started;
            (running, cpu, started)
        }
        Intake::Live => {
            let running = start_daemons(world, daemons);
            wait_for_api(world, "t0").await;
            let cpu = meter(world, &running);
            let started = Instant::now();
            publish().await;
            (running, cpu, started)
        }
    };
    let mut first_applied = None;
    loop {
        let left = stream
            .info()
            .await
            .map(|i| i.state.messages)
            .unwrap_or(u64::MAX);
        if first_applied.is_none() && left < messages as u64 {
            first_applied = Some(started.elapsed());
        }
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
    Ingested {
        run: Run {
            per_second: n as f64 / elapsed.as_secs_f64(),
            peak_rss_mib: stop(running),
            cpu,
        },
        first_applied: (intake == Intake::Backlog)
            .then_some(first_applied)
            .flatten(),
    }
}

/// How far ahead `n` timers due at one instant are: long enough to store them first, on a slow
/// machine's PostgreSQL too (100,000 rows take over 2 s there, past a fixed 4 s lead's margin).
pub fn fire_lead(n: usize) -> Duration {
    Duration::from_secs(4) + Duration::from_millis(n as u64 / 20)
}

/// `n` timers due at one instant: timers published, acknowledged and marked `Reached` per
/// second, from the instant to the last mark.
pub async fn fire(world: &World, n: usize, daemons: &[Settings]) -> Run {
    fire_with(world, n, daemons, Carried::default(), fire_lead(n)).await
}

/// [`fire`], each timer holding `data` when given, due `lead` after the filling begins (long
/// enough for the filling to end and the daemons to start).
pub async fn fire_with(
    world: &World,
    n: usize,
    daemons: &[Settings],
    carried: Carried<'_>,
    lead: Duration,
) -> Run {
    let observer = world.observer().await;
    let instant = Utc::now() + chrono::Duration::from_std(lead).expect("lead");
    observer.prefill(n as u64, "fire", instant, 0, None).await;
    if carried.traced {
        // One trace for all: what a span costs does not depend on its trace.
        let context = traceparent(0);
        observer
            .execute(&format!(
                "UPDATE timer_schedules SET trace_context = '{context}' WHERE tenant_id = 'fire'"
            ))
            .await;
    }
    if let Some(data) = carried.data {
        let text = data.get().replace('\'', "''");
        observer
            .execute(&format!(
                "UPDATE timer_schedules SET data = '{text}' WHERE tenant_id = 'fire'"
            ))
            .await;
    }
    if carried.traced || carried.data.is_some() {
        // The rows were written twice: settle the second write too.
        observer.settle().await;
    }
    assert!(
        Utc::now() + chrono::Duration::seconds(2) < instant,
        "filling the database took longer than the lead"
    );
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
