//! The API's requests that are commands (`cancel`, `cancel-many`): each is published to the
//! command stream first, so it takes its place among the commands there, waits for those
//! before it on its tenant's line, and is then applied with that place (docs/CONTRACT.md §6).

use std::time::Duration;

use bytes::Bytes;

use super::ApiResponder;
use super::handler::Handler;
use crate::actors::canceller::Job;
use crate::actors::persistence::CallError;
use crate::actors::supervisor::NamedActor;
use crate::domain::api::{ApiError, CancelManyAsk, cancel_many_reply, cancel_reply};
use crate::domain::command::{
    cancel_timer_command, cancel_timers_command, generated_correlation_id,
};
use crate::domain::{
    Action, CancelMany, CancelTimersPayload, Command, StreamIncarnation, command_order,
};
use crate::ports::PublishError;

/// How long a cancel waits for the commands published before it to be handled, so that its
/// outcome is the one of its place in the stream; past this (a long backlog, storage failing)
/// it is applied anyway.
const EARLIER_COMMANDS_WAIT: Duration = Duration::from_secs(2);

/// How long a `cancel-many` waits for its command to be done before it answers that it goes
/// on without it: inside a NATS client's usual request timeout of half a minute.
const CANCEL_MANY_WAIT: Duration = Duration::from_secs(25);

/// A `cancel-many` whose command is in the stream but whose outcome cannot be told: it is
/// applied from the stream all the same.
fn in_stream(seq: u64, why: String) -> ApiError {
    ApiError::internal(format!(
        "the CancelTimers is in the command stream (sequence {seq}) and is applied from there, \
         but its outcome cannot be told: {why}"
    ))
}

impl Handler {
    /// Orders the cancel in the command stream, applies it with that order, and answers.
    pub(super) async fn cancel(
        &self,
        tenant_id: &str,
        service_call_id: String,
    ) -> Result<Vec<u8>, ApiError> {
        let now = self.clock.now();
        let correlation_id = generated_correlation_id();
        let envelope = cancel_timer_command(tenant_id, &service_call_id, &correlation_id, now);
        let bytes = serde_json::to_vec(&envelope)
            .map_err(|e| ApiError::internal(format!("cannot encode the CancelTimer: {e}")))?;
        let not_ordered = |seq: u64, e: String| {
            ApiError::internal(format!(
                "the CancelTimer is in the command stream (sequence {seq}) and is applied from \
                 there, but its place in the order cannot be told now: {e}"
            ))
        };
        let (stream, seq) = match self
            .publisher
            .publish(self.subjects.cancel(tenant_id), Bytes::from(bytes))
            .await
        {
            Ok(published) => published,
            Err(PublishError::NotStored(e)) => {
                return Err(ApiError::internal(format!(
                    "cancel not accepted: the command stream did not store it ({e})"
                )));
            }
            Err(PublishError::Unordered { seq, reason }) => return Err(not_ordered(seq, reason)),
        };
        self.wait_for_earlier_commands(seq).await;
        let not_ordered = |e: String| not_ordered(seq, e);
        let epoch = self
            .epoch_of(stream)
            .await
            .map_err(|e| not_ordered(e.to_string()))?;
        let order = command_order(epoch, seq).map_err(not_ordered)?;
        let command = Command {
            tenant_id: tenant_id.to_owned(),
            service_call_id,
            correlation_id,
            action: Action::Cancel,
            seq: order,
            received_at: now,
            trace: None,
            item: None,
        };
        let (outcome, timer) = self.persistence.cancel(command).await.map_err(|e| {
            ApiError::internal(format!(
                "the CancelTimer is in the command stream (sequence {seq}) and is applied once \
                 storage works again, but it is not applied yet: {e}"
            ))
        })?;
        cancel_reply(outcome, timer.as_ref())
    }

    /// Orders the `CancelTimers` in the command stream, has the Canceller run it with that
    /// order (after the commands published before it), and answers with what it cancelled.
    pub(super) async fn cancel_many(
        &self,
        tenant_id: &str,
        ask: CancelManyAsk,
    ) -> Result<Vec<u8>, ApiError> {
        let now = self.clock.now();
        let payload = CancelTimersPayload {
            tenant_id: tenant_id.to_owned(),
            filter: ask.fields,
        };
        let envelope = cancel_timers_command(payload, &generated_correlation_id(), now);
        let bytes = serde_json::to_vec(&envelope)
            .map_err(|e| ApiError::internal(format!("cannot encode the CancelTimers: {e}")))?;
        let (stream, seq) = match self
            .publisher
            .publish(self.subjects.cancel_many(tenant_id), Bytes::from(bytes))
            .await
        {
            Ok(published) => published,
            Err(PublishError::NotStored(e)) => {
                return Err(ApiError::internal(format!(
                    "cancel-many not accepted: the command stream did not store it ({e})"
                )));
            }
            Err(PublishError::Unordered { seq, reason }) => {
                return Err(in_stream(
                    seq,
                    format!("its place cannot be told now: {reason}"),
                ));
            }
        };
        self.wait_for_earlier_commands(seq).await;
        let epoch = self
            .epoch_of(stream)
            .await
            .map_err(|e| in_stream(seq, format!("its place cannot be told now: {e}")))?;
        let order = command_order(epoch, seq).map_err(|e| in_stream(seq, e))?;
        let (reply, done) = ractor::concurrency::oneshot();
        let job = Job {
            stream_seq: seq,
            cancel: CancelMany {
                tenant_id: tenant_id.to_owned(),
                filter: ask.filter,
                seq: order,
                received_at: now,
            },
            delivery: None,
            reply: Some(reply.into()),
        };
        if !self.registry.cancel_many(job) {
            return Err(in_stream(seq, "the Canceller is not running now".into()));
        }
        match tokio::time::timeout(CANCEL_MANY_WAIT, done).await {
            Ok(Ok(Ok(count))) => cancel_many_reply(count, false),
            Ok(Ok(Err(e))) => Err(in_stream(seq, e)),
            Ok(Err(e)) => Err(in_stream(seq, e.to_string())),
            Err(_) => Err(in_stream(
                seq,
                format!(
                    "it was still running after {} s",
                    CANCEL_MANY_WAIT.as_secs()
                ),
            )),
        }
    }

    /// The epoch of a command stream incarnation: remembered after the first answer, since an
    /// incarnation's epoch never changes.
    async fn epoch_of(&self, stream: StreamIncarnation) -> Result<u32, CallError> {
        let known = self
            .epochs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&stream)
            .copied();
        if let Some(epoch) = known {
            return Ok(epoch);
        }
        let epoch = self.persistence.command_epoch(stream.clone()).await?;
        self.epochs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(stream, epoch);
        Ok(epoch)
    }

    /// Waits (at most [`EARLIER_COMMANDS_WAIT`]) until every command before `seq` on its line
    /// has been handled: a ScheduleTimer sent just before is then applied first, as its place
    /// in the stream says.
    async fn wait_for_earlier_commands(&self, seq: u64) {
        if !self
            .publisher
            .await_handled_before(seq, EARLIER_COMMANDS_WAIT)
            .await
        {
            tracing::warn!(
                actor = ApiResponder::NAME,
                seq,
                "earlier commands still pending; applying the cancel ahead of them"
            );
        }
    }
}
