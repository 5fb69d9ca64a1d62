//! The query and cancel API as a NATS micro service (`async_nats::service`, docs/CONTRACT.md §6):
//! name `timer-service`, one endpoint per verb on `<api prefix>.<verb>.*`, discoverable with
//! `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`. Daemons sharing a NATS answer in one queue group.
//! Each endpoint's metadata names the JSON Schemas of its request and replies (`schemas`).
//!
//! A reply goes only to an inbox (a subject under the configured inbox prefix): the service may
//! publish where its tenants may not (event and command subjects), so a request naming any other
//! reply subject is dropped here, before it is handled, and counted.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_nats::service::{NATS_SERVICE_ERROR, NATS_SERVICE_ERROR_CODE, Service, ServiceExt};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt};

use crate::domain::Subjects;
use crate::domain::api::{ApiError, Verb};
#[cfg(test)]
use crate::domain::subjects::DEFAULT_INBOX_PREFIX;
use crate::ports::{ApiReply, ApiRequest, ApiServer, BusError};

/// The service name in discovery (`nats micro ls`).
pub const SERVICE_NAME: &str = "timer-service";
/// At most this many bytes of a reason go into the `Nats-Service-Error` header; the JSON body
/// keeps the whole reason.
const MAX_HEADER_REASON_BYTES: usize = 512;
/// After a dropped request is logged, further drops are only counted for this long, so that a
/// client sending them in a loop cannot flood the log.
const DROP_LOG_INTERVAL: Duration = Duration::from_secs(60);

pub struct NatsApiServer {
    client: async_nats::Client,
    subjects: Subjects,
    /// The daemon's name, in the service's metadata.
    daemon: String,
    /// Replies go only to subjects starting with this (the inbox prefix and a dot).
    inbox: String,
    /// Replies go only to the requesting tenant's inboxes, under `<inbox prefix>.<tenantId>.`.
    per_tenant: bool,
}

impl NatsApiServer {
    pub fn new(
        client: async_nats::Client,
        subjects: Subjects,
        daemon: String,
        inbox_prefix: &str,
        per_tenant: bool,
    ) -> Self {
        Self {
            client,
            subjects,
            daemon,
            inbox: inbox_subjects(inbox_prefix),
            per_tenant,
        }
    }
}

#[async_trait]
impl ApiServer for NatsApiServer {
    async fn start(&self) -> Result<BoxStream<'static, ApiRequest>, BusError> {
        let error = |e: async_nats::Error| BusError(format!("cannot start the API service: {e}"));
        let service = self
            .client
            .service_builder()
            .description("Durable timers: get, list, cancel and count them per tenant")
            .metadata([("daemon".to_owned(), self.daemon.clone())].into())
            .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
            .await
            .map_err(error)?;
        let mut endpoints = SelectAll::new();
        for verb in Verb::ALL {
            let endpoint = service
                .endpoint_builder()
                .name(verb.as_str())
                .metadata(crate::schemas::endpoint_metadata(verb))
                .add(self.subjects.api(verb.as_str(), "*"))
                .await
                .map_err(error)?;
            endpoints.push(endpoint);
        }
        Ok(Requests {
            service: Some(service),
            endpoints,
            inbox: self.inbox.clone(),
            per_tenant: self.per_tenant,
            drops: DropLog::default(),
        }
        .boxed())
    }
}

/// Why a request was dropped unanswered (the `reason` label of the drop counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    /// No reply subject: there is nothing to answer to.
    NoReply,
    /// A reply subject outside the inboxes: answering would publish where the sender may not.
    NotInbox,
}

impl Dropped {
    fn as_str(self) -> &'static str {
        match self {
            Dropped::NoReply => "no_reply",
            Dropped::NotInbox => "reply_not_inbox",
        }
    }
}

/// What every inbox subject under `prefix` starts with: the prefix and one dot, whether or not
/// the setting ends with one.
fn inbox_subjects(prefix: &str) -> String {
    format!("{}.", prefix.trim_end_matches('.'))
}

/// Whether a request with reply subject `reply` may be answered, replies going only to
/// subjects starting with `inbox` (the inbox prefix and a dot) and, when the inboxes are per
/// tenant, with the requesting tenant's token after it: where each tenant may subscribe only to
/// its own inboxes, another tenant's inbox is a subject the sender may not publish on either.
fn check_reply(reply: Option<&str>, inbox: &str, tenant: Option<&str>) -> Result<(), Dropped> {
    let Some(reply) = reply.filter(|r| !r.is_empty()) else {
        return Err(Dropped::NoReply);
    };
    let rest = reply
        .strip_prefix(inbox)
        .filter(|rest| !rest.is_empty())
        .ok_or(Dropped::NotInbox)?;
    match tenant {
        None => Ok(()),
        Some(tenant) => match rest.strip_prefix(tenant) {
            Some(own) if own.len() > 1 && own.starts_with('.') => Ok(()),
            _ => Err(Dropped::NotInbox),
        },
    }
}

/// Logs the first request dropped for a foreign reply subject, then at most one line per
/// [`DROP_LOG_INTERVAL`] with the number dropped meanwhile; the counter sees every one.
#[derive(Default)]
struct DropLog {
    logged_at: Option<Instant>,
    unlogged: u64,
}

impl DropLog {
    fn dropped(&mut self, subject: &str, reply: &str) {
        let now = Instant::now();
        if self
            .logged_at
            .is_some_and(|at| now.duration_since(at) < DROP_LOG_INTERVAL)
        {
            self.unlogged += 1;
            return;
        }
        let tenant_id = subject.rsplit('.').next().unwrap_or_default();
        tracing::warn!(
            subject,
            reply,
            tenant_id,
            dropped_since_last_log = self.unlogged,
            "API request dropped: its reply subject is not an inbox, and the service answers \
             only to inboxes (further drops are counted, and logged at most once a minute)"
        );
        self.logged_at = Some(now);
        self.unlogged = 0;
    }
}

/// The requests of every endpoint that may be answered; stops the service when dropped.
struct Requests {
    service: Option<Service>,
    endpoints: SelectAll<async_nats::service::endpoint::Endpoint>,
    inbox: String,
    per_tenant: bool,
    drops: DropLog,
}

impl Stream for Requests {
    type Item = ApiRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ApiRequest>> {
        loop {
            let Some(request) = futures::ready!(self.endpoints.poll_next_unpin(cx)) else {
                return Poll::Ready(None);
            };
            let message = &request.message;
            let reply = message.reply.as_ref().map(|r| r.as_str());
            let tenant = self
                .per_tenant
                .then(|| message.subject.rsplit('.').next().unwrap_or_default());
            match check_reply(reply, &self.inbox, tenant) {
                Ok(()) => {
                    return Poll::Ready(Some(ApiRequest {
                        subject: message.subject.to_string(),
                        payload: message.payload.clone(),
                        reply: Box::new(NatsReply(request)),
                    }));
                }
                Err(reason) => {
                    metrics::counter!(crate::telemetry::API_REQUESTS_DROPPED,
                        "reason" => reason.as_str())
                    .increment(1);
                    match reason {
                        Dropped::NotInbox => {
                            let (subject, reply) =
                                (message.subject.to_string(), reply.unwrap_or_default());
                            self.drops.dropped(&subject, reply);
                        }
                        Dropped::NoReply => tracing::debug!(subject = %message.subject,
                            "API request without a reply subject: nothing to answer to"),
                    }
                }
            }
        }
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        if let Some(service) = self.service.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = service.stop().await;
            });
        }
    }
}

/// `reason` as a header value: NATS headers end at CR or LF (a value holding one cannot be
/// sent at all), so every control character becomes a space, and the length is bounded.
fn header_safe(reason: &str) -> String {
    let mut safe = String::with_capacity(reason.len().min(MAX_HEADER_REASON_BYTES + 3));
    for c in reason.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if safe.len() + c.len_utf8() > MAX_HEADER_REASON_BYTES {
            safe.push('…');
            break;
        }
        safe.push(c);
    }
    safe
}

struct NatsReply(async_nats::service::Request);

#[async_trait]
impl ApiReply for NatsReply {
    async fn send(&self, result: Result<Vec<u8>, ApiError>) -> Result<(), BusError> {
        let sent = match result {
            Ok(body) => self.0.respond(Ok(Bytes::from(body))).await,
            // The micro protocol's error headers, and a JSON body with the reason too (the
            // library's own error reply has an empty body). The reason may quote the request,
            // so the header gets a safe copy and the body the reason as it is.
            Err(error) => {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(NATS_SERVICE_ERROR, header_safe(&error.message));
                headers.insert(NATS_SERVICE_ERROR_CODE, error.code.to_string().as_str());
                self.0
                    .respond_with_headers(Ok(Bytes::from(error.body())), headers)
                    .await
            }
        };
        sent.map_err(|e| BusError(format!("reply not sent: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_go_only_to_inboxes() {
        let inbox = "_INBOX.";
        assert_eq!(check_reply(Some("_INBOX.abc.1"), inbox, None), Ok(()));
        assert_eq!(check_reply(Some("_INBOX.acme.xyz"), inbox, None), Ok(()));
        for foreign in [
            "timer.evt.due.globex",
            "timer.cmd.cancel.globex",
            "foo.bar",
            "_INBOX",
            "_INBOX.",
            "_INBOXES.x",
            "x._INBOX.y",
        ] {
            assert_eq!(
                check_reply(Some(foreign), inbox, None),
                Err(Dropped::NotInbox),
                "{foreign}"
            );
        }
        assert_eq!(check_reply(None, inbox, None), Err(Dropped::NoReply));
        assert_eq!(check_reply(Some(""), inbox, None), Err(Dropped::NoReply));
    }

    #[test]
    fn per_tenant_inboxes_are_the_requesting_tenants_own() {
        let inbox = "_INBOX.";
        let acme = Some("acme");
        assert_eq!(check_reply(Some("_INBOX.acme.xyz.1"), inbox, acme), Ok(()));
        for foreign in [
            "_INBOX.globex.xyz",
            "_INBOX.acmeco.xyz",
            "_INBOX.acme.",
            "_INBOX.acme",
            "_INBOX.xyz",
        ] {
            assert_eq!(
                check_reply(Some(foreign), inbox, acme),
                Err(Dropped::NotInbox),
                "{foreign}"
            );
        }
    }

    #[test]
    fn a_configured_prefix_is_read_with_or_without_its_dot() {
        assert_eq!(inbox_subjects("replies.timers"), "replies.timers.");
        assert_eq!(inbox_subjects("replies.timers."), "replies.timers.");
        assert_eq!(inbox_subjects(DEFAULT_INBOX_PREFIX), "_INBOX.");
    }

    #[test]
    fn header_reasons_hold_no_control_character_and_are_bounded() {
        let reason = "unknown field `a\nb\r\u{0}c`, expected `serviceCallId`";
        let safe = header_safe(reason);
        assert!(!safe.chars().any(char::is_control), "{safe:?}");
        assert_eq!(safe, "unknown field `a b  c`, expected `serviceCallId`");
        assert!(safe.parse::<async_nats::HeaderValue>().is_ok());

        let long = "é".repeat(2000);
        let safe = header_safe(&long);
        assert!(safe.len() <= MAX_HEADER_REASON_BYTES + '…'.len_utf8());
        assert!(safe.ends_with('…'));
        assert_eq!(header_safe("short"), "short");
    }
}
