//! Commands the command stream holds that no consumer reads (docs/CONTRACT.md §3): the stream
//! takes every subject under `timer.cmd.>`, but with lines (§9) its consumers filter on shapes,
//! and a five-token subject whose last token is no line (`timer.cmd.schedule.acme.extra`,
//! `.03`, `.999`), or a line whose consumer is gone, matches none of them. Such a command was
//! acknowledged by the broker, so it must be applied or rejected, never left in the stream.
//!
//! Finding them is cheap when there are none: one look at the stream and its consumers, whose
//! pending and unacknowledged counts add up to what the stream holds. Only when the stream holds
//! more are its subjects listed and matched against every consumer's filters. Each command
//! found is read by its sequence and handed on like a delivered one; settling it deletes it.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_trait::async_trait;
use futures::TryStreamExt;

use super::delivery::trace_context;
use super::partitions::Lines;
use super::streams::{BrokerNames, incarnation_of};
use crate::domain::StreamIncarnation;
use crate::ports::{BusError, Delivery, InboundCommand, UnreadCommands};

/// Whether NATS subject filter `filter` (`*` one token, `>` the rest) takes `subject`.
pub fn filter_takes(filter: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for part in filter.split('.') {
        match (part, tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (part, Some(token)) if part == token => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

/// The commands of one deployment's command stream that no consumer reads.
pub struct JetStreamStrays {
    js: jetstream::Context,
    names: BrokerNames,
    lines: Lines,
}

impl JetStreamStrays {
    pub fn new(js: jetstream::Context, names: BrokerNames) -> Self {
        Self {
            js,
            lines: Lines::new(&names),
            names,
        }
    }

    /// The filters of every consumer of the stream, or `None` when one reads everything (no
    /// filter): then nothing can be unread. Also whether the stream holds more than the
    /// consumers account for.
    async fn filters(
        &self,
        stream: &stream::Stream,
    ) -> Result<Option<(Vec<String>, bool)>, BusError> {
        let failed = |e: &dyn std::fmt::Display| {
            BusError(format!("consumers of {}: {e}", self.names.command_stream))
        };
        let mut consumers = stream.consumers();
        let mut filters = Vec::new();
        let mut accounted: u64 = 0;
        while let Some(info) = consumers.try_next().await.map_err(|e| failed(&e))? {
            let config = &info.config;
            if config.filter_subject.is_empty() && config.filter_subjects.is_empty() {
                return Ok(None);
            }
            filters.extend(
                std::iter::once(config.filter_subject.clone())
                    .filter(|f| !f.is_empty())
                    .chain(config.filter_subjects.iter().cloned()),
            );
            accounted += info.num_pending + info.num_ack_pending as u64;
        }
        let held = stream.cached_info().state.messages;
        Ok(Some((filters, held > accounted)))
    }
}

#[async_trait]
impl UnreadCommands for JetStreamStrays {
    async fn unread(&self, max: usize) -> Result<Vec<InboundCommand>, BusError> {
        let name = &self.names.command_stream;
        let failed = |e: &dyn std::fmt::Display| BusError(format!("stream {name}: {e}"));
        let stream = self.js.get_stream(name).await.map_err(|e| failed(&e))?;
        let Some((filters, more_held)) = self.filters(&stream).await? else {
            return Ok(Vec::new());
        };
        if !more_held {
            return Ok(Vec::new());
        }
        let incarnation = Arc::new(incarnation_of(&stream)?);
        let mut subjects = stream
            .info_with_subjects(self.names.subjects.command_wildcard())
            .await
            .map_err(|e| failed(&e))?;
        let mut unread_subjects = Vec::new();
        while let Some((subject, _count)) = subjects.try_next().await.map_err(|e| failed(&e))? {
            if !filters.iter().any(|f| filter_takes(f, &subject)) {
                unread_subjects.push(subject);
            }
        }
        let mut out = Vec::new();
        for subject in unread_subjects {
            let mut from = 1;
            while out.len() < max {
                let message = match stream
                    .get_first_raw_message_by_subject(&subject, from)
                    .await
                {
                    Ok(message) => message,
                    Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => break,
                    Err(e) => return Err(failed(&e)),
                };
                from = message.sequence + 1;
                let delivery = Arc::new(Removal {
                    js: self.js.clone(),
                    incarnation: incarnation.clone(),
                    sequence: message.sequence,
                });
                let trace = trace_context(Some(&message.headers));
                // A line's subject (`….<k>`) is that line's command: the line token taken out.
                let command = InboundCommand::new(
                    self.lines.client_subject(&message.subject),
                    message.payload,
                    message.sequence,
                    incarnation.clone(),
                    // Counted by the Sweeper, which hands it over (`actors::sweeper`).
                    1,
                    delivery,
                );
                out.push(command.with_trace(trace));
            }
        }
        if !out.is_empty() {
            tracing::warn!(stream = %name, commands = out.len(),
                "the command stream holds commands no consumer reads: applying or rejecting them");
        }
        Ok(out)
    }
}

/// Settling an unread command removes it from the stream: there is no consumer to acknowledge
/// it to. Handed back (`nak`), it stays, and is found again by a later look. A sequence names a
/// message only within its stream's incarnation: once the stream was deleted and created anew
/// the command went with the old one, and the same sequence is another client's command, which
/// is never deleted.
struct Removal {
    js: jetstream::Context,
    incarnation: Arc<StreamIncarnation>,
    sequence: u64,
}

impl Removal {
    async fn remove(&self) -> Result<(), BusError> {
        let name = &self.incarnation.name;
        let stream = self
            .js
            .get_stream(name)
            .await
            .map_err(|e| BusError(format!("stream {name} unavailable: {e}")))?;
        if incarnation_of(&stream)? != *self.incarnation {
            return Ok(());
        }
        match stream.delete_message(self.sequence).await {
            Ok(_) => Ok(()),
            // Removed already (by another daemon that found it too).
            Err(e)
                if matches!(e.kind(), stream::DeleteMessageErrorKind::JetStream(ref j)
                    if j.error_code() == jetstream::ErrorCode::NO_MESSAGE_FOUND) =>
            {
                Ok(())
            }
            Err(e) => Err(BusError(format!(
                "command {} not removed from the stream: {e}",
                self.sequence
            ))),
        }
    }
}

#[async_trait]
impl Delivery for Removal {
    async fn ack(&self) -> Result<(), BusError> {
        self.remove().await
    }

    async fn term(&self) -> Result<(), BusError> {
        self.remove().await
    }

    async fn nak(&self, _delay: Duration) -> Result<(), BusError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_take_subjects_as_nats_does() {
        for (filter, subject) in [
            ("timer.cmd.*.*.3", "timer.cmd.schedule.acme.3"),
            ("timer.cmd.*", "timer.cmd.x"),
            ("timer.cmd.*.*.*.>", "timer.cmd.a.b.c.d"),
            ("timer.cmd.*.*.*.>", "timer.cmd.a.b.c.d.e"),
            ("timer.cmd.>", "timer.cmd.schedule.acme"),
            ("timer.cmd.schedule.acme", "timer.cmd.schedule.acme"),
        ] {
            assert!(filter_takes(filter, subject), "{filter} {subject}");
        }
        for (filter, subject) in [
            ("timer.cmd.*.*.3", "timer.cmd.schedule.acme.03"),
            ("timer.cmd.*.*.3", "timer.cmd.schedule.acme.extra"),
            ("timer.cmd.*.*", "timer.cmd.schedule.acme.extra"),
            ("timer.cmd.*.*.*.>", "timer.cmd.schedule.acme.extra"),
            ("timer.cmd.*", "timer.cmd"),
            ("timer.cmd.>", "timer.cmd"),
            ("timer.cmd.schedule.acme", "timer.cmd.schedule.acme.1"),
        ] {
            assert!(!filter_takes(filter, subject), "{filter} {subject}");
        }
    }
}
