//! A test OTLP/HTTP receiver: a real HTTP server on a free port that takes what an exporter
//! posts to `/v1/traces`, in protobuf (the exporters' default) or in JSON, and keeps every span
//! with the encoding it came in. [`OtlpReceiver::start_tls`] puts it behind TLS
//! ([`TlsFront`]).
// Two test binaries use it, each a part.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use chrono::Utc;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

use crate::common::pki::Pki;
use crate::common::tls_front::TlsFront;
use crate::common::{DaemonProcess, NatsServer, Scratch, TestClient};

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's span kinds: 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    /// Attribute values as text.
    pub attributes: HashMap<String, String>,
    /// OTLP's status codes: 0 unset, 1 ok, 2 error.
    pub status: i32,
    pub status_message: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The resource's attributes.
    pub resource: HashMap<String, String>,
    /// The request's `Content-Type`.
    pub content_type: String,
}

pub struct OtlpReceiver {
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    /// The TLS in front of it, if any.
    front: Option<TlsFront>,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let spans: Arc<Mutex<Vec<ReceivedSpan>>> = Arc::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |headers: HeaderMap, body: Bytes| {
                let kept = kept.clone();
                async move { receive(&kept, &headers, &body) }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            endpoint,
            spans,
            front: None,
            task,
        }
    }

    /// The receiver behind TLS (`https://127.0.0.1:…`) with `pki`'s server certificate; with
    /// `client_auth`, a client must show a certificate `pki`'s CA signed.
    pub async fn start_tls(pki: &Pki, client_auth: bool) -> Self {
        let mut receiver = Self::start().await;
        let plain = receiver.endpoint.trim_start_matches("http://").to_owned();
        let ca = client_auth.then_some(pki.ca_file.as_path());
        let front = TlsFront::start(&plain, &pki.server_cert, &pki.server_key, ca).await;
        receiver.endpoint = format!("https://{}", front.address);
        receiver.front = Some(front);
        receiver
    }

    /// TLS handshakes that failed so far (behind TLS).
    pub fn handshakes_refused(&self) -> usize {
        self.front.as_ref().map_or(0, TlsFront::refused)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of one trace (its id in hex).
    pub fn trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn receive(
    kept: &Mutex<Vec<ReceivedSpan>>,
    headers: &HeaderMap,
    body: &[u8],
) -> (StatusCode, Vec<u8>) {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    // OTLP/JSON: ids in hex, enums as numbers (the with-serde decoding of the same messages).
    let request = match content_type.as_str() {
        "application/x-protobuf" => ExportTraceServiceRequest::decode(body).ok(),
        "application/json" => serde_json::from_slice::<ExportTraceServiceRequest>(body).ok(),
        _ => return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new()),
    };
    let Some(request) = request else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| text_map(&r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                let status = span.status.unwrap_or_default();
                spans.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    kind: span.kind,
                    attributes: text_map(&span.attributes),
                    status: status.code,
                    status_message: status.message,
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                    resource: resource.clone(),
                    content_type: content_type.clone(),
                });
            }
        }
    }
    kept.lock().unwrap().extend(spans);
    // An empty ExportTraceServiceResponse, in the request's encoding.
    let response = match content_type.as_str() {
        "application/json" => b"{}".to_vec(),
        _ => Vec::new(),
    };
    (StatusCode::OK, response)
}

fn text_map(
    attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue],
) -> HashMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A daemon process exporting its spans to `endpoint` every 50 ms (`env` besides), on a broker
/// and a database of its own, and a client once the daemon's command stream exists. Fields drop
/// in order: the daemon before its database and broker.
pub struct Exporting {
    pub client: TestClient,
    pub daemon: DaemonProcess,
    pub scratch: Scratch,
    pub server: NatsServer,
}

impl Exporting {
    pub async fn start(endpoint: &str, env: &[(&str, &str)]) -> Self {
        let server = NatsServer::start();
        let scratch = Scratch::new();
        let mut all = vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ];
        all.extend_from_slice(env);
        let daemon = DaemonProcess::start_with(&server, &scratch, &all);
        let client = TestClient::connect(&server).await;
        client.wait_for_command_stream().await;
        Self {
            client,
            daemon,
            scratch,
            server,
        }
    }
}

/// Against a collector that accepts connections and never answers (over `scheme`: with `https`
/// the TLS handshake is what never ends), `count` traced timers each fire less than 5 s late
/// (the exporter's timeout is 10 s: no firing waited on the collector), and a SIGTERM stops the
/// daemon cleanly within 20 s (the stop waits for the exporter a bounded time). `env` besides.
pub async fn a_silent_collector_holds_nothing_back(
    scheme: &str,
    count: usize,
    env: &[(&str, &str)],
) {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("{scheme}://{}", silent.local_addr().unwrap());
    let exporting = Exporting::start(&endpoint, env).await;
    let client = &exporting.client;
    let due_at = Utc::now() + chrono::Duration::milliseconds(3_000);
    for i in 0..count {
        let command = crate::common::schedule_command(
            "acme",
            &format!("t-{i}"),
            &crate::common::rfc3339(due_at),
            None,
        );
        let traceparent = format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{:016x}-01", i + 1);
        client
            .publish_traced("timer.cmd.schedule.acme", &command, Some(&traceparent))
            .await;
    }
    let fired = crate::common::eventually(Duration::from_secs(20), "every timer fired", || async {
        let fired = client.fired_ids("acme").await;
        (fired.len() == count).then_some(fired)
    })
    .await;
    assert_eq!(fired.len(), count);
    let latest = client
        .events("timer.evt.due.acme")
        .await
        .iter()
        .map(|e| e.stored_at - e.due_at())
        .max()
        .unwrap();
    assert!(
        latest < chrono::Duration::seconds(5),
        "the latest event was stored {latest} after its dueAt"
    );
    let Exporting { daemon, .. } = exporting;
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(20)).await;
    assert!(status.success(), "{status:?}");
    drop(silent);
}
