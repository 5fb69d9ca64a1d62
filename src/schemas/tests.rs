//! The schemas against the files checked in, and against the service's own checks and replies.

use super::*;
use crate::domain::api::{
    self, ApiError, ListCursor, ListPage, TenantStats, parse_cancel_many_request,
    parse_key_request, parse_list_request, parse_stats_request,
};
use crate::domain::forecast::ForecastWindow;
use crate::domain::timestamp::parse_stored;
use crate::domain::{
    Arrival, CancelOutcome, Command, Parsed, Subjects, Timer, TimerState, parse_message,
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

/// What the service makes of `value` on `subject`: one timer's command or a CancelTimers.
fn parsed(subject: &str, value: &Value) -> Result<Parsed, String> {
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
    .map_err(|r| r.reason)
}

/// One timer's command the service accepts from `value` on `subject`.
fn accepted(subject: &str, value: &Value) -> Result<Command, String> {
    match parsed(subject, value)? {
        Parsed::One(command) => Ok(command),
        Parsed::Many(_) => Err("a CancelTimers names no single timer".into()),
        Parsed::Timers(_) => Err("a ScheduleTimers names no single timer".into()),
    }
}

mod inputs;
mod replies;

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
