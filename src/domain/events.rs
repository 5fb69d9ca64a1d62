//! Events the service publishes: `DueTimeReached` for clients and `TimerCommandRejected` for
//! operators (CONTRACT.md §3).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::envelope::MessageEnvelope;
use super::timer::DueTimer;
use super::timestamp::format_utc;

pub const DUE_TIME_REACHED: &str = "DueTimeReached";
pub const TIMER_COMMAND_REJECTED: &str = "TimerCommandRejected";

/// Namespace of the deterministic `Nats-Msg-Id` values (UUID v5), fixed forever: changing it
/// would let a re-publish after an upgrade slip past the broker's duplicate window.
const MSG_ID_NAMESPACE: Uuid = Uuid::from_u128(0x5d1f_1b0e_7c2a_4f3e_9a41_2c6b_8e0d_4a17);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DueTimeReached {
    pub tenant_id: String,
    pub service_call_id: String,
    pub due_at: String,
    pub reached_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerCommandRejected {
    pub reason: String,
    pub subject: String,
    pub original: String,
}

/// The envelope announcing that `timer` fired at `reached_at`. Time-triggered, so no
/// causation id; the aggregate is the service call.
pub fn due_time_reached(
    timer: &DueTimer,
    reached_at: DateTime<Utc>,
) -> MessageEnvelope<DueTimeReached> {
    let mut envelope = MessageEnvelope::new(
        DUE_TIME_REACHED,
        &timer.tenant_id,
        reached_at,
        DueTimeReached {
            tenant_id: timer.tenant_id.clone(),
            service_call_id: timer.service_call_id.clone(),
            due_at: format_utc(timer.due_at),
            reached_at: format_utc(reached_at),
        },
    );
    envelope.correlation_id = Some(timer.correlation_id.clone());
    envelope.aggregate_id = Some(timer.service_call_id.clone());
    envelope
}

/// `Nats-Msg-Id` of one firing of one timer: the same for every re-publish of that firing, so
/// the broker drops duplicates inside its window; different after a reschedule.
pub fn due_message_id(timer: &DueTimer) -> String {
    let name = format!(
        "due\n{}\n{}\n{}",
        timer.tenant_id,
        timer.service_call_id,
        format_utc(timer.due_at)
    );
    Uuid::new_v5(&MSG_ID_NAMESPACE, name.as_bytes()).to_string()
}

/// `Nats-Msg-Id` of the rejection of the command stored at `command_seq`: a redelivered bad
/// command is reported once.
pub fn rejection_message_id(command_seq: u64) -> String {
    format!("rejected-{command_seq}")
}

/// The envelope reporting a refused command.
pub fn timer_command_rejected(
    tenant_id: &str,
    reason: &str,
    subject: &str,
    original: &[u8],
    at: DateTime<Utc>,
) -> MessageEnvelope<TimerCommandRejected> {
    MessageEnvelope::new(
        TIMER_COMMAND_REJECTED,
        tenant_id,
        at,
        TimerCommandRejected {
            reason: reason.to_owned(),
            subject: subject.to_owned(),
            original: String::from_utf8_lossy(original).into_owned(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn timer(due_ms: i64) -> DueTimer {
        DueTimer {
            tenant_id: "acme".into(),
            service_call_id: "sc-7".into(),
            correlation_id: "req-42".into(),
            due_at: Utc.timestamp_millis_opt(due_ms).unwrap(),
        }
    }

    #[test]
    fn due_time_reached_has_the_contract_shape() {
        let at = Utc.timestamp_millis_opt(1_763_805_600_004).unwrap();
        let json = serde_json::to_value(due_time_reached(&timer(1_763_805_600_000), at)).unwrap();
        assert_eq!(json["type"], "DueTimeReached");
        assert_eq!(json["tenantId"], "acme");
        assert_eq!(json["timestampMs"], 1_763_805_600_004i64);
        assert_eq!(json["correlationId"], "req-42");
        assert_eq!(json["aggregateId"], "sc-7");
        assert!(json["causationId"].is_null());
        assert_eq!(json["payload"]["dueAt"], "2025-11-22T10:00:00.000Z");
        assert_eq!(json["payload"]["reachedAt"], "2025-11-22T10:00:00.004Z");
        assert_eq!(json["payload"]["serviceCallId"], "sc-7");
        let id: Uuid = json["id"].as_str().unwrap().parse().unwrap();
        assert_eq!(id.get_version_num(), 7);
    }

    #[test]
    fn message_id_is_stable_per_firing_and_changes_with_due_at() {
        assert_eq!(due_message_id(&timer(1000)), due_message_id(&timer(1000)));
        assert_ne!(due_message_id(&timer(1000)), due_message_id(&timer(2000)));
    }

    #[test]
    fn rejection_keeps_the_original_bytes_lossily() {
        let at = Utc.timestamp_millis_opt(0).unwrap();
        let env = timer_command_rejected("_", "bad", "timer.cmd.x", &[b'a', 0xff], at);
        assert_eq!(env.payload.original, "a\u{fffd}");
        assert_eq!(env.message_type, "TimerCommandRejected");
    }
}
