//! Changing the number of lines of the command stream (`timer-service lines set`), the one
//! operation that does (docs/operations.md, "Lines of the command stream"). New lines get
//! their consumers before the stream stores anything on them; lines the stream no longer has
//! are deleted only once the running daemons have drained them; with one line the first
//! consumer reads everything again, as a release without lines expects (the rollback).

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self as js};
use futures::TryStreamExt;

use super::layout::{self, FirstShape};
use super::partitions::Lines;
use super::streams::{BrokerNames, lines_supported};

/// How often the drained lines are looked at while waiting.
const DRAIN_LOOK: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum RelayoutError {
    #[error("{0}")]
    Refused(String),
    #[error(
        "lines still holding commands after {waited:?}: {held}; the running daemons read \
             them: run the command again once they have (is a daemon running?)"
    )]
    NotDrained { waited: Duration, held: String },
    #[error("broker: {0}")]
    Broker(#[from] async_nats::Error),
}

fn broker(e: impl Into<async_nats::Error>) -> RelayoutError {
    RelayoutError::Broker(e.into())
}

/// One line consumer as `lines show` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineState {
    pub name: String,
    pub filters: Vec<String>,
    /// Stored and not yet delivered.
    pub pending: u64,
    /// Delivered and not yet acknowledged.
    pub held: u64,
}

/// The layout as `lines show` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// What the stream records; `None` for a stream no daemon of this version laid out.
    pub recorded: Option<u16>,
    pub transform: Option<String>,
    /// The first consumer, then each line consumer by line.
    pub consumers: Vec<LineState>,
}

/// Every consumer of this deployment on the command stream, the first one first.
async fn consumers(
    js: &js::Context,
    names: &BrokerNames,
    lines: &Lines,
    from_line: u16,
) -> Result<Vec<(PullConsumer, LineState)>, RelayoutError> {
    let stream = js.get_stream(&names.command_stream).await.map_err(broker)?;
    let mut found: Vec<String> = stream
        .consumer_names()
        .try_collect()
        .await
        .map_err(broker)?;
    found.sort_by_key(|name| lines.line_of(name));
    let mut out = Vec::new();
    for name in found {
        let wanted = match lines.line_of(&name) {
            Some(line) => line >= from_line,
            None => name == names.consumer,
        };
        if !wanted {
            continue;
        }
        let mut consumer: PullConsumer = stream.get_consumer(&name).await.map_err(broker)?;
        let info = consumer.info().await.map_err(broker)?.clone();
        let mut filters = info.config.filter_subjects.clone();
        if !info.config.filter_subject.is_empty() {
            filters.insert(0, info.config.filter_subject.clone());
        }
        let state = LineState {
            name,
            filters,
            pending: info.num_pending,
            held: info.num_ack_pending as u64,
        };
        out.push((consumer, state));
    }
    Ok(out)
}

pub async fn show(js: &js::Context, names: &BrokerNames) -> Result<Shown, RelayoutError> {
    let stream = js.get_stream(&names.command_stream).await.map_err(broker)?;
    let config = &stream.cached_info().config;
    let lines = Lines::new(names);
    Ok(Shown {
        recorded: layout::recorded(config),
        transform: config
            .subject_transform
            .as_ref()
            .map(|t| format!("{} -> {}", t.source, t.destination)),
        consumers: consumers(js, names, &lines, 0)
            .await?
            .into_iter()
            .map(|(_, state)| state)
            .collect(),
    })
}

/// Gives the command stream `count` lines and waits, up to `wait`, until the lines it no
/// longer has are drained by the running daemons, deleting each then. Run again after a
/// timeout, it carries on where it stopped.
pub async fn set(
    js: &js::Context,
    names: &BrokerNames,
    count: u16,
    wait: Duration,
) -> Result<(), RelayoutError> {
    if count > 1 && !lines_supported(js).await? {
        return Err(RelayoutError::Refused(
            "the NATS server has no subject transforms (2.10 or later): one line only".into(),
        ));
    }
    let stream = js.get_stream(&names.command_stream).await.map_err(|e| {
        RelayoutError::Refused(format!(
            "the command stream {} is not there ({e}): a daemon creates it at its start",
            names.command_stream
        ))
    })?;
    let lines = Lines::new(names).with_count(count);
    let first: PullConsumer = stream.get_consumer(&names.consumer).await.map_err(|e| {
        RelayoutError::Refused(format!(
            "the command consumer {} is not there ({e}): a daemon creates it at its start",
            names.consumer
        ))
    })?;
    let first = match layout::lay_out(js, &stream, first, &lines).await {
        Ok(first) => first,
        Err(e) => {
            return Err(match e.downcast::<layout::Refused>() {
                Ok(refused) => RelayoutError::Refused(refused.0),
                Err(e) => RelayoutError::Broker(e),
            });
        }
    };
    // With one line, line 0 goes too.
    let from_line = if count > 1 { count } else { 0 };
    let started = tokio::time::Instant::now();
    loop {
        let extra: Vec<_> = consumers(js, names, &lines, from_line)
            .await?
            .into_iter()
            .filter(|(_, state)| state.name != names.consumer)
            .collect();
        let mut held = Vec::new();
        for (_, state) in &extra {
            if state.pending == 0 && state.held == 0 {
                stream.delete_consumer(&state.name).await.map_err(broker)?;
                tracing::info!(consumer = %state.name, "a drained line consumer deleted");
            } else {
                held.push(format!(
                    "{} ({} pending, {} held)",
                    state.name, state.pending, state.held
                ));
            }
        }
        if held.is_empty() {
            break;
        }
        if started.elapsed() >= wait {
            return Err(RelayoutError::NotDrained {
                waited: wait,
                held: held.join(", "),
            });
        }
        tracing::info!(lines = %held.join(", "), "waiting for the running daemons to drain");
        tokio::time::sleep(DRAIN_LOOK).await;
    }
    if count == 1 && first_shape_is_narrowed(&first, &lines) {
        layout::set_filters(&stream, &first, lines.wide(), Vec::new()).await?;
        tracing::info!(consumer = %names.consumer, filter = %lines.wide(),
            "the command consumer reads every subject again");
    }
    Ok(())
}

fn first_shape_is_narrowed(first: &PullConsumer, lines: &Lines) -> bool {
    layout::first_shape(&first.cached_info().config, lines) == FirstShape::Narrowed
}
