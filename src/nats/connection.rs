//! Connecting to NATS. The daemon never exits because the broker is away: the first connection
//! and every reconnection are retried forever, with a capped backoff.

use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, jetstream};

use crate::backoff;

/// Upper bound of the reconnect backoff: how long after the broker returns the daemon may take
/// to notice.
const FIRST_RECONNECT_DELAY: Duration = Duration::from_millis(50);
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);
/// How long a JetStream request or PubAck may take before it counts as failed and is retried.
const JETSTREAM_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts connecting to `url`; returns at once, the connection is made in the background.
/// Fails only when the URL itself is unusable.
pub async fn connect(url: &str) -> Result<Client, async_nats::ConnectError> {
    ConnectOptions::new()
        .name("timer-service")
        .retry_on_initial_connect()
        .max_reconnects(None)
        .reconnect_delay_callback(|attempts| match attempts {
            0 => Duration::ZERO,
            n => backoff::exponential(
                u32::try_from(n).unwrap_or(u32::MAX),
                FIRST_RECONNECT_DELAY,
                MAX_RECONNECT_DELAY,
            ),
        })
        .event_callback(|event| async move {
            match event {
                Event::Connected => tracing::info!(actor = "broker", "connected to NATS"),
                Event::Disconnected => {
                    tracing::warn!(actor = "broker", "disconnected from NATS; reconnecting")
                }
                other => tracing::warn!(actor = "broker", event = %other, "NATS connection event"),
            }
        })
        .connect(url)
        .await
}

/// A JetStream context whose requests and PubAcks time out, so a broker outage turns into
/// retried errors instead of hung actors.
pub fn jetstream_context(client: Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(JETSTREAM_TIMEOUT)
        .ack_timeout(JETSTREAM_TIMEOUT)
        .build(client)
}
