//! The daemon's own spans (docs/CONTRACT.md §3, "Trace context"): a real daemon process exports
//! them over OTLP/HTTP to a real receiver when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, joined to
//! the trace of the command's `traceparent`, in protobuf or in JSON; the event carries the
//! daemon's publish span on. A batch split around a command the database refuses still gives
//! each stored command its store span. A collector that never answers delays no timer and no
//! stop.

mod common;
/// Only this file uses it: kept out of `common`, which every test binary builds.
#[path = "common/otlp_receiver.rs"]
mod otlp_receiver;

use std::time::Duration;

use chrono::Utc;
use otlp_receiver::{Exporting, OtlpReceiver, ReceivedSpan};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
/// OTLP span kinds.
const CLIENT: i32 = 3;
const PRODUCER: i32 = 4;
const CONSUMER: i32 = 5;
/// OTLP status code of an error.
const ERROR: i32 = 2;
const PROCESS: &str = "process timer.cmd.schedule.{tenantId}";

/// Publishes `command` on `subject` with a `traceparent` (none when `None`).
async fn send(
    client: &common::TestClient,
    subject: &str,
    command: serde_json::Value,
    traceparent: Option<&str>,
) {
    client.publish_traced(subject, &command, traceparent).await;
}

/// Waits until the receiver holds a span named `name` of trace `trace_id`.
async fn span_named(receiver: &OtlpReceiver, trace_id: &str, name: &str) -> ReceivedSpan {
    common::eventually(
        Duration::from_secs(15),
        &format!("the span {name} of trace {trace_id}"),
        || async {
            receiver
                .trace(trace_id)
                .into_iter()
                .find(|s| s.name == name)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_timer_gives_its_spans_to_the_collector_and_its_event_joins_them() {
    let receiver = OtlpReceiver::start().await;
    let exporting = Exporting::start(
        &receiver.endpoint,
        &[
            ("OTEL_SERVICE_NAME", "timers-under-test"),
            // The standard variable overrides the daemon's own defaults.
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.version=9.9.9,deployment.environment.name=test",
            ),
        ],
    )
    .await;
    let client = &exporting.client;
    let due = |ms: i64| common::rfc3339(Utc::now() + chrono::Duration::milliseconds(ms));
    let traced = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    // Not sampled by its caller: carried on, never recorded.
    let quiet_trace = "0af7651916cd43dd8448eb211c80319c";
    let quiet = format!("00-{quiet_trace}-b7ad6b7169203331-00");
    let rejected_trace = "11111111111111111111111111111111";
    let subject = "timer.cmd.schedule.acme";
    send(
        client,
        subject,
        common::schedule_command("acme", "quiet", &due(800), None),
        Some(&quiet),
    )
    .await;
    send(
        client,
        subject,
        common::schedule_command("acme", "untraced", &due(800), None),
        None,
    )
    .await;
    send(
        client,
        subject,
        common::schedule_command("acme", "traced", &due(1_500), None),
        Some(&traced),
    )
    .await;
    let mut invalid = common::schedule_command("acme", "refused", "2030-01-01T00:00:00Z", None);
    invalid["payload"]["dueAt"] = serde_json::json!("tomorrow");
    send(
        client,
        subject,
        invalid,
        Some(&format!("00-{rejected_trace}-{CLIENT_SPAN}-01")),
    )
    .await;

    // The command: processed under the caller's span, stored under the process span.
    let process = span_named(&receiver, TRACE, PROCESS).await;
    assert_eq!(process.kind, CONSUMER);
    assert_eq!(process.parent_span_id, CLIENT_SPAN);
    assert_eq!(process.attributes["messaging.system"], "nats");
    assert_eq!(process.attributes["messaging.operation.type"], "process");
    assert_eq!(process.attributes["messaging.destination.name"], subject);
    assert_eq!(process.resource["service.name"], "timers-under-test");
    assert_eq!(process.resource["service.version"], "9.9.9");
    assert_eq!(process.resource["deployment.environment.name"], "test");
    // The instance id the daemon logged with its name.
    let log = exporting.daemon.log_text();
    let instance = &process.resource["service.instance.id"];
    assert!(
        log.contains(&format!("instance=\"{instance}\"")),
        "{instance} not in the log"
    );
    let store = span_named(&receiver, TRACE, "store timers").await;
    assert_eq!(store.kind, CLIENT);
    assert_eq!(store.parent_span_id, process.span_id);
    assert!(["sqlite", "postgresql"].contains(&store.attributes["db.system.name"].as_str()));
    assert!(process.start_ns <= store.start_ns && store.end_ns <= process.end_ns);

    // The firing: claimed and published under the caller's span; the event names the publish
    // span as its parent, in the same trace.
    let event = client
        .await_due("acme", "traced", Duration::from_secs(15))
        .await;
    let claim = span_named(&receiver, TRACE, "claim timers").await;
    assert_eq!(claim.kind, CLIENT);
    assert_eq!(claim.parent_span_id, CLIENT_SPAN);
    let publish = span_named(&receiver, TRACE, "publish timer.evt.due.{tenantId}").await;
    assert_eq!(publish.kind, PRODUCER);
    assert_eq!(publish.parent_span_id, CLIENT_SPAN);
    assert_eq!(publish.attributes["messaging.operation.type"], "send");
    assert_eq!(
        publish.attributes["messaging.destination.name"],
        "timer.evt.due.acme"
    );
    assert_eq!(
        Some(publish.attributes["messaging.message.id"].as_str()),
        event.msg_id.as_deref()
    );
    assert_eq!(
        event.trace,
        (
            Some(format!("00-{TRACE}-{}-01", publish.span_id)),
            Some("congo=t61rcWkgMzE".to_owned())
        )
    );
    assert!(claim.end_ns <= publish.start_ns);

    // The rejected command: its process span ends in an error, and its rejection event names
    // that span as its parent.
    let refused = span_named(&receiver, rejected_trace, PROCESS).await;
    assert_eq!(refused.status, ERROR);
    assert_eq!(refused.attributes["error.type"], "invalid");
    assert!(refused.status_message.contains("dueAt"), "{refused:?}");
    let rejection = client
        .await_events("timer.evt.rejected.acme", 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        rejection[0].trace.0,
        Some(format!("00-{rejected_trace}-{}-01", refused.span_id))
    );

    // The unsampled command fired before the traced one and was exported in order before it:
    // nothing of its trace was recorded, and its event carries its context unchanged. The
    // untraced one has no trace at all.
    let quiet_event = client
        .await_due("acme", "quiet", Duration::from_secs(5))
        .await;
    assert_eq!(quiet_event.trace.0.as_deref(), Some(quiet.as_str()));
    assert!(receiver.trace(quiet_trace).is_empty());
    let untraced = client
        .await_due("acme", "untraced", Duration::from_secs(5))
        .await;
    assert_eq!(untraced.trace, (None, None));
    let traces: std::collections::BTreeSet<String> =
        receiver.spans().into_iter().map(|s| s.trace_id).collect();
    assert_eq!(
        traces,
        [TRACE, rejected_trace].map(str::to_owned).into(),
        "spans only for the sampled traces"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_out_in_json_when_the_protocol_says_so() {
    let receiver = OtlpReceiver::start().await;
    let exporting = Exporting::start(
        &receiver.endpoint,
        &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
    )
    .await;
    let client = &exporting.client;
    let due_at = common::rfc3339(Utc::now() + chrono::Duration::milliseconds(500));
    send(
        client,
        "timer.cmd.schedule.acme",
        common::schedule_command("acme", "json", &due_at, None),
        Some(&format!("00-{TRACE}-{CLIENT_SPAN}-01")),
    )
    .await;
    let event = client
        .await_due("acme", "json", Duration::from_secs(15))
        .await;
    let process = span_named(&receiver, TRACE, PROCESS).await;
    let store = span_named(&receiver, TRACE, "store timers").await;
    let claim = span_named(&receiver, TRACE, "claim timers").await;
    let publish = span_named(&receiver, TRACE, "publish timer.evt.due.{tenantId}").await;
    for span in [&process, &store, &claim, &publish] {
        assert_eq!(span.content_type, "application/json", "{span:?}");
    }
    // Ids, kinds and attributes read back from JSON as they were sent.
    assert_eq!(process.kind, CONSUMER);
    assert_eq!(process.parent_span_id, CLIENT_SPAN);
    assert_eq!(store.parent_span_id, process.span_id);
    assert_eq!(claim.kind, CLIENT);
    assert_eq!(publish.kind, PRODUCER);
    assert_eq!(process.resource["service.name"], "timer-service");
    assert_eq!(
        event.trace.0,
        Some(format!("00-{TRACE}-{}-01", publish.span_id))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_command_of_a_split_batch_gets_the_store_span_of_its_part() {
    let server = common::NatsServer::start();
    let scratch = common::Scratch::new();
    common::database::poison(&scratch.database()).await;
    let client = common::TestClient::connect(&server).await;
    // The daemon makes the streams, then stops, so that the commands wait in the stream and its
    // first pull takes them as one batch, which the database refuses for the poisoned one.
    let daemon = common::DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());
    let count = 20;
    let poisoned = 10;
    let trace = |i: usize| format!("{:032x}", i + 1);
    let due_at = common::rfc3339(Utc::now() + chrono::Duration::seconds(60));
    for i in 0..count {
        let correlation = (i == poisoned).then_some("poison");
        send(
            &client,
            "timer.cmd.schedule.acme",
            common::schedule_command("acme", &format!("s-{i}"), &due_at, correlation),
            Some(&format!("00-{}-{CLIENT_SPAN}-01", trace(i))),
        )
        .await;
    }

    let receiver = OtlpReceiver::start().await;
    let daemon = common::DaemonProcess::start_with(
        &server,
        &scratch,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    );
    let refused = span_named(&receiver, &trace(poisoned), PROCESS).await;
    assert_eq!(refused.status, ERROR);
    assert_eq!(refused.attributes["error.type"], "refused");
    let mut parts = std::collections::BTreeSet::new();
    for i in (0..count).filter(|&i| i != poisoned) {
        let process = span_named(&receiver, &trace(i), PROCESS).await;
        let store = span_named(&receiver, &trace(i), "store timers").await;
        assert_eq!(store.parent_span_id, process.span_id, "command {i}");
        assert!(process.start_ns <= store.start_ns && store.end_ns <= process.end_ns);
        parts.insert((store.start_ns, store.end_ns));
    }
    let log = daemon.log_text();
    assert!(
        log.contains("the batch was split to store the rest"),
        "no split in the log:\n{log}"
    );
    // Stored by several commits (the parts of the split), each span naming its own.
    assert!(parts.len() > 1, "{parts:?}");
    assert!(
        receiver
            .trace(&trace(poisoned))
            .iter()
            .all(|s| s.name != "store timers"),
        "the refused command was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_delays_no_timer_and_no_stop() {
    let env = [
        // Small batches: many exports wait on the collector at once.
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16"),
        // A queue the 1,200 spans overflow: those past it are dropped, never waited for.
        ("OTEL_BSP_MAX_QUEUE_SIZE", "64"),
    ];
    otlp_receiver::a_silent_collector_holds_nothing_back("http", 300, &env).await;
}

#[tokio::test]
async fn an_export_it_cannot_make_is_refused_at_the_start_with_the_reason() {
    let server = common::NatsServer::start();
    let scratch = common::Scratch::new();
    let https = "https://127.0.0.1:4318";
    // A CA file with no certificate in it, and a machine whose system store is empty (the
    // variables the system store is read from, pointed at nothing).
    let not_pem = scratch.dir.path().join("not-a-certificate.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let not_pem = not_pem.display().to_string();
    let empty_dir = scratch.dir.path().join("no-certificates");
    std::fs::create_dir(&empty_dir).unwrap();
    let empty_dir = empty_dir.display().to_string();
    let cases: [(&[(&str, &str)], &str); 6] = [
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            "http/protobuf",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", https),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
            ],
            "OTEL_EXPORTER_OTLP_CERTIFICATE: cannot read /nonexistent/ca.pem",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", https),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/etc/hostname"),
            ],
            "OTEL_EXPORTER_OTLP_CLIENT_KEY is set without its pair",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", https),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
            ],
            "expected milliseconds",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", https),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", &not_pem),
            ],
            "no PEM certificate in it",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", https),
                ("SSL_CERT_FILE", &not_pem),
                ("SSL_CERT_DIR", &empty_dir),
            ],
            "no system certificate was found",
        ),
    ];
    for (env, reason) in cases {
        let daemon = common::DaemonProcess::start_with(&server, &scratch, env);
        let log = daemon.log.clone();
        let status = daemon.wait_exit(Duration::from_secs(15)).await;
        assert_eq!(status.code(), Some(2), "{env:?}");
        let log = std::fs::read_to_string(log).unwrap();
        assert!(log.contains(reason), "{reason:?} not in {log}");
    }
}
