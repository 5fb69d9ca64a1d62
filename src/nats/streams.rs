//! The streams and the consumers the service relies on, created when absent and accepted as
//! they are when an operator made them first.

use std::time::Duration;

use async_nats::jetstream::consumer::FromConsumer;
use async_nats::jetstream::{self, consumer, stream};

use super::layout;
use super::partitions::{self, Lines};
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
    /// Lines of the command stream, by tenant (`partitions`); 1 for a single line.
    pub command_partitions: u16,
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
            command_partitions: 16,
        }
    }
}

pub use crate::ports::COMMAND_ACK_WAIT;

/// How long to wait for the server's `INFO` (its version) when the connection has not had one.
const SERVER_INFO_WAIT: Duration = Duration::from_secs(5);

/// The version of the server the client is connected to, once it has said it.
async fn server_version(js: &jetstream::Context) -> Result<String, async_nats::Error> {
    let client = js.client();
    if client.try_server_info().is_none() {
        tokio::time::timeout(SERVER_INFO_WAIT, client.flush())
            .await
            .map_err(|_| "the NATS server has not answered")??;
    }
    client
        .try_server_info()
        .map(|info| info.version)
        .ok_or_else(|| "the NATS server has not said its version".into())
}

/// Whether the server applies subject transforms (and keeps stream metadata): 2.10 or later.
/// Before that the command stream has one line, and the service records nothing on it.
pub async fn lines_supported(js: &jetstream::Context) -> Result<bool, async_nats::Error> {
    Ok(partitions::supports_transforms(&server_version(js).await?))
}

/// The command stream: a work queue, since a command acknowledged by the service is in the
/// database and the broker need not keep it. Created laid out in `command_partitions` lines
/// (docs/CONTRACT.md §9); one found is taken as it is.
pub async fn ensure_command_stream(
    js: &jetstream::Context,
    names: &BrokerNames,
) -> Result<stream::Stream, async_nats::Error> {
    let supported = lines_supported(js).await?;
    command_stream(js, names, supported).await
}

/// [`ensure_command_stream`] with the server's support for lines already known.
async fn command_stream(
    js: &jetstream::Context,
    names: &BrokerNames,
    supported: bool,
) -> Result<stream::Stream, async_nats::Error> {
    let lines = Lines::new(names);
    let (transform, metadata) = if supported {
        let record = [(layout::LINES_KEY.to_owned(), lines.count().to_string())];
        (
            (lines.count() > 1).then(|| lines.transform()),
            record.into(),
        )
    } else {
        (None, Default::default())
    };
    Ok(js
        .get_or_create_stream(stream::Config {
            name: names.command_stream.clone(),
            subjects: vec![names.subjects.command_wildcard()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            num_replicas: names.replicas,
            subject_transform: transform,
            metadata,
            ..Default::default()
        })
        .await?)
}

/// The configuration of every durable pull consumer of the command stream, the first one's
/// and each line's: explicit acks, redelivered without limit until the service stores or
/// refuses each command, after [`COMMAND_ACK_WAIT`] unless reported in progress.
pub(super) fn command_consumer_config(name: &str, filter: String) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        filter_subject: filter,
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: COMMAND_ACK_WAIT,
        max_ack_pending: 10_000,
        ..Default::default()
    }
}

/// Everything the service relies on, created when absent: the command stream, its consumers
/// and the event stream. Called as soon as the broker is reached (the CommandHandler's first
/// pull, and again after any pull failure, so a stream deleted and created anew gets its
/// consumers again), so a downstream consumer of the event stream can be created before the
/// first event. Returns the command consumers, the first one first.
///
/// The stream's layout is adopted as found (`layout`); `command_partitions` lays out only a
/// stream without one, such as an earlier version's (one consumer reading everything): that
/// consumer is narrowed first, then the lines' consumers are created, then the stream stores
/// new commands in lines. Nothing stored is left without a consumer at any step, no two
/// consumers overlap, and a first consumer that cannot be used stops it before any change.
pub async fn ensure_broker_objects(
    js: &jetstream::Context,
    names: &BrokerNames,
) -> Result<Vec<consumer::PullConsumer>, async_nats::Error> {
    let supported = lines_supported(js).await?;
    let setting = Lines::new(names);
    let stream = command_stream(js, names, supported).await?;
    let found = layout::recorded(&stream.cached_info().config).filter(|_| supported);
    let lines = match found {
        _ if !supported => {
            if setting.count() > 1 {
                let version = server_version(js).await?;
                tracing::warn!(server_version = %version,
                    command_partitions = names.command_partitions,
                    "the NATS server has no subject transforms (2.10 or later): commands are \
                     read in one line, first in first out across tenants");
            }
            setting.with_count(1)
        }
        Some(count) => {
            if count != setting.count() {
                tracing::warn!(stream = %names.command_stream, stream_lines = count,
                    command_partitions = names.command_partitions,
                    "the command stream has {count} lines and command_partitions is {}: reading \
                     the stream's {count} (`timer-service lines set` changes them)",
                    names.command_partitions);
            }
            setting.with_count(count)
        }
        None => setting,
    };
    let mut first = ensure_command_consumer(&stream, names, &lines).await?;
    if supported && (found.is_none() || lines.count() > 1) {
        first = layout::lay_out(js, &stream, first, &lines).await?;
    }
    let mut consumers = vec![first];
    if supported {
        consumers.extend(layout::line_consumers(js, names, &lines).await?);
    }
    ensure_event_stream(js, names).await?;
    Ok(consumers)
}

/// The first durable pull consumer of the command stream (the only one with a single line).
/// It reads the published subjects, which with lines are only what an earlier version stored
/// and subjects the lines' transform leaves alone. A consumer found with a longer ack wait
/// (made by an earlier version, with 30 s) is given [`COMMAND_ACK_WAIT`]; should the broker
/// refuse that, it is used as it is, with a warning.
async fn ensure_command_consumer(
    stream: &stream::Stream,
    names: &BrokerNames,
    lines: &Lines,
) -> Result<consumer::PullConsumer, async_nats::Error> {
    let mut config = command_consumer_config(&names.consumer, lines.wide());
    if lines.count() > 1 {
        config.filter_subject = String::new();
        config.filter_subjects = lines.first_filters();
    }
    let mut consumer = stream
        .get_or_create_consumer(&names.consumer, config)
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
    incarnation_of(&stream)
}

/// The incarnation of `stream` as it was looked up.
pub fn incarnation_of(stream: &stream::Stream) -> Result<StreamIncarnation, BusError> {
    let info = stream.cached_info();
    let name = &info.config.name;
    let created_ns = i64::try_from(info.created.unix_timestamp_nanos())
        .map_err(|e| BusError(format!("stream {name}: creation time out of range: {e}")))?;
    Ok(StreamIncarnation {
        name: name.clone(),
        created_ns,
    })
}
