//! Gauges actor: keeps `timer_scheduled` (pending timers) up to date, and the pending and
//! overdue gauges of each labelled tenant (`[metrics] tenants`), one query per tenant over its
//! range of the pending index.
//!
//! Counting walks the pending index, which takes long with millions of timers, so it runs
//! every [`INTERVAL`] on a connection of this actor's own, never in Persistence's queue where
//! it would hold up firing. It only ever reads. A failed count is skipped (the gauge keeps its
//! last value) and the connection reopened next time. On PostgreSQL opening and counting each
//! have the deadline of Persistence's operations, so a server that does not answer holds this
//! actor no longer than that; the connection is then abandoned, not waited for.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::supervisor::NamedActor;
use crate::ports::Clock;
use crate::storage::db::DatabaseTarget;
use crate::storage::{PostgresSettings, SqliteSettings, Store, StoreError};

/// How often pending timers are counted.
pub const INTERVAL: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct Gauges;

impl NamedActor for Gauges {
    const NAME: &'static str = "gauges";
}

#[derive(Clone)]
pub struct GaugesArgs {
    pub database: DatabaseTarget,
    /// Time limits on PostgreSQL (unused on SQLite).
    pub postgres: PostgresSettings,
    /// What "overdue" is judged by: the daemon's clock, as for the `stats` API.
    pub clock: Arc<dyn Clock>,
}

impl GaugesArgs {
    /// `[postgres] operation_timeout` on PostgreSQL; none on SQLite (a local file).
    fn deadline(&self) -> Option<Duration> {
        matches!(self.database, DatabaseTarget::Postgres { .. })
            .then_some(self.postgres.operation_timeout)
    }
}

/// Runs `work` within `deadline`, if any.
async fn bounded<T>(
    deadline: Option<Duration>,
    work: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match deadline {
        None => work.await,
        Some(limit) => tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!(
                "timed out after {limit:?}"
            )))
        }),
    }
}

pub struct GaugesState {
    args: GaugesArgs,
    store: Option<Store>,
}

pub enum GaugesMsg {
    Refresh,
}

impl Actor for Gauges {
    type Msg = GaugesMsg;
    type State = GaugesState;
    type Arguments = GaugesArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: GaugesArgs,
    ) -> Result<GaugesState, ActorProcessingErr> {
        Ok(GaugesState { args, store: None })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut GaugesState,
    ) -> Result<(), ActorProcessingErr> {
        // The interval task ends by itself once this actor has stopped.
        myself.send_interval(INTERVAL, || GaugesMsg::Refresh);
        myself.cast(GaugesMsg::Refresh)?;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut GaugesState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(store) = state.store.take() {
            let _ = bounded(state.args.deadline(), store.close()).await;
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: GaugesMsg,
        state: &mut GaugesState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            GaugesMsg::Refresh => {
                if state.store.is_none() {
                    // A small cache: counting reads the pending index, nothing else.
                    let target = match &state.args.database {
                        DatabaseTarget::Sqlite { path, settings } => DatabaseTarget::Sqlite {
                            path: path.clone(),
                            settings: SqliteSettings {
                                cache_kib: 2_048,
                                ..settings.clone()
                            },
                        },
                        postgres => postgres.clone(),
                    };
                    let open = Store::open_with(&target, &state.args.postgres);
                    match bounded(state.args.deadline(), open).await {
                        Ok(store) => state.store = Some(store),
                        Err(e) => {
                            tracing::debug!(actor = Gauges::NAME, error = %e, "cannot count pending timers");
                            return Ok(());
                        }
                    }
                }
                let Some(store) = &state.store else {
                    return Ok(());
                };
                let counted = count(store, state.args.deadline(), state.args.clock.now()).await;
                if let Err(e) = counted {
                    tracing::debug!(actor = Gauges::NAME, error = %e, "cannot count pending timers");
                    if let Some(store) = state.store.take() {
                        match state.args.deadline() {
                            None => {
                                let _ = store.close().await;
                            }
                            // Closing would wait for the server that did not answer.
                            Some(limit) => {
                                tokio::spawn(tokio::time::timeout(limit, store.close()));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Counts the pending timers in all, then each labelled tenant's, each count within
/// `deadline`, and sets the gauges. A failure leaves the gauges not yet set as they were.
async fn count(
    store: &Store,
    deadline: Option<Duration>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let pending = bounded(deadline, store.count_pending()).await?;
    metrics::gauge!(crate::telemetry::SCHEDULED).set(pending as f64);
    let labels = crate::telemetry::tenant_labels();
    for tenant_id in labels.tenants() {
        let counts = bounded(deadline, store.pending_counts(tenant_id, now)).await?;
        labels.set_pending(tenant_id, counts.pending, counts.overdue);
    }
    Ok(())
}
