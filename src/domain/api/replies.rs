//! The API's replies (docs/CONTRACT.md §6): a timer as the API shows it, and the body of each
//! verb's reply, written as JSON.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ApiError, ListCursor, ListPage, MAX_LIST_REPLY_BYTES, TenantStats};
use crate::domain::data::TimerData;
use crate::domain::forecast::ForecastMinute;
use crate::domain::schema_types;
use crate::domain::timer::{CancelOutcome, Timer, TimerState};
use crate::domain::timestamp::format_utc;

/// A timer as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimerView {
    #[schemars(with = "schema_types::TenantId")]
    pub tenant_id: String,
    #[schemars(with = "schema_types::ServiceCallId")]
    pub service_call_id: String,
    #[schemars(with = "schema_types::CorrelationId")]
    pub correlation_id: String,
    /// Null only for a tombstone: a key cancelled before any ScheduleTimer.
    #[schemars(with = "Option<schema_types::UtcInstant>")]
    pub due_at: Option<String>,
    #[schemars(with = "schema_types::UtcInstant")]
    pub registered_at: String,
    #[schemars(with = "Option<schema_types::UtcInstant>")]
    pub reached_at: Option<String>,
    #[schemars(with = "Option<schema_types::UtcInstant>")]
    pub cancelled_at: Option<String>,
    #[schemars(with = "TimerState")]
    pub state: String,
    /// The timer's `data`; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::Data>")]
    pub data: Option<TimerData>,
    /// `dueAt + expireAfter`: fired after it, the timer is `Expired` (it published
    /// TimerExpired). Absent when its ScheduleTimer set no `expireAfter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::UtcInstant>")]
    pub expires_at: Option<String>,
    /// The trace id (32 hex digits) of the `traceparent` its ScheduleTimer carried, to find the
    /// trace in a tracing backend. Absent when it carried none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

impl From<&Timer> for TimerView {
    fn from(timer: &Timer) -> Self {
        Self {
            tenant_id: timer.tenant_id.clone(),
            service_call_id: timer.service_call_id.clone(),
            correlation_id: timer.correlation_id.clone(),
            due_at: timer.due_at.map(format_utc),
            registered_at: format_utc(timer.registered_at),
            reached_at: timer.reached_at.map(format_utc),
            cancelled_at: timer.cancelled_at.map(format_utc),
            state: timer.state.as_str().to_owned(),
            data: timer.data.clone(),
            expires_at: timer.expires_at.map(format_utc),
            trace_id: timer.trace.as_ref().map(|t| t.trace_id().to_owned()),
        }
    }
}

/// The reply to `get`.
#[derive(Serialize, JsonSchema)]
pub struct GetReply {
    timer: TimerView,
}

/// The reply to `list`: one page of timers in `(dueAt, serviceCallId)` order.
#[derive(Serialize, JsonSchema)]
pub struct ListReply {
    timers: Vec<TimerView>,
    /// Present when more timers follow: send it back as `after` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// The reply to `cancel`, once the cancel is applied and committed.
#[derive(Serialize, JsonSchema)]
pub struct CancelReply {
    #[schemars(with = "CancelOutcome")]
    outcome: &'static str,
    /// The timer as the cancel left it; absent for `not_found`.
    #[serde(skip_serializing_if = "Option::is_none")]
    timer: Option<TimerView>,
}

fn encode(value: &impl Serialize) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|e| ApiError::internal(format!("cannot encode reply: {e}")))
}

pub fn get_reply(timer: &Timer) -> Result<Vec<u8>, ApiError> {
    encode(&GetReply {
        timer: timer.into(),
    })
}

/// The reply to `list`: `{"timers": […], "next"?: "<cursor>"}`, its timers written one by one
/// until [`MAX_LIST_REPLY_BYTES`]; the page is cut short there, its `next` then resuming after
/// the last timer written.
pub fn list_reply(page: &ListPage) -> Result<Vec<u8>, ApiError> {
    let failed = |e: serde_json::Error| ApiError::internal(format!("cannot encode reply: {e}"));
    let mut out = b"{\"timers\":[".to_vec();
    let mut next = page.next.clone();
    for (i, timer) in page.timers.iter().enumerate() {
        let start = out.len();
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &TimerView::from(timer)).map_err(failed)?;
        if i > 0 && out.len() > MAX_LIST_REPLY_BYTES {
            out.truncate(start);
            let last = &page.timers[i - 1];
            next = Some(ListCursor {
                due_at: last.due_at,
                service_call_id: last.service_call_id.clone(),
            });
            break;
        }
    }
    out.push(b']');
    if let Some(next) = next {
        out.extend_from_slice(b",\"next\":");
        serde_json::to_writer(&mut out, &next.encode()).map_err(failed)?;
    }
    out.push(b'}');
    Ok(out)
}

/// The reply to `cancel`; `not_found` carries no timer (the tombstone it left is not one).
pub fn cancel_reply(outcome: CancelOutcome, timer: Option<&Timer>) -> Result<Vec<u8>, ApiError> {
    encode(&CancelReply {
        outcome: outcome.as_str(),
        timer: timer
            .filter(|_| outcome != CancelOutcome::NotFound)
            .map(TimerView::from),
    })
}

/// The reply to `stats`.
#[derive(Serialize, JsonSchema)]
pub struct StatsReply<'a> {
    #[serde(flatten)]
    stats: &'a TenantStats,
    /// Present when the request asked for a forecast: one entry per minute, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    forecast: Option<&'a [ForecastMinute]>,
}

/// The reply to `stats`; `forecast` only when the request asked for one.
pub fn stats_reply(
    stats: &TenantStats,
    forecast: Option<&[ForecastMinute]>,
) -> Result<Vec<u8>, ApiError> {
    encode(&StatsReply { stats, forecast })
}
