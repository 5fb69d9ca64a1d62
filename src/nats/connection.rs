//! Connecting to NATS. The daemon never exits because the broker is away: the first connection
//! and every reconnection are retried forever, with a capped backoff.

use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, jetstream};

use crate::backoff;
use crate::config::NatsSettings;
use crate::health::Health;

/// Upper bound of the reconnect backoff: how long after the broker returns the daemon may take
/// to notice.
const FIRST_RECONNECT_DELAY: Duration = Duration::from_millis(50);
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);
/// How long a JetStream request or PubAck may take before it counts as failed and is retried.
pub const JETSTREAM_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("broker URL {url:?} is unusable: {source}")]
    Url {
        url: String,
        source: async_nats::ConnectError,
    },
    #[error("broker URL {url:?} is unusable: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("NATS {what} {path}: {source}")]
    File {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
}

/// The connection options of `[nats]`: authentication (credentials file, nkey seed,
/// user/password or token; also accepted in the URL) and TLS (a CA to trust, a client
/// certificate for mutual TLS).
async fn authenticated(settings: &NatsSettings) -> Result<ConnectOptions, ConnectError> {
    let file_error = |what, path: &std::path::Path| {
        let path = path.display().to_string();
        move |source| ConnectError::File { what, path, source }
    };
    let mut options = ConnectOptions::new();
    if let Some(path) = &settings.credentials {
        options = options
            .credentials_file(path)
            .await
            .map_err(file_error("credentials file", path))?;
    }
    if let Some(path) = &settings.nkey_seed {
        let seed = std::fs::read_to_string(path).map_err(file_error("nkey seed file", path))?;
        options = options.nkey(seed.trim().to_owned());
    }
    if let (Some(user), Some(password)) = (&settings.user, &settings.password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &settings.token {
        options = options.token(token.clone());
    }
    if let Some(ca) = &settings.tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let (Some(cert), Some(key)) = (&settings.tls_cert, &settings.tls_key) {
        options = options
            .add_client_certificate(cert.clone(), key.clone())
            .require_tls(true);
    }
    Ok(options)
}

/// The servers of a `broker_url`: one URL, or several separated by commas (the nodes of a
/// cluster; the client also learns the others from whichever it reaches).
pub fn server_addrs(url: &str) -> Result<Vec<async_nats::ServerAddr>, ConnectError> {
    url.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse().map_err(|e: std::io::Error| ConnectError::BadUrl {
                url: u.to_owned(),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// Starts connecting to `url`; returns at once, the connection is made in the background.
/// Fails only when the URL or an authentication file is unusable. The connection's state is
/// kept in `health`; `name` is how the server lists the connection.
pub async fn connect(
    url: &str,
    settings: &NatsSettings,
    name: &str,
    health: Health,
) -> Result<Client, ConnectError> {
    let servers = server_addrs(url)?;
    authenticated(settings)
        .await?
        .name(format!("timer-service {name}"))
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
        .event_callback(move |event| {
            let health = health.clone();
            async move {
                match event {
                    Event::Connected => {
                        health.set_broker_connected(true);
                        tracing::info!(actor = "broker", "connected to NATS");
                    }
                    Event::Disconnected => {
                        health.set_broker_connected(false);
                        tracing::warn!(actor = "broker", "disconnected from NATS; reconnecting");
                    }
                    other => {
                        tracing::warn!(actor = "broker", event = %other, "NATS connection event")
                    }
                }
            }
        })
        .connect(servers)
        .await
        .map_err(|source| ConnectError::Url {
            url: url.to_owned(),
            source,
        })
}

/// A JetStream context whose requests and PubAcks time out, so a broker outage turns into
/// retried errors instead of hung actors.
pub fn jetstream_context(client: Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(JETSTREAM_TIMEOUT)
        .ack_timeout(JETSTREAM_TIMEOUT)
        .build(client)
}
