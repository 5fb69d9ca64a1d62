//! One line of the command source: a durable pull consumer and its open pull request. A task
//! reads the request as the broker answers it, so that every message delivered is held by the
//! keep-alive from its arrival (`keepalive`), not only once the CommandHandler takes it: the
//! commands a request brings wait here while a commit is slow or the handler backs off.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{PullConsumer, pull::Batch};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::delivery::Delivered;
use super::keepalive::KeepAlive;
use crate::domain::StreamIncarnation;
use crate::ports::BusError;

/// Beyond a pull request's own expiry, how long to wait for the broker to close it before
/// giving up on the request (the broker may be gone).
pub const REQUEST_GRACE: Duration = Duration::from_secs(2);

/// What a line's open request yielded.
pub enum Next {
    Message(Box<Delivered>, Arc<StreamIncarnation>),
    /// The broker closed the request (its expiry, or all it asked for delivered).
    Ended,
    Failed(String),
}

/// What the reader took off a request, in order: each message as it arrived (`Some(Ok)`),
/// then how the request ended: closed by the broker (`None`) or failed.
type Read = Option<Result<Delivered, String>>;

struct Request {
    read: mpsc::UnboundedReceiver<Read>,
    /// When it was sent (about: once the broker had taken it).
    opened_at: Instant,
    /// By when the broker must have closed the request: its expiry plus [`REQUEST_GRACE`].
    answer_by: Instant,
    stream: Arc<StreamIncarnation>,
    /// Dropped with the request (its line forgotten, its answer overdue): the request's
    /// subscription goes with it, and what it still held waits for its ack wait.
    _reader: AbortOnDropHandle<()>,
}

pub struct Line {
    consumer: PullConsumer,
    request: Option<Request>,
    /// The broker's count of commands pending on this line behind the last one delivered.
    pub pending: u64,
    /// Holds every message this line's requests deliver until it is settled.
    keep_alive: KeepAlive,
}

impl Line {
    pub fn new(consumer: PullConsumer) -> Self {
        Self {
            consumer,
            request: None,
            pending: 0,
            keep_alive: KeepAlive::start(),
        }
    }

    pub fn is_open(&self) -> bool {
        self.request.is_some()
    }

    pub fn answer_by(&self) -> Option<Instant> {
        self.request.as_ref().map(|r| r.answer_by)
    }

    pub fn opened_at(&self) -> Option<Instant> {
        self.request.as_ref().map(|r| r.opened_at)
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
        let (sender, read) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_request(batch, self.keep_alive.clone(), sender));
        let now = Instant::now();
        self.request = Some(Request {
            read,
            opened_at: now,
            answer_by: now + expires + REQUEST_GRACE,
            stream,
            _reader: AbortOnDropHandle::new(reader),
        });
    }

    /// What the open request has already received, if anything.
    pub fn ready(&mut self) -> Option<Next> {
        let request = self.request.as_mut()?;
        let next = match request.read.try_recv() {
            Ok(read) => read,
            Err(mpsc::error::TryRecvError::Empty) => return None,
            Err(mpsc::error::TryRecvError::Disconnected) => None,
        };
        Some(self.settle(next))
    }

    /// Waits for what the open request yields next; never returns without one.
    pub async fn next(&mut self) -> Next {
        let Some(request) = self.request.as_mut() else {
            return std::future::pending().await;
        };
        let next = request.read.recv().await.flatten();
        self.settle(next)
    }

    fn settle(&mut self, next: Read) -> Next {
        match (next, self.request.as_ref()) {
            (Some(Ok(delivered)), Some(request)) => {
                self.pending = delivered.pending;
                Next::Message(Box::new(delivered), request.stream.clone())
            }
            (Some(Err(e)), _) => {
                self.request = None;
                Next::Failed(e)
            }
            _ => {
                self.request = None;
                Next::Ended
            }
        }
    }

    /// Takes what the open request still delivers until the broker closes it or its answer is
    /// overdue, so a graceful stop leaves nothing it was sent to wait for redelivery.
    pub async fn drain(&mut self) -> Vec<(Delivered, Arc<StreamIncarnation>)> {
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

/// Reads a request as the broker answers it, holding each message in `keep_alive` as it
/// arrives, until the request ends or its line stops listening.
async fn read_request(mut batch: Batch, keep_alive: KeepAlive, out: mpsc::UnboundedSender<Read>) {
    loop {
        let read = match batch.next().await {
            Some(Ok(message)) => match Delivered::take(message, &keep_alive) {
                Some(delivered) => Some(Ok(delivered)),
                None => continue,
            },
            Some(Err(e)) => Some(Err(e.to_string())),
            None => None,
        };
        let ended = !matches!(read, Some(Ok(_)));
        if out.send(read).is_err() || ended {
            return;
        }
    }
}
