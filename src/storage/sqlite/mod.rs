//! The SQLite [`Backend`]: one daemon per file, with one connection, its only reader and
//! writer.
//!
//! - the clock: the caller's `now` decides what is due and is what the store writes; no other
//!   daemon's claim exists to wait for, and its own claims from before a restart are its to
//!   resume (`claimed_by` is its name).
//! - `firing`: the claim in `dueAt` order and the mark; `fair`: the fair claim's walk and
//!   shares. SQLite's one writer needs no lock, and one statement is a transaction of its own.
//! - durability: the connection rests at `synchronous = NORMAL` and is raised to the
//!   configured level for durable work only.
//! - the checks only a file has: its identity at its path, the free space of its disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, OnConflict, SimpleExpr};
use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, EntityTrait};

use super::backend::{Backend, ClaimDue, ClaimShares, Now};
use super::db::{FileIdentity, SqliteSettings, Synchronous, checkpoint, free_bytes};
use super::{DueBatch, MIN_FREE_BYTES, NameHold, Store, StoreError, daemons};
use crate::domain::DueTimer;
use crate::domain::timestamp::format_utc;

mod fair;
mod firing;
mod read_deadline;

pub(crate) use read_deadline::ReadDeadline;

/// The file a store writes to and what is checked of it.
#[derive(Debug)]
pub(crate) struct Sqlite {
    path: PathBuf,
    /// The file opened; a commit counts only while the path still names it.
    identity: FileIdentity,
    /// The configured `synchronous` level: what commands and cancels commit at.
    synchronous: Synchronous,
    /// On a reader connection: when its current read must stop (its progress handler reads it).
    read_deadline: Option<Arc<ReadDeadline>>,
}

impl Sqlite {
    /// The backend of the file at `path`, just opened as `db`: its identity noted, and the
    /// connection lowered to its resting level.
    pub(crate) async fn open(
        db: &DatabaseConnection,
        path: &Path,
        settings: &SqliteSettings,
    ) -> Result<Self, StoreError> {
        let sqlite = Self {
            identity: FileIdentity::of(path).map_err(|e| StoreError::FileMoved {
                path: path.to_owned(),
                reason: e.to_string(),
            })?,
            path: path.to_owned(),
            synchronous: settings.synchronous,
            read_deadline: None,
        };
        if sqlite.raises() {
            set_synchronous(db, Synchronous::Normal).await?;
        }
        Ok(sqlite)
    }

    /// The backend of a reader connection to the file at `path`, just opened as `db` with a
    /// progress handler that stops a read once `deadline` has passed.
    pub(crate) async fn reader(
        db: &DatabaseConnection,
        path: &Path,
        settings: &SqliteSettings,
        deadline: Arc<ReadDeadline>,
    ) -> Result<Self, StoreError> {
        let mut sqlite = Self::open(db, path, settings).await?;
        sqlite.read_deadline = Some(deadline);
        Ok(sqlite)
    }

    /// Whether the configured level waits for the disk at each commit, so that the connection
    /// rests at `NORMAL` (no fsync) and is raised to it only for durable work: the writes whose
    /// loss to a power cut is harmless (claims, marks, retention deletes, the probe) then skip
    /// the fsync without a round trip of their own.
    fn raises(&self) -> bool {
        matches!(self.synchronous, Synchronous::Full | Synchronous::Extra)
    }
}

async fn set_synchronous(db: &DatabaseConnection, level: Synchronous) -> Result<(), StoreError> {
    let pragma = format!("PRAGMA synchronous = {}", level.as_str());
    db.execute_unprepared(&pragma).await?;
    Ok(())
}

#[async_trait::async_trait]
impl Backend for Sqlite {
    async fn raise_durability(&self, db: &DatabaseConnection) -> Result<(), StoreError> {
        if self.raises() {
            set_synchronous(db, self.synchronous).await?;
        }
        Ok(())
    }

    async fn lower_durability(&self, db: &DatabaseConnection) {
        if self.raises()
            && let Err(e) = set_synchronous(db, Synchronous::Normal).await
        {
            tracing::debug!(error = %e, "synchronous stays at the configured level");
        }
    }

    /// The connection's resting level already skips the fsync.
    async fn relax(&self, _txn: &DatabaseTransaction) -> Result<(), DbErr> {
        Ok(())
    }

    /// Nothing to do: on SQLite a cancel's steps keep their time from the first to the last
    /// (BENCHMARKS.md, "Cancel many").
    async fn plan_for_values(&self, _txn: &DatabaseTransaction) -> Result<(), DbErr> {
        Ok(())
    }

    fn statement_is_transaction(&self) -> bool {
        true
    }

    /// Fails when the path no longer names the file this store writes to (removed, or replaced
    /// by another): what was just committed went into a file that is gone.
    fn check_written(&self) -> Result<(), StoreError> {
        let moved = |reason: String| StoreError::FileMoved {
            path: self.path.clone(),
            reason,
        };
        match FileIdentity::of(&self.path) {
            Ok(identity) if identity == self.identity => Ok(()),
            Ok(_) => Err(moved("another file is at its path now".into())),
            Err(e) => Err(moved(e.to_string())),
        }
    }

    fn check_room(&self) -> Result<(), StoreError> {
        let free = free_bytes(&self.path).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        if free < MIN_FREE_BYTES {
            return Err(StoreError::Unavailable(format!(
                "disk almost full: {} KiB free beside {}",
                free / 1024,
                self.path.display()
            )));
        }
        Ok(())
    }

    /// On the writer's connection, a passive checkpoint of what the Checkpointer left: only the
    /// frames committed since its last complete pass, so it is short, and it waits for nobody.
    /// With the WAL then fully copied, SQLite's next commit writes it again from its start.
    /// Done from the Checkpointer's connection (a `RESTART`), the same step would take the
    /// writer's lock and leave the writer waiting in its busy handler.
    async fn catch_up_wal(&self, db: &DatabaseConnection) -> Result<(), StoreError> {
        let done = checkpoint(db).await?;
        tracing::debug!(
            actor = "persistence",
            wal_pages = done.wal_pages,
            checkpointed_pages = done.checkpointed_pages,
            "WAL caught up"
        );
        Ok(())
    }

    async fn claim_due(&self, store: &Store, claim: ClaimDue<'_>) -> Result<DueBatch, StoreError> {
        firing::claim_due(store, claim).await
    }

    async fn mark_reached(
        &self,
        store: &Store,
        batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
    ) -> Result<u64, StoreError> {
        firing::mark_reached(store, batches).await
    }

    async fn walk_tenants(
        &self,
        store: &Store,
        now: Now,
        resume_after: Option<&str>,
    ) -> Result<Vec<(String, bool)>, StoreError> {
        fair::walk(store, now.at, resume_after).await
    }

    async fn claim_shares(
        &self,
        store: &Store,
        claim: ClaimShares<'_>,
    ) -> Result<DueBatch, StoreError> {
        fair::claim(store, claim).await
    }

    fn clock_now(&self, now: DateTime<Utc>) -> SimpleExpr {
        Expr::value(format_utc(now))
    }

    fn quota_clock_ms(&self, now: Now) -> SimpleExpr {
        Expr::cust(now.at.timestamp_millis().to_string())
    }

    fn retention_cutoff(&self, now: Now, keep: Duration) -> Option<SimpleExpr> {
        now.before(keep)
    }

    /// At once: the file's writer lock keeps out any other daemon.
    async fn take_name(
        &self,
        store: &Store,
        name: &str,
        _watch: Duration,
    ) -> Result<NameHold, StoreError> {
        let row = daemons::ActiveModel {
            name: sea_orm::ActiveValue::Set(name.to_owned()),
            seen_at: sea_orm::ActiveValue::Set(format_utc(Utc::now())),
            instance: sea_orm::ActiveValue::Set(Some(daemons::instance().to_owned())),
        };
        daemons::Entity::insert(row)
            .on_conflict(
                OnConflict::column(daemons::Column::Name)
                    .update_columns([daemons::Column::SeenAt, daemons::Column::Instance])
                    .to_owned(),
            )
            .exec_without_returning(&store.db)
            .await?;
        Ok(NameHold::Taken {
            waited: Duration::ZERO,
        })
    }

    /// The deadline the reader's progress handler watches; nothing on the writer.
    async fn limit_reads(
        &self,
        _db: &DatabaseConnection,
        limit: Option<Duration>,
    ) -> Result<(), StoreError> {
        if let Some(deadline) = &self.read_deadline {
            deadline.set(limit);
        }
        Ok(())
    }

    /// `SQLITE_INTERRUPT`: the progress handler stopped the statement.
    fn stopped_for_time(&self, error: &StoreError) -> bool {
        const INTERRUPT: &str = "9";
        error.database_code().as_deref() == Some(INTERRUPT)
    }
}
