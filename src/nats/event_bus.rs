//! `EventBus` over JetStream: every event is sent first (pipelined), then every PubAck awaited.
//! Only a PubAck means the broker stored the event.

use std::sync::atomic::{AtomicBool, Ordering};

use async_nats::jetstream::{self, context::PublishAckFuture, message::PublishMessage};
use async_trait::async_trait;

use super::streams::{BrokerNames, ensure_event_stream};
use crate::ports::{BusError, EventBus, OutgoingEvent};

pub struct NatsEventBus {
    js: jetstream::Context,
    names: BrokerNames,
    /// Whether the event stream is known to exist; cleared on any failure so the next publish
    /// checks again (an operator may have deleted it, a fresh broker may lack it).
    stream_ready: AtomicBool,
}

impl NatsEventBus {
    pub fn new(js: jetstream::Context, names: BrokerNames) -> Self {
        Self {
            js,
            names,
            stream_ready: AtomicBool::new(false),
        }
    }

    async fn send_all(
        &self,
        events: Vec<OutgoingEvent>,
    ) -> Vec<Result<PublishAckFuture, BusError>> {
        let mut sent = Vec::with_capacity(events.len());
        for event in events {
            let message = PublishMessage::build()
                .payload(event.payload)
                .message_id(&event.message_id);
            sent.push(
                self.js
                    .send_publish(event.subject, message)
                    .await
                    .map_err(|e| BusError(format!("publish failed: {e}"))),
            );
        }
        sent
    }
}

#[async_trait]
impl EventBus for NatsEventBus {
    async fn publish_all(&self, events: Vec<OutgoingEvent>) -> Vec<Result<(), BusError>> {
        if !self.stream_ready.load(Ordering::Acquire) {
            if let Err(e) = ensure_event_stream(&self.js, &self.names).await {
                let error = BusError(format!(
                    "event stream {} unavailable: {e}",
                    self.names.event_stream
                ));
                return events.iter().map(|_| Err(error.clone())).collect();
            }
            self.stream_ready.store(true, Ordering::Release);
        }
        let mut results = Vec::with_capacity(events.len());
        for sent in self.send_all(events).await {
            let acked = match sent {
                Ok(ack) => ack
                    .await
                    .map(|_| ())
                    .map_err(|e| BusError(format!("no PubAck: {e}"))),
                Err(e) => Err(e),
            };
            results.push(acked);
        }
        if results.iter().any(Result::is_err) {
            self.stream_ready.store(false, Ordering::Release);
        }
        results
    }
}
