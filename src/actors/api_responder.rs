//! ApiResponder actor: answers the query and cancel API (docs/CONTRACT.md §6) — `get`, `list`,
//! `cancel`, `stats` on `timer.api.<verb>.<tenantId>`.
//!
//! Every request is scoped by the tenant in its subject: reads go through Persistence with that
//! tenant, so another tenant's timer is simply not found. A `cancel` is ordered with every other
//! command: it is published as a `CancelTimer` to the command stream, applied with the sequence
//! the PubAck gave it, and answered only once committed (the CommandHandler meets the same
//! command later and changes nothing). A bad request is answered 400 with a reason.
//!
//! Requests are handled in tasks of their own, at most `[api] max_in_flight_per_tenant` of one
//! tenant at once while the tenant's others wait their turn (`admission`), so a slow one holds
//! up no other and one tenant's flood waits behind itself; reads also take turns by tenant on
//! Persistence's reader connections. A request's failure or panic reaches only its caller, who is answered 500
//! either way. When the service cannot receive any more (the connection closed), the actor
//! fails and is restarted.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::Semaphore;
use tokio_util::task::AbortOnDropHandle;

use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::backoff::Retries;
use crate::domain::Subjects;
use crate::domain::api::ApiError;
use crate::ports::{ApiRequest, ApiServer, Clock, CommandPublisher};

mod admission;
mod handler;
mod ordered;

use admission::Admission;
use handler::Handler;

/// Requests waiting or handled, all tenants together; past this, receiving waits.
pub const MAX_QUEUED: usize = 4_096;

#[derive(Default)]
pub struct ApiResponder;

impl NamedActor for ApiResponder {
    const NAME: &'static str = "api_responder";
}

#[derive(Clone)]
pub struct ApiResponderArgs {
    pub registry: Registry,
    pub server: Arc<dyn ApiServer>,
    pub publisher: Arc<dyn CommandPublisher>,
    pub clock: Arc<dyn Clock>,
    pub subjects: Subjects,
    /// Most requests of one tenant handled at once.
    pub max_in_flight_per_tenant: usize,
}

pub struct ApiResponderState {
    args: ApiResponderArgs,
    /// The task receiving requests; aborted (stopping the service) when the actor ends.
    serving: Option<AbortOnDropHandle<()>>,
    failed_starts: Retries,
}

pub enum ApiResponderMsg {
    /// Start the service (again, after a failed attempt).
    Start,
    /// The service can no longer receive requests.
    Ended,
}

impl Actor for ApiResponder {
    type Msg = ApiResponderMsg;
    type State = ApiResponderState;
    type Arguments = ApiResponderArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ApiResponderArgs,
    ) -> Result<ApiResponderState, ActorProcessingErr> {
        Ok(ApiResponderState {
            args,
            serving: None,
            failed_starts: Retries::default(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut ApiResponderState,
    ) -> Result<(), ActorProcessingErr> {
        myself.cast(ApiResponderMsg::Start)?;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut ApiResponderState,
    ) -> Result<(), ActorProcessingErr> {
        state.serving.take();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: ApiResponderMsg,
        state: &mut ApiResponderState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ApiResponderMsg::Start => match state.args.server.start().await {
                Ok(requests) => {
                    tracing::info!(
                        actor = ApiResponder::NAME,
                        prefix = state.args.subjects.api_prefix(),
                        "answering the query and cancel API"
                    );
                    state.failed_starts.succeeded();
                    let handler = Handler::new(&state.args);
                    let per_tenant = state.args.max_in_flight_per_tenant.max(1);
                    let task = tokio::spawn(serve(requests, handler, per_tenant, myself.clone()));
                    state.serving = Some(AbortOnDropHandle::new(task));
                }
                Err(e) => {
                    let delay = state.failed_starts.failed();
                    tracing::warn!(actor = ApiResponder::NAME, error = %e,
                        retry_in_ms = delay.as_millis() as u64, "cannot start the API");
                    myself.send_after(delay, || ApiResponderMsg::Start);
                }
            },
            ApiResponderMsg::Ended => {
                return Err("the API service stopped receiving requests".into());
            }
        }
        Ok(())
    }
}

/// Receives requests and answers each in a task of its own, a tenant's requests taking turns
/// (see [`Admission`]). The receiving waits only when [`MAX_QUEUED`] requests wait in all.
async fn serve(
    mut requests: futures::stream::BoxStream<'static, ApiRequest>,
    handler: Handler,
    per_tenant: usize,
    actor: ActorRef<ApiResponderMsg>,
) {
    let slots = Arc::new(Semaphore::new(MAX_QUEUED));
    let admission = Admission::new(per_tenant);
    while let Some(request) = requests.next().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let handler = handler.clone();
        let admitted = handler
            .tenant_of(&request.subject)
            .map(|tenant| admission.admit(tenant));
        tokio::spawn(async move {
            match admitted {
                Some(Err(refused)) => answer(&handler, request, Some(refused)).await,
                Some(Ok(ticket)) => {
                    let _turn = ticket.turn().await;
                    answer(&handler, request, None).await;
                }
                // No tenant: answered 400 by the handler, at once.
                None => answer(&handler, request, None).await,
            }
            drop(slot);
        });
    }
    let _ = actor.cast(ApiResponderMsg::Ended);
}

/// The reason a client reads when its request hit a fault of the service rather than of the
/// request: the details are in the service's log, not in the reply.
const UNEXPECTED: &str = "the request failed unexpectedly; the service logged why";

/// Handles one request (or answers it with `refused`) and sends its one reply. A panic while
/// handling it, or while sending the reply, still answers 500 (the client is not left waiting
/// for a timeout) and is logged.
async fn answer(handler: &Handler, request: ApiRequest, refused: Option<ApiError>) {
    let verb = handler.verb_of(&request.subject);
    let handled = match refused {
        Some(refused) => Ok(Err(refused)),
        None => {
            AssertUnwindSafe(handler.handle(&request.subject, &request.payload))
                .catch_unwind()
                .await
        }
    };
    let result = handled.unwrap_or_else(|panic| {
        tracing::error!(actor = ApiResponder::NAME, subject = %request.subject,
            panic = panic_message(panic.as_ref()), "API request handling panicked");
        Err(ApiError::internal(UNEXPECTED))
    });
    if let Err(e) = &result {
        if e.code >= 500 && e.retry_after.is_none() {
            tracing::error!(actor = ApiResponder::NAME, subject = %request.subject,
                code = e.code, reason = %e.message, "API request failed");
        } else {
            tracing::debug!(actor = ApiResponder::NAME, subject = %request.subject,
                code = e.code, reason = %e.message, "API request refused");
        }
    }
    let mut code = result.as_ref().map_or_else(|e| e.code, |_| 200);
    match AssertUnwindSafe(request.reply.send(result))
        .catch_unwind()
        .await
    {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(actor = ApiResponder::NAME, error = %e, "API reply not sent"),
        Err(panic) => {
            tracing::error!(actor = ApiResponder::NAME, subject = %request.subject,
                panic = panic_message(panic.as_ref()), "sending an API reply panicked; \
                 answering 500 instead");
            code = 500;
            let fallback =
                AssertUnwindSafe(request.reply.send(Err(ApiError::internal(UNEXPECTED))))
                    .catch_unwind()
                    .await;
            if !matches!(fallback, Ok(Ok(()))) {
                tracing::error!(actor = ApiResponder::NAME, subject = %request.subject,
                    "API request left unanswered: even the 500 reply could not be sent");
            }
        }
    }
    metrics::counter!(crate::telemetry::API_REQUESTS, "verb" => verb, "code" => code.to_string())
        .increment(1);
}

/// The text a panic was raised with, when it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use bytes::Bytes;

    use super::*;
    use crate::domain::StreamIncarnation;
    use crate::ports::{ApiReply, BusError, PublishError, SystemClock};

    /// A publisher whose command was stored (a PubAck came) but whose stream's incarnation could
    /// not be read afterwards.
    struct StoredUnordered;

    #[async_trait]
    impl CommandPublisher for StoredUnordered {
        async fn publish(
            &self,
            _subject: String,
            _payload: Bytes,
        ) -> Result<(StreamIncarnation, u64), PublishError> {
            Err(PublishError::Unordered {
                seq: 7,
                reason: "stream TIMER_COMMANDS unavailable".into(),
            })
        }

        async fn handled_through(&self, _seq: u64) -> Result<u64, BusError> {
            Ok(0)
        }
    }

    /// A publisher that fails the way a bug would: by panicking.
    struct PanickingPublisher;

    #[async_trait]
    impl CommandPublisher for PanickingPublisher {
        async fn publish(
            &self,
            _subject: String,
            _payload: Bytes,
        ) -> Result<(StreamIncarnation, u64), PublishError> {
            panic!("a bug while publishing");
        }

        async fn handled_through(&self, _seq: u64) -> Result<u64, BusError> {
            Ok(0)
        }
    }

    /// Records the code of every reply sent; panics on the first `panics` sends.
    #[derive(Clone, Default)]
    struct Replies {
        codes: Arc<Mutex<Vec<u16>>>,
        panics: Arc<Mutex<usize>>,
    }

    #[async_trait]
    impl ApiReply for Replies {
        async fn send(&self, result: Result<Vec<u8>, ApiError>) -> Result<(), BusError> {
            let panic_now = {
                let mut panics = self.panics.lock().unwrap();
                let panic_now = *panics > 0;
                *panics = panics.saturating_sub(1);
                panic_now
            };
            assert!(!panic_now, "a bug while replying");
            let code = result.as_ref().map_or_else(|e| e.code, |_| 200);
            self.codes.lock().unwrap().push(code);
            Ok(())
        }
    }

    fn handler() -> Handler {
        handler_with(Arc::new(PanickingPublisher))
    }

    fn handler_with(publisher: Arc<dyn CommandPublisher>) -> Handler {
        let registry = crate::actors::registry::Registry::new("api-test");
        Handler {
            persistence: registry.persistence(),
            registry,
            publisher,
            clock: Arc::new(SystemClock),
            subjects: Subjects::default(),
            epochs: Arc::default(),
        }
    }

    fn request(subject: &str, body: &str, replies: &Replies) -> ApiRequest {
        ApiRequest {
            subject: subject.into(),
            payload: Bytes::from(body.to_owned()),
            reply: Box::new(replies.clone()),
        }
    }

    fn codes(replies: &Replies) -> Vec<u16> {
        replies.codes.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn a_panic_while_handling_a_request_is_answered_500() {
        let replies = Replies::default();
        let cancel = request(
            "timer.api.cancel.acme",
            r#"{"serviceCallId":"sc-7"}"#,
            &replies,
        );
        answer(&handler(), cancel, None).await;
        assert_eq!(codes(&replies), [500]);
    }

    #[tokio::test]
    async fn a_panic_while_replying_is_answered_500_once() {
        let replies = Replies::default();
        *replies.panics.lock().unwrap() = 1;
        answer(
            &handler(),
            request("timer.api.stats.acme", "[", &replies),
            None,
        )
        .await;
        assert_eq!(codes(&replies), [500]);

        let replies = Replies::default();
        answer(
            &handler(),
            request("timer.api.stats.acme", "[", &replies),
            None,
        )
        .await;
        assert_eq!(codes(&replies), [400], "no panic, the request's own answer");
    }

    /// A cancel whose PubAck came is in the stream and applied from there, whatever fails
    /// after: the answer says so, never that the stream did not store it.
    #[tokio::test]
    async fn a_cancel_stored_but_not_ordered_is_not_called_unstored() {
        let handler = handler_with(Arc::new(StoredUnordered));
        let error = handler
            .handle("timer.api.cancel.acme", br#"{"serviceCallId":"sc-7"}"#)
            .await
            .unwrap_err();
        assert_eq!(error.code, 500);
        assert!(
            error
                .message
                .contains("is in the command stream (sequence 7) and is applied from there"),
            "{}",
            error.message
        );
        assert!(
            !error.message.contains("did not store"),
            "{}",
            error.message
        );
    }
}
