//! Raw limits on the same broker and disk the daemon uses: what the hardware and the client
//! stacks allow, as the yardstick for the daemon's own figures.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, message::PublishMessage, stream};
use chrono::Utc;
use futures::StreamExt;
use timer_service::domain::{Action, Command};
use timer_service::storage::db::DatabaseTarget;
use timer_service::storage::{Claimant, Store};

/// A JSON body of about 200 bytes, like a ScheduleTimer command.
fn body(i: usize) -> bytes::Bytes {
    let text = format!(
        r#"{{"id":"01935c2e-7c1a-7b53-a8e2-{i:012}","type":"ScheduleTimer","tenantId":"bench","timestampMs":1763798400000,"payload":{{"tenantId":"bench","serviceCallId":"c-{i}","dueAt":"2026-11-22T10:00:00.000Z"}}}}"#
    );
    text.into()
}

/// Publishes `n` messages with at most `window` PubAcks outstanding; returns the elapsed time.
pub async fn publish_pipelined(
    js: &jetstream::Context,
    n: usize,
    window: usize,
    message: impl Fn(usize) -> (String, PublishMessage),
) -> Duration {
    let started = Instant::now();
    let mut in_flight = VecDeque::with_capacity(window);
    for i in 0..n {
        let (subject, msg) = message(i);
        in_flight.push_back(js.send_publish(subject, msg).await.expect("publish"));
        if in_flight.len() >= window {
            in_flight.pop_front().expect("ack").await.expect("PubAck");
        }
    }
    for ack in in_flight {
        ack.await.expect("PubAck");
    }
    started.elapsed()
}

/// JetStream publish with `Nats-Msg-Id`, `window` PubAcks in flight: messages/s.
pub async fn jetstream_publish_with_msg_id(
    js: &jetstream::Context,
    n: usize,
    window: usize,
) -> f64 {
    js.create_stream(stream::Config {
        name: "RAW_PUB".into(),
        subjects: vec!["raw.pub.>".into()],
        ..Default::default()
    })
    .await
    .expect("stream");
    let run = uuid::Uuid::now_v7().simple().to_string();
    let elapsed = publish_pipelined(js, n, window, |i| {
        (
            format!("raw.pub.t{}", i % 16),
            PublishMessage::build()
                .payload(body(i))
                .message_id(format!("{run}-{i}")),
        )
    })
    .await;
    js.delete_stream("RAW_PUB").await.expect("delete");
    n as f64 / elapsed.as_secs_f64()
}

/// Pulls `n` messages from `consumer`, `batch` a request, acknowledging each.
async fn pull_and_ack(consumer: &consumer::PullConsumer, n: usize, batch: usize) {
    let mut received = 0;
    while received < n {
        let mut messages = consumer
            .batch()
            .max_messages(batch)
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .expect("pull");
        while let Some(message) = messages.next().await {
            message.expect("message").ack().await.expect("ack");
            received += 1;
        }
    }
}

/// [`jetstream_consume_ack`] on a work-queue stream in `lines` subjects, as the command
/// stream's lines: the messages spread evenly over them, one consumer per line filtered on its
/// subject, all of them pulled at once. Every acknowledgement is checked against every
/// consumer of a work-queue stream, so this shows what the consumers' number costs the broker.
pub async fn jetstream_consume_lines(js: &jetstream::Context, n: usize, lines: usize) -> f64 {
    let stream = js
        .create_stream(stream::Config {
            name: "RAW_LINES".into(),
            subjects: vec!["raw.lines.>".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .expect("stream");
    publish_pipelined(js, n, 1000, |i| {
        (
            format!("raw.lines.{}", i % lines),
            PublishMessage::build().payload(body(i)),
        )
    })
    .await;
    let mut consumers = Vec::with_capacity(lines);
    for line in 0..lines {
        let consumer: consumer::PullConsumer = stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(format!("line{line}")),
                filter_subject: format!("raw.lines.{line}"),
                ack_policy: consumer::AckPolicy::Explicit,
                max_ack_pending: 10_000,
                ..Default::default()
            })
            .await
            .expect("consumer");
        consumers.push((consumer, n / lines + usize::from(line < n % lines)));
    }
    let started = Instant::now();
    futures::future::join_all(
        consumers
            .iter()
            .map(|(consumer, share)| pull_and_ack(consumer, *share, 1000)),
    )
    .await;
    let rate = n as f64 / started.elapsed().as_secs_f64();
    js.delete_stream("RAW_LINES").await.expect("delete");
    rate
}

/// Durable pull consumer, pulls of `batch`, explicit ack of each message: messages/s. With
/// `retention` `WorkQueue` (the command stream's) each acknowledgement also removes its message
/// from the stream; with `Limits` the messages stay.
pub async fn jetstream_consume_ack(
    js: &jetstream::Context,
    n: usize,
    batch: usize,
    retention: stream::RetentionPolicy,
) -> f64 {
    let stream = js
        .create_stream(stream::Config {
            name: "RAW_CONSUME".into(),
            subjects: vec!["raw.consume".into()],
            retention,
            ..Default::default()
        })
        .await
        .expect("stream");
    publish_pipelined(js, n, 1000, |i| {
        (
            "raw.consume".into(),
            PublishMessage::build().payload(body(i)),
        )
    })
    .await;
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("raw".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let started = Instant::now();
    pull_and_ack(&consumer, n, batch).await;
    let rate = n as f64 / started.elapsed().as_secs_f64();
    js.delete_stream("RAW_CONSUME").await.expect("delete");
    rate
}

fn timer(i: usize, due: chrono::DateTime<Utc>) -> Command {
    Command {
        tenant_id: format!("t{}", i % 10),
        service_call_id: format!("raw-{i:09}"),
        correlation_id: format!("corr-{i}"),
        action: Action::Schedule {
            due_at: due,
            data: None,
            expires_at: None,
        },
        seq: i as u64 + 1,
        received_at: Utc::now(),
        trace: None,
        item: None,
    }
}

/// Batched upserts of rows shaped like ours, through the service's own store and settings:
/// rows/s. Leaves the `n` rows in the database, due now, for [`claim_and_mark`].
pub async fn upsert(database: &DatabaseTarget, n: usize, batch: usize) -> f64 {
    let store = Store::open(database).await.expect("open");
    let due = Utc::now();
    let rows: Vec<Command> = (0..n).map(|i| timer(i, due)).collect();
    let started = Instant::now();
    for chunk in rows.chunks(batch) {
        store.apply(chunk).await.expect("upsert");
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    store.close().await.expect("close");
    rate
}

/// Claim `batch` due rows and mark them `Reached`, one transaction each, until none is left:
/// rows/s.
pub async fn claim_and_mark(database: &DatabaseTarget, batch: usize) -> f64 {
    let store = Store::open(database).await.expect("open");
    let claimant = Claimant {
        name: "raw".into(),
        lease: Duration::from_secs(30),
    };
    let started = Instant::now();
    let mut marked = 0;
    loop {
        let now = Utc::now();
        let due = store
            .claim_due(now, None, batch, &claimant)
            .await
            .expect("claim")
            .timers;
        if due.is_empty() {
            break;
        }
        marked += store
            .mark_reached(&[(due.clone().into(), now)])
            .await
            .expect("mark");
    }
    let rate = marked as f64 / started.elapsed().as_secs_f64();
    store.close().await.expect("close");
    rate
}
