//! A test OTLP/HTTP receiver: a real HTTP server on a free port that takes what an exporter
//! posts to `/v1/traces`, in protobuf (the exporters' default) or in JSON, and keeps every span
//! with the encoding it came in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

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
            task,
        }
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
