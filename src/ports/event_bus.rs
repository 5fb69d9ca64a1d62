//! `EventBus` port: how events leave the service. The JetStream adapter ships; the in-memory one
//! serves unit tests of the actors.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

/// An event ready to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingEvent {
    pub subject: String,
    /// Deduplication id the broker uses to drop a re-publish (`Nats-Msg-Id` on NATS).
    pub message_id: String,
    pub payload: Bytes,
}

/// Why an event was not stored by the broker.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct BusError(pub String);

#[async_trait]
pub trait EventBus: Send + Sync + 'static {
    /// Publishes every event and waits until the broker has stored each (or refused it).
    /// Returns one result per event, in order: only `Ok` means "durably published".
    async fn publish_all(&self, events: Vec<OutgoingEvent>) -> Vec<Result<(), BusError>>;
}

/// Keeps published events in memory; can be told to refuse publishes, as a broker outage would.
#[derive(Debug, Default)]
pub struct InMemoryEventBus {
    published: Mutex<Vec<OutgoingEvent>>,
    refusing: AtomicBool,
    offered: AtomicUsize,
}

impl InMemoryEventBus {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn published(&self) -> Vec<OutgoingEvent> {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Events offered to the bus so far, refused ones included.
    pub fn offered(&self) -> usize {
        self.offered.load(Ordering::SeqCst)
    }

    /// While `true`, every publish fails.
    pub fn set_refusing(&self, refusing: bool) {
        self.refusing.store(refusing, Ordering::SeqCst);
    }
}

#[async_trait]
impl EventBus for InMemoryEventBus {
    async fn publish_all(&self, events: Vec<OutgoingEvent>) -> Vec<Result<(), BusError>> {
        self.offered.fetch_add(events.len(), Ordering::SeqCst);
        if self.refusing.load(Ordering::SeqCst) {
            return events
                .iter()
                .map(|_| Err(BusError("broker unavailable".into())))
                .collect();
        }
        let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
        events
            .into_iter()
            .map(|event| {
                published.push(event);
                Ok(())
            })
            .collect()
    }
}
