//! The command stream's layout, kept on the stream itself so that every process touching the
//! broker reads the same one (docs/design.md, "The broker is shared state"): the number of
//! lines in its metadata ([`LINES_KEY`]) beside the subject transform that makes them.
//!
//! `[nats] command_partitions` lays out only a stream that has no layout yet (one a daemon
//! creates, or one an earlier version made); a daemon adopts the layout it finds, and while it
//! runs it looks again every [`LOOK_EVERY`] and reads every line consumer the stream has.
//! `timer-service lines set` is the one way to change it (`relayout`). Nothing is changed on
//! the broker before every check that can refuse has passed (docs/CONTRACT.md §9).

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::consumer::{self, FromConsumer, PullConsumer};
use async_nats::jetstream::{self as js, stream};
use futures::TryStreamExt;

use super::partitions::Lines;
use super::streams::{BrokerNames, command_consumer_config};

/// The stream metadata key that records the number of lines.
pub const LINES_KEY: &str = "timer-service.lines";

/// How often a running daemon looks at the stream's layout and consumers: two small requests.
pub const LOOK_EVERY: Duration = Duration::from_secs(2);

/// The broker holds an object the daemon cannot use as it is; nothing was changed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The lines the stream records: its metadata, else the partition count of its transform (a
/// stream laid out by a version that recorded nothing); `None` for a stream without either.
pub fn recorded(config: &stream::Config) -> Option<u16> {
    let noted = config.metadata.get(LINES_KEY).and_then(|v| v.parse().ok());
    noted.filter(|n| *n >= 1).or_else(|| {
        let destination = &config.subject_transform.as_ref()?.destination;
        let (_, rest) = destination.split_once("partition(")?;
        rest.split_once(',')?.0.trim().parse().ok()
    })
}

/// What the first consumer reads, as far as lines are concerned.
#[derive(Debug, PartialEq, Eq)]
pub enum FirstShape {
    /// Every subject (as a daemon creates it for one line, and earlier versions did).
    ReadsAll,
    /// Every subject but a line's (as a daemon narrows it for lines).
    Narrowed,
    /// Anything else: an operator's choice, usable only with one line.
    Other(Vec<String>),
}

pub fn first_shape(config: &consumer::Config, lines: &Lines) -> FirstShape {
    let mut filters: BTreeSet<String> = config.filter_subjects.iter().cloned().collect();
    if !config.filter_subject.is_empty() {
        filters.insert(config.filter_subject.clone());
    }
    let narrowed: BTreeSet<String> = lines.first_filters().into_iter().collect();
    if filters.is_empty() || filters == BTreeSet::from([lines.wide()]) {
        FirstShape::ReadsAll
    } else if filters == narrowed {
        FirstShape::Narrowed
    } else {
        FirstShape::Other(filters.into_iter().collect())
    }
}

/// Lays the stream out in `lines`: checks the first consumer can be used, narrows it, creates
/// each line's consumer, and only then sets the transform and records the count, so that a
/// refusal leaves the broker as it was and every stored subject has its consumer at each
/// step. One line is only recorded (undoing lines is `relayout`'s, which drains them).
pub async fn lay_out(
    js: &js::Context,
    stream: &stream::Stream,
    first: PullConsumer,
    lines: &Lines,
) -> Result<PullConsumer, async_nats::Error> {
    if lines.count() <= 1 {
        record(js, stream, lines).await?;
        return Ok(first);
    }
    let first = match first_shape(&first.cached_info().config, lines) {
        FirstShape::Narrowed => first,
        FirstShape::ReadsAll => narrow(stream, first, lines).await?,
        FirstShape::Other(filters) => {
            let reason = format!(
                "consumer {} reads {filters:?}: with the command stream in {} lines it must read \
                 every subject but a line's {:?}, or everything ({}, narrowed by the service); \
                 nothing was changed on the broker. Change or delete the consumer, or give the \
                 stream one line (`timer-service lines set 1`)",
                lines.first_name(),
                lines.count(),
                lines.first_filters(),
                lines.wide()
            );
            tracing::error!(consumer = %lines.first_name(), reason = %reason,
                "the command stream cannot be laid out in lines");
            return Err(Refused(reason).into());
        }
    };
    for line in 0..lines.count() {
        let name = lines.consumer_name(line);
        stream
            .get_or_create_consumer(&name, command_consumer_config(&name, lines.filter(line)))
            .await?;
    }
    record(js, stream, lines).await?;
    Ok(first)
}

/// Gives the stream the transform of `lines` (none for one line) and records their count,
/// keeping the rest of its configuration; reads the stream afresh first.
pub async fn record(
    js: &js::Context,
    stream: &stream::Stream,
    lines: &Lines,
) -> Result<(), async_nats::Error> {
    let name = stream.cached_info().config.name.clone();
    let mut config = js.get_stream(&name).await?.cached_info().config.clone();
    let transform = (lines.count() > 1).then(|| lines.transform());
    let count = lines.count().to_string();
    if config.subject_transform == transform && config.metadata.get(LINES_KEY) == Some(&count) {
        return Ok(());
    }
    let from = recorded(&config);
    config.subject_transform = transform;
    config.metadata.insert(LINES_KEY.to_owned(), count);
    js.update_stream(config).await?;
    tracing::info!(stream = %name, from = ?from, to = lines.count(),
        "the command stream's lines changed");
    Ok(())
}

/// Narrows a first consumer that reads everything to every subject but the lines', so it no
/// longer overlaps them. What it holds stays: before the transform, nothing is on a line.
async fn narrow(
    stream: &stream::Stream,
    first: PullConsumer,
    lines: &Lines,
) -> Result<PullConsumer, async_nats::Error> {
    let filters = lines.first_filters();
    let narrowed = set_filters(stream, &first, String::new(), filters.clone()).await?;
    tracing::info!(consumer = %lines.first_name(), filters = ?filters,
        "the command consumer narrowed to the published subjects: commands now go in lines");
    Ok(narrowed)
}

/// The first consumer with other filters, the rest of its configuration kept.
pub async fn set_filters(
    stream: &stream::Stream,
    consumer: &PullConsumer,
    filter: String,
    filters: Vec<String>,
) -> Result<PullConsumer, async_nats::Error> {
    let mut config = consumer.cached_info().config.clone();
    config.filter_subject = filter;
    config.filter_subjects = filters;
    Ok(stream
        .create_consumer(consumer::pull::Config::try_from_consumer_config(config)?)
        .await?)
}

/// The stream's lines now and the names of every line consumer of this deployment on it
/// (ordered by line), after giving each of the stream's lines that has none its consumer (a
/// process that set the transform may have stopped before creating it). The names are
/// listed before the stream is read: a consumer deleted after the list belongs to a line the
/// stream no longer has, so it is never created again behind `relayout`'s back.
pub async fn current(
    js: &js::Context,
    names: &BrokerNames,
    lines: &Lines,
) -> Result<(u16, Vec<String>), async_nats::Error> {
    let mut stream = js.get_stream(&names.command_stream).await?;
    let mut found: Vec<String> = stream.consumer_names().try_collect().await?;
    let count = recorded(&stream.info().await?.config).unwrap_or(1);
    let lines = lines.with_count(count);
    let wanted = if count > 1 { count } else { 0 };
    for line in 0..wanted {
        let name = lines.consumer_name(line);
        if !found.contains(&name) {
            stream
                .get_or_create_consumer(&name, command_consumer_config(&name, lines.filter(line)))
                .await?;
            tracing::warn!(consumer = %name, lines = count,
                "a line of the command stream had no consumer: created");
            found.push(name);
        }
    }
    let mut found: Vec<(u16, String)> = found
        .into_iter()
        .filter_map(|name| Some((lines.line_of(&name)?, name)))
        .collect();
    found.sort();
    Ok((count, found.into_iter().map(|(_, name)| name).collect()))
}

/// Every line consumer of this deployment on the stream, by line; those beyond the stream's
/// lines are read too (they may hold commands until `relayout` deletes them).
pub async fn line_consumers(
    js: &js::Context,
    names: &BrokerNames,
    lines: &Lines,
) -> Result<Vec<PullConsumer>, async_nats::Error> {
    let stream = js.get_stream(&names.command_stream).await?;
    let (count, found) = current(js, names, lines).await?;
    let mut consumers = Vec::new();
    for name in found {
        if lines.line_of(&name).is_some_and(|line| line >= count) {
            tracing::info!(consumer = %name, lines = count,
                "reading a line consumer beyond the stream's lines: it may hold commands");
        }
        consumers.push(stream.get_consumer(&name).await?);
    }
    Ok(consumers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_count_is_read_from_the_record_else_from_the_transform() {
        let mut config = stream::Config::default();
        assert_eq!(recorded(&config), None, "an earlier version's stream");
        config.subject_transform = Some(Lines::of(32).transform());
        assert_eq!(recorded(&config), Some(32));
        config.metadata = HashMap::from([(LINES_KEY.to_owned(), "1".to_owned())]);
        assert_eq!(recorded(&config), Some(1), "the record decides");
        config.metadata = HashMap::from([(LINES_KEY.to_owned(), "x".to_owned())]);
        assert_eq!(recorded(&config), Some(32));
    }

    #[test]
    fn the_first_consumer_is_usable_with_lines_when_it_reads_all_or_all_but_lines() {
        let l = Lines::of(4);
        let shape = |filter: &str, filters: &[&str]| {
            first_shape(
                &consumer::Config {
                    filter_subject: filter.into(),
                    filter_subjects: filters.iter().map(|f| f.to_string()).collect(),
                    ..Default::default()
                },
                &l,
            )
        };
        assert_eq!(shape("", &[]), FirstShape::ReadsAll);
        assert_eq!(shape("timer.cmd.>", &[]), FirstShape::ReadsAll);
        assert_eq!(
            shape("", &["timer.cmd.*.*.*.>", "timer.cmd.*", "timer.cmd.*.*"]),
            FirstShape::Narrowed
        );
        assert_eq!(
            shape("", &["timer.cmd.schedule.>", "timer.cmd.cancel.>"]),
            FirstShape::Other(vec![
                "timer.cmd.cancel.>".into(),
                "timer.cmd.schedule.>".into()
            ])
        );
    }
}
