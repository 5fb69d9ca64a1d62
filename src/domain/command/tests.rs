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

const LIMITS: CommandLimits = CommandLimits {
    max_bytes: 65_536,
    max_data_bytes: 16_384,
    max_data_depth: 64,
    max_data_number_chars: 100,
};

/// The limits of [`reason_of`] and the property test: a small message.
const SMALL: CommandLimits = CommandLimits {
    max_bytes: 1024,
    max_data_bytes: 512,
    max_data_depth: 64,
    max_data_number_chars: 100,
};

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
        LIMITS,
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
    let Action::Schedule {
        due_at,
        data,
        expires_at: None,
    } = cmd.action
    else {
        panic!("a schedule")
    };
    assert_eq!(
        super::super::timestamp::format_utc(due_at),
        "2026-11-22T10:00:00.000Z"
    );
    assert_eq!(data, None);
}

#[test]
fn a_schedule_carries_any_json_as_data_up_to_its_limit() {
    let with_data = |data: serde_json::Value| {
        let mut payload = valid_payload();
        payload["data"] = data;
        envelope(payload)
    };
    for data in [
        json!({"order": 42, "lines": [1, 2, 3]}),
        json!("text"),
        json!(7),
        json!([]),
        json!(false),
    ] {
        let cmd = parse(SUBJECT, &with_data(data.clone())).unwrap();
        let Action::Schedule {
            data: Some(kept), ..
        } = cmd.action
        else {
            panic!("data kept")
        };
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(kept.as_str()).unwrap(),
            data
        );
    }
    let Action::Schedule { data, .. } = parse(SUBJECT, &with_data(json!(null))).unwrap().action
    else {
        panic!("a schedule")
    };
    assert_eq!(data, None, "null is no data");

    // The limit counts the JSON text as written: exactly at it passes, a byte more does not.
    let at_limit = "x".repeat(LIMITS.max_data_bytes - 2);
    assert!(parse(SUBJECT, &with_data(json!(at_limit))).is_ok());
    let over = "x".repeat(LIMITS.max_data_bytes - 1);
    let rejection = parse(SUBJECT, &with_data(json!(over))).unwrap_err();
    assert_eq!(rejection.kind, RejectionKind::Invalid);
    assert_eq!(
        rejection.reason,
        "data is 16385 bytes, more than the 16384-byte limit (max_data_bytes)"
    );
    let none = CommandLimits {
        max_data_bytes: 0,
        ..LIMITS
    };
    let bytes = serde_json::to_vec(&with_data(json!(1))).unwrap();
    let rejection = parse_command(&Subjects::default(), SUBJECT, &bytes, none, ARRIVAL, || {
        "g".into()
    })
    .unwrap_err();
    assert!(
        rejection.reason.starts_with("data is 1 bytes"),
        "{rejection:?}"
    );
}

/// A ScheduleTimer whose `data` is the JSON text `data`, written out by hand: a value nested
/// thousands deep is text here, never a tree.
fn with_raw_data(data: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"01935c2e-7c1a-7b53-a8e2-4f0b9c1d2e3f","type":"ScheduleTimer","tenantId":"acme","timestampMs":1763798400000,"payload":{{"tenantId":"acme","serviceCallId":"sc-7","dueAt":"2026-11-22T10:00:00.000Z","data":{data}}}}}"#
    )
    .into_bytes()
}

#[test]
fn data_nested_too_deep_or_with_too_long_a_number_is_rejected_with_its_reason() {
    let parse_raw = |bytes: &[u8]| {
        parse_command(
            &Subjects::default(),
            SUBJECT,
            bytes,
            LIMITS,
            ARRIVAL,
            || "g".into(),
        )
    };
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert!(parse_raw(&with_raw_data(&nested(64))).is_ok());
    assert!(parse_raw(&with_raw_data(&format!("{{\"n\":{}}}", "9".repeat(100)))).is_ok());
    for (data, reason) in [
        (
            nested(65),
            "data nests 65 arrays or objects deep, more than the 64 allowed (max_data_depth)",
        ),
        (
            nested(8000),
            "data nests 8000 arrays or objects deep, more than the 64 allowed (max_data_depth)",
        ),
        (
            format!("[{}]", "9".repeat(101)),
            "data has a number of 101 characters, more than the 100 allowed (max_data_number_chars)",
        ),
        (
            format!("-1.{}e+5", "0".repeat(200)),
            "data has a number of 206 characters, more than the 100 allowed (max_data_number_chars)",
        ),
    ] {
        let rejection = parse_raw(&with_raw_data(&data)).unwrap_err();
        assert_eq!(
            (rejection.kind, rejection.reason.as_str()),
            (RejectionKind::Invalid, reason)
        );
    }
    // Long digit runs inside strings are text, not numbers.
    assert!(parse_raw(&with_raw_data(&format!("\"{}\"", "9".repeat(5000)))).is_ok());
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
    parse_command(&Subjects::default(), subject, bytes, SMALL, ARRIVAL, || {
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

fn cmd_due(cmd: &Command) -> chrono::DateTime<chrono::Utc> {
    match cmd.action {
        Action::Schedule { due_at, .. } => due_at,
        Action::Cancel => panic!("a schedule"),
    }
}

#[test]
fn the_commands_this_service_builds_pass_its_own_validation() {
    let now = chrono::DateTime::UNIX_EPOCH;
    let plain = ScheduleTimerPayload::new("acme", "sc-7", "2026-11-22T10:00:00Z");
    let schedule = schedule_timer_command(plain.clone(), now);
    let cmd = parse(SUBJECT, &serde_json::to_value(schedule).unwrap()).unwrap();
    assert!(matches!(cmd.action, Action::Schedule { data: None, .. }));
    let data: crate::domain::TimerData = serde_json::from_str(r#"{"order":42}"#).unwrap();
    let schedule = schedule_timer_command(
        ScheduleTimerPayload {
            data: Some(data.clone()),
            expire_after: Some("PT1M".into()),
            ..plain
        },
        now,
    );
    let cmd = parse(SUBJECT, &serde_json::to_value(schedule).unwrap()).unwrap();
    assert_eq!(
        cmd.action,
        Action::Schedule {
            due_at: cmd_due(&cmd),
            data: Some(data),
            expires_at: Some(cmd_due(&cmd) + chrono::Duration::minutes(1)),
        }
    );
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

proptest::proptest! {
    /// No input bytes make validation panic.
    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let _ = parse_command(&Subjects::default(), SUBJECT, &bytes, SMALL, ARRIVAL, || "g".into());
        let _ = parse_command(&Subjects::default(), "timer.cmd.cancel.acme", &bytes, SMALL, ARRIVAL, || "g".into());
    }
}
