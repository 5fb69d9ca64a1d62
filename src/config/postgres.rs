//! `[postgres]`: how long the daemon waits on its PostgreSQL server. Settings only: the storage
//! module applies them when it connects, Persistence and Gauges when they run an operation.
//!
//! Every wait has a limit (docs/CONTRACT.md §8), so that a server stopped, frozen or unreachable
//! is an outage the daemon sees within seconds and waits out, never a hang. The server enforces
//! the statement and lock limits itself; a server that does not answer at all cannot, so every
//! operation also has a deadline of the daemon's own (`operation_timeout`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// PostgreSQL time limits the operator may set (`[postgres]` in `config.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresSettings {
    /// How long opening a connection may take, retries of a refused one included.
    #[serde(with = "super::duration")]
    pub connect_timeout: Duration,
    /// The server cancels a statement running longer (`statement_timeout`); `0` for no limit.
    #[serde(with = "super::duration")]
    pub statement_timeout: Duration,
    /// The server cancels a statement waiting longer for a lock (`lock_timeout`); `0` for no
    /// limit.
    #[serde(with = "super::duration")]
    pub lock_timeout: Duration,
    /// The daemon's own deadline on one operation (one transaction with its connection): past
    /// it the operation counts as failed and its connection is dropped. Catches a server that
    /// never answers, which cannot enforce its own limits.
    #[serde(with = "super::duration")]
    pub operation_timeout: Duration,
    /// Idle time before the server probes a silent client connection (`tcp_keepalives_idle`);
    /// `0` keeps the server's setting.
    #[serde(with = "super::duration")]
    pub tcp_keepalives_idle: Duration,
    /// Time between the server's probes (`tcp_keepalives_interval`); `0` keeps the server's.
    #[serde(with = "super::duration")]
    pub tcp_keepalives_interval: Duration,
    /// Unanswered probes before the server drops the connection (`tcp_keepalives_count`); `0`
    /// keeps the server's.
    pub tcp_keepalives_count: u32,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            lock_timeout: Duration::from_secs(5),
            operation_timeout: Duration::from_secs(15),
            tcp_keepalives_idle: Duration::from_secs(10),
            tcp_keepalives_interval: Duration::from_secs(5),
            tcp_keepalives_count: 3,
        }
    }
}

impl PostgresSettings {
    /// The session settings sent at connection start-up (the `options` startup parameter, so
    /// no round trip of their own), PostgreSQL's names and units: milliseconds for the
    /// timeouts, seconds for the keepalives. A zero keepalive setting is left out (the
    /// server's own applies).
    pub fn session_options(&self) -> Vec<(&'static str, String)> {
        let mut options = vec![
            (
                "statement_timeout",
                self.statement_timeout.as_millis().to_string(),
            ),
            ("lock_timeout", self.lock_timeout.as_millis().to_string()),
            // A daemon frozen between its statements and their COMMIT (SIGSTOP, a stalled VM)
            // holds the rows it locked, and no claim lease frees a lock: the other daemons
            // skip those timers and wait on their own marks forever. Past this, the server
            // ends that session and rolls it back; what the daemon had committed is freed by
            // its lease. The daemon's transactions never wait on it between statements.
            (
                "idle_in_transaction_session_timeout",
                self.statement_timeout.as_millis().to_string(),
            ),
            // No JIT compilation: the firing path's statements are planned for any instant
            // (read inside the statement), so their estimates pass `jit_above_cost`, and each
            // claim spent 166 ms compiling beside one tenant's ten million pending timers
            // (timers fired seconds late); the daemon runs no query that JIT pays back.
            ("jit", "off".to_owned()),
        ];
        for (name, value) in [
            ("tcp_keepalives_idle", self.tcp_keepalives_idle.as_secs()),
            (
                "tcp_keepalives_interval",
                self.tcp_keepalives_interval.as_secs(),
            ),
            ("tcp_keepalives_count", u64::from(self.tcp_keepalives_count)),
        ] {
            if value > 0 {
                options.push((name, value.to_string()));
            }
        }
        options
    }

    /// Checks what types alone cannot; the error names the setting's key path.
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        let at_least = |setting: &'static str, value: Duration, min: Duration| {
            if value < min {
                Err((setting, format!("{value:?} is below the {min:?} minimum")))
            } else {
                Ok(())
            }
        };
        at_least(
            "postgres.connect_timeout",
            self.connect_timeout,
            Duration::from_millis(100),
        )?;
        at_least(
            "postgres.operation_timeout",
            self.operation_timeout,
            Duration::from_secs(1),
        )?;
        // The server's limits are the clean way out (it cancels the statement and says why);
        // the daemon's deadline is only for a server that cannot answer at all.
        if !self.statement_timeout.is_zero() && self.operation_timeout <= self.statement_timeout {
            return Err((
                "postgres.operation_timeout",
                "must exceed postgres.statement_timeout".into(),
            ));
        }
        for (setting, value) in [
            ("postgres.tcp_keepalives_idle", self.tcp_keepalives_idle),
            (
                "postgres.tcp_keepalives_interval",
                self.tcp_keepalives_interval,
            ),
        ] {
            if value.subsec_nanos() != 0 {
                return Err((setting, format!("{value:?} is not whole seconds")));
            }
        }
        if self.tcp_keepalives_count > 1000 {
            return Err((
                "postgres.tcp_keepalives_count",
                format!("{} is outside 0–1000", self.tcp_keepalives_count),
            ));
        }
        Ok(())
    }
}
