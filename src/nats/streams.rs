//! The streams and the consumer the service relies on, created when absent and accepted as
//! they are when an operator made them first.

use std::time::Duration;

use async_nats::jetstream::consumer::FromConsumer;
use async_nats::jetstream::{self, consumer, stream};

use crate::domain::{StreamIncarnation, Subjects};
use crate::ports::BusError;

/// The broker objects of one deployment (docs/CONTRACT.md §2) and how the service creates them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerNames {
    pub command_stream: String,
    pub consumer: String,
    pub event_stream: String,
    pub subjects: Subjects,
    /// `max_age` of the event stream when the service creates it; zero for no limit.
    pub event_max_age: Duration,
    /// Replicas of the streams the service creates.
    pub replicas: usize,
}

impl Default for BrokerNames {
    fn default() -> Self {
        Self {
            command_stream: "TIMER_COMMANDS".into(),
            consumer: "timer-service".into(),
            event_stream: "TIMER_EVENTS".into(),
            subjects: Subjects::default(),
            event_max_age: Duration::from_secs(7 * 24 * 3600),
            replicas: 1,
        }
    }
}

pub use crate::ports::COMMAND_ACK_WAIT;

/// The command stream: a work queue, since a command acknowledged by the service is in SQLite
/// and the broker need not keep it.
pub async fn ensure_command_stream(
    js: &jetstream::Context,
    names: &BrokerNames,
) -> Result<stream::Stream, async_nats::Error> {
    Ok(js
        .get_or_create_stream(stream::Config {
            name: names.command_stream.clone(),
            subjects: vec![names.subjects.command_wildcard()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            num_replicas: names.replicas,
            ..Default::default()
        })
        .await?)
}

/// Everything the service relies on, created when absent: the command stream, its consumer
/// and the event stream. Called as soon as the broker is reached (the CommandHandler's first
/// pull, and again after any pull failure), so a downstream consumer of the event stream can
/// be created before the first event.
pub async fn ensure_broker_objects(
    js: &jetstream::Context,
    names: &BrokerNames,
) -> Result<consumer::PullConsumer, async_nats::Error> {
    let consumer = ensure_command_consumer(js, names).await?;
    ensure_event_stream(js, names).await?;
    Ok(consumer)
}

/// The durable pull consumer the CommandHandler reads from: explicit acks, redelivered
/// without limit until the service stores or refuses each command. A consumer found with a
/// longer ack wait (made by an earlier version, with 30 s) is given [`COMMAND_ACK_WAIT`];
/// should the broker refuse that, it is used as it is, with a warning.
pub async fn ensure_command_consumer(
    js: &jetstream::Context,
    names: &BrokerNames,
) -> Result<consumer::PullConsumer, async_nats::Error> {
    let stream = ensure_command_stream(js, names).await?;
    let mut consumer = stream
        .get_or_create_consumer(
            &names.consumer,
            consumer::pull::Config {
                durable_name: Some(names.consumer.clone()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: COMMAND_ACK_WAIT,
                max_ack_pending: 10_000,
                ..Default::default()
            },
        )
        .await?;
    let found = consumer.cached_info().config.ack_wait;
    if found > COMMAND_ACK_WAIT {
        let mut config = consumer.cached_info().config.clone();
        config.ack_wait = COMMAND_ACK_WAIT;
        let config = consumer::pull::Config::try_from_consumer_config(config)?;
        match stream.create_consumer(config).await {
            Ok(updated) => {
                tracing::info!(consumer = %names.consumer, from = ?found, to = ?COMMAND_ACK_WAIT,
                    "the command consumer's ack wait shortened: held commands come back sooner");
                consumer = updated;
            }
            Err(e) => tracing::warn!(consumer = %names.consumer, ack_wait = ?found, error = %e,
                "the command consumer's ack wait cannot be shortened; commands a stopped daemon \
                 held come back only after it"),
        }
    }
    Ok(consumer)
}

/// The event stream `DueTimeReached` and `TimerCommandRejected` are published to. Its
/// duplicate window (the broker default, two minutes) is what drops a re-publish with the same
/// `Nats-Msg-Id` after a crash; `max_age` bounds its size (events older than that are gone,
/// consumed or not).
pub async fn ensure_event_stream(
    js: &jetstream::Context,
    names: &BrokerNames,
) -> Result<stream::Stream, async_nats::Error> {
    Ok(js
        .get_or_create_stream(stream::Config {
            name: names.event_stream.clone(),
            subjects: vec![names.subjects.event_wildcard()],
            storage: stream::StorageType::File,
            max_age: names.event_max_age,
            num_replicas: names.replicas,
            ..Default::default()
        })
        .await?)
}

/// The incarnation of stream `name` now: its creation instant tells it from a stream of the
/// same name deleted before or created after.
pub async fn incarnation(
    js: &jetstream::Context,
    name: &str,
) -> Result<StreamIncarnation, BusError> {
    let stream = js
        .get_stream(name)
        .await
        .map_err(|e| BusError(format!("stream {name} unavailable: {e}")))?;
    let created_ns = i64::try_from(stream.cached_info().created.unix_timestamp_nanos())
        .map_err(|e| BusError(format!("stream {name}: creation time out of range: {e}")))?;
    Ok(StreamIncarnation {
        name: name.to_owned(),
        created_ns,
    })
}
