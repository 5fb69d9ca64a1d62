//! One message the broker delivered on a pull request, taken off the client as it arrives: its
//! content, its JetStream metadata, and the handle that settles it, held by the keep-alive from
//! that moment until it is settled or dropped.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use async_trait::async_trait;

use super::keepalive::{InProgress, KeepAlive};
use super::partitions::Lines;
use crate::domain::trace::{TRACEPARENT, TRACESTATE};
use crate::domain::{StreamIncarnation, TraceContext};
use crate::ports::{BusError, Delivery, InboundCommand};

pub struct Delivered {
    /// The message without its acknowledgement handle.
    pub message: async_nats::Message,
    /// Its sequence in the command stream.
    pub sequence: u64,
    /// How many times the broker has delivered it, this time included.
    pub deliveries: u64,
    /// The broker's count of commands pending on its consumer behind it.
    pub pending: u64,
    pub delivery: Arc<JetStreamDelivery>,
}

impl Delivered {
    /// Takes a delivered message and holds it in `keep_alive`. A message without JetStream
    /// metadata cannot be ordered: it is terminated, and `None` returned.
    pub fn take(message: jetstream::Message, keep_alive: &KeepAlive) -> Option<Self> {
        let (sequence, deliveries, pending) = match message.info() {
            Ok(info) => (
                info.stream_sequence,
                u64::try_from(info.delivered).unwrap_or(1),
                info.pending,
            ),
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
        let delivery = Arc::new(JetStreamDelivery(acker));
        keep_alive.hold(&delivery);
        Some(Self {
            message,
            sequence,
            deliveries,
            pending,
            delivery,
        })
    }
}

impl Delivered {
    /// The command for the CommandHandler, from `stream`; the subject handed on is the one the
    /// client published on (the line token taken out).
    pub fn into_inbound(self, stream: Arc<StreamIncarnation>, subjects: &Lines) -> InboundCommand {
        let trace = trace_context(self.message.headers.as_ref());
        let command = InboundCommand::new(
            subjects.client_subject(&self.message.subject),
            self.message.payload,
            self.sequence,
            stream,
            self.deliveries,
            self.delivery,
        );
        command.with_trace(trace)
    }
}

/// The W3C trace context a command's headers carry. Header names are matched whatever their
/// case (HTTP carriers write `Traceparent`); the values of a header sent more than once are
/// joined, as W3C says for `tracestate`.
pub(super) fn trace_context(headers: Option<&async_nats::HeaderMap>) -> Option<TraceContext> {
    let header = |name: &str| {
        let values: Vec<&str> = headers?
            .iter()
            .filter(|(key, _)| AsRef::<str>::as_ref(*key).eq_ignore_ascii_case(name))
            .flat_map(|(_, values)| values.iter().map(|v| v.as_str()))
            .collect();
        (!values.is_empty()).then(|| values.join(","))
    };
    TraceContext::from_headers(
        header(TRACEPARENT).as_deref(),
        header(TRACESTATE).as_deref(),
    )
}

pub struct JetStreamDelivery(jetstream::message::Acker);

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
}

#[async_trait]
impl InProgress for JetStreamDelivery {
    async fn progress(&self) -> Result<(), BusError> {
        self.0
            .ack_with(AckKind::Progress)
            .await
            .map_err(|e| BusError(e.to_string()))
    }
}
