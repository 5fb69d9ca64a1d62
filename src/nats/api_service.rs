//! The query and cancel API as a NATS micro service (`async_nats::service`, CONTRACT.md §6):
//! name `timer-service`, one endpoint per verb on `<api prefix>.<verb>.*`, discoverable with
//! `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`. Daemons sharing a NATS answer in one queue group.
//! Also the publisher that orders an API cancel in the command stream.

use std::pin::Pin;
use std::task::{Context, Poll};

use async_nats::jetstream;
use async_nats::service::{NATS_SERVICE_ERROR, NATS_SERVICE_ERROR_CODE, Service, ServiceExt};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt};

use super::streams::{BrokerNames, incarnation};
use crate::domain::api::{ApiError, Verb};
use crate::domain::{StreamIncarnation, Subjects};
use crate::ports::{ApiReply, ApiRequest, ApiServer, BusError, CommandPublisher};

/// The service name in discovery (`nats micro ls`).
pub const SERVICE_NAME: &str = "timer-service";

pub struct NatsApiServer {
    client: async_nats::Client,
    subjects: Subjects,
    /// The daemon's name, in the service's metadata.
    daemon: String,
}

impl NatsApiServer {
    pub fn new(client: async_nats::Client, subjects: Subjects, daemon: String) -> Self {
        Self {
            client,
            subjects,
            daemon,
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
                .add(self.subjects.api(verb.as_str(), "*"))
                .await
                .map_err(error)?;
            endpoints.push(endpoint);
        }
        Ok(Requests {
            service: Some(service),
            endpoints,
        }
        .boxed())
    }
}

/// The requests of every endpoint; stops the service when dropped.
struct Requests {
    service: Option<Service>,
    endpoints: SelectAll<async_nats::service::endpoint::Endpoint>,
}

impl Stream for Requests {
    type Item = ApiRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ApiRequest>> {
        self.endpoints.poll_next_unpin(cx).map(|request| {
            request.map(|request| ApiRequest {
                subject: request.message.subject.to_string(),
                payload: request.message.payload.clone(),
                reply: Box::new(NatsReply(request)),
            })
        })
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

struct NatsReply(async_nats::service::Request);

#[async_trait]
impl ApiReply for NatsReply {
    async fn send(&self, result: Result<Vec<u8>, ApiError>) -> Result<(), BusError> {
        let sent = match result {
            Ok(body) => self.0.respond(Ok(Bytes::from(body))).await,
            // The micro protocol's error headers, and a JSON body with the reason too (the
            // library's own error reply has an empty body).
            Err(error) => {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(NATS_SERVICE_ERROR, error.message.as_str());
                headers.insert(NATS_SERVICE_ERROR_CODE, error.code.to_string().as_str());
                self.0
                    .respond_with_headers(Ok(Bytes::from(error.body())), headers)
                    .await
            }
        };
        sent.map_err(|e| BusError(format!("reply not sent: {e}")))
    }
}

/// Publishes commands to the command stream through JetStream and returns their sequence.
pub struct JetStreamCommandPublisher {
    js: jetstream::Context,
    names: BrokerNames,
}

impl JetStreamCommandPublisher {
    pub fn new(js: jetstream::Context, names: BrokerNames) -> Self {
        Self { js, names }
    }
}

#[async_trait]
impl CommandPublisher for JetStreamCommandPublisher {
    /// The incarnation is read before and after the publish: the same both times, it is the
    /// one that stored the command; otherwise the stream was created anew meanwhile and the
    /// command's place in the order cannot be told, which is an error.
    async fn publish(
        &self,
        subject: String,
        payload: Bytes,
    ) -> Result<(StreamIncarnation, u64), BusError> {
        let before = incarnation(&self.js, &self.names.command_stream).await?;
        let ack = self
            .js
            .publish(subject, payload)
            .await
            .map_err(|e| BusError(format!("publish failed: {e}")))?
            .await
            .map_err(|e| BusError(format!("no PubAck: {e}")))?;
        let after = incarnation(&self.js, &self.names.command_stream).await?;
        if before != after {
            return Err(BusError(format!(
                "the command stream was created anew while the command was published ({before}, then {after})"
            )));
        }
        Ok((after, ack.sequence))
    }

    /// The command consumer's ack floor: every command up to it is acknowledged or terminated.
    async fn handled_through(&self) -> Result<u64, BusError> {
        // Getting the consumer fetches its info: one request to the broker, not two.
        let consumer: jetstream::consumer::PullConsumer = self
            .js
            .get_consumer_from_stream(&self.names.consumer, &self.names.command_stream)
            .await
            .map_err(|e| BusError(format!("command consumer unavailable: {e}")))?;
        Ok(consumer.cached_info().ack_floor.stream_sequence)
    }
}
