//! `[api]`: what the query API may cost the daemon. Settings only: Persistence runs the reads
//! on its reader connections and stops one past `read_timeout`; the ApiResponder bounds each
//! tenant's requests in flight.
//!
//! A tenant's reads take turns with the other tenants' and never stand in front of a due
//! timer (docs/CONTRACT.md §6, §9); these limits bound what one read, and one tenant, can take.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[api]` in `config.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    /// Longest a `get`, `list` or `stats` read may run; a longer one is stopped and answered
    /// 503 with a retry hint.
    #[serde(with = "super::duration")]
    pub read_timeout: Duration,
    /// Database connections that serve reads (the API's, the gauges' counts) beside the
    /// writer's.
    pub read_connections: usize,
    /// Most requests of one tenant handled at once; more are answered 503 with a retry hint.
    pub max_in_flight_per_tenant: usize,
}

/// Most reader connections that may be asked for.
pub const MAX_READ_CONNECTIONS: usize = 16;

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            read_timeout: Duration::from_secs(1),
            read_connections: 2,
            max_in_flight_per_tenant: 32,
        }
    }
}

impl ApiSettings {
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.read_timeout.is_zero() {
            return Err(("api.read_timeout", "must be above zero".into()));
        }
        if !(1..=MAX_READ_CONNECTIONS).contains(&self.read_connections) {
            return Err((
                "api.read_connections",
                format!("must be from 1 to {MAX_READ_CONNECTIONS}"),
            ));
        }
        if self.max_in_flight_per_tenant == 0 {
            return Err(("api.max_in_flight_per_tenant", "must be above zero".into()));
        }
        Ok(())
    }
}
