//! The `spans` section (SQLite): ingest and fire with every command traced (a sampled
//! `traceparent`), without an exporter and with one sending to a collector in this process
//! (over plain HTTP, and over TLS), beside untraced commands without an exporter; and how many
//! spans the collector received.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use super::Ctx;
use crate::Figures;
use crate::tls_front::TlsFront;
use crate::workloads::{self, Carried};

/// How much longer than a bare fire the traced timers' lead is: their rows are written twice.
const SECOND_WRITE: Duration = Duration::from_secs(2);

/// Where a variant's spans go.
#[derive(Clone, Copy)]
pub enum Export {
    None,
    /// To the collector over plain HTTP.
    Http,
    /// To the collector over TLS, verified against the benchmark's own CA.
    Https,
}

/// The variants: label, commands traced, spans exported.
pub const VARIANTS: [(&str, bool, Export); 4] = [
    ("plain", false, Export::None),
    ("carried", true, Export::None),
    ("exported", true, Export::Http),
    ("exported-tls", true, Export::Https),
];

pub(super) async fn spans(ctx: &Ctx<'_>, f: &mut Figures) {
    let args = ctx.args;
    let collector = Collector::start().await;
    // The same collector behind TLS, with a server certificate of the benchmark's own CA.
    let pki = crate::pki::Pki::new();
    let plain = collector.endpoint.trim_start_matches("http://");
    let front = TlsFront::start(plain, &pki.server_cert, &pki.server_key, None).await;
    for (label, traced, export) in VARIANTS {
        let mut daemon = ctx.default("d");
        let endpoint = || "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned();
        daemon.env.extend(match export {
            Export::None => vec![],
            Export::Http => vec![(endpoint(), collector.endpoint.clone())],
            Export::Https => vec![
                (endpoint(), format!("https://{}", front.address)),
                (
                    "OTEL_EXPORTER_OTLP_CERTIFICATE".into(),
                    pki.ca_file.display().to_string(),
                ),
            ],
        });
        let daemons = [daemon];
        let carried = Carried { data: None, traced };
        eprintln!("spans ({label}): ingest and fire");
        let before = collector.spans();
        let w = ctx
            .world(&format!("spans-ingest-{label}"), &ctx.sqlite, None)
            .await;
        let ingest = workloads::ingest_with(&w, args.ingest_n, &daemons, carried).await;
        f.run(&format!("spans.ingest.{label}"), ingest);
        drop(w);
        // The daemon has stopped, and sent what it still held.
        let received = collector.spans() - before;
        f.rate(format!("spans.received.ingest.{label}"), received as f64);
        let before = collector.spans();
        let w = ctx
            .world(&format!("spans-fire-{label}"), &ctx.sqlite, None)
            .await;
        let fire = workloads::fire_with(
            &w,
            args.fire_n,
            &daemons,
            carried,
            workloads::fire_lead(args.fire_n) + SECOND_WRITE,
        )
        .await;
        f.run(&format!("spans.fire.{label}"), fire);
        let received = collector.spans() - before;
        f.rate(format!("spans.received.fire.{label}"), received as f64);
    }
}

/// An OTLP/HTTP collector that counts the spans it is sent.
struct Collector {
    endpoint: String,
    spans: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Collector {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the collector");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let spans = Arc::new(AtomicU64::new(0));
        let counted = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let counted = counted.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body).unwrap_or_default();
                    let n: usize = request
                        .resource_spans
                        .iter()
                        .flat_map(|r| &r.scope_spans)
                        .map(|s| s.spans.len())
                        .sum();
                    counted.fetch_add(n as u64, Ordering::Relaxed);
                    axum::http::StatusCode::OK
                }
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

    fn spans(&self) -> u64 {
        self.spans.load(Ordering::Relaxed)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}
