//! Refused commands: each is reported on the rejection subject of its tenant, then terminated
//! on the broker so that it is never redelivered.

use std::time::SystemTime;

use futures::future::join_all;

use super::CommandHandlerArgs;
use crate::domain::Rejection;
use crate::domain::events::{rejection_message_id, timer_command_rejected};
use crate::ports::{InboundCommand, OutgoingEvent};

/// What a rejection event's `Nats-Msg-Id` is made of: the command's order, and the timer's
/// position for one timer of a `ScheduleTimers` refused alone.
pub(super) type RejectionId = (u64, Option<u32>);

/// Reports each refused command on the rejection subject, then terminates it on the broker.
pub(super) async fn reject(
    args: &CommandHandlerArgs,
    rejected: Vec<(InboundCommand, Rejection, RejectionId)>,
) {
    let now = args.clock.now();
    let mut events = Vec::with_capacity(rejected.len());
    let mut spans = Vec::new();
    for (command, rejection, (order, item)) in &rejected {
        // Its event carries the command's process span on, when one is recorded.
        let span = command.process_span();
        let trace = span.carried(command.trace.as_ref());
        if crate::telemetry::spans::enabled() {
            spans.push((span, rejection.kind.as_str(), rejection.reason.clone()));
        }
        tracing::warn!(actor = "command_handler", tenant_id = %rejection.tenant_id,
            subject = %command.subject, sequence = command.sequence, reason = %rejection.reason,
            "command rejected");
        crate::telemetry::record_rejected(&rejection.tenant_id, rejection.kind);
        let envelope = timer_command_rejected(
            &rejection.tenant_id,
            &rejection.reason,
            &command.subject,
            &command.payload,
            now,
        );
        match serde_json::to_vec(&envelope) {
            Ok(payload) => events.push(OutgoingEvent {
                subject: args.subjects.rejected(&rejection.tenant_id),
                message_id: rejection_message_id(*order, *item),
                payload: payload.into(),
                trace,
            }),
            Err(e) => tracing::error!(actor = "command_handler", error = %e,
                "cannot encode a rejection event"),
        }
    }
    for result in args.bus.publish_all(events).await {
        if let Err(e) = result.map(|_| ()) {
            tracing::error!(actor = "command_handler", error = %e,
                "rejection event not published; the rejection stays in this log only");
        }
    }
    let count = rejected.len() as u64;
    join_all(rejected.into_iter().map(|(command, _, _)| command.term())).await;
    let terminated = SystemTime::now();
    for (span, kind, reason) in spans {
        span.end(terminated, Some((kind, &reason)));
    }
    metrics::counter!(crate::telemetry::COMMANDS_RECEIVED, "outcome" => "rejected")
        .increment(count);
}
