//! Connecting to NATS. The daemon never exits because the broker is away: the first connection
//! and every reconnection are retried forever, with a capped backoff.

use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, jetstream};

use super::link::LinkWatch;
use crate::backoff::Retry;
use crate::config::{NatsSettings, redact_url};

/// The reconnect policy, 50 ms to 1 s. Its bound is how long after the broker returns the
/// daemon may take to notice, beside an attempt under way (`connect_timeout`) that a silent
/// path holds up. An attempt a second costs a broker that is down nothing.
const RECONNECT: Retry = Retry::new(Duration::from_millis(50), Duration::from_secs(1));
/// How long a JetStream request or PubAck may take before it counts as failed and is retried.
pub const JETSTREAM_TIMEOUT: Duration = Duration::from_secs(5);

/// The URLs in these errors are redacted (no password or token): errors end up in logs.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("broker URL {url:?} is unusable: {source}")]
    Url {
        url: String,
        source: async_nats::ConnectError,
    },
    #[error("broker URL {url:?} is unusable: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("broker URLs carry different credentials: write them once, or in [nats]")]
    UrlCredentials,
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
        options = options.user_and_password(user.clone(), password.expose().to_owned());
    }
    if let Some(token) = &settings.token {
        options = options.token(token.expose().to_owned());
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

/// Credentials written in a broker URL: `nats://user:password@host` or `nats://token@host`.
#[derive(Clone, PartialEq, Eq)]
pub enum UrlCredentials {
    UserPassword { user: String, password: String },
    Token(String),
}

impl std::fmt::Debug for UrlCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UserPassword { user, .. } => write!(f, "UserPassword({user:?}, ***)"),
            Self::Token(_) => f.write_str("Token(***)"),
        }
    }
}

impl UrlCredentials {
    /// Authenticates `options` with these credentials.
    pub fn apply(self, options: ConnectOptions) -> ConnectOptions {
        match self {
            Self::UserPassword { user, password } => options.user_and_password(user, password),
            Self::Token(token) => options.token(token),
        }
    }
}

/// The servers of a `broker_url` — one URL, or several separated by commas (the nodes of a
/// cluster; the client also learns the others from whichever it reaches) — without the
/// credentials written in them, and those credentials. The client library neither sends a
/// URL's credentials nor keeps them out of its own debug logs, so they travel as connection
/// options instead.
pub fn broker_servers(
    url: &str,
) -> Result<(Vec<async_nats::ServerAddr>, Option<UrlCredentials>), ConnectError> {
    let mut servers = Vec::new();
    let mut credentials: Option<UrlCredentials> = None;
    for piece in url.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let bad = |reason: String| ConnectError::BadUrl {
            url: redact_url(piece),
            reason,
        };
        let addr: async_nats::ServerAddr = piece
            .parse()
            .map_err(|e: std::io::Error| bad(e.to_string()))?;
        if let Some(user) = addr.username() {
            let found = match addr.password() {
                Some(password) => UrlCredentials::UserPassword {
                    user: percent_decode(user),
                    password: percent_decode(password),
                },
                None => UrlCredentials::Token(percent_decode(user)),
            };
            match &credentials {
                Some(known) if *known != found => return Err(ConnectError::UrlCredentials),
                _ => credentials = Some(found),
            }
        }
        let mut bare = addr.into_inner();
        if bare.set_password(None).is_err() || bare.set_username("").is_err() {
            return Err(bad("its credentials cannot be taken out".into()));
        }
        servers.push(async_nats::ServerAddr::from_url(bare).map_err(|e| bad(e.to_string()))?);
    }
    Ok((servers, credentials))
}

/// The servers of a `broker_url`, without credentials (see [`broker_servers`]).
pub fn server_addrs(url: &str) -> Result<Vec<async_nats::ServerAddr>, ConnectError> {
    broker_servers(url).map(|(servers, _)| servers)
}

/// `%XX` escapes of a URL's user name or password, decoded.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `[nats]` names a way to authenticate (then credentials in the URL are not used).
fn has_auth(settings: &NatsSettings) -> bool {
    settings.credentials.is_some()
        || settings.nkey_seed.is_some()
        || settings.user.is_some()
        || settings.token.is_some()
}

/// The servers of `url` and the options that authenticate and secure a connection to them:
/// what the daemon's connection and the CLI's share. Credentials written in the URL are used
/// only when `settings` names no way to authenticate.
pub async fn connect_options(
    url: &str,
    settings: &NatsSettings,
) -> Result<(Vec<async_nats::ServerAddr>, ConnectOptions), ConnectError> {
    let (servers, url_credentials) = broker_servers(url)?;
    let mut options = authenticated(settings).await?;
    if let Some(credentials) = url_credentials.filter(|_| !has_auth(settings)) {
        options = credentials.apply(options);
    }
    Ok((servers, options))
}

/// Starts connecting to `url`; returns at once, the connection is made in the background.
/// Fails only when the URL or an authentication file is unusable. The connection's life is
/// reported to `link`; `name` is how the server lists the connection. The client pings a
/// third of `link_timeout` apart while nothing comes in, and drops the connection after three
/// unanswered pings (the client's own limit), so a silent path is noticed within
/// `link_timeout`; `connect_timeout` bounds each attempt to connect.
pub async fn connect(
    url: &str,
    settings: &NatsSettings,
    name: &str,
    link: &LinkWatch,
) -> Result<Client, ConnectError> {
    let (servers, options) = connect_options(url, settings).await?;
    let events = link.downgrade();
    let client = options
        .name(format!("timer-service {name}"))
        .retry_on_initial_connect()
        .max_reconnects(None)
        .ping_interval(settings.link_timeout / 3)
        .connection_timeout(settings.connect_timeout)
        .reconnect_delay_callback(|attempts| match attempts {
            0 => Duration::ZERO,
            n => RECONNECT.delay(u32::try_from(n).unwrap_or(u32::MAX)),
        })
        .event_callback(move |event| {
            let link = events.upgrade();
            async move {
                match (event, link) {
                    (Event::Connected, Some(link)) => link.connected(),
                    (Event::Disconnected, Some(link)) => link.disconnected(),
                    (other, _) => {
                        tracing::warn!(actor = "broker", event = %other, "NATS connection event")
                    }
                }
            }
        })
        .connect(servers)
        .await
        .map_err(|source| ConnectError::Url {
            url: redact_url(url),
            source,
        })?;
    link.attach(client.clone());
    Ok(client)
}

/// A JetStream context whose requests and PubAcks time out, so a broker outage turns into
/// retried errors instead of hung actors.
pub fn jetstream_context(client: Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(JETSTREAM_TIMEOUT)
        .ack_timeout(JETSTREAM_TIMEOUT)
        .build(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_urls_for_the_connection_options() {
        let (servers, credentials) =
            broker_servers("nats://svc:p%40ss%2Fw0rd@n1:4222, nats://svc:p%40ss%2Fw0rd@n2")
                .unwrap();
        assert_eq!(
            credentials,
            Some(UrlCredentials::UserPassword {
                user: "svc".into(),
                password: "p@ss/w0rd".into()
            })
        );
        for server in &servers {
            assert!(server.username().is_none() && server.password().is_none());
            assert!(!format!("{server:?}").contains("w0rd"));
        }
        let (_, token) = broker_servers("tls://t0ken@nats").unwrap();
        assert_eq!(token, Some(UrlCredentials::Token("t0ken".into())));
        assert!(!format!("{token:?}").contains("t0ken"));
        assert!(matches!(
            broker_servers("nats://a:x@n1,nats://a:y@n2"),
            Err(ConnectError::UrlCredentials)
        ));
    }

    #[test]
    fn a_bad_url_is_reported_without_its_password() {
        let error = server_addrs("nats://svc:s3cret@nats:port").unwrap_err();
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("svc:***@nats"), "{shown}");
    }
}
