//! `[nats]`: the broker objects' and subjects' names, stream settings, authentication.

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
    pub command_partitions: u16,
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
