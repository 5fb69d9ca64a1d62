//! One line of the command source: a durable pull consumer and its open pull request.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::PullConsumer, consumer::pull::Batch};
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use crate::domain::StreamIncarnation;
use crate::ports::BusError;

/// Beyond a pull request's own expiry, how long to wait for the broker to close it before
/// giving up on the request (the broker may be gone).
pub const REQUEST_GRACE: Duration = Duration::from_secs(2);

/// What a line's open request yielded.
pub enum Next {
    Message(Box<jetstream::Message>, Arc<StreamIncarnation>),
    /// The broker closed the request (its expiry, or all it asked for delivered).
    Ended,
    Failed(String),
}

struct Request {
    batch: Batch,
    /// By when the broker must have closed the request: its expiry plus [`REQUEST_GRACE`].
    answer_by: Instant,
    stream: Arc<StreamIncarnation>,
}

pub struct Line {
    consumer: PullConsumer,
    request: Option<Request>,
    /// The broker's count of commands pending on this line behind the last one delivered.
    pub pending: u64,
}

impl Line {
    pub fn new(consumer: PullConsumer) -> Self {
        Self {
            consumer,
            request: None,
            pending: 0,
        }
    }

    pub fn is_open(&self) -> bool {
        self.request.is_some()
    }

    pub fn answer_by(&self) -> Option<Instant> {
        self.request.as_ref().map(|r| r.answer_by)
    }

    /// Sends a pull request for `size` commands expiring after `expires`; the caller names the
    /// stream incarnation that serves it once known ([`Line::opened`]).
    pub async fn request(&self, size: usize, expires: Duration) -> Result<Batch, BusError> {
        self.consumer
            .batch()
            .max_messages(size)
            .expires(expires)
            .messages()
            .await
            .map_err(|e| BusError(format!("pull request failed: {e}")))
    }

    pub fn opened(&mut self, batch: Batch, expires: Duration, stream: Arc<StreamIncarnation>) {
        self.request = Some(Request {
            batch,
            answer_by: Instant::now() + expires + REQUEST_GRACE,
            stream,
        });
    }

    /// What the open request has already received, if anything.
    pub fn ready(&mut self) -> Option<Next> {
        let request = self.request.as_mut()?;
        let next = request.batch.next().now_or_never()?;
        Some(self.settle(next))
    }

    /// Waits for what the open request yields next; never returns without one.
    pub async fn next(&mut self) -> Next {
        let Some(request) = self.request.as_mut() else {
            return std::future::pending().await;
        };
        let next = request.batch.next().await;
        self.settle(next)
    }

    fn settle(&mut self, next: Option<Result<jetstream::Message, impl std::fmt::Display>>) -> Next {
        match (next, self.request.as_ref()) {
            (Some(Ok(message)), Some(request)) => {
                self.pending = message.info().map(|i| i.pending).unwrap_or(0);
                Next::Message(Box::new(message), request.stream.clone())
            }
            (Some(Err(e)), _) => {
                self.request = None;
                Next::Failed(e.to_string())
            }
            _ => {
                self.request = None;
                Next::Ended
            }
        }
    }

    /// Takes what the open request still delivers until the broker closes it or its answer is
    /// overdue, so a graceful stop leaves nothing it was sent to wait for redelivery.
    pub async fn drain(&mut self) -> Vec<(jetstream::Message, Arc<StreamIncarnation>)> {
        let mut out = Vec::new();
        while let Some(answer_by) = self.answer_by() {
            match tokio::time::timeout_at(answer_by, self.next()).await {
                Ok(Next::Message(message, stream)) => out.push((*message, stream)),
                Ok(_) | Err(_) => self.request = None,
            }
        }
        out
    }
}
