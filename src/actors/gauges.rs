//! Gauges actor: keeps `timer_scheduled` (pending timers) up to date.
//!
//! Counting walks the pending index, which takes long with millions of timers, so it runs
//! every [`INTERVAL`] on a connection of this actor's own, never in Persistence's queue where
//! it would hold up firing. It only ever reads. A failed count is skipped (the gauge keeps its
//! last value) and the connection reopened next time. On PostgreSQL opening and counting each
//! have the deadline of Persistence's operations, so a server that does not answer holds this
//! actor no longer than that; the connection is then abandoned, not waited for.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::supervisor::NamedActor;
use crate::storage::db::DatabaseTarget;
use crate::storage::{PostgresSettings, SqliteSettings, Store, StoreError};

/// How often pending timers are counted.
pub const INTERVAL: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct Gauges;

impl NamedActor for Gauges {
    const NAME: &'static str = "gauges";
}

#[derive(Debug, Clone)]
pub struct GaugesArgs {
    pub database: DatabaseTarget,
    /// Time limits on PostgreSQL (unused on SQLite).
    pub postgres: PostgresSettings,
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
                    // A small cache: counting reads the pending index once, nothing else.
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
                match bounded(state.args.deadline(), store.count_pending()).await {
                    Ok(pending) => metrics::gauge!(crate::telemetry::SCHEDULED).set(pending as f64),
                    Err(e) => {
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
        }
        Ok(())
    }
}
