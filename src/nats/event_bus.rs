//! `EventBus` over JetStream: every event of a batch is sent first (pipelined), then the
//! PubAcks are awaited. Only a PubAck means the broker stored the event.
//!
//! The whole batch, sending included, has one deadline ([`BATCH_DEADLINE`]): acknowledgements
//! lost in a broker restart never come, and a send can wait for room in the client's buffer
//! while the connection is down. Past the deadline every event whose PubAck was not seen yet
//! counts as failed, so the Poller retries it once JetStream serves again; one that was stored
//! after all is dropped by the broker as a duplicate (`Nats-Msg-Id`). A batch that waited out
//! its bound without a single PubAck is reported to the link's watch (`link`), which forces a
//! reconnection if no other PubAck came meanwhile either.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishAckFuture, message::PublishMessage};
use async_trait::async_trait;

use super::connection::JETSTREAM_TIMEOUT;
use super::link::LinkWatch;
use super::streams::{BrokerNames, ensure_event_stream};
use crate::domain::trace::{TRACEPARENT, TRACESTATE};
use crate::ports::{BusError, EventBus, OutgoingEvent, Published, Stored};

/// Longest one batch may take, from its first send to its last PubAck: the JetStream timeout,
/// plus a little for sending the batch.
pub const BATCH_DEADLINE: Duration = JETSTREAM_TIMEOUT.saturating_add(Duration::from_secs(1));

pub struct NatsEventBus {
    js: jetstream::Context,
    names: BrokerNames,
    /// Whether the event stream is known to exist; cleared on any failure so the next publish
    /// checks again (an operator may have deleted it, a fresh broker may lack it).
    stream_ready: AtomicBool,
    link: LinkWatch,
}

impl NatsEventBus {
    pub fn new(js: jetstream::Context, names: BrokerNames, link: LinkWatch) -> Self {
        Self {
            js,
            names,
            stream_ready: AtomicBool::new(false),
            link,
        }
    }

    async fn send_all(
        &self,
        events: Vec<OutgoingEvent>,
    ) -> Vec<Result<PublishAckFuture, BusError>> {
        let mut sent = Vec::with_capacity(events.len());
        for event in events {
            let mut message = PublishMessage::build()
                .payload(event.payload)
                .message_id(&event.message_id);
            if let Some(trace) = &event.trace {
                message = message.header(TRACEPARENT, trace.traceparent.as_str());
                if let Some(state) = &trace.tracestate {
                    message = message.header(TRACESTATE, state.as_str());
                }
            }
            sent.push(
                self.js
                    .send_publish(event.subject, message)
                    .await
                    .map_err(|e| BusError(format!("publish failed: {e}"))),
            );
        }
        sent
    }

    /// Makes sure the event stream exists, sends every event, then awaits the PubAcks in
    /// order, pushing each outcome to `results` as it comes (so what was acknowledged before a
    /// deadline cut this short is kept). In order, because by the time the first is awaited
    /// most have arrived: awaiting them all at once armed a timer for each, which cost firing
    /// throughput.
    async fn publish_unbounded(&self, events: Vec<OutgoingEvent>, results: &mut Vec<Published>) {
        if !self.stream_ready.load(Ordering::Acquire) {
            if let Err(e) = ensure_event_stream(&self.js, &self.names).await {
                let error = BusError(format!(
                    "event stream {} unavailable: {e}",
                    self.names.event_stream
                ));
                results.extend(events.iter().map(|_| Err(error.clone())));
                return;
            }
            self.stream_ready.store(true, Ordering::Release);
        }
        for sent in self.send_all(events).await {
            let acked = match sent {
                Ok(ack) => ack
                    .await
                    .inspect(|_| self.link.answered())
                    .map(|ack| match ack.duplicate {
                        true => Stored::Duplicate,
                        false => Stored::New,
                    })
                    .map_err(|e| BusError(format!("no PubAck: {e}"))),
                Err(e) => Err(e),
            };
            results.push(acked);
        }
    }
}

#[async_trait]
impl EventBus for NatsEventBus {
    async fn publish_all(&self, events: Vec<OutgoingEvent>) -> Vec<Published> {
        let count = events.len();
        let began = tokio::time::Instant::now();
        let mut results = Vec::with_capacity(count);
        let bounded =
            tokio::time::timeout(BATCH_DEADLINE, self.publish_unbounded(events, &mut results))
                .await;
        if bounded.is_err() {
            let error = BusError(format!(
                "no PubAck within {BATCH_DEADLINE:?} (the broker is away or restarting)"
            ));
            results.resize(count, Err(error));
        }
        if results.iter().any(Result::is_err) {
            self.stream_ready.store(false, Ordering::Release);
        }
        // Waited out without a single PubAck: no answer at all, as on a silent path (an error
        // the broker sends back comes sooner, and is an answer).
        if count > 0 && results.iter().all(Result::is_err) && began.elapsed() >= JETSTREAM_TIMEOUT {
            self.link.unanswered("PubAck", began);
        }
        results
    }

    fn link_up(&self) -> bool {
        self.link.is_up()
    }
}
