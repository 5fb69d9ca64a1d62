//! The daemon's spans to a collector over HTTPS (docs/CONTRACT.md §3, "Trace context"): the
//! collector verified against the CA named in `OTEL_EXPORTER_OTLP_CERTIFICATE`, and shown a
//! client certificate when it asks for one; a collector the daemon cannot trust gets nothing,
//! and no timer waits for it. A real daemon process, a real TLS receiver.

mod common;
/// Only the span tests use it: kept out of `common`, which every test binary builds.
#[path = "common/otlp_receiver.rs"]
mod otlp_receiver;

use std::time::Duration;

use chrono::Utc;
use common::TestClient;
use common::pki::Pki;
use otlp_receiver::{Exporting, OtlpReceiver};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// Schedules a timer due in half a second, with a sampled `traceparent` of [`TRACE`], and
/// waits for its DueTimeReached; returns how long after its `dueAt` the event was stored.
async fn a_traced_timer_fires(client: &TestClient) -> chrono::Duration {
    let due_at = common::rfc3339(Utc::now() + chrono::Duration::milliseconds(500));
    client
        .publish_traced(
            "timer.cmd.schedule.acme",
            &common::schedule_command("acme", "tls", &due_at, None),
            Some(&format!("00-{TRACE}-00f067aa0ba902b7-01")),
        )
        .await;
    let event = client
        .await_due("acme", "tls", Duration::from_secs(15))
        .await;
    event.stored_at - event.due_at()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_to_an_https_collector_that_asks_for_a_client_certificate() {
    let pki = Pki::new();
    let receiver = OtlpReceiver::start_tls(&pki, true).await;
    let identity = pki.client("timer-service");
    let (ca, cert, key) = (
        pki.ca_file.display().to_string(),
        identity.cert.display().to_string(),
        identity.key.display().to_string(),
    );
    let exporting = Exporting::start(
        &receiver.endpoint,
        &[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert),
            // The traces form wins over the general one.
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/nonexistent/key.pem"),
            ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", &key),
        ],
    )
    .await;
    a_traced_timer_fires(&exporting.client).await;
    let names = common::eventually(
        Duration::from_secs(15),
        "the four spans of the traced timer",
        || async {
            let mut names: Vec<String> =
                receiver.trace(TRACE).into_iter().map(|s| s.name).collect();
            names.sort();
            (names.len() >= 4).then_some(names)
        },
    )
    .await;
    assert_eq!(
        names,
        [
            "claim timers",
            "process timer.cmd.schedule.{tenantId}",
            "publish timer.evt.due.{tenantId}",
            "store timers",
        ]
    );
    assert_eq!(receiver.handshakes_refused(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_it_cannot_trust_gets_nothing_and_holds_no_timer_back() {
    let pki = Pki::new();
    let receiver = OtlpReceiver::start_tls(&pki, false).await;
    // No OTEL_EXPORTER_OTLP_CERTIFICATE: the system's certificates, which do not know the
    // test's CA.
    let exporting = Exporting::start(&receiver.endpoint, &[]).await;
    let late = a_traced_timer_fires(&exporting.client).await;
    assert!(
        late < chrono::Duration::seconds(1),
        "stored {late} after its dueAt"
    );
    // The exporter tried, and the handshake failed on its side.
    common::eventually(Duration::from_secs(15), "a refused handshake", || async {
        (receiver.handshakes_refused() > 0).then_some(())
    })
    .await;
    assert!(receiver.spans().is_empty());
    // And the operator reads why in the log.
    exporting
        .daemon
        .await_log("BatchSpanProcessor.ExportError", Duration::from_secs(15))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_collector_that_never_answers_holds_no_timer_and_no_stop_back() {
    // Each export waits on a handshake that never ends, bounded only by the exporter's timeout.
    otlp_receiver::a_silent_collector_holds_nothing_back("https", 50, &[]).await;
}
