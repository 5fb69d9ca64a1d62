//! Taking requests on, from the NATS service and from within the process (the console): each
//! is answered in a task of its own, a tenant's requests taking turns (see [`Admission`]), at
//! most [`MAX_QUEUED`] waiting or handled in all. A panic while answering still answers 500.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use ractor::ActorRef;
use tokio::sync::Semaphore;

use super::admission::Admission;
use super::handler::Handler;
use super::{ApiResponder, ApiResponderMsg, MAX_QUEUED};
use crate::actors::supervisor::NamedActor;
use crate::domain::api::ApiError;
use crate::ports::ApiRequest;

/// What every request goes through, whichever way it came; cheap to clone.
#[derive(Clone)]
pub(super) struct Intake {
    handler: Handler,
    admission: Admission,
    slots: Arc<Semaphore>,
}

impl Intake {
    pub(super) fn new(handler: Handler, per_tenant: usize) -> Self {
        Self {
            handler,
            admission: Admission::new(per_tenant),
            slots: Arc::new(Semaphore::new(MAX_QUEUED)),
        }
    }

    /// Waits for room among the [`MAX_QUEUED`], then answers `request` in a task of its own
    /// once its tenant's turn comes (at once when it is refused, or names no tenant: 400).
    pub(super) async fn take(&self, request: ApiRequest) {
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return;
        };
        let handler = self.handler.clone();
        let admitted = handler
            .tenant_of(&request.subject)
            .map(|tenant| self.admission.admit(tenant));
        tokio::spawn(async move {
            match admitted {
                Some(Err(refused)) => answer(&handler, request, Some(refused)).await,
                Some(Ok(ticket)) => {
                    let _turn = ticket.turn().await;
                    answer(&handler, request, None).await;
                }
                None => answer(&handler, request, None).await,
            }
            drop(slot);
        });
    }
}

/// Receives the NATS service's requests until it can receive no more, then tells the actor.
/// The receiving waits only when [`MAX_QUEUED`] requests wait in all.
pub(super) async fn serve(
    mut requests: futures::stream::BoxStream<'static, ApiRequest>,
    intake: Intake,
    actor: ActorRef<ApiResponderMsg>,
) {
    while let Some(request) = requests.next().await {
        intake.take(request).await;
    }
    let _ = actor.cast(ApiResponderMsg::Ended);
}

/// The reason a client reads when its request hit a fault of the service rather than of the
/// request: the details are in the service's log, not in the reply.
const UNEXPECTED: &str = "the request failed unexpectedly; the service logged why";

/// Handles one request (or answers it with `refused`) and sends its one reply. A panic while
/// handling it, or while sending the reply, still answers 500 (the client is not left waiting
/// for a timeout) and is logged.
pub(super) async fn answer(handler: &Handler, request: ApiRequest, refused: Option<ApiError>) {
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
    use crate::ports::{ApiReply, BusError, CommandPublisher, PublishError};

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
        Handler::for_tests(Arc::new(PanickingPublisher))
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

    /// A bad stats request, answered 400 when nothing goes wrong.
    async fn bad_stats(replies: &Replies) {
        let bad = request("timer.api.stats.acme", "[", replies);
        answer(&handler(), bad, None).await;
    }

    #[tokio::test]
    async fn a_panic_while_replying_is_answered_500_once() {
        let replies = Replies::default();
        *replies.panics.lock().unwrap() = 1;
        bad_stats(&replies).await;
        assert_eq!(codes(&replies), [500]);

        let replies = Replies::default();
        bad_stats(&replies).await;
        assert_eq!(codes(&replies), [400], "no panic, the request's own answer");
    }
}
