//! The publisher that orders an API cancel in the command stream, and tells when the commands
//! before it are handled.

use async_nats::jetstream::{self, stream::RawMessageErrorKind};
use async_trait::async_trait;
use bytes::Bytes;

use super::partitions::Lines;
use super::streams::{BrokerNames, incarnation};
use crate::domain::StreamIncarnation;
use crate::ports::{BusError, CommandPublisher, PublishError};

/// Publishes commands to the command stream through JetStream and returns their sequence.
pub struct JetStreamCommandPublisher {
    js: jetstream::Context,
    lines: Lines,
    names: BrokerNames,
}

impl JetStreamCommandPublisher {
    pub fn new(js: jetstream::Context, names: BrokerNames) -> Self {
        Self {
            js,
            lines: Lines::new(&names),
            names,
        }
    }
}

#[async_trait]
impl CommandPublisher for JetStreamCommandPublisher {
    /// The incarnation is read before and after the publish: the same both times, it is the
    /// one that stored the command; otherwise the stream was created anew meanwhile and the
    /// command's place in the order cannot be told, which is an error.
    async fn publish(
        &self,
        subject: String,
        payload: Bytes,
    ) -> Result<(StreamIncarnation, u64), PublishError> {
        let before = incarnation(&self.js, &self.names.command_stream)
            .await
            .map_err(|e| PublishError::NotStored(e.0))?;
        let ack = self
            .js
            .publish(subject, payload)
            .await
            .map_err(|e| PublishError::NotStored(format!("publish failed: {e}")))?
            .await
            .map_err(|e| PublishError::NotStored(format!("no PubAck: {e}")))?;
        // Stored from here on: whatever fails now, the command is in the stream.
        let unordered = |reason: String| PublishError::Unordered {
            seq: ack.sequence,
            reason,
        };
        let after = incarnation(&self.js, &self.names.command_stream)
            .await
            .map_err(|e| unordered(e.0))?;
        if before != after {
            return Err(unordered(format!(
                "the command stream was created anew while the command was published ({before}, then {after})"
            )));
        }
        Ok((after, ack.sequence))
    }

    /// The ack floor of the consumer that reads command `seq` (the first one, or its line's:
    /// every command of its key is on that line). A command gone from the stream, or a
    /// consumer with nothing pending or unacknowledged, is handled through `seq`; so is a
    /// command none of whose tenant's `ScheduleTimer`s and `CancelTimer`s lie between the ack
    /// floor and `seq` (the work queue keeps only what is not acknowledged): other tenants'
    /// commands are not its to wait for, and an earlier `CancelTimers` under way (held
    /// unacknowledged until its last step, minutes for a million) keeps its place by the
    /// rows' order, not by holding every command after it.
    async fn handled_through(&self, seq: u64) -> Result<u64, BusError> {
        let stream = self
            .js
            .get_stream_no_info(&self.names.command_stream)
            .await
            .map_err(|e| BusError(format!("command stream unavailable: {e}")))?;
        let (consumer, awaited) = match stream.get_raw_message(seq).await {
            Ok(message) => (
                self.lines.consumer_of(&message.subject),
                self.lines.awaited_before(&message.subject),
            ),
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => return Ok(seq),
            Err(e) => return Err(BusError(format!("command {seq} unreadable: {e}"))),
        };
        // Getting the consumer fetches its info: one request to the broker, not two.
        let consumer: jetstream::consumer::PullConsumer = stream
            .get_consumer(&consumer)
            .await
            .map_err(|e| BusError(format!("command consumer {consumer} unavailable: {e}")))?;
        let info = consumer.cached_info();
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            return Ok(seq);
        }
        let floor = info.ack_floor.stream_sequence;
        let Some(subjects) = awaited.filter(|_| floor + 1 < seq) else {
            return Ok(floor);
        };
        for subject in subjects {
            // The tenant's first such command not acknowledged: `seq` or later when none of
            // them lies before it.
            match stream
                .get_first_raw_message_by_subject(&subject, floor + 1)
                .await
            {
                Ok(next) if next.sequence < seq => return Ok(next.sequence - 1),
                Ok(_) => {}
                Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => {}
                Err(e) => return Err(BusError(format!("{subject} unreadable: {e}"))),
            }
        }
        Ok(seq - 1)
    }
}
