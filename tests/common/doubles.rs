//! Test doubles of the ports: an in-memory [`EventBus`] and a clock that moves only when told.
//!
//! They live with the tests rather than in the library behind a feature: only integration tests
//! use them, so the shipped crate carries no test code and no extra feature to build twice.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use timer_service::ports::{BusError, Clock, EventBus, OutgoingEvent, Published, Stored};

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
    /// Every event offered is kept; one whose message id was published before is answered as
    /// a duplicate, as the broker does within its window.
    async fn publish_all(&self, events: Vec<OutgoingEvent>) -> Vec<Published> {
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
                let seen = published.iter().any(|p| p.message_id == event.message_id);
                published.push(event);
                Ok(if seen { Stored::Duplicate } else { Stored::New })
            })
            .collect()
    }
}

/// A clock that only moves when told to, for deterministic tests of firing decisions.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }

    pub fn advance(&self, by: chrono::Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}
