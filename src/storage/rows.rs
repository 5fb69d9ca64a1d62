//! Conversions between stored rows and the domain's types. Timestamps are stored as
//! fixed-width text (what the indexes order by) and parsed here, once; a row that does not
//! parse is reported as [`StoreError::CorruptRow`].

use chrono::{DateTime, Utc};
use sea_orm::QueryResult;

use super::StoreError;
use super::entity;
use crate::domain::expiry::is_expired;
use crate::domain::timestamp::parse_stored;
use crate::domain::{DueTimer, Timer, TimerData, TimerState, TraceContext};

/// The `data` column of a row, checked to be JSON.
fn data_of(
    tenant_id: &str,
    service_call_id: &str,
    text: Option<String>,
) -> Result<Option<TimerData>, StoreError> {
    text.map(TimerData::from_stored)
        .transpose()
        .map_err(|reason| StoreError::CorruptRow {
            tenant_id: tenant_id.to_owned(),
            service_call_id: service_call_id.to_owned(),
            reason,
        })
}

/// The `data` of a claimed row. The daemon stores only data it checked, so text that is not
/// JSON was written by hand or damaged on disk: that timer fires without it, logged, rather than
/// failing its claim, which would fail every claim after it (the row stays first in line).
fn claimed_data_of(
    tenant_id: &str,
    service_call_id: &str,
    text: Option<String>,
) -> Option<TimerData> {
    data_of(tenant_id, service_call_id, text).unwrap_or_else(|e| {
        tracing::error!(tenant_id, service_call_id, error = %e,
            "a claimed timer's data is not JSON; it fires without it");
        None
    })
}

pub(super) fn parse_time(field: &str, text: &str) -> Result<DateTime<Utc>, StoreError> {
    parse_stored(text).map_err(|e| StoreError::CorruptRow {
        tenant_id: "?".into(),
        service_call_id: "?".into(),
        reason: format!("{field} {text:?}: {e}"),
    })
}

/// A time column of a one-row query that may have found nothing.
pub(super) fn parse_optional_time(
    field: &str,
    text: Option<String>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    text.map(|text| parse_time(field, &text)).transpose()
}

pub(super) fn from_model(model: entity::Model) -> Result<Timer, StoreError> {
    let corrupt = |reason: String| StoreError::CorruptRow {
        tenant_id: model.tenant_id.clone(),
        service_call_id: model.service_call_id.clone(),
        reason,
    };
    let time = |field: &str, text: &str| {
        parse_stored(text).map_err(|e| corrupt(format!("{field} {text:?}: {e}")))
    };
    let optional =
        |field: &str, text: &Option<String>| text.as_deref().map(|t| time(field, t)).transpose();
    let reached_at = optional("reached_at", &model.reached_at)?;
    let expires_at = optional("expires_at", &model.expires_at)?;
    let stored: TimerState = model.state.parse().map_err(corrupt)?;
    Ok(Timer {
        due_at: optional("due_at", &model.due_at)?,
        registered_at: time("registered_at", &model.registered_at)?,
        reached_at,
        cancelled_at: optional("cancelled_at", &model.cancelled_at)?,
        state: match (stored, reached_at) {
            (TimerState::Reached, Some(at)) if is_expired(expires_at, at) => TimerState::Expired,
            _ => stored,
        },
        expires_at,
        command_seq: u64::try_from(model.command_seq).map_err(|e| corrupt(e.to_string()))?,
        cancelled_seq: model
            .cancelled_seq
            .map(|seq| u64::try_from(seq).map_err(|e| corrupt(e.to_string())))
            .transpose()?,
        data: data_of(&model.tenant_id, &model.service_call_id, model.data)?,
        trace: model
            .trace_context
            .as_deref()
            .and_then(TraceContext::decode),
        tenant_id: model.tenant_id,
        service_call_id: model.service_call_id,
        correlation_id: model.correlation_id,
    })
}

/// The columns a SQLite claim returns ([`due_timer`] reads them).
pub(super) const CLAIMED: &str =
    "tenant_id, service_call_id, correlation_id, due_at, data, trace_context, expires_at";

/// A claimed row as a claim statement returns it (`RETURNING` [`CLAIMED`]).
pub(super) fn due_timer(row: &QueryResult) -> Result<DueTimer, StoreError> {
    let tenant_id: String = row.try_get("", "tenant_id")?;
    due_timer_of(tenant_id, row)
}

/// [`due_timer`], its tenant already read.
pub(super) fn due_timer_of(tenant_id: String, row: &QueryResult) -> Result<DueTimer, StoreError> {
    let due_at: String = row.try_get("", "due_at")?;
    let service_call_id: String = row.try_get("", "service_call_id")?;
    let due_at = parse_stored(&due_at).map_err(|e| StoreError::CorruptRow {
        tenant_id: tenant_id.clone(),
        service_call_id: service_call_id.clone(),
        reason: format!("due_at {due_at:?}: {e}"),
    })?;
    let trace: Option<String> = row.try_get("", "trace_context")?;
    let expires_at: Option<String> = row.try_get("", "expires_at")?;
    Ok(DueTimer {
        data: claimed_data_of(&tenant_id, &service_call_id, row.try_get("", "data")?),
        trace: trace.as_deref().and_then(TraceContext::decode),
        expires_at: parse_optional_time("expires_at", expires_at)?,
        tenant_id,
        service_call_id,
        correlation_id: row.try_get("", "correlation_id")?,
        due_at,
    })
}
