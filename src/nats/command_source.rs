//! `CommandSource` over the command stream's durable pull consumers: the first one, and one
//! per line the stream has (`partitions`; lines added or deleted while it runs are followed,
//! `follow`). Each line keeps a pull
//! request for several batches open ([`REQUEST_AT_LEAST`] commands among the lines), expiring
//! after the wait, so a quiet stream costs one request per line and wait and a busy one
//! delivers many batches per round trip. A batch is filled from the lines in turns, one
//! command each, so the commands of a tenant behind no backlog go in the next batch whatever
//! another line holds.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use async_trait::async_trait;
use futures::FutureExt;
use tokio::time::Instant;

use super::connection::JETSTREAM_TIMEOUT;
use super::follow::Follower;
use super::layout::Refused;
use super::link::WeakLinkWatch;
use super::partitions::Lines;
use super::pull::{Line, Next};
use super::streams::{BrokerNames, ensure_broker_objects, incarnation};
use crate::domain::StreamIncarnation;
use crate::health::Health;
use crate::ports::{BusError, CommandSource, CommandSourceFactory, InboundCommand};

/// Shortest life of a pull request. A call that waits only a millisecond (while commands are
/// gathered for the next commit) still opens a request that the next calls go on reading:
/// one that expired within a millisecond went unanswered now and then under a burst
/// (nats-server 2.9 sent no timeout for it), and each such request cost its grace and a
/// backoff.
const REQUEST_EXPIRES_AT_LEAST: Duration = Duration::from_millis(250);
/// While the broker reports more commands pending, how long to wait for the next one to fill
/// the batch. They are already on their way, so this is only a guard against a stalled server.
const FILL_WAIT: Duration = Duration::from_millis(20);
/// Commands the open requests ask for together, at least: one request per small batch would
/// make the broker's round trip the limit, while every command sent ahead runs its ack wait.
/// Lines with commands pending share it; an idle line asks for its share of all lines.
pub const REQUEST_AT_LEAST: usize = 4_000;

pub struct JetStreamCommandSource {
    js: jetstream::Context,
    names: BrokerNames,
    subjects: Lines,
    /// The first consumer's line, then one per line of the stream; empty until the broker
    /// objects are ensured.
    lines: Vec<Line>,
    /// The consumer name of each of `lines`.
    line_names: Vec<String>,
    /// Looks at the stream's lines now and then, and adds or drops lines.
    follow: Follower,
    /// Where a broker the service cannot use as it is turns readiness red.
    health: Health,
    /// Told when the broker answers a pull request, and when one goes unanswered: a path
    /// silent toward the broker, while API requests keep the connection's pings quiet and no
    /// timer is published, is noticed by the pull requests alone.
    link: WeakLinkWatch,
    /// The line whose turn comes first when the next batch is filled.
    turn: usize,
    /// The incarnation the last request read from, to log a change of it once.
    stream: Option<Arc<StreamIncarnation>>,
}

impl JetStreamCommandSource {
    pub fn new(
        js: jetstream::Context,
        names: BrokerNames,
        health: Health,
        link: WeakLinkWatch,
    ) -> Self {
        Self {
            js,
            subjects: Lines::new(&names),
            names,
            lines: Vec::new(),
            line_names: Vec::new(),
            follow: Follower::new(),
            health,
            link,
            turn: 0,
            stream: None,
        }
    }

    async fn ensure_lines(&mut self) -> Result<(), BusError> {
        if self.lines.is_empty() {
            let ensured = ensure_broker_objects(&self.js, &self.names).await;
            let refused = ensured
                .as_ref()
                .err()
                .and_then(|e| e.downcast_ref::<Refused>());
            self.health.intake_refused(refused.map(ToString::to_string));
            if ensured.is_ok() {
                self.health.streams_ready();
            }
            let consumers = ensured.map_err(|e| {
                BusError(format!(
                    "streams {} and {} with consumer {} unavailable: {e}",
                    self.names.command_stream, self.names.event_stream, self.names.consumer
                ))
            })?;
            tracing::info!(
                actor = "command_handler",
                consumers = consumers.len(),
                "reading the command stream's consumers in turns"
            );
            self.line_names = consumers
                .iter()
                .map(|c| c.cached_info().name.clone())
                .collect();
            self.lines = consumers.into_iter().map(Line::new).collect();
            self.turn = 0;
            self.follow.looked();
        }
        Ok(())
    }

    /// Forgets the consumers and the open requests after an error, so the next call starts over.
    fn reset(&mut self) {
        self.lines.clear();
        self.line_names.clear();
        self.stream = None;
    }

    /// Opens a request on every line without one. The incarnation of the command stream is
    /// asked after the requests are sent: a request goes to the consumer of that name as it is
    /// when the request arrives, so the stream asked afterwards is that one or a newer one
    /// (which would have ended the request by deleting its consumer), never an older one; the
    /// messages of a request are never taken for a newer incarnation's.
    async fn open_requests(&mut self, max: usize, wait: Duration) -> Result<(), BusError> {
        let began = Instant::now();
        if let Err(e) = self.ensure_lines().await {
            self.unanswered("the command stream's objects", began);
            return Err(e);
        }
        let began = Instant::now();
        let (js, names, subjects) = (&self.js, &self.names, &self.subjects);
        let looked = (self.follow)
            .look(js, names, subjects, &mut self.lines, &mut self.line_names)
            .await;
        self.turn %= self.lines.len().max(1);
        if let Err(e) = looked {
            self.unanswered("the command stream's lines", began);
            self.reset();
            return Err(e);
        }
        let expires = wait.max(REQUEST_EXPIRES_AT_LEAST);
        let busy = self.lines.iter().filter(|l| l.pending > 0).count().max(1);
        let mut sent = Vec::new();
        for (i, line) in self.lines.iter().enumerate() {
            if line.is_open() {
                continue;
            }
            let share = if line.pending > 0 {
                busy
            } else {
                self.lines.len()
            };
            match line
                .request(max.max(REQUEST_AT_LEAST / share), expires)
                .await
            {
                Ok(batch) => sent.push((i, batch)),
                Err(e) => {
                    self.reset();
                    return Err(e);
                }
            }
        }
        if sent.is_empty() {
            return Ok(());
        }
        let began = Instant::now();
        let stream = match incarnation(&self.js, &self.names.command_stream).await {
            Ok(stream) => stream,
            Err(e) => {
                self.unanswered("the command stream's info", began);
                self.reset();
                return Err(e);
            }
        };
        let stream = match &self.stream {
            Some(known) if **known == stream => known.clone(),
            _ => {
                tracing::info!(actor = "command_handler", stream = %stream,
                    "reading the command stream");
                Arc::new(stream)
            }
        };
        self.stream = Some(stream.clone());
        for (i, batch) in sent {
            self.lines[i].opened(batch, expires, stream.clone());
        }
        Ok(())
    }

    /// Appends what the lines have already received, up to `max` in `out`, one command per line
    /// in turn; the next call starts with the line whose turn it would have been.
    fn take_turns(&mut self, out: &mut Vec<InboundCommand>, max: usize) {
        let n = self.lines.len();
        let mut turns: VecDeque<usize> = (0..n).map(|k| (self.turn + k) % n).collect();
        while let Some(i) = turns.pop_front() {
            if out.len() >= max {
                self.turn = i;
                return;
            }
            match self.lines[i].ready() {
                Some(Next::Message(message, stream)) => {
                    out.push(message.into_inbound(stream, &self.subjects));
                    turns.push_back(i);
                }
                Some(Next::Failed(e)) => {
                    tracing::warn!(actor = "command_handler", error = %e, "pull request ended with an error");
                    self.follow.look_now();
                }
                Some(Next::Ended) | None => {}
            }
        }
    }

    /// A JetStream request begun at `began` failed; if only after waiting its whole bound, the
    /// broker never answered it, and the link watch hears so (an error the broker sends back
    /// comes at once, and is an answer).
    fn unanswered(&self, what: &str, began: Instant) {
        if began.elapsed() >= JETSTREAM_TIMEOUT
            && let Some(link) = self.link.upgrade()
        {
            link.unanswered(what, began);
        }
    }

    /// The broker answered a pull request: the path carries bytes both ways.
    fn heard(&self) {
        if let Some(link) = self.link.upgrade() {
            link.answered();
        }
    }

    /// Waits for the first line to yield something; `None` when no line has a request open.
    async fn next_any(&mut self) -> Option<(usize, Next)> {
        let waiting: Vec<_> = self
            .lines
            .iter_mut()
            .enumerate()
            .filter(|(_, line)| line.is_open())
            .map(|(i, line)| async move { (i, line.next().await) }.boxed())
            .collect();
        if waiting.is_empty() {
            return None;
        }
        Some(futures::future::select_all(waiting).await.0)
    }
}

#[async_trait]
impl CommandSource for JetStreamCommandSource {
    async fn next_batch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<InboundCommand>, BusError> {
        self.open_requests(max, wait).await?;
        let mut out = Vec::new();
        self.take_turns(&mut out, max);
        if out.is_empty() {
            // A request opened by an earlier call may live longer than this call's `wait`:
            // waiting on it only that long keeps gathered commands from waiting for its expiry.
            let Some(answer_by) = self.lines.iter().filter_map(Line::answer_by).min() else {
                return Ok(out);
            };
            let first_wait = tokio::time::Instant::now() + wait;
            match tokio::time::timeout_at(first_wait.min(answer_by), self.next_any()).await {
                Ok(Some((_, Next::Message(message, stream)))) => {
                    out.push(message.into_inbound(stream, &self.subjects));
                }
                Ok(Some((_, Next::Failed(e)))) => {
                    self.reset();
                    return Err(BusError(format!("pull request failed: {e}")));
                }
                Ok(Some((_, Next::Ended))) => {
                    self.heard();
                    return Ok(out);
                }
                Ok(None) => return Ok(out),
                Err(_) if tokio::time::Instant::now() < answer_by => return Ok(out),
                Err(_) => {
                    // The broker let a request lapse without a word: it may be frozen or gone.
                    // Look it up afresh after a backoff rather than sending request after
                    // request into a broker that does not answer (each would take commands to
                    // an inbox no longer read once it resumes, until their ack wait runs out).
                    let since = self.lines.iter().filter_map(Line::opened_at).min();
                    if let (Some(link), Some(since)) = (self.link.upgrade(), since) {
                        link.unanswered("pull request", since);
                    }
                    self.reset();
                    return Err(BusError("pull request was never answered".into()));
                }
            }
        }
        // Fill the batch while the broker says more are pending on a line with a request
        // open: under load every transaction then carries a full batch.
        loop {
            self.take_turns(&mut out, max);
            if out.len() >= max || !self.lines.iter().any(|l| l.pending > 0 && l.is_open()) {
                break;
            }
            match tokio::time::timeout(FILL_WAIT, self.next_any()).await {
                Ok(Some((_, Next::Message(message, stream)))) => {
                    out.push(message.into_inbound(stream, &self.subjects));
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        if !out.is_empty() {
            self.heard();
        }
        Ok(out)
    }

    /// Every line's open request, drained at once: their expiries run together.
    async fn drain(&mut self) -> Result<Vec<InboundCommand>, BusError> {
        let drained = futures::future::join_all(self.lines.iter_mut().map(Line::drain)).await;
        Ok(drained
            .into_iter()
            .flatten()
            .map(|(delivered, stream)| delivered.into_inbound(stream, &self.subjects))
            .collect())
    }
}

/// Hands each (re)started CommandHandler a fresh source on the shared connection.
pub struct JetStreamCommandSourceFactory {
    js: jetstream::Context,
    names: BrokerNames,
    health: Health,
    link: WeakLinkWatch,
}

impl JetStreamCommandSourceFactory {
    pub fn new(
        js: jetstream::Context,
        names: BrokerNames,
        health: Health,
        link: WeakLinkWatch,
    ) -> Self {
        Self {
            js,
            names,
            health,
            link,
        }
    }
}

impl CommandSourceFactory for JetStreamCommandSourceFactory {
    fn create(&self) -> Box<dyn CommandSource> {
        Box::new(JetStreamCommandSource::new(
            self.js.clone(),
            self.names.clone(),
            self.health.clone(),
            self.link.clone(),
        ))
    }
}
