//! Checkpointer actor: moves the SQLite WAL into the database file in the background.
//!
//! A checkpoint of a large database touches pages all over the file and fsyncs it; run inside a
//! commit (SQLite's default), it stalled the Persistence actor — and with it every firing — for
//! up to a second with ten million timers stored. Here it runs on a connection of its own in
//! `PASSIVE` mode, which never blocks the writer, so only this actor waits for the disk. Under a
//! steady load the writer seldom finds the WAL both fully copied and unused, so the file keeps
//! growing; once it passes [`TRUNCATE_ABOVE_PAGES`] and is fully copied, a `TRUNCATE`
//! checkpoint empties it, holding the writer off only for as long as truncating takes.

use std::path::PathBuf;
use std::time::Duration;

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use sea_orm::DatabaseConnection;

use crate::persistence::SqliteSettings;
use crate::persistence::db::{CheckpointMode, checkpoint, connect};

/// How often the WAL is checkpointed.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// WAL size (pages of 4 KiB) above which a fully copied WAL is emptied.
pub const TRUNCATE_ABOVE_PAGES: i64 = 65_536;

pub struct Checkpointer;

#[derive(Debug, Clone)]
pub struct CheckpointerArgs {
    pub db_path: PathBuf,
    pub sqlite: SqliteSettings,
}

pub struct CheckpointerState {
    db: DatabaseConnection,
    tick: Option<JoinHandle<()>>,
}

pub enum CheckpointerMsg {
    Checkpoint,
    /// Fault hook: fail as a crash would (drills and tests of supervision).
    Fail(String),
}

impl Actor for Checkpointer {
    type Msg = CheckpointerMsg;
    type State = CheckpointerState;
    type Arguments = CheckpointerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: CheckpointerArgs,
    ) -> Result<CheckpointerState, ActorProcessingErr> {
        // A small cache: checkpointing reads the WAL, not the tables.
        let settings = SqliteSettings {
            cache_kib: 2_048,
            ..args.sqlite
        };
        Ok(CheckpointerState {
            db: connect(&args.db_path, &settings).await?,
            tick: None,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut CheckpointerState,
    ) -> Result<(), ActorProcessingErr> {
        state.tick =
            Some(myself.send_interval(CHECKPOINT_INTERVAL, || CheckpointerMsg::Checkpoint));
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut CheckpointerState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(tick) = state.tick.take() {
            tick.abort();
        }
        state.db.clone().close().await?;
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: CheckpointerMsg,
        state: &mut CheckpointerState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CheckpointerMsg::Checkpoint => {
                let started = std::time::Instant::now();
                let mut result = checkpoint(&state.db, CheckpointMode::Passive).await;
                if let Ok(done) = &result
                    && done.wal_pages > TRUNCATE_ABOVE_PAGES
                    && done.checkpointed_pages == done.wal_pages
                {
                    result = checkpoint(&state.db, CheckpointMode::Truncate).await;
                }
                match result {
                    Ok(done) => tracing::debug!(
                        actor = "checkpointer",
                        wal_pages = done.wal_pages,
                        checkpointed_pages = done.checkpointed_pages,
                        elapsed_us = started.elapsed().as_micros() as u64,
                        "WAL checkpointed"
                    ),
                    Err(e) => tracing::warn!(actor = "checkpointer", error = %e,
                        "WAL checkpoint failed; retrying at the next interval"),
                }
            }
            CheckpointerMsg::Fail(reason) => return Err(reason.into()),
        }
        Ok(())
    }
}
