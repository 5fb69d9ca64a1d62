//! The input schemas (commands, API requests) against the service's own checks: what one
//! accepts, so does the other.

use super::*;

/// The schema and the service agree on each command: what one accepts, so does the other.
/// (The schemas cannot say that the tenant is the same in subject, envelope and payload, nor
/// bound the year of dueAt or the size of the message: the prose of docs/CONTRACT.md does.)
#[test]
fn the_command_schemas_accept_what_the_service_accepts() {
    let long = |n: usize| "x".repeat(n);
    let schedule = |tenant: &str, id: &str, due: Value, corr: Value| {
        let mut value = command(
            SCHEDULE_TIMER,
            json!({ "tenantId": tenant, "serviceCallId": id, "dueAt": due }),
        );
        if !corr.is_null() {
            value["payload"]["correlationId"] = corr;
        }
        value["tenantId"] = json!(tenant);
        value
    };
    let z = json!("2026-11-22T10:00:00.000Z");
    let cases = [
        schedule("acme", "sc-7", z.clone(), json!("req-42")),
        schedule(
            "acme",
            "sc-7",
            json!("2026-11-22T11:00:00.123456+01:00"),
            Value::Null,
        ),
        schedule("a", &long(128), z.clone(), json!(long(256))),
        schedule(&long(64), "sc-7", z.clone(), Value::Null),
        schedule(&long(65), "sc-7", z.clone(), Value::Null),
        schedule("ac.me", "sc-7", z.clone(), Value::Null),
        schedule("acmé", "sc-7", z.clone(), Value::Null),
        schedule("acme", "", z.clone(), Value::Null),
        schedule("acme", &long(129), z.clone(), Value::Null),
        schedule("acme", "sc\n7", z.clone(), Value::Null),
        schedule("acme", "sc\u{85}7", z.clone(), Value::Null),
        schedule("acme", "sc-é-7", z.clone(), Value::Null),
        schedule("acme", "sc-7", json!("2026-11-22T10:00:00"), Value::Null),
        schedule("acme", "sc-7", json!("2026-11-22"), Value::Null),
        schedule("acme", "sc-7", json!("tomorrow"), Value::Null),
        schedule("acme", "sc-7", json!(1_763_798_400_000i64), Value::Null),
        schedule("acme", "sc-7", z.clone(), json!("")),
        schedule("acme", "sc-7", z.clone(), json!(long(257))),
        schedule("acme", "sc-7", z.clone(), json!("a\u{0}b")),
        schedule("acme", "sc-7", z.clone(), json!(42)),
    ];
    let mut checked = Vec::new();
    for case in cases {
        let subject = format!("timer.cmd.schedule.{}", case["tenantId"].as_str().unwrap());
        checked.push(("schedule-timer", subject, case));
    }
    let mut no_id = command(SCHEDULE_TIMER, json!({}));
    no_id["payload"] = schedule("acme", "sc-7", z.clone(), Value::Null)["payload"].clone();
    no_id.as_object_mut().unwrap().remove("id");
    let mut bad_id = no_id.clone();
    bad_id["id"] = json!("not-a-uuid");
    let mut wrong_type = schedule("acme", "sc-7", z.clone(), Value::Null);
    wrong_type["type"] = json!("CancelTimer");
    let mut expiring = Vec::new();
    for after in [
        json!("PT15M"),
        json!("P1DT12H"),
        json!("PT90S"),
        json!("PT0.25S"),
        json!(null),
        json!("15m"),
        json!("P1Y"),
        json!("P1M"),
        json!("PT1.5M"),
        json!(900),
    ] {
        let mut case = schedule("acme", "sc-7", z.clone(), Value::Null);
        case["payload"]["expireAfter"] = after;
        expiring.push(case);
    }
    for case in [no_id, bad_id, wrong_type].into_iter().chain(expiring) {
        checked.push(("schedule-timer", "timer.cmd.schedule.acme".into(), case));
    }
    for payload in [
        json!({ "tenantId": "acme", "serviceCallId": "sc-7" }),
        json!({ "tenantId": "acme", "serviceCallId": "sc-7", "dueAt": "ignored" }),
        json!({ "tenantId": "acme" }),
        json!({ "tenantId": "acme", "serviceCallId": "" }),
        json!({ "tenantId": "acme", "serviceCallId": "a\tb" }),
    ] {
        let case = command(CANCEL_TIMER, payload);
        checked.push(("cancel-timer", "timer.cmd.cancel.acme".into(), case));
    }
    for payload in [
        json!({ "tenantId": "acme", "correlationId": "req-42" }),
        json!({ "tenantId": "acme", "all": true, "state": "Scheduled" }),
        json!({ "tenantId": "acme", "correlationId": "req-42", "state": "Reached" }),
        json!({ "tenantId": "acme", "all": true, "state": "scheduled" }),
    ] {
        let case = command(CANCEL_TIMERS, payload);
        checked.push(("cancel-timers", "timer.cmd.cancel-many.acme".into(), case));
    }
    let (mut accepted_count, mut rejected_count) = (0, 0);
    for (name, subject, case) in checked {
        let service = parsed(&subject, &case).map(drop);
        let schema = verdict(name, &case);
        assert_eq!(
            service.is_ok(),
            schema.is_ok(),
            "{case}: the service says {service:?}, the schema {name} says {schema:?}"
        );
        if service.is_ok() {
            accepted_count += 1;
        } else {
            rejected_count += 1;
        }
    }
    assert!(accepted_count >= 5 && rejected_count >= 15);
}

/// What the API's parser makes of `body` sent with the request the schema `name` describes.
fn api_verdict(name: &str, body: &[u8]) -> Result<(), ApiError> {
    match name {
        "api-get-request" => parse_key_request(Verb::Get, body).map(drop),
        "api-cancel-request" => parse_key_request(Verb::Cancel, body).map(drop),
        "api-list-request" => parse_list_request(body).map(drop),
        "api-stats-request" => parse_stats_request(body).map(drop),
        "api-cancel-many-request" => parse_cancel_many_request(body).map(drop),
        other => panic!("no request schema {other}"),
    }
}

/// The request schemas and the API's parsers agree on each body.
#[test]
fn the_request_schemas_accept_what_the_api_accepts() {
    let cases = [
        ("api-get-request", r#"{"serviceCallId":"sc-7"}"#),
        ("api-get-request", r#"{"serviceCallId":""}"#),
        ("api-get-request", r#"{"serviceCallId":"a\u0007b"}"#),
        ("api-get-request", r#"{"serviceCallId":"sc-7","x":1}"#),
        ("api-get-request", r#"{}"#),
        ("api-cancel-request", r#"{"serviceCallId":"sc-7"}"#),
        ("api-list-request", r#"{}"#),
        ("api-list-request", r#"{"state":"Scheduled","limit":1000}"#),
        (
            "api-list-request",
            r#"{"correlationId":"req-42","limit":null}"#,
        ),
        (
            "api-list-request",
            r#"{"dueFrom":"2026-11-22T00:00:00Z","dueTo":"2026-11-23T00:00:00+02:00"}"#,
        ),
        ("api-list-request", r#"{"state":"Fired"}"#),
        ("api-list-request", r#"{"limit":0}"#),
        ("api-list-request", r#"{"limit":1001}"#),
        ("api-list-request", r#"{"limit":"10"}"#),
        ("api-list-request", r#"{"dueFrom":"yesterday"}"#),
        ("api-list-request", r#"{"page":2}"#),
        ("api-cancel-many-request", r#"{"correlationId":"req-42"}"#),
        ("api-cancel-many-request", r#"{"all":true,"dryRun":true}"#),
        (
            "api-cancel-many-request",
            r#"{"dueFrom":"2026-11-22T10:00:00Z","dueTo":"2026-11-23T10:00:00+01:00"}"#,
        ),
        ("api-cancel-many-request", r#"{"serviceCallId":"sc-7"}"#),
        ("api-cancel-many-request", r#"{"all":"yes"}"#),
        (
            "api-cancel-many-request",
            r#"{"correlationId":"x","dryRun":1}"#,
        ),
        ("api-cancel-many-request", r#"{"dueFrom":"yesterday"}"#),
        (
            "api-cancel-many-request",
            r#"{"all":true,"state":"Scheduled"}"#,
        ),
        (
            "api-cancel-many-request",
            r#"{"correlationId":"x","state":"Reached"}"#,
        ),
        ("api-stats-request", r#"{}"#),
        ("api-stats-request", r#"{"forecastMinutes":1440}"#),
        ("api-stats-request", r#"{"forecastMinutes":0}"#),
        ("api-stats-request", r#"{"forecastMinutes":1441}"#),
        ("api-stats-request", r#"{"forecastMinutes":1.5}"#),
        ("api-stats-request", r#"{"forecastMinutes":"60"}"#),
    ];
    for (name, body) in cases {
        let api = api_verdict(name, body.as_bytes());
        let value: Value = serde_json::from_str(body).unwrap();
        let schema = verdict(name, &value);
        assert_eq!(
            api.is_ok(),
            schema.is_ok(),
            "{body}: the API says {api:?}, the schema {name} says {schema:?}"
        );
    }
}
