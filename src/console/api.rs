//! The console's JSON endpoints. A tenant's reads and actions are the query API's own requests
//! (`get`, `list`, `stats`, `cancel`, `cancel-many`, docs/CONTRACT.md §6), handed to the
//! ApiResponder inside the process: the same validation, the same per-tenant turns and bounds,
//! the same answers as over NATS, and they work while the broker is away (reads need only the
//! database). The overview (`overview`) and a tenant's activity (`activity`) are the console's
//! own.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::oneshot;

use super::Console;
use crate::domain::api::{ApiError, Verb};
use crate::ports::{ApiReply, ApiRequest, BusError};

/// Longest a console request waits for its answer: a `cancel-many` answers within 25 s.
const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// How long a browser is asked to wait while the ApiResponder restarts.
const RESTART_RETRY: Duration = Duration::from_secs(1);

/// Where an in-process request's answer goes.
type Answer = oneshot::Sender<Result<Vec<u8>, ApiError>>;

/// The reply of an in-process request: handed back through a channel.
struct LocalReply(Mutex<Option<Answer>>);

#[async_trait]
impl ApiReply for LocalReply {
    async fn send(&self, result: Result<Vec<u8>, ApiError>) -> Result<(), BusError> {
        let sender = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        match sender {
            Some(sender) => sender
                .send(result)
                .map_err(|_| BusError("the console request was given up".into())),
            None => Err(BusError("answered twice".into())),
        }
    }
}

impl Console {
    /// Asks the query API `verb` for `tenant` with `body`, as a client over NATS would.
    pub(super) async fn ask(&self, verb: Verb, tenant: &str, body: Bytes) -> Response {
        let (sender, answer) = oneshot::channel();
        let request = ApiRequest {
            subject: format!("{}.{}.{tenant}", self.subjects.api_prefix(), verb.as_str()),
            payload: body,
            reply: Box::new(LocalReply(Mutex::new(Some(sender)))),
        };
        if !self.registry.api_request(request) {
            return error(ApiError::unavailable(
                "the API is restarting; try again in a moment",
                RESTART_RETRY,
            ));
        }
        match tokio::time::timeout(ANSWER_WAIT, answer).await {
            Ok(Ok(Ok(body))) => json_bytes(StatusCode::OK, body),
            Ok(Ok(Err(e))) => error(e),
            Ok(Err(_)) => error(ApiError::internal(
                "the request was dropped unanswered; the daemon logged why",
            )),
            Err(_) => error(ApiError::internal(format!(
                "no answer within {} s",
                ANSWER_WAIT.as_secs()
            ))),
        }
    }
}

/// `value` as a 200 JSON answer (500 should it not encode).
pub(super) fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => json_bytes(StatusCode::OK, body),
        Err(e) => error(ApiError::internal(format!("cannot encode the answer: {e}"))),
    }
}

/// A JSON body with `status`, never cached.
pub(super) fn json_bytes(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// An error as the API gives it: its code, `{ "error": … }`, and `Retry-After` on a 503.
pub(super) fn error(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_bytes(status, e.body());
    if let Some(after) = e.retry_after {
        let seconds = after.as_secs_f64().ceil().max(1.0) as u64;
        if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }
    response
}
