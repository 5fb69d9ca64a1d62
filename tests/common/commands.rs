//! Command envelopes as a client writes them.

use chrono::Utc;
use serde_json::{Value, json};

/// The envelope of a command of `kind` around `payload`, with a fresh id and no correlation or
/// causation id.
fn envelope(kind: &str, tenant: &str, aggregate_id: Value, payload: Value) -> Value {
    json!({
        "id": uuid::Uuid::now_v7(),
        "type": kind,
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "correlationId": null,
        "causationId": null,
        "aggregateId": aggregate_id,
        "payload": payload,
    })
}

/// A ScheduleTimer envelope, as a client writes it.
pub fn schedule_command(
    tenant: &str,
    service_call_id: &str,
    due_at: &str,
    correlation_id: Option<&str>,
) -> Value {
    let mut payload = json!({
        "tenantId": tenant,
        "serviceCallId": service_call_id,
        "dueAt": due_at,
    });
    if let Some(c) = correlation_id {
        payload["correlationId"] = json!(c);
    }
    envelope("ScheduleTimer", tenant, json!(service_call_id), payload)
}

/// A CancelTimer envelope, as a client writes it.
pub fn cancel_command(tenant: &str, service_call_id: &str) -> Value {
    let payload = json!({ "tenantId": tenant, "serviceCallId": service_call_id });
    envelope("CancelTimer", tenant, json!(service_call_id), payload)
}

/// A CancelTimers envelope of `tenant` with the filter `filter` (`{"all": true}`, a
/// correlation id, a range), as a client writes it.
pub fn cancel_timers_command(tenant: &str, filter: Value) -> Value {
    let mut payload = filter;
    payload["tenantId"] = json!(tenant);
    envelope("CancelTimers", tenant, Value::Null, payload)
}

/// A ScheduleTimers envelope of `tenant` holding `timers` (each a ScheduleTimer's payload
/// without `tenantId`), as a client writes it.
pub fn schedule_timers_command(
    tenant: &str,
    timers: Vec<Value>,
    correlation_id: Option<&str>,
) -> Value {
    json!({
        "id": uuid::Uuid::now_v7(),
        "type": "ScheduleTimers",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "correlationId": correlation_id,
        "payload": { "tenantId": tenant, "timers": timers },
    })
}
