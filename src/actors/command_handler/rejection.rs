//! Refused commands: each is reported on the rejection subject of its tenant, then terminated
//! on the broker so that it is never redelivered. A command whose report the broker did not
//! take is handed back instead, to be decided and reported again a moment later
//! (docs/CONTRACT.md §3): terminated unreported, its sender would never learn its fate.

use std::time::{Duration, SystemTime};

use futures::future::join_all;

use super::CommandHandlerArgs;
use crate::domain::events::{rejection_message_id, timer_command_rejected};
use crate::domain::{Rejection, RejectionKind};
use crate::ports::{InboundCommand, OutgoingEvent};

/// What a rejection event's `Nats-Msg-Id` is made of: the command's order, and the timer's
/// position for one timer of a `ScheduleTimers` refused alone.
pub(super) type RejectionId = (u64, Option<u32>);

/// How long a command whose rejection event was not published waits before the broker delivers
/// it again: long enough not to spin on a broker that refuses every publish, short enough that
/// the rejection follows soon after the path is back.
pub(super) const UNREPORTED_RETRY: Duration = Duration::from_secs(1);

/// The delivery at which a command whose rejection is still not published is terminated all
/// the same, the rejection left in the log (about a minute of a broker that takes deliveries
/// but not this publish: a permission missing for good). Without a bound such commands would
/// pile up unsettled on the consumer, up to its `max_ack_pending`, and hold every tenant's.
pub(super) const UNREPORTED_DELIVERIES: u64 = 10;

/// What becomes of a rejected command's delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settle {
    /// Never delivered again.
    Terminate,
    /// Delivered again after [`UNREPORTED_RETRY`], to be decided and reported again.
    Retry,
}

/// The settle of a command delivered `deliveries` times whose rejection was `reported`.
fn settle(reported: bool, deliveries: u64) -> Settle {
    match reported || deliveries >= UNREPORTED_DELIVERIES {
        true => Settle::Terminate,
        false => Settle::Retry,
    }
}

/// Reports each refused command on the rejection subject, then terminates it on the broker; one
/// whose report was not published is handed back for [`UNREPORTED_RETRY`] instead, until its
/// [`UNREPORTED_DELIVERIES`]th delivery.
pub(super) async fn reject(
    args: &CommandHandlerArgs,
    rejected: Vec<(InboundCommand, Rejection, RejectionId)>,
) {
    let now = args.clock.now();
    let mut events = Vec::with_capacity(rejected.len());
    // For each command, the position of its event in `events` (none when it cannot be encoded,
    // which no retry would change).
    let mut event_of = Vec::with_capacity(rejected.len());
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
        let envelope = timer_command_rejected(
            &rejection.tenant_id,
            &rejection.reason,
            &command.subject,
            &command.payload,
            now,
        );
        match serde_json::to_vec(&envelope) {
            Ok(payload) => {
                event_of.push(Some(events.len()));
                events.push(OutgoingEvent {
                    subject: args.subjects.rejected(&rejection.tenant_id),
                    message_id: rejection_message_id(*order, *item),
                    payload: payload.into(),
                    trace,
                });
            }
            Err(e) => {
                event_of.push(None);
                tracing::error!(actor = "command_handler", error = %e,
                    "cannot encode a rejection event; the rejection stays in this log only");
            }
        }
    }
    let mut unpublished = 0;
    let mut cause = None;
    let published: Vec<bool> = args
        .bus
        .publish_all(events)
        .await
        .into_iter()
        .map(|result| match result {
            Ok(_) => true,
            Err(e) => {
                unpublished += 1;
                cause.get_or_insert(e);
                false
            }
        })
        .collect();
    if let Some(cause) = cause {
        tracing::warn!(actor = "command_handler", error = %cause, unpublished,
            retry_in = ?UNREPORTED_RETRY,
            "rejection events not published; their commands are handed back to be rejected again");
    }
    let mut terminated = 0;
    let mut abandoned = 0;
    let mut settled = Vec::with_capacity(rejected.len());
    for ((command, rejection, _), event) in rejected.into_iter().zip(event_of) {
        // An event `publish_all` gave no answer for counts as not published.
        let reported = event.is_none_or(|i| published.get(i).copied().unwrap_or(false));
        let how = settle(reported, command.deliveries);
        if how == Settle::Terminate {
            // Counted once settled: a command handed back is counted when it comes to an end.
            crate::telemetry::record_rejected(&rejection.tenant_id, rejection.kind);
            if let RejectionKind::Quota(quota) = rejection.kind {
                super::quota::count(&args.quotas, &rejection.tenant_id, quota);
            }
        }
        terminated += u64::from(how == Settle::Terminate);
        abandoned += usize::from(how == Settle::Terminate && !reported);
        settled.push(async move {
            match how {
                Settle::Terminate => command.term().await,
                Settle::Retry => command.retry_after(UNREPORTED_RETRY).await,
            }
        });
    }
    if abandoned > 0 {
        tracing::error!(
            actor = "command_handler",
            commands = abandoned,
            deliveries = UNREPORTED_DELIVERIES,
            "rejection events still not published; their commands are terminated, the rejections \
             stay in this log only"
        );
    }
    join_all(settled).await;
    let ended = SystemTime::now();
    for (span, kind, reason) in spans {
        span.end(ended, Some((kind, &reason)));
    }
    metrics::counter!(crate::telemetry::COMMANDS_RECEIVED, "outcome" => "rejected")
        .increment(terminated);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_terminated_once_reported_or_past_its_deliveries_and_retried_otherwise() {
        assert_eq!(settle(true, 1), Settle::Terminate);
        assert_eq!(settle(false, 1), Settle::Retry);
        assert_eq!(settle(false, UNREPORTED_DELIVERIES - 1), Settle::Retry);
        assert_eq!(settle(false, UNREPORTED_DELIVERIES), Settle::Terminate);
    }
}
