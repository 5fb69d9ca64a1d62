//! Gauges actor: keeps `timer_scheduled` (pending timers) up to date, and the pending and
//! overdue gauges of each labelled tenant (`[metrics] tenants`), one query per tenant over its
//! range of the pending index.
//!
//! Counting walks the pending index, which takes long with millions of timers, so the counts
//! are reads of the daemon's own on Persistence's reader connections, never on the writer's
//! where they would hold up firing; they take their turn there beside the tenants' API reads. A
//! failed count leaves the gauges as they were and is tried again by the one retry policy,
//! within the [`INTERVAL`] (`periodic`).

use std::sync::Arc;
use std::time::Duration;

use super::periodic::{Every, Next, Periodic};
use super::persistence::{CallError, PersistenceClient};
use super::registry::Registry;
use crate::ports::Clock;

/// How often pending timers are counted.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// The Gauges actor: counts, round after round ([`Every`]).
pub type Gauges = Every<Counts>;

#[derive(Clone)]
pub struct GaugesArgs {
    pub registry: Registry,
    /// What "overdue" is judged by: the daemon's clock, as for the `stats` API.
    pub clock: Arc<dyn Clock>,
}

/// The Gauges' work: one count of everything per round.
pub struct Counts(GaugesArgs);

impl Periodic for Counts {
    const NAME: &'static str = "gauges";
    const EVERY: Duration = INTERVAL;
    const AT_START: bool = true;
    type Args = GaugesArgs;

    fn new(args: GaugesArgs) -> Self {
        Self(args)
    }

    fn registry(&self) -> &Registry {
        &self.0.registry
    }

    async fn round(&mut self) -> Result<Next, String> {
        let persistence = self.0.registry.persistence();
        count(&persistence, self.0.clock.as_ref())
            .await
            .map_err(|e| e.to_string())?;
        Ok(Next::Scheduled)
    }

    fn failed(&self) -> &'static str {
        "pending timers not counted"
    }
}

/// Counts the pending timers in all, then each labelled tenant's, and sets the gauges. A
/// failure leaves the gauges not yet set as they were.
async fn count(persistence: &PersistenceClient, clock: &dyn Clock) -> Result<(), CallError> {
    let pending = persistence.count_pending().await?;
    metrics::gauge!(crate::telemetry::SCHEDULED).set(pending as f64);
    let labels = crate::telemetry::tenant_labels();
    for tenant_id in labels.tenants() {
        let counts = persistence.pending_counts(tenant_id, clock.now()).await?;
        labels.set_pending(tenant_id, counts.pending, counts.overdue);
    }
    Ok(())
}
