//! The machine-readable contract against the running service: the events it publishes and the
//! API's replies, taken off a real nats-server, are valid under the JSON Schemas checked in
//! under `schema/`, and the API's endpoints name those schemas in `$SRV.INFO`.
//! (That the files are what the types give is a unit test of `timer_service::schemas`; that
//! `schema/asyncapi.yaml` is valid AsyncAPI is `scripts/check-asyncapi.sh`.)

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use common::{TestClient, eventually};
use serde_json::{Value, json};

/// The schemas of `schema/`, by file name without `.json`, with their `$id`s.
struct Schemas {
    by_name: HashMap<String, (String, jsonschema::Validator)>,
}

impl Schemas {
    fn checked_in() -> Self {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
        let mut by_name = HashMap::new();
        for entry in std::fs::read_dir(&dir).expect("schema/") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let schema: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
            let validator = jsonschema::draft202012::options()
                .should_validate_formats(true)
                .build(&schema)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let id = schema["$id"].as_str().expect("$id").to_owned();
            by_name.insert(name, (id, validator));
        }
        assert!(
            by_name.len() >= 13,
            "the schemas of schema/: {:?}",
            by_name.keys()
        );
        Self { by_name }
    }

    fn id(&self, name: &str) -> &str {
        &self.by_name[name].0
    }

    /// Asserts that `message` is valid under the schema `name`, naming every error if not.
    fn assert_valid(&self, name: &str, message: &Value) {
        let (_, validator) = self
            .by_name
            .get(name)
            .unwrap_or_else(|| panic!("no schema/{name}.json"));
        let errors: Vec<String> = validator
            .iter_errors(message)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{message} is not valid under schema/{name}.json: {errors:#?}"
        );
    }
}

/// A reply that succeeded, checked against the reply schema of `verb`.
async fn reply(schemas: &Schemas, client: &TestClient, verb: &str, body: Value) -> Value {
    let subject = format!("timer.api.{verb}.acme");
    let (code, reply) = client.api_request(&subject, body).await;
    assert_eq!(code, None, "{subject}: {reply}");
    schemas.assert_valid(&format!("api-{verb}-reply"), &reply);
    reply
}

/// An error reply, checked against the error schema; its code header is one the schema's
/// description names.
async fn error_reply(schemas: &Schemas, client: &TestClient, subject: &str, body: &[u8]) -> u16 {
    let message = tokio::time::timeout(
        Duration::from_secs(10),
        client
            .client
            .request(subject.to_owned(), body.to_vec().into()),
    )
    .await
    .expect("an answer in time")
    .expect("a reply");
    let headers = message.headers.expect("error headers");
    let code: u16 = headers
        .get("Nats-Service-Error-Code")
        .expect("code")
        .as_str()
        .parse()
        .expect("a number");
    assert!([400, 404, 500, 503].contains(&code), "{code}");
    assert!(headers.get("Nats-Service-Error").is_some());
    let body: Value = serde_json::from_slice(&message.payload).expect("JSON");
    schemas.assert_valid("api-error-reply", &body);
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_replies_are_valid_under_the_checked_in_schemas() {
    let schemas = Schemas::checked_in();
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;

    // A DueTimeReached as the daemon publishes it, with a correlation id of the client's and
    // without one (the service makes one up).
    client
        .schedule("acme", "fired", Utc::now(), Some("req-42"))
        .await;
    client.schedule("acme", "fired-2", Utc::now(), None).await;
    for id in ["fired", "fired-2"] {
        let event = client.await_due("acme", id, Duration::from_secs(15)).await;
        assert!(event.msg_id.is_some(), "Nats-Msg-Id");
        schemas.assert_valid("due-time-reached", &event.envelope);
    }

    // TimerCommandRejected: a bad field, not JSON at all, and one so large its quote is cut.
    let mut bad = common::schedule_command("acme", "bad", "tomorrow", None);
    client
        .publish_raw("timer.cmd.schedule.acme", serde_json::to_vec(&bad).unwrap())
        .await;
    client
        .publish_raw("timer.cmd.cancel.acme", b"{not json".to_vec())
        .await;
    bad["payload"]["serviceCallId"] = json!("x".repeat(10_000));
    client
        .publish_raw("timer.cmd.schedule.acme", serde_json::to_vec(&bad).unwrap())
        .await;
    let rejected = client
        .await_events("timer.evt.rejected.acme", 3, Duration::from_secs(15))
        .await;
    assert!(
        rejected
            .iter()
            .any(|e| e.envelope["payload"]["truncated"] == true),
        "one quote is cut"
    );
    for event in &rejected {
        schemas.assert_valid("timer-command-rejected", &event.envelope);
    }

    // The API's replies: a pending timer, a fired one, a page with more to come, every cancel
    // outcome, a tombstone, stats with and without a forecast.
    let later = Utc::now() + chrono::Duration::minutes(10);
    client
        .schedule("acme", "pending", later, Some("req-7"))
        .await;
    client.schedule("acme", "to-cancel", later, None).await;
    eventually(Duration::from_secs(10), "the timers stored", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;
    for id in ["pending", "fired"] {
        reply(&schemas, &client, "get", json!({ "serviceCallId": id })).await;
    }
    let page = reply(&schemas, &client, "list", json!({ "limit": 2 })).await;
    assert!(page["next"].is_string(), "{page}");
    reply(&schemas, &client, "list", json!({ "after": page["next"] })).await;
    reply(
        &schemas,
        &client,
        "list",
        json!({ "state": "Scheduled", "correlationId": "req-7" }),
    )
    .await;
    let mut outcomes = Vec::new();
    for id in ["to-cancel", "to-cancel", "fired", "never-scheduled"] {
        let cancelled = reply(&schemas, &client, "cancel", json!({ "serviceCallId": id })).await;
        outcomes.push(cancelled["outcome"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        outcomes,
        [
            "cancelled",
            "already_cancelled",
            "already_reached",
            "not_found"
        ]
    );
    let tombstone = reply(
        &schemas,
        &client,
        "get",
        json!({ "serviceCallId": "never-scheduled" }),
    )
    .await;
    assert!(tombstone["timer"]["dueAt"].is_null());
    let stats = reply(&schemas, &client, "stats", json!({ "forecastMinutes": 15 })).await;
    assert_eq!(stats["forecast"].as_array().map(Vec::len), Some(15));
    reply(&schemas, &client, "stats", json!({})).await;

    // Error replies: a bad request, and a timer that is not there.
    let bad_request =
        error_reply(&schemas, &client, "timer.api.list.acme", br#"{"limit":0}"#).await;
    let not_found = error_reply(
        &schemas,
        &client,
        "timer.api.get.acme",
        br#"{"serviceCallId":"nothing"}"#,
    )
    .await;
    assert_eq!((bad_request, not_found), (400, 404));
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_endpoint_names_its_schemas_in_its_metadata() {
    let schemas = Schemas::checked_in();
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let (code, info) = client
        .api_request("$SRV.INFO.timer-service", json!({}))
        .await;
    assert_eq!(code, None, "{info}");
    let endpoints = info["endpoints"].as_array().expect("endpoints");
    assert_eq!(endpoints.len(), 5, "{info}");
    for endpoint in endpoints {
        let verb = endpoint["name"].as_str().expect("name");
        let metadata = &endpoint["metadata"];
        assert_eq!(
            metadata["request_schema"],
            schemas.id(&format!("api-{verb}-request")),
            "{endpoint}"
        );
        assert_eq!(
            metadata["response_schema"],
            schemas.id(&format!("api-{verb}-reply")),
            "{endpoint}"
        );
        assert_eq!(
            metadata["error_schema"],
            schemas.id("api-error-reply"),
            "{endpoint}"
        );
    }
    daemon.shutdown().await.unwrap();
}

/// `timer-service schema --out DIR`, the command that regenerates the files, writes exactly the
/// JSON files checked in under `schema/`.
#[test]
fn the_schema_command_writes_the_checked_in_files() {
    let out = tempfile::tempdir().expect("tempdir");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_timer-service"))
        .args(["schema", "--out"])
        .arg(out.path())
        .status()
        .expect("run timer-service schema");
    assert!(status.success());
    let json_files = |dir: &Path| {
        let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).expect("read"))
            })
            .collect();
        files.sort();
        files
    };
    let checked_in = json_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("schema"));
    assert_eq!(
        json_files(out.path()),
        checked_in,
        "regenerate with `cargo run -- schema --out schema/`"
    );
    assert_eq!(checked_in.len(), 18);
}
