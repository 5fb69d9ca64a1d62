//! Ports of the query and cancel API: where requests come from and how they are answered, and
//! how a cancel is ordered in the command stream. The NATS micro service implements both.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

use super::event_bus::BusError;
use crate::domain::StreamIncarnation;
use crate::domain::api::ApiError;

/// One request to the API.
pub struct ApiRequest {
    pub subject: String,
    pub payload: Bytes,
    pub reply: Box<dyn ApiReply>,
}

/// Answers one request: a JSON body, or an error with its code and reason.
#[async_trait]
pub trait ApiReply: Send + Sync {
    async fn send(&self, result: Result<Vec<u8>, ApiError>) -> Result<(), BusError>;
}

#[async_trait]
pub trait ApiServer: Send + Sync + 'static {
    /// Starts answering on the API subjects. Requests arrive on the stream; dropping it stops
    /// the service (it leaves discovery too). The stream ends when the service can no longer
    /// receive.
    async fn start(&self) -> Result<BoxStream<'static, ApiRequest>, BusError>;
}

/// Why a published command has no place in the order to report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The command stream did not store it.
    #[error("the command stream did not store it: {0}")]
    NotStored(String),
    /// Stored at `seq` (the PubAck came), but in which incarnation of the stream cannot be told
    /// now: it is applied from the stream all the same.
    #[error("stored at sequence {seq}, but its stream's incarnation cannot be told: {reason}")]
    Unordered { seq: u64, reason: String },
}

/// Publishes a command to the command stream, returning, once stored, the incarnation of the
/// stream that stored it and its sequence there.
#[async_trait]
pub trait CommandPublisher: Send + Sync + 'static {
    async fn publish(
        &self,
        subject: String,
        payload: Bytes,
    ) -> Result<(StreamIncarnation, u64), PublishError>;

    /// The stream sequence up to which every command that may share a key with command `seq`
    /// has been handled (stored or refused).
    async fn handled_through(&self, seq: u64) -> Result<u64, BusError>;

    /// Waits, at most `bound`, until every command that may share a key with command `seq` and
    /// came before it has been handled; says whether they all were. A consumer still being
    /// created (a daemon starting) or a broker restarting answers in a moment, so a failed
    /// look is asked again until the bound, less often the longer it waits (each look is a
    /// few requests to the broker, and many commands may wait at once).
    async fn await_handled_before(&self, seq: u64, bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        let mut pause = Duration::from_millis(5);
        loop {
            match tokio::time::timeout_at(deadline, self.handled_through(seq)).await {
                Ok(Ok(floor)) if floor + 1 >= seq => return true,
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "cannot tell yet which commands are handled")
                }
                Err(_) => return false,
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }
}
