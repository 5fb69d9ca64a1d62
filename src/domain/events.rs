//! Events the service publishes: `DueTimeReached` for clients and `TimerCommandRejected` for
//! operators (docs/CONTRACT.md §3).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::data::TimerData;
use super::envelope::MessageEnvelope;
use super::schema_types;
use super::timer::DueTimer;
use super::timestamp::format_utc;

pub const DUE_TIME_REACHED: &str = "DueTimeReached";
pub const TIMER_EXPIRED: &str = "TimerExpired";
pub const TIMER_COMMAND_REJECTED: &str = "TimerCommandRejected";

/// Namespace of the deterministic `Nats-Msg-Id` values (UUID v5), fixed forever: changing it
/// would let a re-publish after an upgrade slip past the broker's duplicate window.
/// A rejection quotes at most this much of the command (in bytes of its UTF-8 text), so that
/// oversized commands do not make oversized events.
pub const MAX_ORIGINAL_BYTES: usize = 4096;

const MSG_ID_NAMESPACE: Uuid = Uuid::from_u128(0x5d1f_1b0e_7c2a_4f3e_9a41_2c6b_8e0d_4a17);

/// The payload of DueTimeReached: the timer that fired, its dueAt, and when it fired (never
/// before dueAt).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DueTimeReached {
    #[schemars(with = "schema_types::TenantId")]
    pub tenant_id: String,
    #[schemars(with = "schema_types::ServiceCallId")]
    pub service_call_id: String,
    #[schemars(with = "schema_types::UtcInstant")]
    pub due_at: String,
    #[schemars(with = "schema_types::UtcInstant")]
    pub reached_at: String,
    /// The timer's `data`, as its ScheduleTimer carried it; absent when it had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::Data>")]
    pub data: Option<TimerData>,
}

/// The payload of TimerExpired: a timer whose firing came after its `expireAfter` deadline
/// (docs/CONTRACT.md §5), published instead of its DueTimeReached, with the same fields and
/// its deadline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimerExpired {
    #[schemars(with = "schema_types::TenantId")]
    pub tenant_id: String,
    #[schemars(with = "schema_types::ServiceCallId")]
    pub service_call_id: String,
    #[schemars(with = "schema_types::UtcInstant")]
    pub due_at: String,
    /// When it fired: after `expiresAt`.
    #[schemars(with = "schema_types::UtcInstant")]
    pub reached_at: String,
    /// `dueAt + expireAfter`: the last instant it could have fired as DueTimeReached.
    #[schemars(with = "schema_types::UtcInstant")]
    pub expires_at: String,
    /// The timer's `data`, as its ScheduleTimer carried it; absent when it had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::Data>")]
    pub data: Option<TimerData>,
}

/// The payload of TimerCommandRejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimerCommandRejected {
    /// Why the command was refused.
    pub reason: String,
    /// The subject the command came on.
    pub subject: String,
    /// The command as UTF-8 (lossy): at most its first 4,096 bytes, cut at a character boundary.
    #[schemars(length(max = MAX_ORIGINAL_BYTES))]
    pub original: String,
    /// Present, and true, when `original` holds only the start of the command.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("const" = true))]
    pub truncated: bool,
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
            data: timer.data.clone(),
        },
    );
    envelope.correlation_id = Some(timer.correlation_id.clone());
    envelope.aggregate_id = Some(timer.service_call_id.clone());
    envelope
}

/// The event of `timer` fired at `reached_at`: its TimerExpired when that is past its
/// deadline, else its DueTimeReached; the event type, and its bytes.
pub fn firing_event(
    timer: &DueTimer,
    reached_at: DateTime<Utc>,
) -> serde_json::Result<(&'static str, Vec<u8>)> {
    match timer.expires_at {
        Some(deadline) if timer.expired_at(reached_at) => {
            serde_json::to_vec(&timer_expired(timer, reached_at, deadline))
                .map(|bytes| (TIMER_EXPIRED, bytes))
        }
        _ => serde_json::to_vec(&due_time_reached(timer, reached_at))
            .map(|bytes| (DUE_TIME_REACHED, bytes)),
    }
}

/// The envelope announcing that `timer` fired at `reached_at`, past its `expires_at`: the
/// envelope of its DueTimeReached, of another type.
pub fn timer_expired(
    timer: &DueTimer,
    reached_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
) -> MessageEnvelope<TimerExpired> {
    let mut envelope = MessageEnvelope::new(
        TIMER_EXPIRED,
        &timer.tenant_id,
        reached_at,
        TimerExpired {
            tenant_id: timer.tenant_id.clone(),
            service_call_id: timer.service_call_id.clone(),
            due_at: format_utc(timer.due_at),
            reached_at: format_utc(reached_at),
            expires_at: format_utc(expires_at),
            data: timer.data.clone(),
        },
    );
    envelope.correlation_id = Some(timer.correlation_id.clone());
    envelope.aggregate_id = Some(timer.service_call_id.clone());
    envelope
}

/// `Nats-Msg-Id` of one firing of one timer: the same for every re-publish of that firing, so
/// the broker drops duplicates inside its window; different after a reschedule. A TimerExpired
/// carries the id its DueTimeReached would have: within the window, a firing published again
/// is dropped whichever of the two it is, so a consumer sees one of them.
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
pub fn rejection_message_id(command_seq: u64, item: Option<u32>) -> String {
    match item {
        None => format!("rejected-{command_seq}"),
        Some(item) => format!("rejected-{command_seq}-{item}"),
    }
}

/// The first [`MAX_ORIGINAL_BYTES`] of `original` as UTF-8 (lossy), cut at a character
/// boundary, and whether anything was cut.
fn quoted(original: &[u8]) -> (String, bool) {
    // Each byte becomes at most three (U+FFFD), so this much input fills the quote.
    let input = &original[..original.len().min(3 * MAX_ORIGINAL_BYTES)];
    let mut text = String::from_utf8_lossy(input).into_owned();
    if text.len() <= MAX_ORIGINAL_BYTES && input.len() == original.len() {
        return (text, false);
    }
    let cut = (0..=MAX_ORIGINAL_BYTES.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let truncated = cut < text.len() || input.len() < original.len();
    text.truncate(cut);
    (text, truncated)
}

/// The envelope reporting a refused command.
pub fn timer_command_rejected(
    tenant_id: &str,
    reason: &str,
    subject: &str,
    original: &[u8],
    at: DateTime<Utc>,
) -> MessageEnvelope<TimerCommandRejected> {
    let (original, truncated) = quoted(original);
    MessageEnvelope::new(
        TIMER_COMMAND_REJECTED,
        tenant_id,
        at,
        TimerCommandRejected {
            reason: reason.to_owned(),
            subject: subject.to_owned(),
            original,
            truncated,
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
            data: None,
            trace: None,
            expires_at: None,
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
        assert!(json["payload"].get("data").is_none(), "no data, no field");
    }

    #[test]
    fn due_time_reached_echoes_the_data_as_written() {
        let mut with_data = timer(0);
        with_data.data =
            Some(TimerData::from_stored(r#"{"order": 42, "tags": ["a"]}"#.into()).unwrap());
        let at = Utc.timestamp_millis_opt(1).unwrap();
        let text = serde_json::to_string(&due_time_reached(&with_data, at)).unwrap();
        assert!(
            text.contains(r#""data":{"order": 42, "tags": ["a"]}"#),
            "{text}"
        );
        let back: MessageEnvelope<DueTimeReached> = serde_json::from_str(&text).unwrap();
        assert_eq!(back.payload.data, with_data.data);
    }

    #[test]
    fn a_firing_past_its_deadline_is_a_timer_expired_with_the_same_envelope() {
        let mut timer = timer(1_763_805_600_000);
        timer.data = Some(TimerData::from_stored(r#"{"order":42}"#.into()).unwrap());
        timer.expires_at = Some(timer.due_at + chrono::Duration::seconds(60));
        let in_time = timer.due_at + chrono::Duration::seconds(60);
        let (kind, bytes) = firing_event(&timer, in_time).unwrap();
        assert_eq!(kind, DUE_TIME_REACHED);
        let due: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let late = in_time + chrono::Duration::milliseconds(1);
        let (kind, bytes) = firing_event(&timer, late).unwrap();
        assert_eq!(kind, TIMER_EXPIRED);
        let expired: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(expired["type"], "TimerExpired");
        for field in ["tenantId", "correlationId", "aggregateId"] {
            assert_eq!(expired[field], due[field], "{field}");
        }
        assert_eq!(expired["payload"]["data"], serde_json::json!({"order": 42}));
        assert_eq!(expired["payload"]["dueAt"], "2025-11-22T10:00:00.000Z");
        assert_eq!(expired["payload"]["expiresAt"], "2025-11-22T10:01:00.000Z");
        assert_eq!(expired["payload"]["reachedAt"], "2025-11-22T10:01:00.001Z");
        timer.expires_at = None;
        let (kind, _) = firing_event(&timer, late + chrono::Duration::days(400)).unwrap();
        assert_eq!(kind, DUE_TIME_REACHED, "no expireAfter, no expiry");
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
        assert!(!env.payload.truncated);
        assert_eq!(env.message_type, "TimerCommandRejected");
        let json = serde_json::to_value(&env).unwrap();
        assert!(json["payload"].get("truncated").is_none(), "{json}");
    }

    #[test]
    fn a_large_original_is_cut_to_4_kib_at_a_character_boundary() {
        let at = Utc.timestamp_millis_opt(0).unwrap();
        let reject = |bytes: &[u8]| timer_command_rejected("acme", "r", "s", bytes, at).payload;

        let exact = vec![b'x'; MAX_ORIGINAL_BYTES];
        let kept = reject(&exact);
        assert_eq!(
            (kept.original.len(), kept.truncated),
            (MAX_ORIGINAL_BYTES, false)
        );

        let large = vec![b'x'; 70_000];
        let cut = reject(&large);
        assert_eq!(cut.original, "x".repeat(MAX_ORIGINAL_BYTES));
        assert!(cut.truncated);
        let json =
            serde_json::to_value(timer_command_rejected("acme", "r", "s", &large, at)).unwrap();
        assert_eq!(json["payload"]["truncated"], true);

        // "é" is two bytes: one byte before the limit, the next one straddles it.
        let mut accents = b"x".to_vec();
        accents.extend("é".repeat(3000).as_bytes());
        let cut = reject(&accents);
        assert_eq!(cut.original.len(), MAX_ORIGINAL_BYTES - 1);
        assert!(cut.original.ends_with('é') && cut.truncated);

        // Invalid bytes grow threefold as U+FFFD; the quote stays within the limit.
        let invalid = vec![0xff; 2000];
        let cut = reject(&invalid);
        assert!(cut.original.len() <= MAX_ORIGINAL_BYTES && cut.truncated);
        assert!(cut.original.chars().all(|c| c == '\u{fffd}'));
    }
}
