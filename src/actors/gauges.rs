//! Gauges actor: keeps `timer_scheduled` (pending timers) up to date, and the pending and
//! overdue gauges of each labelled tenant (`[metrics] tenants`), one query per tenant over its
//! range of the pending index.
//!
//! Counting walks the pending index, which takes long with millions of timers, so the counts
//! are reads of the daemon's own on Persistence's reader connections, never on the writer's
//! where they would hold up firing; they take their turn there beside the tenants' API reads. A
//! failed count is skipped (the gauge keeps its last value) and tried again at the next
//! [`INTERVAL`].

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::persistence::{CallError, PersistenceClient};
use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::ports::Clock;

/// How often pending timers are counted.
pub const INTERVAL: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct Gauges;

impl NamedActor for Gauges {
    const NAME: &'static str = "gauges";
}

#[derive(Clone)]
pub struct GaugesArgs {
    pub registry: Registry,
    /// What "overdue" is judged by: the daemon's clock, as for the `stats` API.
    pub clock: Arc<dyn Clock>,
}

pub enum GaugesMsg {
    Refresh,
}

impl Actor for Gauges {
    type Msg = GaugesMsg;
    type State = GaugesArgs;
    type Arguments = GaugesArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: GaugesArgs,
    ) -> Result<GaugesArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut GaugesArgs,
    ) -> Result<(), ActorProcessingErr> {
        // The interval task ends by itself once this actor has stopped.
        myself.send_interval(INTERVAL, || GaugesMsg::Refresh);
        myself.cast(GaugesMsg::Refresh)?;
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: GaugesMsg,
        state: &mut GaugesArgs,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            GaugesMsg::Refresh => {
                let persistence = state.registry.persistence();
                if let Err(e) = count(&persistence, state.clock.as_ref()).await {
                    tracing::debug!(actor = Gauges::NAME, error = %e, "cannot count pending timers");
                }
            }
        }
        Ok(())
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
