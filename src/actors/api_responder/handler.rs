//! One API request, from its subject and body to its reply: routing by verb, the tenant scope,
//! and a cancel's place among the commands published before it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{ApiResponder, ApiResponderArgs};
use crate::actors::persistence::{CallError, PersistenceClient};
use crate::actors::supervisor::NamedActor;
use crate::domain::api::{
    ApiError, Verb, cancel_reply, get_reply, list_reply, parse_key_request, parse_list_request,
    parse_stats_request, stats_reply,
};
use crate::domain::command::{cancel_timer_command, generated_correlation_id};
use crate::domain::forecast::ForecastWindow;
use crate::domain::tenant::check_tenant_id;
use crate::domain::{Action, Command, StreamIncarnation, Subjects, command_order};
use crate::ports::{BusError, Clock, CommandPublisher, PublishError};
use crate::storage::StoreError;

/// How long a cancel waits for the commands published before it to be handled, so that its
/// outcome is the one of its place in the stream; past this (a long backlog, storage failing)
/// it is applied anyway.
const EARLIER_COMMANDS_WAIT: Duration = Duration::from_secs(2);

/// How long a client whose read ran too long is asked to wait before it tries again.
const TOO_LONG_RETRY: Duration = Duration::from_secs(1);

/// Everything one request needs; cheap to clone into each request's task.
#[derive(Clone)]
pub(super) struct Handler {
    pub(super) persistence: PersistenceClient,
    pub(super) publisher: Arc<dyn CommandPublisher>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) subjects: Subjects,
    /// The epochs of the command stream incarnations met (see `domain::order`).
    pub(super) epochs: Arc<std::sync::Mutex<HashMap<StreamIncarnation, u32>>>,
}

impl Handler {
    pub(super) fn new(args: &ApiResponderArgs) -> Self {
        Self {
            persistence: args.registry.persistence(),
            publisher: args.publisher.clone(),
            clock: args.clock.clone(),
            subjects: args.subjects.clone(),
            epochs: Arc::default(),
        }
    }

    /// Answers one request on `subject` (`<api prefix>.<verb>.<tenantId>`).
    pub(super) async fn handle(&self, subject: &str, body: &[u8]) -> Result<Vec<u8>, ApiError> {
        let (verb, tenant_id) = self.route(subject)?;
        let storage = |e: CallError| match e {
            CallError::Store(StoreError::TooLong(limit)) => ApiError::unavailable(
                format!(
                    "the read ran longer than {} ms and was stopped: ask for less (a smaller \
                     limit, fewer forecastMinutes) or retry later",
                    limit.as_millis()
                ),
                TOO_LONG_RETRY,
            ),
            e => ApiError::internal(format!("storage unavailable: {e}")),
        };
        match verb {
            Verb::Get => {
                let service_call_id = parse_key_request(verb, body)?;
                match self
                    .persistence
                    .get(tenant_id, &service_call_id)
                    .await
                    .map_err(storage)?
                {
                    Some(timer) => get_reply(&timer),
                    None => Err(ApiError::not_found(format!(
                        "no timer {service_call_id:?} for tenant {tenant_id:?}"
                    ))),
                }
            }
            Verb::List => {
                let (filter, limit) = parse_list_request(body)?;
                let page = self
                    .persistence
                    .list(tenant_id, filter, limit)
                    .await
                    .map_err(storage)?;
                list_reply(&page)
            }
            Verb::Stats => {
                let forecast_minutes = parse_stats_request(body)?;
                let now = self.clock.now();
                let stats = self
                    .persistence
                    .stats(tenant_id, now)
                    .await
                    .map_err(storage)?;
                let forecast = match forecast_minutes {
                    None => None,
                    Some(minutes) => Some(
                        self.persistence
                            .forecast(tenant_id, ForecastWindow::new(now, minutes))
                            .await
                            .map_err(storage)?,
                    ),
                };
                stats_reply(&stats, forecast.as_deref())
            }
            Verb::Cancel => {
                let service_call_id = parse_key_request(verb, body)?;
                self.cancel(tenant_id, service_call_id).await
            }
        }
    }

    /// The tenant a request subject names, when it names a valid one.
    pub(super) fn tenant_of<'s>(&self, subject: &'s str) -> Option<&'s str> {
        self.route(subject).ok().map(|(_, tenant)| tenant)
    }

    /// The verb of a request subject, for metrics (`unknown` when it names none).
    pub(super) fn verb_of(&self, subject: &str) -> &'static str {
        self.route(subject)
            .map(|(verb, _)| verb.as_str())
            .unwrap_or("unknown")
    }

    /// The verb and tenant of a request subject; a malformed tenant is a bad request.
    fn route<'s>(&self, subject: &'s str) -> Result<(Verb, &'s str), ApiError> {
        let rest = subject
            .strip_prefix(self.subjects.api_prefix())
            .and_then(|rest| rest.strip_prefix('.'))
            .ok_or_else(|| ApiError::bad_request(format!("unknown API subject {subject:?}")))?;
        let (verb, tenant_id) = rest
            .split_once('.')
            .and_then(|(verb, tenant)| Some((Verb::parse(verb)?, tenant)))
            .ok_or_else(|| ApiError::bad_request(format!("unknown API subject {subject:?}")))?;
        check_tenant_id(tenant_id).map_err(ApiError::bad_request)?;
        Ok((verb, tenant_id))
    }

    /// Orders the cancel in the command stream, applies it with that order, and answers.
    async fn cancel(&self, tenant_id: &str, service_call_id: String) -> Result<Vec<u8>, ApiError> {
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
        };
        let (outcome, timer) = self.persistence.cancel(command).await.map_err(|e| {
            ApiError::internal(format!(
                "the CancelTimer is in the command stream (sequence {seq}) and is applied once \
                 storage works again, but it is not applied yet: {e}"
            ))
        })?;
        cancel_reply(outcome, timer.as_ref())
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

    /// Waits until every command before `seq` has been handled: a ScheduleTimer sent just
    /// before this cancel is then applied first, as its place in the stream says.
    async fn wait_for_earlier_commands(&self, seq: u64) {
        let deadline = tokio::time::Instant::now() + EARLIER_COMMANDS_WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.publisher.handled_through(seq))
                .await
                .unwrap_or_else(|_| Err(BusError("no answer before the deadline".into())))
            {
                Ok(floor) if floor + 1 >= seq => return,
                Ok(_) => {}
                // Asked again until the deadline: a consumer still being created (a daemon
                // starting) or a broker restarting answers in a moment.
                Err(e) => tracing::debug!(actor = ApiResponder::NAME, error = %e,
                    "cannot tell yet which commands are handled"),
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    actor = ApiResponder::NAME,
                    seq,
                    "earlier commands still pending; applying the cancel ahead of them"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
