//! `CommandSource` over the durable pull consumer. Each pull request asks for several batches
//! ([`REQUEST_AT_LEAST`] commands) and expires after the wait, so a quiet stream costs one
//! request per wait and a busy one delivers many batches per round trip; each call still hands
//! out one batch at most.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::PullConsumer, consumer::pull::Batch};
use async_trait::async_trait;
use futures::{FutureExt, StreamExt};

use super::streams::{BrokerNames, ensure_broker_objects, incarnation};
use crate::domain::StreamIncarnation;
use crate::ports::{BusError, CommandSource, CommandSourceFactory, Delivery, InboundCommand};

/// Beyond a pull request's own expiry, how long to wait for the broker to close it before
/// giving up on the request (the broker may be gone).
const REQUEST_GRACE: Duration = Duration::from_secs(2);
/// Shortest life of a pull request. A call that waits only a millisecond (while commands are
/// gathered for the next commit) still opens a request that the next calls go on reading:
/// one that expired within a millisecond went unanswered now and then under a burst
/// (nats-server 2.9 sent no timeout for it), and each such request cost its grace and a
/// backoff.
const REQUEST_EXPIRES_AT_LEAST: Duration = Duration::from_millis(250);
/// While the broker reports more commands pending, how long to wait for the next one to fill
/// the batch. They are already on their way, so this is only a guard against a stalled server.
const FILL_WAIT: Duration = Duration::from_millis(20);
/// Commands one pull request asks for, at least: one request per small batch would make the
/// broker's round trip the limit. The broker stops at the consumer's `max_ack_pending` anyway.
pub const REQUEST_AT_LEAST: usize = 4_000;

pub struct JetStreamCommandSource {
    js: jetstream::Context,
    names: BrokerNames,
    consumer: Option<PullConsumer>,
    /// The open pull request, if any (messages may still arrive on it), the instant by which
    /// the broker must have closed it (its expiry plus [`REQUEST_GRACE`]), and the incarnation
    /// of the command stream it reads from.
    request: Option<(Batch, tokio::time::Instant, Arc<StreamIncarnation>)>,
    /// The incarnation the last request read from, to log a change of it once.
    stream: Option<Arc<StreamIncarnation>>,
}

impl JetStreamCommandSource {
    pub fn new(js: jetstream::Context, names: BrokerNames) -> Self {
        Self {
            js,
            names,
            consumer: None,
            request: None,
            stream: None,
        }
    }

    async fn consumer(&mut self) -> Result<&PullConsumer, BusError> {
        if self.consumer.is_none() {
            let consumer = ensure_broker_objects(&self.js, &self.names)
                .await
                .map_err(|e| {
                    BusError(format!(
                        "streams {} and {} with consumer {} unavailable: {e}",
                        self.names.command_stream, self.names.event_stream, self.names.consumer
                    ))
                })?;
            self.consumer = Some(consumer);
        }
        self.consumer
            .as_ref()
            .ok_or_else(|| BusError("consumer missing".into()))
    }

    /// Forgets the consumer and the open request after an error, so the next call starts over.
    fn reset(&mut self) {
        self.consumer = None;
        self.request = None;
        self.stream = None;
    }

    /// The incarnation of the command stream that serves a pull request opened before this
    /// call. A request goes to the consumer of that name as it is when the request arrives;
    /// asked afterwards, the stream is that one or a newer one (which would have ended the
    /// request by deleting its consumer), never an older one: so the messages of the request
    /// are never taken for a newer incarnation's.
    async fn incarnation(&self) -> Result<StreamIncarnation, BusError> {
        incarnation(&self.js, &self.names.command_stream).await
    }

    async fn open_request(&mut self, max: usize, wait: Duration) -> Result<(), BusError> {
        if self.request.is_none() {
            let batch = self
                .consumer()
                .await?
                .batch()
                .max_messages(max.max(REQUEST_AT_LEAST))
                .expires(wait.max(REQUEST_EXPIRES_AT_LEAST))
                .messages()
                .await
                .map_err(|e| BusError(format!("pull request failed: {e}")));
            let answer_by =
                tokio::time::Instant::now() + wait.max(REQUEST_EXPIRES_AT_LEAST) + REQUEST_GRACE;
            let opened = match batch {
                Ok(batch) => self.incarnation().await.map(|stream| (batch, stream)),
                Err(e) => Err(e),
            };
            match opened {
                Ok((batch, stream)) => {
                    let stream = match &self.stream {
                        Some(known) if **known == stream => known.clone(),
                        _ => {
                            tracing::info!(actor = "command_handler", stream = %stream,
                                "reading the command stream");
                            Arc::new(stream)
                        }
                    };
                    self.stream = Some(stream.clone());
                    self.request = Some((batch, answer_by, stream));
                }
                Err(e) => {
                    self.reset();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Appends every message already received on the open request, up to `max` in `out`.
    /// Returns how many commands the broker said were still pending at the last one.
    fn take_ready(&mut self, out: &mut Vec<InboundCommand>, max: usize, mut pending: u64) -> u64 {
        while out.len() < max {
            let Some((batch, _, stream)) = self.request.as_mut() else {
                break;
            };
            match batch.next().now_or_never() {
                Some(Some(Ok(message))) => pending = push(out, message, stream),
                Some(Some(Err(e))) => {
                    tracing::warn!(actor = "command_handler", error = %e, "pull request ended with an error");
                    self.request = None;
                }
                Some(None) => self.request = None,
                None => break,
            }
        }
        pending
    }
}

/// Appends a delivered message of `stream`; returns the broker's count of commands pending
/// behind it.
fn push(
    out: &mut Vec<InboundCommand>,
    message: jetstream::Message,
    stream: &Arc<StreamIncarnation>,
) -> u64 {
    let pending = message.info().map(|i| i.pending).unwrap_or(0);
    out.extend(inbound(message, stream.clone()));
    pending
}

#[async_trait]
impl CommandSource for JetStreamCommandSource {
    async fn next_batch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<InboundCommand>, BusError> {
        self.open_request(max, wait).await?;
        let mut out = Vec::new();
        let Some((batch, answer_by, stream)) = self.request.as_mut() else {
            return Ok(out);
        };
        // A request opened by an earlier call may live longer than this call's `wait`: waiting
        // on it only that long keeps gathered commands from waiting for its expiry.
        let answer_by = *answer_by;
        let first_wait = tokio::time::Instant::now() + wait;
        let mut pending =
            match tokio::time::timeout_at(first_wait.min(answer_by), batch.next()).await {
                Ok(Some(Ok(message))) => push(&mut out, message, stream),
                Ok(Some(Err(e))) => {
                    self.reset();
                    return Err(BusError(format!("pull request failed: {e}")));
                }
                Ok(None) => {
                    self.request = None;
                    return Ok(out);
                }
                Err(_) if tokio::time::Instant::now() < answer_by => return Ok(out),
                Err(_) => {
                    // The broker let the request lapse without a word: it may be frozen or
                    // gone. Look it up afresh after a backoff rather than sending request after
                    // request into a broker that does not answer (each would take commands to
                    // an inbox no longer read once it resumes, until their ack wait runs out).
                    self.reset();
                    return Err(BusError("pull request was never answered".into()));
                }
            };
        // Fill the batch while the broker says more are pending and the request has room:
        // under load every transaction then carries a full batch.
        loop {
            pending = self.take_ready(&mut out, max, pending);
            if out.len() >= max || pending == 0 {
                break;
            }
            let Some((batch, _, stream)) = self.request.as_mut() else {
                break;
            };
            match tokio::time::timeout(FILL_WAIT, batch.next()).await {
                Ok(Some(Ok(message))) => pending = push(&mut out, message, stream),
                Ok(Some(Err(_))) | Ok(None) => {
                    self.request = None;
                    break;
                }
                Err(_) => break,
            }
        }
        Ok(out)
    }

    async fn drain(&mut self) -> Result<Vec<InboundCommand>, BusError> {
        let mut out = Vec::new();
        while let Some((batch, answer_by, stream)) = self.request.as_mut() {
            match tokio::time::timeout_at(*answer_by, batch.next()).await {
                Ok(Some(Ok(message))) => {
                    push(&mut out, message, stream);
                }
                Ok(Some(Err(_))) | Ok(None) | Err(_) => self.request = None,
            }
        }
        Ok(out)
    }
}

/// Wraps a delivered message; a message without JetStream metadata cannot be ordered and is
/// terminated.
fn inbound(message: jetstream::Message, stream: Arc<StreamIncarnation>) -> Option<InboundCommand> {
    let (sequence, redelivered) = match message.info() {
        Ok(info) => (info.stream_sequence, info.delivered > 1),
        Err(e) => {
            tracing::error!(actor = "command_handler", subject = %message.subject, error = %e,
                "delivered message has no JetStream metadata; terminating it");
            tokio::spawn(async move {
                let _ = message.ack_with(AckKind::Term).await;
            });
            return None;
        }
    };
    let (message, acker) = message.split();
    Some(InboundCommand::new(
        message.subject.to_string(),
        message.payload,
        sequence,
        stream,
        redelivered,
        Arc::new(JetStreamDelivery(acker)),
    ))
}

struct JetStreamDelivery(jetstream::message::Acker);

#[async_trait]
impl Delivery for JetStreamDelivery {
    async fn ack(&self) -> Result<(), BusError> {
        self.0.ack().await.map_err(|e| BusError(e.to_string()))
    }

    async fn term(&self) -> Result<(), BusError> {
        self.0
            .ack_with(AckKind::Term)
            .await
            .map_err(|e| BusError(e.to_string()))
    }

    async fn nak(&self, delay: Duration) -> Result<(), BusError> {
        self.0
            .ack_with(AckKind::Nak((!delay.is_zero()).then_some(delay)))
            .await
            .map_err(|e| BusError(e.to_string()))
    }

    async fn progress(&self) -> Result<(), BusError> {
        self.0
            .ack_with(AckKind::Progress)
            .await
            .map_err(|e| BusError(e.to_string()))
    }
}

/// Hands each (re)started CommandHandler a fresh source on the shared connection.
pub struct JetStreamCommandSourceFactory {
    js: jetstream::Context,
    names: BrokerNames,
}

impl JetStreamCommandSourceFactory {
    pub fn new(js: jetstream::Context, names: BrokerNames) -> Self {
        Self { js, names }
    }
}

impl CommandSourceFactory for JetStreamCommandSourceFactory {
    fn create(&self) -> Box<dyn CommandSource> {
        Box::new(JetStreamCommandSource::new(
            self.js.clone(),
            self.names.clone(),
        ))
    }
}
