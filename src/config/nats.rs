//! `[nats]`: the broker objects' and subjects' names, stream settings, the link's bounds,
//! authentication.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Secret;
use super::duration;
use crate::domain::subjects::{DEFAULT_API_PREFIX, DEFAULT_COMMAND_PREFIX, DEFAULT_EVENT_PREFIX};
use crate::nats::BrokerNames;

/// `[nats]`: names of the broker objects and subjects, stream settings, authentication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsSettings {
    pub command_stream: String,
    pub consumer: String,
    pub event_stream: String,
    pub command_subject_prefix: String,
    pub event_subject_prefix: String,
    pub api_subject_prefix: String,
    /// API replies go only to subjects under this prefix (clients' inboxes), so a request cannot
    /// make the service publish on a subject its sender may not publish on.
    pub inbox_prefix: String,
    /// Each tenant's clients use inboxes of their own, `<inbox_prefix>.<tenantId>.…` (as the
    /// per-tenant permissions of docs/deployment.md have it): replies then go only under the
    /// requesting tenant's, never into another tenant's.
    pub inbox_per_tenant: bool,
    /// `max_age` of the event stream when the service creates it; zero keeps events forever.
    #[serde(with = "duration")]
    pub event_max_age: Duration,
    /// Replicas of the streams the service creates (3 on a NATS cluster).
    pub replicas: usize,
    /// Lines the command stream is split into by tenant, read in turns, so that one tenant's
    /// backlog of commands does not stand in front of the others' (1: one line, as before).
    /// Lays out only a stream without lines recorded; a stream keeps its own (`nats::layout`).
    pub command_partitions: u16,
    /// How long the link to the broker may bring nothing back before it counts as lost and the
    /// daemon reconnects: a path gone silent without a reset (the broker's machine lost, a NAT
    /// or load balancer that dropped the connection) is noticed within it.
    #[serde(with = "duration")]
    pub link_timeout: Duration,
    /// How long one attempt to connect may take, handshake included, before the next begins:
    /// an attempt caught by a silent path holds up the one that would find it healed.
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
    /// A `.creds` file (JWT and nkey seed), for a server with decentralised auth.
    pub credentials: Option<PathBuf>,
    /// A file holding an nkey seed (`SU…`).
    pub nkey_seed: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<Secret>,
    pub token: Option<Secret>,
    /// CA certificate(s) to trust the server's certificate with (PEM); implies TLS.
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

impl Default for NatsSettings {
    fn default() -> Self {
        let names = BrokerNames::default();
        Self {
            command_stream: names.command_stream,
            consumer: names.consumer,
            event_stream: names.event_stream,
            command_subject_prefix: DEFAULT_COMMAND_PREFIX.into(),
            event_subject_prefix: DEFAULT_EVENT_PREFIX.into(),
            api_subject_prefix: DEFAULT_API_PREFIX.into(),
            inbox_prefix: crate::domain::subjects::DEFAULT_INBOX_PREFIX.into(),
            inbox_per_tenant: false,
            event_max_age: Duration::from_secs(7 * 24 * 3600),
            replicas: 1,
            command_partitions: 16,
            link_timeout: Duration::from_secs(6),
            connect_timeout: Duration::from_secs(3),
            credentials: None,
            nkey_seed: None,
            user: None,
            password: None,
            token: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// The bounds `link_timeout` must keep: the client pings a third of it apart, and a link that
/// stays silent a second or two is no loss.
pub const LINK_TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(3)..=Duration::from_secs(600);
/// The bounds of `connect_timeout`.
pub const CONNECT_TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(60);

impl NatsSettings {
    pub(super) fn validate_link(&self) -> Result<(), (&'static str, String)> {
        let outside = |value: Duration, range: &std::ops::RangeInclusive<Duration>| {
            format!(
                "{} is outside {}–{}",
                humantime::format_duration(value),
                humantime::format_duration(*range.start()),
                humantime::format_duration(*range.end())
            )
        };
        if !LINK_TIMEOUT_RANGE.contains(&self.link_timeout) {
            let reason = outside(self.link_timeout, &LINK_TIMEOUT_RANGE);
            return Err(("nats.link_timeout", reason));
        }
        if !CONNECT_TIMEOUT_RANGE.contains(&self.connect_timeout) {
            let reason = outside(self.connect_timeout, &CONNECT_TIMEOUT_RANGE);
            return Err(("nats.connect_timeout", reason));
        }
        Ok(())
    }
}

// `figment::Jail` closures return figment's own (large) error type.
#[cfg(test)]
#[allow(clippy::result_large_err)]
mod tests {
    use figment::Jail;

    use crate::config::Config;

    fn load(jail: &Jail) -> Result<Config, String> {
        Config::load(&jail.directory().join("config.toml"))
            .map(|loaded| loaded.config)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_link_bounds_are_set_by_file_or_environment_and_kept_in_range() {
        Jail::expect_with(|jail| {
            jail.create_file("config.toml", "[nats]\nlink_timeout = \"9s\"\n")?;
            jail.set_env("TIMER_NATS_CONNECT_TIMEOUT", "5s");
            let config = load(jail).expect("loads");
            assert_eq!(config.nats.link_timeout, std::time::Duration::from_secs(9));
            assert_eq!(
                config.nats.connect_timeout,
                std::time::Duration::from_secs(5)
            );
            jail.set_env("TIMER_NATS_LINK_TIMEOUT", "1s");
            let error = load(jail).expect_err("too short");
            assert!(error.contains("nats.link_timeout"), "{error}");
            assert!(error.contains("outside 3s–10m"), "{error}");
            jail.set_env("TIMER_NATS_LINK_TIMEOUT", "6s");
            jail.set_env("TIMER_NATS_CONNECT_TIMEOUT", "2m");
            let error = load(jail).expect_err("too long");
            assert!(error.contains("nats.connect_timeout"), "{error}");
            Ok(())
        });
    }
}
