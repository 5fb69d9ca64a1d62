//! Http actor: `/metrics` (Prometheus text), `/healthz` and `/readyz` (docs/CONTRACT.md §7) on one
//! small axum server.
//!
//! - `/healthz` answers 200 while the process and its Supervisor run (this actor is the
//!   Supervisor's child: when the Supervisor stops, so does the server).
//! - `/readyz` answers 200 only while the broker is connected, the database accepts writes
//!   (Persistence probes it every two seconds) and every actor runs; otherwise 503 with a JSON
//!   body naming what is wrong.
//!
//! With `[console]` set, the web console (`crate::console`) is served on the same listener at
//! `/console`.
//!
//! The address is bound when the actor starts, so a port in use stops start-up with a clear
//! error instead of a daemon nobody can watch.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::json;
use tokio_util::task::AbortOnDropHandle;

use super::supervisor::NamedActor;
use crate::console::ConsoleArgs;
use crate::health::Health;

#[derive(Default)]
pub struct Http;

impl NamedActor for Http {
    const NAME: &'static str = "http";
}

#[derive(Clone)]
pub struct HttpArgs {
    pub listen: SocketAddr,
    pub metrics: PrometheusHandle,
    pub health: Health,
    /// The web console's routes, when it is on.
    pub console: Option<ConsoleArgs>,
}

pub struct HttpState {
    _server: AbortOnDropHandle<()>,
}

/// No messages: the server task does the work; the actor owns it and its lifetime.
pub enum HttpMsg {}

struct Shared {
    metrics: PrometheusHandle,
    health: Health,
}

impl Actor for Http {
    type Msg = HttpMsg;
    type State = HttpState;
    type Arguments = HttpArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: HttpArgs,
    ) -> Result<HttpState, ActorProcessingErr> {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(|e| format!("cannot listen on {} for HTTP: {e}", args.listen))?;
        let shared = Arc::new(Shared {
            metrics: args.metrics,
            health: args.health,
        });
        let mut app = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(shared);
        let console = args.console.is_some();
        if let Some(console) = args.console {
            app = app.merge(crate::console::router(console));
        }
        tracing::info!(actor = Http::NAME, listen = %args.listen, console,
            "serving /metrics, /healthz, /readyz{}", if console { ", /console" } else { "" });
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(actor = Http::NAME, error = %e, "HTTP server stopped");
            }
        });
        Ok(HttpState {
            _server: AbortOnDropHandle::new(server),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: HttpMsg,
        _state: &mut HttpState,
    ) -> Result<(), ActorProcessingErr> {
        match message {}
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    shared.metrics.run_upkeep();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        shared.metrics.render(),
    )
}

async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

async fn readyz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let status = shared.health.status();
    let problems = status.problems();
    let code = if problems.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "ready": problems.is_empty(),
        "problems": problems,
        "brokerConnected": status.broker_connected,
        "storageError": status.storage_error,
        "actorsDown": status.actors_down,
    });
    (code, axum::Json(body))
}
