//! The query and cancel API (docs/CONTRACT.md §6): requests, their validation, and replies. No I/O:
//! the ApiResponder actor calls these, the NATS micro service carries the bytes.

use std::fmt;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::forecast::MAX_FORECAST_MINUTES;
use super::ids::check_service_call_id;
use super::schema_types;
use super::timer::{Timer, TimerState};
use super::timestamp::{format_utc, parse_due_at, parse_stored};

/// Largest page `list` returns, and the default.
pub const MAX_LIST_LIMIT: usize = 1000;
pub const DEFAULT_LIST_LIMIT: usize = 100;
/// Most bytes of timers one `list` reply carries: a page of timers holding large `data` ends
/// sooner, with a `next` cursor, so that the reply stays well within the broker's default
/// largest message (1 MiB). A page always holds at least one timer.
pub const MAX_LIST_REPLY_BYTES: usize = 512 * 1024;

/// The endpoints, by the subject token `timer.api.<verb>.<tenantId>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Cancel,
    Stats,
    CancelMany,
}

impl Verb {
    pub const ALL: [Verb; 5] = [
        Verb::Get,
        Verb::List,
        Verb::Cancel,
        Verb::Stats,
        Verb::CancelMany,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Cancel => "cancel",
            Verb::Stats => "stats",
            Verb::CancelMany => "cancel-many",
        }
    }

    pub fn parse(token: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|v| v.as_str() == token)
    }
}

/// A refused or failed request: the micro protocol's error code and a reason, and for a
/// request refused for now (503) when to try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    pub message: String,
    /// For a 503: how long the client should wait before it asks again.
    pub retry_after: Option<std::time::Duration>,
}

impl ApiError {
    fn new(code: u16, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, message)
    }

    /// Refused for now (too many requests of the tenant at once, a read that ran too long):
    /// the same request may succeed `retry_after` later.
    pub fn unavailable(message: impl Into<String>, retry_after: std::time::Duration) -> Self {
        Self {
            retry_after: Some(retry_after),
            ..Self::new(503, message)
        }
    }

    /// The JSON body of an error reply: `{ "error": "…" }`, with `"retryAfterMs"` on a 503.
    pub fn body(&self) -> Vec<u8> {
        let body = ErrorReply {
            error: &self.message,
            retry_after_ms: self
                .retry_after
                .map(|after| u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// The body of an error reply; its code and reason are also in the headers
/// `Nats-Service-Error-Code` and `Nats-Service-Error`.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorReply<'a> {
    /// Why the request was refused or failed.
    error: &'a str,
    /// On a 503 only: how many milliseconds to wait before asking again.
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

/// Where a `list` page ends: the last timer's `(dueAt, serviceCallId)`. On the wire it is an
/// opaque string (`<dueAt>|<serviceCallId>`, `dueAt` empty for a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub due_at: Option<DateTime<Utc>>,
    pub service_call_id: String,
}

impl ListCursor {
    pub fn encode(&self) -> String {
        format!(
            "{}|{}",
            self.due_at.map(format_utc).unwrap_or_default(),
            self.service_call_id
        )
    }

    pub fn decode(text: &str) -> Result<Self, String> {
        let invalid = || format!("after {text:?} is not a cursor returned as next by list");
        let (due, service_call_id) = text.split_once('|').ok_or_else(invalid)?;
        let due_at = match due {
            "" => None,
            due => Some(parse_stored(due).map_err(|_| invalid())?),
        };
        check_service_call_id(service_call_id).map_err(|_| invalid())?;
        Ok(Self {
            due_at,
            service_call_id: service_call_id.to_owned(),
        })
    }
}

/// What a `list` request selects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    pub state: Option<TimerState>,
    pub correlation_id: Option<String>,
    /// Inclusive.
    pub due_from: Option<DateTime<Utc>>,
    /// Exclusive.
    pub due_to: Option<DateTime<Utc>>,
    pub after: Option<ListCursor>,
}

/// One page of `list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub timers: Vec<Timer>,
    /// Present when more timers follow: pass it back as `after`.
    pub next: Option<ListCursor>,
}

/// A tenant's pending timers at a glance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStats {
    /// The tenant's pending (`Scheduled`) timers.
    pub scheduled: u64,
    /// Pending timers whose `dueAt` passed more than a second ago: a stuck service shows here.
    pub overdue: u64,
    /// The earliest `dueAt` of the pending timers; null when there is none.
    #[serde(serialize_with = "optional_time")]
    #[schemars(with = "Option<schema_types::UtcInstant>")]
    pub next_due_at: Option<DateTime<Utc>>,
}

/// The request of `get` and of `cancel`: the key of the timer, in the tenant of the subject.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyRequest {
    #[schemars(with = "schema_types::ServiceCallId")]
    service_call_id: String,
}

/// The request of `list`: every field is optional, and an empty body counts as `{}`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListRequest {
    /// Only timers in this state.
    #[schemars(with = "Option<TimerState>")]
    state: Option<String>,
    /// Only the timers of this correlation id.
    correlation_id: Option<String>,
    /// Only timers due at or after this instant.
    #[schemars(with = "Option<schema_types::ClientInstant>")]
    due_from: Option<String>,
    /// Only timers due before this instant.
    #[schemars(with = "Option<schema_types::ClientInstant>")]
    due_to: Option<String>,
    /// The most timers in the page (default 100).
    #[schemars(range(min = 1, max = MAX_LIST_LIMIT))]
    limit: Option<i64>,
    /// The `next` of the previous page: this page starts after it.
    after: Option<String>,
}

/// The request of `stats`: `{}`, or a forecast of the minutes ahead too.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatsRequest {
    /// How many minutes the forecast covers, from the current one. Read as any JSON value, so
    /// that a wrong one gets a reason of its own.
    #[schemars(with = "Option<u32>", range(min = 1, max = MAX_FORECAST_MINUTES))]
    forecast_minutes: Option<serde_json::Value>,
}

/// Parses a JSON request body; an empty body counts as `{}`.
fn request<T: serde::de::DeserializeOwned>(verb: Verb, bytes: &[u8]) -> Result<T, ApiError> {
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        bytes
    };
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid {} request: {e}", verb.as_str())))
}

/// `get` and `cancel`: `{ "serviceCallId": "…" }`.
pub fn parse_key_request(verb: Verb, bytes: &[u8]) -> Result<String, ApiError> {
    let request: KeyRequest = request(verb, bytes)?;
    check_service_call_id(&request.service_call_id).map_err(ApiError::bad_request)?;
    Ok(request.service_call_id)
}

/// `list`: the filter and the page size.
pub fn parse_list_request(bytes: &[u8]) -> Result<(ListFilter, usize), ApiError> {
    let request: ListRequest = request(Verb::List, bytes)?;
    let limit = match request.limit {
        None => DEFAULT_LIST_LIMIT,
        Some(n) if (1..=MAX_LIST_LIMIT as i64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::bad_request(format!(
                "limit {n} is outside 1–{MAX_LIST_LIMIT}"
            )));
        }
    };
    let time = |field: &str, text: Option<String>| {
        text.map(|t| {
            parse_due_at(&t).map_err(|e| ApiError::bad_request(e.replacen("dueAt", field, 1)))
        })
        .transpose()
    };
    let filter = ListFilter {
        state: request
            .state
            .map(|s| s.parse().map_err(ApiError::bad_request))
            .transpose()?,
        correlation_id: request.correlation_id,
        due_from: time("dueFrom", request.due_from)?,
        due_to: time("dueTo", request.due_to)?,
        after: request
            .after
            .map(|a| ListCursor::decode(&a).map_err(ApiError::bad_request))
            .transpose()?,
    };
    Ok((filter, limit))
}

/// `stats`: `{}`, or `{ "forecastMinutes": n }` for a forecast of the next `n` minutes
/// (1 to [`MAX_FORECAST_MINUTES`]); returns `n`, if asked.
pub fn parse_stats_request(bytes: &[u8]) -> Result<Option<u32>, ApiError> {
    let request: StatsRequest = request(Verb::Stats, bytes)?;
    let Some(value) = request.forecast_minutes else {
        return Ok(None);
    };
    value
        .as_u64()
        .filter(|n| (1..=u64::from(MAX_FORECAST_MINUTES)).contains(n))
        .and_then(|n| u32::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "forecastMinutes must be a whole number from 1 to {MAX_FORECAST_MINUTES}, got {value}"
            ))
        })
}

fn optional_time<S: serde::Serializer>(
    time: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match time {
        Some(t) => serializer.serialize_str(&format_utc(*t)),
        None => serializer.serialize_none(),
    }
}

mod cancel_many;
pub use cancel_many::{
    CancelManyAsk, CancelManyReply, CancelManyRequest, cancel_many_reply, parse_cancel_many_request,
};
mod replies;
pub use replies::{
    CancelReply, GetReply, ListReply, StatsReply, TimerView, cancel_reply, get_reply, list_reply,
    stats_reply,
};

#[cfg(test)]
mod tests;
