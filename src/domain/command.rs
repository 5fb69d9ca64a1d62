//! `ScheduleTimer` and `CancelTimer`: parsing and validation of the commands the service
//! accepts (CONTRACT.md §3). Every way a command can be wrong ends in a [`Rejection`] with a
//! reason a person can act on; nothing here panics on input.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::envelope::MessageEnvelope;
use super::subjects::{CommandKind, Subjects, UNKNOWN_TENANT};
use super::timer::{Action, Command};
use super::timestamp::parse_due_at;

/// The envelope `type` of each command.
pub const SCHEDULE_TIMER: &str = "ScheduleTimer";
pub const CANCEL_TIMER: &str = "CancelTimer";
const MAX_TENANT_ID_CHARS: usize = 64;
const MAX_SERVICE_CALL_ID_CHARS: usize = 128;
/// Within what both backends store and index: PostgreSQL refuses NUL in text, and its btree
/// refuses keys of more than about 2.7 kB, either of which would block a whole batch.
const MAX_CORRELATION_ID_CHARS: usize = 256;

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

/// `CancelTimer` payload as it appears on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTimerPayload {
    pub tenant_id: String,
    pub service_call_id: String,
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

/// Checks a correlation id: 1–256 characters, none of them a control character (NUL included).
pub fn check_correlation_id(correlation_id: &str) -> Result<(), String> {
    let chars = correlation_id.chars().count();
    if chars == 0 || chars > MAX_CORRELATION_ID_CHARS {
        return Err(format!(
            "correlationId must be 1–{MAX_CORRELATION_ID_CHARS} characters, got {chars}"
        ));
    }
    if correlation_id.chars().any(char::is_control) {
        return Err(format!(
            "correlationId {correlation_id:?} contains a control character"
        ));
    }
    Ok(())
}

/// Where and when a command arrived: its JetStream stream sequence (the order of commands) and
/// the instant the service accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub seq: u64,
    pub at: DateTime<Utc>,
}

/// Parses and validates one command delivered on `subject`.
///
/// `max_bytes` bounds the message size; `new_correlation_id` is called only when the command
/// carries no correlation id (payload first, then envelope).
pub fn parse_command(
    subjects: &Subjects,
    subject: &str,
    bytes: &[u8],
    max_bytes: usize,
    arrival: Arrival,
    new_correlation_id: impl FnOnce() -> String,
) -> Result<Command, Rejection> {
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
    let Some((kind, tenant_id)) = subjects.command_of(subject) else {
        return Err(reject(format!(
            "unknown command subject {subject:?}: expected {} or {}",
            subjects.schedule("<tenantId>"),
            subjects.cancel("<tenantId>")
        )));
    };
    check_tenant_id(tenant_id).map_err(|e| reject(format!("subject {subject:?}: {e}")))?;

    // The payload stays raw until the type is known: one pass over the bytes, no JSON tree.
    let envelope: MessageEnvelope<Box<RawValue>> = serde_json::from_slice(bytes)
        .map_err(|e| reject(format!("not a valid MessageEnvelope: {e}")))?;
    if envelope.message_type != kind.message_type() {
        return Err(reject(format!(
            "unknown message type {:?} on {subject:?}: expected {:?}",
            envelope.message_type,
            kind.message_type()
        )));
    }
    if envelope.tenant_id != tenant_id {
        return Err(reject(format!(
            "tenant mismatch: envelope tenantId {:?} differs from subject tenant {tenant_id:?}",
            envelope.tenant_id
        )));
    }
    let payload_tenant_matches = |payload_tenant: &str| {
        if payload_tenant == tenant_id {
            Ok(())
        } else {
            Err(reject(format!(
                "tenant mismatch: payload tenantId {payload_tenant:?} differs from subject tenant {tenant_id:?}"
            )))
        }
    };
    let (service_call_id, payload_correlation, action) = match kind {
        CommandKind::Schedule => {
            let payload: ScheduleTimerPayload = serde_json::from_str(envelope.payload.get())
                .map_err(|e| reject(format!("invalid ScheduleTimer payload: {e}")))?;
            payload_tenant_matches(&payload.tenant_id)?;
            check_service_call_id(&payload.service_call_id).map_err(reject)?;
            let due_at = parse_due_at(&payload.due_at).map_err(reject)?;
            (
                payload.service_call_id,
                payload.correlation_id,
                Action::Schedule { due_at },
            )
        }
        CommandKind::Cancel => {
            let payload: CancelTimerPayload = serde_json::from_str(envelope.payload.get())
                .map_err(|e| reject(format!("invalid CancelTimer payload: {e}")))?;
            payload_tenant_matches(&payload.tenant_id)?;
            check_service_call_id(&payload.service_call_id).map_err(reject)?;
            (payload.service_call_id, None, Action::Cancel)
        }
    };
    // The one stored is checked: payload first, then envelope.
    let correlation_id = match (payload_correlation, envelope.correlation_id) {
        (Some(id), _) => {
            check_correlation_id(&id).map_err(|e| reject(format!("payload {e}")))?;
            id
        }
        (None, Some(id)) => {
            check_correlation_id(&id).map_err(|e| reject(format!("envelope {e}")))?;
            id
        }
        (None, None) => new_correlation_id(),
    };

    Ok(Command {
        tenant_id: tenant_id.to_owned(),
        service_call_id,
        correlation_id,
        action,
        seq: arrival.seq,
        received_at: arrival.at,
    })
}

/// A `ScheduleTimer` as a client sends it (the CLI does), stamped `now`.
pub fn schedule_timer_command(
    tenant_id: &str,
    service_call_id: &str,
    due_at: &str,
    correlation_id: Option<&str>,
    now: DateTime<Utc>,
) -> MessageEnvelope<ScheduleTimerPayload> {
    let mut envelope = MessageEnvelope::new(
        SCHEDULE_TIMER,
        tenant_id,
        now,
        ScheduleTimerPayload {
            tenant_id: tenant_id.to_owned(),
            service_call_id: service_call_id.to_owned(),
            due_at: due_at.to_owned(),
            correlation_id: correlation_id.map(str::to_owned),
        },
    );
    envelope.aggregate_id = Some(service_call_id.to_owned());
    envelope
}

/// A `CancelTimer` as a client sends it (the query API does, for its `cancel`), stamped `now`.
pub fn cancel_timer_command(
    tenant_id: &str,
    service_call_id: &str,
    correlation_id: &str,
    now: DateTime<Utc>,
) -> MessageEnvelope<CancelTimerPayload> {
    let mut envelope = MessageEnvelope::new(
        CANCEL_TIMER,
        tenant_id,
        now,
        CancelTimerPayload {
            tenant_id: tenant_id.to_owned(),
            service_call_id: service_call_id.to_owned(),
        },
    );
    envelope.correlation_id = Some(correlation_id.to_owned());
    envelope.aggregate_id = Some(service_call_id.to_owned());
    envelope
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

    const ARRIVAL: Arrival = Arrival {
        seq: 7,
        at: chrono::DateTime::UNIX_EPOCH,
    };

    fn parse(subject: &str, value: &serde_json::Value) -> Result<Command, Rejection> {
        let bytes = serde_json::to_vec(value).unwrap();
        parse_command(
            &Subjects::default(),
            subject,
            &bytes,
            65_536,
            ARRIVAL,
            || "generated".into(),
        )
    }

    #[test]
    fn accepts_the_contract_example() {
        let cmd = parse(SUBJECT, &envelope(valid_payload())).unwrap();
        assert_eq!(cmd.tenant_id, "acme");
        assert_eq!(cmd.service_call_id, "sc-7");
        assert_eq!(cmd.correlation_id, "req-42");
        assert_eq!(cmd.seq, 7);
        let Action::Schedule { due_at } = cmd.action else {
            panic!("a schedule")
        };
        assert_eq!(
            super::super::timestamp::format_utc(due_at),
            "2026-11-22T10:00:00.000Z"
        );
    }

    #[test]
    fn accepts_a_cancel_on_the_cancel_subject() {
        let mut e = envelope(json!({"tenantId": "acme", "serviceCallId": "sc-7"}));
        e["type"] = json!("CancelTimer");
        let cmd = parse("timer.cmd.cancel.acme", &e).unwrap();
        assert_eq!(cmd.action, Action::Cancel);
        assert_eq!(
            (cmd.service_call_id.as_str(), cmd.correlation_id.as_str()),
            ("sc-7", "env-corr")
        );
        e["type"] = json!("ScheduleTimer");
        let refused = parse("timer.cmd.cancel.acme", &e).unwrap_err();
        assert!(
            refused.reason.contains("expected \"CancelTimer\""),
            "{}",
            refused.reason
        );
        e["type"] = json!("CancelTimer");
        e["payload"]["tenantId"] = json!("globex");
        assert!(
            parse("timer.cmd.cancel.acme", &e)
                .unwrap_err()
                .reason
                .contains("tenant mismatch")
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

    #[test]
    fn correlation_ids_are_checked_where_they_come_from() {
        let long = "c".repeat(3000);
        for (place, value, reason) in [
            (
                "payload",
                json!("a\u{0}b"),
                "payload correlationId \"a\\0b\" contains a control",
            ),
            ("payload", json!("tab\there"), "control character"),
            (
                "payload",
                json!(long),
                "payload correlationId must be 1–256 characters, got 3000",
            ),
            ("payload", json!(""), "got 0"),
            ("envelope", json!("x\ny"), "envelope correlationId"),
            (
                "envelope",
                json!("c".repeat(257)),
                "envelope correlationId must be 1–256",
            ),
        ] {
            let mut e = envelope(valid_payload());
            if place == "payload" {
                e["payload"]["correlationId"] = value;
            } else {
                e["payload"]
                    .as_object_mut()
                    .unwrap()
                    .remove("correlationId");
                e["correlationId"] = value;
            }
            let rejection = parse(SUBJECT, &e).unwrap_err();
            assert!(rejection.reason.contains(reason), "{}", rejection.reason);
            assert_eq!(rejection.tenant_id, "acme");
        }
        // At the limit, in characters rather than bytes; an unused envelope id is not stored.
        let mut e = envelope(valid_payload());
        e["payload"]["correlationId"] = json!("é".repeat(256));
        e["correlationId"] = json!("never\u{0}stored");
        assert_eq!(parse(SUBJECT, &e).unwrap().correlation_id, "é".repeat(256));
        let mut cancel = envelope(json!({"tenantId": "acme", "serviceCallId": "sc-7"}));
        cancel["type"] = json!("CancelTimer");
        cancel["correlationId"] = json!("nul\u{0}");
        assert!(
            parse("timer.cmd.cancel.acme", &cancel)
                .unwrap_err()
                .reason
                .contains("envelope correlationId")
        );
    }

    #[test]
    fn a_rejection_goes_to_the_tenant_of_the_subject_whatever_the_message_names() {
        let mut e = envelope(valid_payload());
        e["tenantId"] = json!("globex");
        e["payload"]["tenantId"] = json!("globex");
        let rejection = parse(SUBJECT, &e).unwrap_err();
        assert_eq!(rejection.tenant_id, "acme");
        e["tenantId"] = json!("acme");
        let rejection = parse(SUBJECT, &e).unwrap_err();
        assert_eq!(rejection.tenant_id, "acme");
    }

    fn reason_of(subject: &str, bytes: &[u8]) -> Rejection {
        parse_command(&Subjects::default(), subject, bytes, 1024, ARRIVAL, || {
            "g".into()
        })
        .unwrap_err()
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
                "unknown message type",
            ),
            (
                "timer.cmd.pause.acme",
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
    fn the_commands_this_service_builds_pass_its_own_validation() {
        let now = chrono::DateTime::UNIX_EPOCH;
        let schedule = schedule_timer_command("acme", "sc-7", "2026-11-22T10:00:00Z", None, now);
        let cmd = parse(SUBJECT, &serde_json::to_value(schedule).unwrap()).unwrap();
        assert!(matches!(cmd.action, Action::Schedule { .. }));
        let cancel = cancel_timer_command("acme", "sc-7", "corr", now);
        let cmd = parse(
            "timer.cmd.cancel.acme",
            &serde_json::to_value(cancel).unwrap(),
        )
        .unwrap();
        assert_eq!(
            (cmd.action, cmd.correlation_id.as_str()),
            (Action::Cancel, "corr")
        );
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
            let _ = parse_command(&Subjects::default(), SUBJECT, &bytes, 1024, ARRIVAL, || "g".into());
            let _ = parse_command(&Subjects::default(), "timer.cmd.cancel.acme", &bytes, 1024, ARRIVAL, || "g".into());
        }
    }
}
