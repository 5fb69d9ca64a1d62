//! `EventBus` port: how events leave the service. The JetStream adapter ships; an in-memory
//! one for the actors' tests lives with the tests (`tests/common/doubles.rs`).

use async_trait::async_trait;
use bytes::Bytes;

use crate::domain::TraceContext;

/// An event ready to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingEvent {
    pub subject: String,
    /// Deduplication id the broker uses to drop a re-publish (`Nats-Msg-Id` on NATS).
    pub message_id: String,
    pub payload: Bytes,
    /// The trace context the event carries on (`traceparent`, `tracestate` headers).
    pub trace: Option<TraceContext>,
}

/// Why an event was not stored by the broker.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct BusError(pub String);

/// What the broker made of an event it acknowledged: either way the event is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Stored by this publish.
    New,
    /// Already stored by an earlier publish with the same message id (a re-publish after a
    /// mark that failed, or another daemon's publish of the same firing): dropped as such.
    Duplicate,
}

/// The outcome of one event's publish: only `Ok` means "durably published".
pub type Published = Result<Stored, BusError>;

#[async_trait]
pub trait EventBus: Send + Sync + 'static {
    /// Publishes every event and waits until the broker has stored each (or refused it).
    /// Returns one outcome per event, in order.
    async fn publish_all(&self, events: Vec<OutgoingEvent>) -> Vec<Published>;

    /// Whether the link to the broker is up as far as the client knows. An event handed over
    /// while it is down waits in the client and goes out as it was built once the link is
    /// back: a timer with `expireAfter` is not handed over then, so that whether it expired is
    /// decided when it can be published.
    fn link_up(&self) -> bool {
        true
    }
}
