//! What types alone cannot check: ranges, names, subject prefixes, and settings that go
//! together. Each error names the setting's key path, so loading can say where it came from.

use std::time::Duration;

use super::{Config, NatsSettings};
use crate::domain::tenant::check_tenant_id;
use crate::nats::partitions::MAX_COMMAND_PARTITIONS;

impl Config {
    /// Checks what types alone cannot; the error names the setting's key path.
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.broker_url.trim().is_empty() {
            return Err(("broker_url", "must not be empty".into()));
        }
        if self.db_path.as_os_str().is_empty() {
            return Err(("db_path", "must not be empty".into()));
        }
        if let Some(url) = &self.database_url
            && !url.starts_with("postgres://")
            && !url.starts_with("postgresql://")
        {
            return Err((
                "database_url",
                "must be a postgres:// URL (leave it out to use the SQLite file)".into(),
            ));
        }
        if self.polling_interval < Duration::from_millis(10) {
            return Err((
                "polling_interval",
                format!("{:?} is below the 10 ms minimum", self.polling_interval),
            ));
        }
        if !(1..=10_000).contains(&self.batch_size) {
            return Err((
                "batch_size",
                format!("{} is outside 1–10000", self.batch_size),
            ));
        }
        if self.max_command_bytes < 256 {
            return Err(("max_command_bytes", "must be at least 256".into()));
        }
        if let Some(name) = &self.name {
            check_name(name).map_err(|e| ("name", e))?;
        }
        if self.claim_lease < Duration::from_secs(1) {
            return Err(("claim_lease", "must be at least 1s".into()));
        }
        for (setting, name) in [
            ("nats.command_stream", &self.nats.command_stream),
            ("nats.event_stream", &self.nats.event_stream),
            ("nats.consumer", &self.nats.consumer),
        ] {
            check_tenant_id(name).map_err(|_| {
                (
                    setting,
                    format!("{name:?} must be letters, digits, '_' or '-'"),
                )
            })?;
        }
        for (setting, prefix) in [
            (
                "nats.command_subject_prefix",
                &self.nats.command_subject_prefix,
            ),
            ("nats.event_subject_prefix", &self.nats.event_subject_prefix),
            ("nats.api_subject_prefix", &self.nats.api_subject_prefix),
        ] {
            let ok = !prefix.is_empty()
                && prefix
                    .split('.')
                    .all(|token| !token.is_empty() && !token.contains(['*', '>', ' ']));
            if !ok {
                return Err((setting, format!("{prefix:?} is not a subject prefix")));
            }
        }
        if !(1..=5).contains(&self.nats.replicas) {
            return Err((
                "nats.replicas",
                format!("{} is outside 1–5", self.nats.replicas),
            ));
        }
        if !(1..=MAX_COMMAND_PARTITIONS).contains(&self.nats.command_partitions) {
            return Err((
                "nats.command_partitions",
                format!(
                    "{} is outside 1–{MAX_COMMAND_PARTITIONS}",
                    self.nats.command_partitions
                ),
            ));
        }
        if self.supervisor.min_backoff > self.supervisor.max_backoff {
            return Err((
                "supervisor.min_backoff",
                "must not exceed supervisor.max_backoff".into(),
            ));
        }
        if self.supervisor.shutdown_timeout < Duration::from_secs(1) {
            return Err((
                "supervisor.shutdown_timeout",
                "must be at least 1s: a stop needs that long to flush the broker connection".into(),
            ));
        }
        if !self.http.listen.trim().is_empty() && self.http_listen().is_none() {
            return Err((
                "http.listen",
                format!(
                    "{:?} is not an address like 127.0.0.1:9464",
                    self.http.listen
                ),
            ));
        }
        self.nats.validate_auth()?;
        self.nats.validate_link()?;
        self.postgres.validate()?;
        self.quotas.validate()?;
        self.metrics.validate()?;
        self.api.validate()?;
        self.console.validate()?;
        if self.console.enabled() && self.http_listen().is_none() {
            return Err((
                "console",
                "the console is served on the HTTP listener: set http.listen too".into(),
            ));
        }
        Ok(())
    }
}

impl NatsSettings {
    /// One way to authenticate at most, and files that exist.
    pub(super) fn validate_auth(&self) -> Result<(), (&'static str, String)> {
        let ways = [
            self.credentials.is_some(),
            self.nkey_seed.is_some(),
            self.user.is_some() || self.password.is_some(),
            self.token.is_some(),
        ];
        if ways.iter().filter(|w| **w).count() > 1 {
            return Err((
                "nats",
                "set one of credentials, nkey_seed, user/password or token".into(),
            ));
        }
        if self.user.is_some() != self.password.is_some() {
            return Err(("nats.user", "user and password go together".into()));
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(("nats.tls_cert", "tls_cert and tls_key go together".into()));
        }
        for (setting, path) in [
            ("nats.credentials", &self.credentials),
            ("nats.nkey_seed", &self.nkey_seed),
            ("nats.tls_ca", &self.tls_ca),
            ("nats.tls_cert", &self.tls_cert),
            ("nats.tls_key", &self.tls_key),
        ] {
            if let Some(path) = path
                && !path.is_file()
            {
                return Err((
                    setting,
                    format!("{} is not a readable file", path.display()),
                ));
            }
        }
        Ok(())
    }
}

/// A daemon name: 1–64 characters of `[A-Za-z0-9_.-]`.
pub(super) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    ok.then_some(()).ok_or_else(|| {
        format!("{name:?} must be 1–64 characters of A-Z, a-z, 0-9, '_', '-' or '.'")
    })
}
