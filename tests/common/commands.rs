//! Command envelopes as a client writes them.

use chrono::Utc;
use serde_json::{Value, json};

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
    json!({
        "id": uuid::Uuid::now_v7(),
        "type": "ScheduleTimer",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "correlationId": null,
        "causationId": null,
        "aggregateId": service_call_id,
        "payload": payload,
    })
}

/// A CancelTimer envelope, as a client writes it.
pub fn cancel_command(tenant: &str, service_call_id: &str) -> Value {
    json!({
        "id": uuid::Uuid::now_v7(),
        "type": "CancelTimer",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "correlationId": null,
        "causationId": null,
        "aggregateId": service_call_id,
        "payload": { "tenantId": tenant, "serviceCallId": service_call_id },
    })
}

/// A CancelTimers envelope of `tenant` with the filter `filter` (`{"all": true}`, a
/// correlation id, a range), as a client writes it.
pub fn cancel_timers_command(tenant: &str, filter: Value) -> Value {
    let mut payload = filter;
    payload["tenantId"] = json!(tenant);
    json!({
        "id": uuid::Uuid::now_v7(),
        "type": "CancelTimers",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "correlationId": null,
        "causationId": null,
        "aggregateId": null,
        "payload": payload,
    })
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
