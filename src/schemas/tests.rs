//! The schemas against the files checked in, and against the service's own checks and replies.

use super::*;
use crate::domain::api::{
    self, ApiError, ListCursor, ListPage, TenantStats, parse_cancel_many_request,
    parse_key_request, parse_list_request, parse_stats_request,
};
use crate::domain::forecast::ForecastWindow;
use crate::domain::timestamp::parse_stored;
use crate::domain::{
    Arrival, CancelOutcome, Command, Subjects, Timer, TimerState, parse_command, parse_message,
};

const REGENERATE: &str = "cargo run -- schema --out schema/";

fn schema(name: &str) -> Value {
    all()
        .into_iter()
        .find(|file| file.name == name)
        .unwrap_or_else(|| panic!("no schema {name}"))
        .schema
}

fn validator(name: &str) -> jsonschema::Validator {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema(name))
        .unwrap_or_else(|e| panic!("{name} is not a usable schema: {e}"))
}

/// Whether `value` is valid under `name`, with the first error as the reason when not.
fn verdict(name: &str, value: &Value) -> Result<(), String> {
    validator(name).validate(value).map_err(|e| e.to_string())
}

fn assert_valid(name: &str, bytes: &[u8]) {
    let value: Value = serde_json::from_slice(bytes).expect("JSON");
    if let Err(e) = verdict(name, &value) {
        panic!("{value} is not valid under {name}: {e}");
    }
}

#[test]
fn the_checked_in_schemas_are_what_the_types_give() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
    let drift = drift(&dir);
    assert!(
        drift.is_empty(),
        "the JSON Schemas under schema/ are not what the message types give:\n  {}\n\
         regenerate them with `{REGENERATE}` and commit the result",
        drift.join("\n  ")
    );
}

#[test]
fn every_schema_is_2020_12_with_an_id_of_its_name() {
    let files = all();
    let mut names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), files.len(), "two schemas of one name");
    for file in &files {
        jsonschema::draft202012::meta::validate(&file.schema)
            .unwrap_or_else(|e| panic!("{}: {e}", file.name));
        assert_eq!(
            file.schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert_eq!(file.schema["$id"], id(&file.name));
        assert!(file.schema["description"].is_string(), "{}", file.name);
    }
    for verb in Verb::ALL {
        let (request, reply) = api_names(verb);
        assert!(names.contains(&request.as_str()) && names.contains(&reply.as_str()));
    }
}

fn command(message_type: &str, payload: Value) -> Value {
    json!({
        "id": "01935c2e-7c1a-7b53-a8e2-4f0b9c1d2e3f",
        "type": message_type,
        "tenantId": "acme",
        "timestampMs": 1_763_798_400_000i64,
        "correlationId": null,
        "payload": payload,
    })
}

const LIMITS: crate::domain::command::CommandLimits = crate::domain::command::CommandLimits {
    max_bytes: 65_536,
    max_data_bytes: 16_384,
    max_data_depth: 64,
    max_data_number_chars: 100,
};

fn accepted(subject: &str, value: &Value) -> Result<Command, String> {
    let bytes = serde_json::to_vec(value).expect("JSON");
    let arrival = Arrival {
        seq: 7,
        at: chrono::DateTime::UNIX_EPOCH,
    };
    parse_command(
        &Subjects::default(),
        subject,
        &bytes,
        LIMITS,
        arrival,
        || "generated".into(),
    )
    .map_err(|r| r.reason)
}

/// Whether the service accepts `value` on `subject`, whichever command it is.
fn message_accepted(subject: &str, value: &Value) -> Result<(), String> {
    let bytes = serde_json::to_vec(value).expect("JSON");
    let arrival = Arrival {
        seq: 7,
        at: chrono::DateTime::UNIX_EPOCH,
    };
    parse_message(
        &Subjects::default(),
        subject,
        &bytes,
        LIMITS,
        arrival,
        || "generated".into(),
    )
    .map(drop)
    .map_err(|r| r.reason)
}

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
        let service = message_accepted(&subject, &case);
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

/// A row as the service stores it, made from a command as the service reads one.
fn timer(id: &str, state: TimerState) -> Timer {
    let body = command(
        SCHEDULE_TIMER,
        json!({ "tenantId": "acme", "serviceCallId": id, "dueAt": "2026-11-22T10:00:00.5Z" }),
    );
    let mut timer = accepted("timer.cmd.schedule.acme", &body)
        .expect("accepted")
        .new_row();
    let at = parse_stored("2026-11-22T10:00:00.504Z").ok();
    match state {
        TimerState::Scheduled => {}
        TimerState::Reached => timer.reached_at = at,
        TimerState::Expired => {
            timer.reached_at = at;
            timer.expires_at = timer.due_at;
        }
        TimerState::Cancelled => timer.cancelled_at = at,
    }
    timer.state = state;
    timer
}

fn tombstone(id: &str) -> Timer {
    let body = command(
        CANCEL_TIMER,
        json!({ "tenantId": "acme", "serviceCallId": id }),
    );
    accepted("timer.cmd.cancel.acme", &body)
        .expect("accepted")
        .new_row()
}

#[test]
fn the_reply_schemas_hold_every_reply_the_api_builds() {
    for state in TimerState::ALL {
        assert_valid(
            "api-get-reply",
            &api::get_reply(&timer("sc-7", state)).unwrap(),
        );
    }
    assert_valid("api-get-reply", &api::get_reply(&tombstone("t")).unwrap());

    let page = ListPage {
        timers: vec![tombstone("t"), timer("sc-7", TimerState::Scheduled)],
        next: Some(ListCursor {
            due_at: None,
            service_call_id: "t".into(),
        }),
    };
    assert_valid("api-list-reply", &api::list_reply(&page).unwrap());
    let empty = ListPage {
        timers: Vec::new(),
        next: None,
    };
    assert_valid("api-list-reply", &api::list_reply(&empty).unwrap());

    let outcomes = [
        (CancelOutcome::Cancelled, TimerState::Cancelled),
        (CancelOutcome::AlreadyCancelled, TimerState::Cancelled),
        (CancelOutcome::AlreadyReached, TimerState::Reached),
        (CancelOutcome::NotFound, TimerState::Cancelled),
    ];
    for (outcome, state) in outcomes {
        let reply = api::cancel_reply(outcome, Some(&timer("sc-7", state))).unwrap();
        assert_valid("api-cancel-reply", &reply);
    }
    let mut misnamed: Value =
        serde_json::from_slice(&api::cancel_reply(CancelOutcome::NotFound, None).unwrap()).unwrap();
    misnamed["outcome"] = json!("NotFound");
    assert!(verdict("api-cancel-reply", &misnamed).is_err());

    let now = parse_stored("2026-11-24T10:05:02.250Z").unwrap();
    let stats = TenantStats {
        scheduled: 14,
        overdue: 0,
        next_due_at: Some(now),
    };
    let forecast = ForecastWindow::new(now, 3).fill([(0, 12)]);
    assert_valid(
        "api-stats-reply",
        &api::stats_reply(&stats, Some(&forecast)).unwrap(),
    );
    let idle = TenantStats {
        scheduled: 0,
        overdue: 0,
        next_due_at: None,
    };
    assert_valid("api-stats-reply", &api::stats_reply(&idle, None).unwrap());

    for error in [
        ApiError::bad_request("invalid get request: missing field `serviceCallId`"),
        ApiError::not_found("no timer sc-7"),
        ApiError::unavailable("too many requests", std::time::Duration::from_millis(250)),
    ] {
        assert_valid(API_ERROR_REPLY, &error.body());
    }
}

#[test]
fn the_rejection_schema_holds_a_cut_quote_and_an_unknown_tenant() {
    let at = parse_stored("2026-11-22T10:00:00.000Z").unwrap();
    let large = vec![b'x'; 70_000];
    for (tenant, original) in [("acme", &large[..]), ("_", &b"\xff{"[..])] {
        let event = crate::domain::events::timer_command_rejected(
            tenant,
            "bad",
            "timer.cmd.x",
            original,
            at,
        );
        assert_valid(
            "timer-command-rejected",
            &serde_json::to_vec(&event).unwrap(),
        );
    }
}

/// The AsyncAPI document beside the schemas refers to each of them and carries the service's
/// version (that it is valid AsyncAPI is scripts/check-asyncapi.sh's part).
#[test]
fn the_asyncapi_document_names_every_schema_and_the_version() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/asyncapi.yaml");
    let text = std::fs::read_to_string(&path).expect("schema/asyncapi.yaml");
    for file in all() {
        let reference = format!("$ref: './{}'", file.file_name());
        assert!(
            text.contains(&reference),
            "asyncapi.yaml has no {reference}"
        );
    }
    let version = format!("\n  version: {}\n", env!("CARGO_PKG_VERSION"));
    assert!(
        text.contains(&version),
        "asyncapi.yaml's info.version is not the package's {}",
        env!("CARGO_PKG_VERSION")
    );
}
