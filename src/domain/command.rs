//! `ScheduleTimer`: parsing and validation of the one command the service accepts
//! (CONTRACT.md §3). Every way a command can be wrong ends in a [`Rejection`] with a reason a
//! person can act on; nothing here panics on input.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::envelope::MessageEnvelope;
use super::subjects::{Subjects, UNKNOWN_TENANT};
use super::timestamp::parse_due_at;

/// The envelope `type` of the command.
pub const SCHEDULE_TIMER: &str = "ScheduleTimer";
const MAX_TENANT_ID_CHARS: usize = 64;
const MAX_SERVICE_CALL_ID_CHARS: usize = 128;

/// `ScheduleTimer` payload as it appears on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleTimerPayload {
    pub tenant_id: String,
    pub service_call_id: String,
    pub due_at: String,
    #[serde(default)]
    pub correlation_id: Option<String>,
}

/// A command that passed every check: what the service stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleTimer {
    pub tenant_id: String,
    pub service_call_id: String,
    /// UTC, truncated to the millisecond.
    pub due_at: DateTime<Utc>,
    pub correlation_id: String,
}

/// Why a command was refused, and which tenant the refusal is reported to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The tenant read from the subject when it is well-formed; [`UNKNOWN_TENANT`] otherwise.
    pub tenant_id: String,
    pub reason: String,
}

/// Checks a tenant id: 1–64 characters of `[A-Za-z0-9_-]`.
pub fn check_tenant_id(tenant_id: &str) -> Result<(), String> {
    let ok_chars = tenant_id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if tenant_id.is_empty() || tenant_id.len() > MAX_TENANT_ID_CHARS || !ok_chars {
        return Err(format!(
            "tenantId {tenant_id:?} must be 1–{MAX_TENANT_ID_CHARS} characters of A-Z, a-z, 0-9, '_' or '-'"
        ));
    }
    Ok(())
}

/// Checks a service call id: 1–128 characters, none of them a control character.
pub fn check_service_call_id(service_call_id: &str) -> Result<(), String> {
    let chars = service_call_id.chars().count();
    if chars == 0 || chars > MAX_SERVICE_CALL_ID_CHARS {
        return Err(format!(
            "serviceCallId must be 1–{MAX_SERVICE_CALL_ID_CHARS} characters, got {chars}"
        ));
    }
    if service_call_id.chars().any(char::is_control) {
        return Err(format!(
            "serviceCallId {service_call_id:?} contains a control character"
        ));
    }
    Ok(())
}

/// Parses and validates one command delivered on `subject`.
///
/// `max_bytes` bounds the message size; `new_correlation_id` is called only when neither the
/// payload nor the envelope carries a correlation id.
pub fn parse_schedule_timer(
    subjects: &Subjects,
    subject: &str,
    bytes: &[u8],
    max_bytes: usize,
    new_correlation_id: impl FnOnce() -> String,
) -> Result<ScheduleTimer, Rejection> {
    let report_to = subjects
        .command_tenant(subject)
        .filter(|t| check_tenant_id(t).is_ok())
        .unwrap_or(UNKNOWN_TENANT)
        .to_owned();
    let reject = |reason: String| Rejection {
        tenant_id: report_to.clone(),
        reason,
    };

    if bytes.len() > max_bytes {
        return Err(reject(format!(
            "message is {} bytes, more than the {max_bytes}-byte limit",
            bytes.len()
        )));
    }
    let Some(tenant_id) = subjects.schedule_tenant(subject) else {
        return Err(reject(format!(
            "unknown command subject {subject:?}: expected {}",
            subjects.schedule("<tenantId>")
        )));
    };
    check_tenant_id(tenant_id).map_err(|e| reject(format!("subject {subject:?}: {e}")))?;

    // The payload stays raw until the type is known: one pass over the bytes, no JSON tree.
    let envelope: MessageEnvelope<Box<RawValue>> = serde_json::from_slice(bytes)
        .map_err(|e| reject(format!("not a valid MessageEnvelope: {e}")))?;
    if envelope.message_type != SCHEDULE_TIMER {
        return Err(reject(format!(
            "unknown message type {:?}: expected {SCHEDULE_TIMER:?}",
            envelope.message_type
        )));
    }
    if envelope.tenant_id != tenant_id {
        return Err(reject(format!(
            "tenant mismatch: envelope tenantId {:?} differs from subject tenant {tenant_id:?}",
            envelope.tenant_id
        )));
    }
    let payload: ScheduleTimerPayload = serde_json::from_str(envelope.payload.get())
        .map_err(|e| reject(format!("invalid ScheduleTimer payload: {e}")))?;
    if payload.tenant_id != tenant_id {
        return Err(reject(format!(
            "tenant mismatch: payload tenantId {:?} differs from subject tenant {tenant_id:?}",
            payload.tenant_id
        )));
    }
    check_service_call_id(&payload.service_call_id).map_err(reject)?;
    let due_at = parse_due_at(&payload.due_at).map_err(reject)?;
    let correlation_id = payload
        .correlation_id
        .or(envelope.correlation_id)
        .unwrap_or_else(new_correlation_id);

    Ok(ScheduleTimer {
        tenant_id: tenant_id.to_owned(),
        service_call_id: payload.service_call_id,
        due_at,
        correlation_id,
    })
}

/// A correlation id for a command that came without one: UUID v7, so it sorts by time.
pub fn generated_correlation_id() -> String {
    Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SUBJECT: &str = "timer.cmd.schedule.acme";

    fn envelope(payload: serde_json::Value) -> serde_json::Value {
        json!({
            "id": "01935c2e-7c1a-7b53-a8e2-4f0b9c1d2e3f",
            "type": "ScheduleTimer",
            "tenantId": "acme",
            "timestampMs": 1763798400000i64,
            "correlationId": "env-corr",
            "payload": payload,
        })
    }

    fn valid_payload() -> serde_json::Value {
        json!({"tenantId": "acme", "serviceCallId": "sc-7", "dueAt": "2026-11-22T10:00:00.000Z", "correlationId": "req-42"})
    }

    fn parse(subject: &str, value: &serde_json::Value) -> Result<ScheduleTimer, Rejection> {
        let bytes = serde_json::to_vec(value).unwrap();
        parse_schedule_timer(&Subjects::default(), subject, &bytes, 65_536, || {
            "generated".into()
        })
    }

    #[test]
    fn accepts_the_contract_example() {
        let cmd = parse(SUBJECT, &envelope(valid_payload())).unwrap();
        assert_eq!(cmd.tenant_id, "acme");
        assert_eq!(cmd.service_call_id, "sc-7");
        assert_eq!(cmd.correlation_id, "req-42");
        assert_eq!(
            super::super::timestamp::format_utc(cmd.due_at),
            "2026-11-22T10:00:00.000Z"
        );
    }

    #[test]
    fn correlation_id_falls_back_to_envelope_then_generated() {
        let mut p = valid_payload();
        p.as_object_mut().unwrap().remove("correlationId");
        assert_eq!(
            parse(SUBJECT, &envelope(p.clone())).unwrap().correlation_id,
            "env-corr"
        );
        let mut e = envelope(p);
        e.as_object_mut().unwrap().remove("correlationId");
        assert_eq!(parse(SUBJECT, &e).unwrap().correlation_id, "generated");
    }

    fn reason_of(subject: &str, bytes: &[u8]) -> Rejection {
        parse_schedule_timer(&Subjects::default(), subject, bytes, 1024, || "g".into()).unwrap_err()
    }

    #[test]
    fn rejects_every_kind_of_bad_input_with_a_reason() {
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut e = envelope(valid_payload());
            f(&mut e);
            serde_json::to_vec(&e).unwrap()
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                SUBJECT,
                b"{not json".to_vec(),
                "not a valid MessageEnvelope",
            ),
            (SUBJECT, vec![0xff, 0xfe], "not a valid MessageEnvelope"),
            (
                SUBJECT,
                with(&|e| e["type"] = json!("CancelTimer")),
                "unknown message type",
            ),
            (
                SUBJECT,
                with(&|e| {
                    e.as_object_mut().unwrap().remove("id");
                }),
                "missing field `id`",
            ),
            (
                SUBJECT,
                with(&|e| e["id"] = json!("nope")),
                "not a valid MessageEnvelope",
            ),
            (
                SUBJECT,
                with(&|e| e["tenantId"] = json!("other")),
                "tenant mismatch: envelope",
            ),
            (
                SUBJECT,
                with(&|e| e["payload"]["tenantId"] = json!("other")),
                "tenant mismatch: payload",
            ),
            (
                SUBJECT,
                with(&|e| {
                    e["payload"].as_object_mut().unwrap().remove("dueAt");
                }),
                "missing field `dueAt`",
            ),
            (
                SUBJECT,
                with(&|e| e["payload"]["dueAt"] = json!("tomorrow")),
                "RFC 3339",
            ),
            (
                SUBJECT,
                with(&|e| e["payload"]["dueAt"] = json!("2026-11-22T10:00:00")),
                "zone",
            ),
            (
                SUBJECT,
                with(&|e| e["payload"]["serviceCallId"] = json!("")),
                "serviceCallId",
            ),
            (
                SUBJECT,
                with(&|e| e["payload"]["serviceCallId"] = json!("x".repeat(129))),
                "serviceCallId",
            ),
            (
                SUBJECT,
                with(&|e| e["payload"]["serviceCallId"] = json!("a\nb")),
                "control character",
            ),
            (
                SUBJECT,
                with(&|e| e["payload"]["serviceCallId"] = json!(7)),
                "invalid ScheduleTimer payload",
            ),
            (
                "timer.cmd.cancel.acme",
                with(&|_| {}),
                "unknown command subject",
            ),
            (SUBJECT, vec![b' '; 2000], "byte limit"),
        ];
        for (subject, bytes, expected) in cases {
            let rejection = reason_of(subject, &bytes);
            assert!(
                rejection.reason.contains(expected),
                "expected {expected:?} in {:?}",
                rejection.reason
            );
            assert_eq!(rejection.tenant_id, "acme");
        }
    }

    #[test]
    fn rejection_goes_to_unknown_tenant_when_subject_tenant_is_unreadable() {
        let bytes = serde_json::to_vec(&envelope(valid_payload())).unwrap();
        let rejection = reason_of("timer.cmd.schedule.a+b", &bytes);
        assert_eq!(rejection.tenant_id, "_");
        assert!(
            rejection.reason.contains("tenantId"),
            "{}",
            rejection.reason
        );
    }

    #[test]
    fn tenant_id_rules() {
        assert!(check_tenant_id("acme_01-x").is_ok());
        assert!(check_tenant_id("").is_err());
        assert!(check_tenant_id(&"a".repeat(65)).is_err());
        assert!(check_tenant_id("a.b").is_err());
        assert!(check_tenant_id("ä").is_err());
    }

    proptest::proptest! {
        /// No input bytes make validation panic.
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = parse_schedule_timer(&Subjects::default(), SUBJECT, &bytes, 1024, || "g".into());
        }
    }
}
