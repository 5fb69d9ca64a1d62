//! One API request, from its subject and body to its reply: routing by verb and the tenant
//! scope; the requests that are commands are `ordered`'s.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::ApiResponderArgs;
use crate::actors::persistence::{CallError, PersistenceClient};
use crate::actors::registry::Registry;
use crate::domain::api::{
    ApiError, Verb, cancel_many_reply, get_reply, list_reply, parse_cancel_many_request,
    parse_key_request, parse_list_request, parse_stats_request, stats_reply,
};
use crate::domain::forecast::ForecastWindow;
use crate::domain::tenant::check_tenant_id;
use crate::domain::{StreamIncarnation, Subjects};
use crate::ports::{Clock, CommandPublisher};
use crate::storage::StoreError;

/// How long a client whose read ran too long is asked to wait before it tries again.
const TOO_LONG_RETRY: Duration = Duration::from_secs(1);

/// Everything one request needs; cheap to clone into each request's task.
#[derive(Clone)]
pub(super) struct Handler {
    pub(super) persistence: PersistenceClient,
    pub(super) registry: Registry,
    pub(super) publisher: Arc<dyn CommandPublisher>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) subjects: Subjects,
    /// The epochs of the command stream incarnations met (see `domain::order`).
    pub(super) epochs: Arc<std::sync::Mutex<HashMap<StreamIncarnation, u32>>>,
}

impl Handler {
    pub(super) fn new(args: &ApiResponderArgs) -> Self {
        Self {
            persistence: args.registry.persistence(),
            registry: args.registry.clone(),
            publisher: args.publisher.clone(),
            clock: args.clock.clone(),
            subjects: args.subjects.clone(),
            epochs: Arc::default(),
        }
    }

    /// Answers one request on `subject` (`<api prefix>.<verb>.<tenantId>`).
    pub(super) async fn handle(&self, subject: &str, body: &[u8]) -> Result<Vec<u8>, ApiError> {
        let (verb, tenant_id) = self.route(subject)?;
        let storage = |e: CallError| match e {
            CallError::Store(StoreError::TooLong(limit)) => ApiError::unavailable(
                format!(
                    "the read ran longer than {} ms and was stopped: ask for less (a smaller \
                     limit, fewer forecastMinutes) or retry later",
                    limit.as_millis()
                ),
                TOO_LONG_RETRY,
            ),
            e => ApiError::internal(format!("storage unavailable: {e}")),
        };
        match verb {
            Verb::Get => {
                let service_call_id = parse_key_request(verb, body)?;
                match self
                    .persistence
                    .get(tenant_id, &service_call_id)
                    .await
                    .map_err(storage)?
                {
                    Some(timer) => get_reply(&timer),
                    None => Err(ApiError::not_found(format!(
                        "no timer {service_call_id:?} for tenant {tenant_id:?}"
                    ))),
                }
            }
            Verb::List => {
                let (filter, limit) = parse_list_request(body)?;
                let page = self
                    .persistence
                    .list(tenant_id, filter, limit)
                    .await
                    .map_err(storage)?;
                list_reply(&page)
            }
            Verb::Stats => {
                let forecast_minutes = parse_stats_request(body)?;
                let now = self.clock.now();
                let stats = self
                    .persistence
                    .stats(tenant_id, now)
                    .await
                    .map_err(storage)?;
                let forecast = match forecast_minutes {
                    None => None,
                    Some(minutes) => Some(
                        self.persistence
                            .forecast(tenant_id, ForecastWindow::new(now, minutes))
                            .await
                            .map_err(storage)?,
                    ),
                };
                stats_reply(&stats, forecast.as_deref())
            }
            Verb::Cancel => {
                let service_call_id = parse_key_request(verb, body)?;
                self.cancel(tenant_id, service_call_id).await
            }
            Verb::CancelMany => {
                let ask = parse_cancel_many_request(body)?;
                if ask.dry_run {
                    let count = self
                        .persistence
                        .count_cancellable(tenant_id, ask.filter)
                        .await
                        .map_err(storage)?;
                    return cancel_many_reply(count, true);
                }
                self.cancel_many(tenant_id, ask).await
            }
        }
    }

    /// The tenant a request subject names, when it names a valid one.
    pub(super) fn tenant_of<'s>(&self, subject: &'s str) -> Option<&'s str> {
        self.route(subject).ok().map(|(_, tenant)| tenant)
    }

    /// The verb of a request subject, for metrics (`unknown` when it names none).
    pub(super) fn verb_of(&self, subject: &str) -> &'static str {
        self.route(subject)
            .map(|(verb, _)| verb.as_str())
            .unwrap_or("unknown")
    }

    /// The verb and tenant of a request subject; a malformed tenant is a bad request.
    fn route<'s>(&self, subject: &'s str) -> Result<(Verb, &'s str), ApiError> {
        let rest = subject
            .strip_prefix(self.subjects.api_prefix())
            .and_then(|rest| rest.strip_prefix('.'))
            .ok_or_else(|| ApiError::bad_request(format!("unknown API subject {subject:?}")))?;
        let (verb, tenant_id) = rest
            .split_once('.')
            .and_then(|(verb, tenant)| Some((Verb::parse(verb)?, tenant)))
            .ok_or_else(|| ApiError::bad_request(format!("unknown API subject {subject:?}")))?;
        check_tenant_id(tenant_id).map_err(ApiError::bad_request)?;
        Ok((verb, tenant_id))
    }
}

#[cfg(test)]
impl Handler {
    /// A handler over a Persistence that is not running, publishing through `publisher`.
    pub(super) fn for_tests(publisher: Arc<dyn CommandPublisher>) -> Self {
        let registry = Registry::new("api-test");
        Self {
            persistence: registry.persistence(),
            registry,
            publisher,
            clock: Arc::new(crate::ports::SystemClock),
            subjects: Subjects::default(),
            epochs: Arc::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use bytes::Bytes;

    use super::*;
    use crate::ports::{BusError, PublishError};

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

    /// A cancel whose PubAck came is in the stream and applied from there, whatever fails
    /// after: the answer says so, never that the stream did not store it.
    #[tokio::test]
    async fn a_cancel_stored_but_not_ordered_is_not_called_unstored() {
        let handler = Handler::for_tests(Arc::new(StoredUnordered));
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
