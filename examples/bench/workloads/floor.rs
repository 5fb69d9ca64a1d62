//! The floor under every lateness figure: the steady load's events published at their own
//! `dueAt` straight to a stream's subject, and read by the same subscriber as the daemon's,
//! with no daemon and no database. What is left is the wait for each instant, one JetStream
//! publish and its delivery: no timer service on this machine can be on time by less.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::mpsc;

use super::{LatenessRun, collect_lateness, wait_for};
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

/// `rate` events a second for `secs`, the first `lead` from now, each published at its `dueAt`
/// (to the microsecond) as `waiter` wakes for it.
pub async fn floor_lateness(
    world: &World,
    rate: u32,
    secs: u32,
    lead: Duration,
    waiter: Waiter,
) -> LatenessRun {
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
    let step = Duration::from_secs_f64(1.0 / f64::from(rate));
    // One reading of both clocks: each `dueAt` is waited for on the monotonic clock.
    let (wall, mono) = (Utc::now(), tokio::time::Instant::now());
    let dues: Vec<(DateTime<Utc>, tokio::time::Instant)> = (0..expected)
        .map(|i| {
            let offset = lead + step.mul_f64(i as f64);
            let due = wall + chrono::Duration::from_std(offset).expect("offset");
            (due, mono + offset)
        })
        .collect();
    let (acks, settled) = settle_acks();
    match waiter {
        Waiter::Tokio => {
            for (i, (due, at)) in dues.into_iter().enumerate() {
                tokio::time::sleep_until(at).await;
                let _ = acks.send(publish(&js, &subject, i, due).await);
            }
        }
        Waiter::Thread => {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let thread = std::thread::spawn(move || {
                for (i, (due, at)) in dues.into_iter().enumerate() {
                    let at = at.into_std();
                    let now = std::time::Instant::now();
                    if at > now {
                        std::thread::sleep(at - now);
                    }
                    if tx.send((i, due)).is_err() {
                        return;
                    }
                }
            });
            while let Some((i, due)) = rx.recv().await {
                let _ = acks.send(publish(&js, &subject, i, due).await);
            }
            thread.join().expect("the waiting thread");
        }
    }
    drop(acks);
    settled.await.expect("acks");
    let samples = wait_for(received, expected, Duration::from_secs(15)).await;
    world.js.delete_stream(&name).await.expect("delete");
    LatenessRun::of_samples(samples, expected)
}

type Ack = jetstream::context::PublishAckFuture;

/// A task awaiting each PubAck, so that the loop publishing at each instant never waits for one.
fn settle_acks() -> (mpsc::UnboundedSender<Ack>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Ack>();
    let task = tokio::spawn(async move {
        while let Some(ack) = rx.recv().await {
            ack.await.expect("PubAck");
        }
    });
    (tx, task)
}

/// Event `i`, shaped and deduplicated as a DueTimeReached is.
async fn publish(js: &jetstream::Context, subject: &str, i: usize, due: DateTime<Utc>) -> Ack {
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
        .expect("publish")
}
