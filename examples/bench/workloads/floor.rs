//! The floor under every lateness figure: the steady load's events published at their own
//! `dueAt` straight to a stream's subject, and read by the same subscriber as the daemon's,
//! with no daemon and no database. What is left is the wait for each instant, one JetStream
//! publish and its delivery: no timer service on this machine can be on time by less.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::mpsc;

use super::{LatenessRun, collect_lateness, schedule_steady, settle_acks, wait_for};
use crate::world::World;

/// How each instant is waited for.
#[derive(Debug, Clone, Copy)]
pub enum Waiter {
    /// tokio's timer, as the daemon's wake-ups are: it counts whole milliseconds and rounds a
    /// deadline up.
    Tokio,
    /// A thread of its own sleeping to each instant (the kernel's timer), which hands the
    /// instant to the publishing task.
    Thread,
}

/// `rate` events a second for `secs` from now, each published at its `dueAt` (to the
/// microsecond) as `waiter` wakes for it.
pub async fn floor_lateness(world: &World, rate: u32, secs: u32, waiter: Waiter) -> LatenessRun {
    let name = format!("FLOOR_{waiter:?}").to_uppercase();
    let subject = format!("floor.{waiter:?}").to_lowercase();
    world
        .js
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("{subject}.>")],
            ..Default::default()
        })
        .await
        .expect("stream");
    let received = collect_lateness(&world.client, format!("{subject}.>")).await;
    // A connection of its own, as the daemon's events come on the daemon's.
    let publisher = async_nats::connect(world.server.url())
        .await
        .expect("connect");
    let js = jetstream::new(publisher);
    let expected = (rate * secs) as usize;
    match waiter {
        Waiter::Tokio => {
            // No lead: each event is published at its own `dueAt`, not ahead of it.
            schedule_steady(rate, expected, Duration::ZERO, |i, due| {
                publish(&js, &subject, i, due)
            })
            .await;
        }
        Waiter::Thread => by_thread(rate, expected, &js, &subject).await,
    }
    let samples = wait_for(received, expected, Duration::from_secs(15)).await;
    world.js.delete_stream(&name).await.expect("delete");
    LatenessRun::of_samples(samples, expected)
}

/// [`schedule_steady`]'s load, each instant waited for by a thread of its own and handed to
/// the publishing task.
async fn by_thread(rate: u32, count: usize, js: &jetstream::Context, subject: &str) {
    let step = Duration::from_secs_f64(1.0 / f64::from(rate));
    // One reading of both clocks: each `dueAt` is waited for on the monotonic clock.
    let (wall, mono) = (Utc::now(), std::time::Instant::now());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let thread = std::thread::spawn(move || {
        for i in 0..count {
            let offset = step.mul_f64(i as f64);
            std::thread::sleep(
                (mono + offset).saturating_duration_since(std::time::Instant::now()),
            );
            let due = wall + chrono::Duration::from_std(offset).expect("offset");
            if tx.send((i, due)).is_err() {
                return;
            }
        }
    });
    let (acks, settled) = settle_acks();
    while let Some((i, due)) = rx.recv().await {
        let _ = acks.send(publish(js, subject, i, due).await.expect("publish"));
    }
    thread.join().expect("the waiting thread");
    drop(acks);
    settled.await.expect("acks");
}

/// Event `i`, shaped and deduplicated as a DueTimeReached is.
async fn publish(
    js: &jetstream::Context,
    subject: &str,
    i: usize,
    due: DateTime<Utc>,
) -> Result<jetstream::context::PublishAckFuture, jetstream::context::PublishError> {
    let due = due.to_rfc3339_opts(SecondsFormat::Micros, true);
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", format!("floor-{i}-{due}").as_str());
    let payload = serde_json::to_vec(&serde_json::json!({
        "type": "DueTimeReached",
        "payload": { "tenantId": "floor", "serviceCallId": format!("floor-{i}"), "dueAt": due,
            "reachedAt": due },
    }))
    .expect("json");
    js.publish_with_headers(format!("{subject}.t{}", i % 10), headers, payload.into())
        .await
}
