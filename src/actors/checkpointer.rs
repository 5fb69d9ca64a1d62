//! Checkpointer actor: moves the SQLite WAL into the database file in the background.
//!
//! A checkpoint of a large database touches pages all over the file and fsyncs it; run inside a
//! commit (SQLite's default), it stalls the Persistence actor, and with it every firing. Here it
//! runs on a connection of its own in `PASSIVE` mode, which never blocks the writer, so only
//! this actor waits for the disk. Under a steady load the writer seldom finds the WAL both
//! fully copied and unused, so it would keep growing; once it passes [`RESTART_ABOVE_PAGES`]
//! and a pass has copied it all, Persistence is asked to copy the few frames committed since on
//! its own connection, between two of its transactions (no lock to wait for), and its next
//! commit writes the WAL from its start again. The WAL file keeps the size it reached (about
//! 64 MiB under load). After each pass the pages it copied are flushed to disk here
//! (`flush_database_file`), so that this catch-up, which runs on the firing path, never
//! inherits their writing.
//!
//! Like Persistence, it treats storage faults as outages: a failed checkpoint closes its
//! connection, the next attempt (at the next interval: attempts are not spaced out further, a
//! failing checkpoint costs little and once space is back the WAL stops growing into it only
//! after a checkpoint) opens a fresh one, and it never fails the actor (`periodic`). It also
//! reopens when the path names another file than the one it has open.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::periodic::{Every, Next, Periodic};
use super::registry::Registry;
use sea_orm::{DatabaseConnection, DbErr};

use crate::storage::SqliteSettings;
use crate::storage::db::{Checkpoint, DatabaseTarget, FileIdentity, checkpoint, connect};

/// How often the WAL is checkpointed and what was copied flushed: often, so each flush is small
/// (the commits' own fsyncs queue behind a flush; see BENCHMARKS.md for the intervals tried).
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);
/// WAL size (pages of 4 KiB) above which a fully copied WAL is started again from its beginning.
pub const RESTART_ABOVE_PAGES: i64 = 16_384;

/// The Checkpointer actor: a checkpoint per round ([`Every`]).
pub type Checkpointer = Every<WalCheckpoints>;

#[derive(Debug, Clone)]
pub struct CheckpointerArgs {
    pub registry: Registry,
    pub db_path: PathBuf,
    pub sqlite: SqliteSettings,
}

/// The Checkpointer's work and what it keeps between rounds.
pub struct WalCheckpoints {
    args: CheckpointerArgs,
    /// The open connection and the file it opened; `None` after a failure.
    db: Option<Opened>,
    /// What the last pass reported: an idle WAL reports the same again, and needs no flush.
    last: Option<Checkpoint>,
}

/// A connection, with the file it was opened on: its identity, to notice a replaced file, and
/// a handle to flush it by.
struct Opened {
    db: DatabaseConnection,
    identity: FileIdentity,
    file: Arc<std::fs::File>,
}

impl Periodic for WalCheckpoints {
    const NAME: &'static str = "checkpointer";
    const EVERY: Duration = CHECKPOINT_INTERVAL;
    /// The first 100 ms after the start: the writer has just opened the file.
    const AT_START: bool = false;
    type Args = CheckpointerArgs;

    fn new(args: CheckpointerArgs) -> Self {
        Self {
            args,
            db: None,
            last: None,
        }
    }

    fn registry(&self) -> &Registry {
        &self.args.registry
    }

    /// One pass; a failure closes the connection, and the next attempt opens a fresh one.
    async fn round(&mut self) -> Result<Next, String> {
        let started = std::time::Instant::now();
        match run_checkpoint(self).await {
            Ok(done) => {
                tracing::debug!(
                    actor = Self::NAME,
                    wal_pages = done.wal_pages,
                    checkpointed_pages = done.checkpointed_pages,
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "WAL checkpointed"
                );
                Ok(Next::Scheduled)
            }
            Err(e) => {
                if let Some(opened) = self.db.take() {
                    let _ = opened.db.close().await;
                }
                Err(e.to_string())
            }
        }
    }

    fn failed(&self) -> &'static str {
        "WAL checkpoint failed"
    }

    async fn stop(&mut self) {
        if let Some(opened) = self.db.take() {
            let _ = opened.db.close().await;
        }
    }
}

/// One checkpoint on a connection to the file now at the path: opened when missing, reopened
/// when the path names another file. A small cache: checkpointing reads the WAL, not the tables.
async fn run_checkpoint(state: &mut WalCheckpoints) -> Result<Checkpoint, DbErr> {
    let path = &state.args.db_path;
    let file_error =
        |e: std::io::Error| DbErr::Custom(format!("database file {}: {e}", path.display()));
    let current = FileIdentity::of(path).map_err(file_error)?;
    if state
        .db
        .as_ref()
        .is_some_and(|opened| opened.identity != current)
    {
        tracing::warn!(actor = "checkpointer", db_path = %path.display(),
            "the database file was replaced; reopening it");
        if let Some(opened) = state.db.take() {
            let _ = opened.db.close().await;
        }
    }
    if state.db.is_none() {
        let file = Arc::new(std::fs::File::open(path).map_err(file_error)?);
        let target = DatabaseTarget::Sqlite {
            path: path.clone(),
            settings: SqliteSettings {
                cache_kib: 2_048,
                ..state.args.sqlite.clone()
            },
        };
        state.db = Some(Opened {
            db: connect(&target, 1).await?,
            identity: FileIdentity::of_file(&file).map_err(file_error)?,
            file,
        });
    }
    let Some(opened) = &state.db else {
        return Err(DbErr::Custom("no connection".into()));
    };
    let done = checkpoint(&opened.db).await?;
    if done.checkpointed_pages > 0 && state.last != Some(done) {
        flush_database_file(opened.file.clone())
            .await
            .map_err(file_error)?;
    }
    state.last = Some(done);
    if done.wal_pages > RESTART_ABOVE_PAGES && done.checkpointed_pages == done.wal_pages {
        state.args.registry.persistence().catch_up_wal();
    }
    Ok(done)
}

/// Writes the pages this pass copied into the file to disk. SQLite fsyncs the file only at the
/// end of a pass that found nothing more to copy, which under a steady load is the writer's own
/// catch-up: it then waited for every page copied since the last one (with retention deleting
/// rows all over the indexes, thousands of random pages), and firing waited behind it. Flushed
/// here after each pass, that writing happens on this actor's time and the catch-up's own fsync
/// has only its few pages left. An extra flush never changes what SQLite considers durable.
async fn flush_database_file(file: Arc<std::fs::File>) -> std::io::Result<()> {
    tokio::task::spawn_blocking(move || file.sync_data()).await?
}
