//! What the daemon knows about its own health: whether the broker is connected, whether the
//! database accepts writes, and which actors are down. The parts that observe these (the broker
//! connection, Persistence, the Supervisor) write here; readiness, metrics and tests read it.
//!
//! Storage faults and broker outages are outages the daemon waits out, never reasons to exit:
//! this is where "waiting" becomes visible to an operator.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

/// A snapshot of the daemon's health.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Status {
    pub broker_connected: bool,
    /// The cause of the last failed database operation, while the database fails.
    pub storage_error: Option<String>,
    /// Actors that are not running (failed, waiting for their restart).
    pub actors_down: BTreeSet<String>,
}

impl Status {
    /// What keeps the daemon from being ready; empty when it is ready.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.broker_connected {
            problems.push("broker: not connected".to_owned());
        }
        if let Some(error) = &self.storage_error {
            problems.push(format!("database: {error}"));
        }
        for actor in &self.actors_down {
            problems.push(format!("actor {actor}: not running"));
        }
        problems
    }
}

/// Shared, cheap to clone; every daemon has its own.
#[derive(Debug, Clone, Default)]
pub struct Health {
    status: Arc<Mutex<Status>>,
}

impl Health {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn status(&self) -> Status {
        self.lock().clone()
    }

    pub fn set_broker_connected(&self, connected: bool) {
        self.lock().broker_connected = connected;
        metrics::gauge!(crate::telemetry::BROKER_CONNECTED).set(f64::from(u8::from(connected)));
    }

    /// A database write committed: storage works (again).
    pub fn storage_ok(&self) {
        self.lock().storage_error = None;
        metrics::gauge!(crate::telemetry::STORAGE_OK).set(1.0);
    }

    pub fn storage_failed(&self, cause: impl Into<String>) {
        self.lock().storage_error = Some(cause.into());
        metrics::gauge!(crate::telemetry::STORAGE_OK).set(0.0);
    }

    pub fn actor_down(&self, actor: &str) {
        self.lock().actors_down.insert(actor.to_owned());
    }

    pub fn actor_up(&self, actor: &str) {
        self.lock().actors_down.remove(actor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_name_each_failing_part() {
        let health = Health::new();
        assert_eq!(health.status().problems(), ["broker: not connected"]);
        health.set_broker_connected(true);
        assert!(health.status().problems().is_empty());
        health.storage_failed("database or disk is full");
        health.actor_down("poller");
        assert_eq!(
            health.status().problems(),
            [
                "database: database or disk is full",
                "actor poller: not running"
            ]
        );
        health.storage_ok();
        health.actor_up("poller");
        assert!(health.status().problems().is_empty());
    }
}
