//! A client of the public contract (docs/CONTRACT.md §3, §6): schedules and cancels over the command
//! subjects, queries over the API. It uses nothing but NATS and the wire format, so it works
//! against any deployment; the `timer-service timers` CLI and the examples are built on it.

use std::time::Duration;

use async_nats::jetstream;
use async_nats::service::{NATS_SERVICE_ERROR, NATS_SERVICE_ERROR_CODE};
use chrono::Utc;
use serde::Deserialize;
use serde_json::Value;

use crate::domain::api::{TimerView, Verb};
use crate::domain::command::{
    cancel_timer_command, generated_correlation_id, schedule_timer_command,
};
use crate::domain::schedule_many::{MAX_TIMERS, schedule_timers_command};
use crate::domain::{ScheduleTimerPayload, ScheduleTimersPayload, Subjects, TimerSpec};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no timer-service answers on {0} (is it running, and may this user publish there?)")]
    NoService(String),
    #[error("no answer on {0} within the timeout")]
    Timeout(String),
    #[error("request on {subject} failed: {message}")]
    Request { subject: String, message: String },
    /// The service refused or failed the request (micro protocol error).
    #[error("{code}: {message}")]
    Api { code: u16, message: String },
    #[error("command not stored by the broker on {subject}: {message}")]
    Publish { subject: String, message: String },
    #[error("unexpected reply: {0}")]
    Decode(String),
}

impl ClientError {
    /// The API's error code, when the service answered with one.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClientError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// `stats` as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsView {
    pub scheduled: u64,
    pub overdue: u64,
    pub next_due_at: Option<String>,
}

/// `list` as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ListView {
    pub timers: Vec<TimerView>,
    pub next: Option<String>,
}

/// `cancel` as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CancelView {
    pub outcome: String,
    pub timer: Option<TimerView>,
}

/// `cancel-many` as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelManyView {
    pub count: u64,
    pub dry_run: bool,
}

pub struct TimerClient {
    nats: async_nats::Client,
    js: jetstream::Context,
    subjects: Subjects,
    timeout: Duration,
}

impl TimerClient {
    pub fn new(nats: async_nats::Client, subjects: Subjects) -> Self {
        Self::with_timeout(nats, subjects, Duration::from_secs(5))
    }

    /// A client whose requests and PubAcks give up after `timeout` (a denied publish is never
    /// answered: the timeout is how a client without permission finds out).
    pub fn with_timeout(nats: async_nats::Client, subjects: Subjects, timeout: Duration) -> Self {
        Self {
            js: jetstream::ContextBuilder::new()
                .timeout(timeout)
                .ack_timeout(timeout)
                .build(nats.clone()),
            nats,
            subjects,
            timeout,
        }
    }

    /// Publishes a `ScheduleTimer`; returns its stream sequence once the broker stored it.
    pub async fn schedule(
        &self,
        tenant_id: &str,
        service_call_id: &str,
        due_at: &str,
        correlation_id: Option<&str>,
    ) -> Result<u64, ClientError> {
        let mut payload = ScheduleTimerPayload::new(tenant_id, service_call_id, due_at);
        payload.correlation_id = correlation_id.map(str::to_owned);
        self.schedule_timer(payload).await
    }

    /// Publishes a `ScheduleTimer` of any shape (with `data`, `expireAfter`…); returns its
    /// stream sequence once the broker stored it.
    pub async fn schedule_timer(&self, payload: ScheduleTimerPayload) -> Result<u64, ClientError> {
        let subject = self.subjects.schedule(&payload.tenant_id);
        let command = schedule_timer_command(payload, Utc::now());
        self.publish(subject, &command).await
    }

    /// Publishes a `ScheduleTimers`: `timers` of one tenant in one message (1 to 1,000, each key
    /// once, the message within `max_command_bytes`; docs/CONTRACT.md §3); returns its stream
    /// sequence once the broker stored it. The service checks the message whole: one bad timer
    /// rejects all of it, with the timer's position in the reason. A count out of range is
    /// refused here, before anything is published.
    pub async fn schedule_timers(
        &self,
        tenant_id: &str,
        timers: Vec<TimerSpec>,
        correlation_id: Option<&str>,
    ) -> Result<u64, ClientError> {
        let subject = self.subjects.schedule_many(tenant_id);
        if timers.is_empty() || timers.len() > MAX_TIMERS {
            return Err(ClientError::Publish {
                subject,
                message: format!(
                    "{} timers: a ScheduleTimers holds 1 to {MAX_TIMERS}",
                    timers.len()
                ),
            });
        }
        let payload = ScheduleTimersPayload {
            tenant_id: tenant_id.to_owned(),
            timers,
        };
        let command = schedule_timers_command(payload, correlation_id, Utc::now());
        self.publish(subject, &command).await
    }

    /// Publishes a `CancelTimer` (not waiting for it to be applied, unlike [`Self::cancel`]).
    pub async fn cancel_command(
        &self,
        tenant_id: &str,
        service_call_id: &str,
    ) -> Result<u64, ClientError> {
        let command = cancel_timer_command(
            tenant_id,
            service_call_id,
            &generated_correlation_id(),
            Utc::now(),
        );
        self.publish(self.subjects.cancel(tenant_id), &command)
            .await
    }

    async fn publish(
        &self,
        subject: String,
        body: &impl serde::Serialize,
    ) -> Result<u64, ClientError> {
        let error = |message: String| ClientError::Publish {
            subject: subject.clone(),
            message,
        };
        let bytes = serde_json::to_vec(body).map_err(|e| error(e.to_string()))?;
        let ack = self
            .js
            .publish(subject.clone(), bytes.into())
            .await
            .map_err(|e| error(e.to_string()))?
            .await
            .map_err(|e| error(e.to_string()))?;
        Ok(ack.sequence)
    }

    /// Sends one API request and returns the JSON reply, or the service's error.
    pub async fn request(
        &self,
        verb: Verb,
        tenant_id: &str,
        body: &Value,
    ) -> Result<Value, ClientError> {
        let subject = self.subjects.api(verb.as_str(), tenant_id);
        let bytes = serde_json::to_vec(body).map_err(|e| ClientError::Decode(e.to_string()))?;
        let reply = tokio::time::timeout(
            self.timeout,
            self.nats.request(subject.clone(), bytes.into()),
        )
        .await
        .map_err(|_| ClientError::Timeout(subject.clone()))?
        .map_err(|e| match e.kind() {
            async_nats::RequestErrorKind::NoResponders => ClientError::NoService(subject.clone()),
            async_nats::RequestErrorKind::TimedOut => ClientError::Timeout(subject.clone()),
            _ => ClientError::Request {
                subject: subject.clone(),
                message: e.to_string(),
            },
        })?;
        if let Some(code) = reply
            .headers
            .as_ref()
            .and_then(|h| h.get(NATS_SERVICE_ERROR_CODE))
        {
            let message = reply
                .headers
                .as_ref()
                .and_then(|h| h.get(NATS_SERVICE_ERROR))
                .map(|m| m.to_string())
                .unwrap_or_default();
            return Err(ClientError::Api {
                code: code.as_str().parse().unwrap_or(500),
                message,
            });
        }
        serde_json::from_slice(&reply.payload).map_err(|e| ClientError::Decode(e.to_string()))
    }

    async fn typed<T: serde::de::DeserializeOwned>(
        &self,
        verb: Verb,
        tenant_id: &str,
        body: Value,
    ) -> Result<T, ClientError> {
        let reply = self.request(verb, tenant_id, &body).await?;
        serde_json::from_value(reply).map_err(|e| ClientError::Decode(e.to_string()))
    }

    pub async fn get(
        &self,
        tenant_id: &str,
        service_call_id: &str,
    ) -> Result<TimerView, ClientError> {
        #[derive(Deserialize)]
        struct Reply {
            timer: TimerView,
        }
        let body = serde_json::json!({ "serviceCallId": service_call_id });
        Ok(self.typed::<Reply>(Verb::Get, tenant_id, body).await?.timer)
    }

    /// One page of `list`; `query` is the request body (`state`, `correlationId`, `dueFrom`,
    /// `dueTo`, `limit`, `after`).
    pub async fn list(&self, tenant_id: &str, query: Value) -> Result<ListView, ClientError> {
        self.typed(Verb::List, tenant_id, query).await
    }

    /// Cancels through the API: answered once the cancel is applied and committed.
    pub async fn cancel(
        &self,
        tenant_id: &str,
        service_call_id: &str,
    ) -> Result<CancelView, ClientError> {
        let body = serde_json::json!({ "serviceCallId": service_call_id });
        self.typed(Verb::Cancel, tenant_id, body).await
    }

    /// Cancels many of a tenant's pending timers through the API; `request` is its body (a
    /// filter, or `all: true`, and `dryRun`). Answered once they are cancelled.
    pub async fn cancel_many(
        &self,
        tenant_id: &str,
        request: Value,
    ) -> Result<CancelManyView, ClientError> {
        self.typed(Verb::CancelMany, tenant_id, request).await
    }

    pub async fn stats(&self, tenant_id: &str) -> Result<StatsView, ClientError> {
        self.typed(Verb::Stats, tenant_id, serde_json::json!({}))
            .await
    }
}
