//! Storage: the only code that touches SeaORM and the database.
//!
//! Every query of the service, as batch-shaped methods of [`Store`]: one call, one
//! transaction. Multi-row statements (`INSERT … ON CONFLICT` over many rows, one `UPDATE …
//! WHERE (key) IN (…)`) keep the per-statement round trip of the driver off the per-timer path.
//! The queries are written once; where SQLite and PostgreSQL differ, they ask the backend.
//!
//! - this file: the store's face — [`Store`] and its public methods, [`StoreError`],
//!   [`DueBatch`], [`Claimant`].
//! - `backend`: the `Backend` trait, the differences between the databases;
//!   `sqlite` and `postgres`: one implementation each.
//! - `commands`: applying commands and cancels, and the epochs of the command stream.
//! - `firing`: claiming due timers, marking them `Reached`, and when to look again.
//! - `queries`: the query API's reads (`get`, `list`, `stats`).
//! - `retention`: deleting finished timers.
//! - `probe`: the health probe, the pending count, the WAL catch-up.
//! - `rows`: conversions between stored rows and the domain's types.
//! - `db`: opening the database with its settings, migrations, checkpoints, free space.
//! - `entity`: the SeaORM model of `timer_schedules`; `daemons`: the health probe's table;
//!   `command_streams`: the incarnations of the command stream and their epochs.

pub mod command_streams;
pub mod daemons;
pub mod db;
pub mod entity;
pub mod firing;
pub mod queries;

mod backend;
mod commands;
mod postgres;
mod probe;
mod retention;
mod rows;
mod sqlite;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr, TransactionTrait};

use crate::domain::api::{ListFilter, ListPage, TenantStats};
use crate::domain::{CancelOutcome, Command, DuePosition, DueTimer, StreamIncarnation, Timer};
use backend::Backend;
use db::{DatabaseTarget, connect};
use postgres::Postgres;
use sqlite::Sqlite;

pub use db::{SqliteSettings, Synchronous};
pub use probe::MIN_FREE_BYTES;

/// Rows per statement: 11 bound values per upserted row stays far below SQLite's limit of
/// 32,766 variables.
const ROWS_PER_STATEMENT: usize = 1_000;

/// The condition the partial index `idx_timer_schedules_pending` is defined with. Written as a
/// literal: SQLite only uses a partial index when the query repeats its condition as-is, and a
/// bound parameter would not.
const PENDING: &str = "state = 'Scheduled'";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] DbErr),
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("database file {path} was removed or replaced while open: {reason}")]
    FileMoved { path: PathBuf, reason: String },
    #[error(
        "commands of {0} cannot be ordered: a newer incarnation of that stream is known (this one was deleted)"
    )]
    StaleStream(StreamIncarnation),
    #[error("stored row ({tenant_id}, {service_call_id}) is unreadable: {reason}")]
    CorruptRow {
        tenant_id: String,
        service_call_id: String,
        reason: String,
    },
}

impl StoreError {
    /// Whether the connection may be left in an unknown state, so it must be reopened before
    /// the next transaction. After a failed `COMMIT` (a full disk, an I/O error, a lock held
    /// past the busy timeout) SQLite may or may not have rolled the transaction back, and the
    /// driver's idea of it can differ from SQLite's: its next `BEGIN` then became a `SAVEPOINT`
    /// inside a transaction that never committed, and every later "commit" wrote nothing to
    /// disk while reporting success. Closing the connection rolls back whatever is open.
    pub fn needs_reopen(&self) -> bool {
        !matches!(
            self,
            StoreError::CorruptRow { .. } | StoreError::StaleStream(_)
        )
    }
}

/// A batch of due timers, and when the next one falls due.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueBatch {
    /// Due timers in firing order, at most the limit asked for, each now claimed.
    pub timers: Vec<DueTimer>,
    /// When to look again: the earliest `dueAt` still pending after `now`, or the lapse of
    /// another daemon's claim on a due timer if sooner. Looked up when the batch is not full
    /// (nothing more is due now), so that the caller need not ask again to learn it.
    pub next_due_at: Option<DateTime<Utc>>,
}

/// Who claims due timers, and for how long: a claim keeps other daemons (and a racing cancel)
/// off a timer while it is published; a daemon that dies holds its claims until they lapse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    /// The daemon's name. Stable across restarts, so a restarted daemon picks up its own
    /// claims at once instead of waiting for them to lapse.
    pub name: String,
    pub lease: Duration,
}

/// The service's database.
#[derive(Debug, Clone)]
pub struct Store {
    db: DatabaseConnection,
    backend: Arc<dyn Backend>,
}

impl Store {
    /// Opens the existing database. The schema must already be migrated.
    pub async fn open(target: &DatabaseTarget) -> Result<Self, StoreError> {
        let (db, backend) = open_backend(target).await?;
        Ok(Self { db, backend })
    }

    pub async fn close(self) -> Result<(), StoreError> {
        Ok(self.db.close().await?)
    }

    /// Applies a batch of accepted commands, each by the rules of docs/CONTRACT.md §3 (see
    /// [`crate::domain::timer::apply_command`], which this SQL follows), in stream order per key.
    /// Returns the number of rows written.
    pub async fn apply(&self, commands: &[Command]) -> Result<u64, StoreError> {
        commands::apply(self, commands).await
    }

    /// The epoch of an incarnation of the command stream (see [`crate::domain::order`]): the
    /// one recorded for it, or, the first time it is met, the next one. An incarnation older
    /// than one already known for the same stream name was deleted since: its commands cannot
    /// be ordered after the newer one's, and are refused. One durable transaction.
    pub async fn command_epoch(
        &self,
        stream: &StreamIncarnation,
        now: DateTime<Utc>,
    ) -> Result<u32, StoreError> {
        commands::command_epoch(self, stream, now).await
    }

    /// Applies one `CancelTimer` already ordered in the command stream (`command.seq` is its
    /// sequence there) and says how it went, with the timer as it is afterwards. One
    /// transaction. The CommandHandler meets the same command later and changes nothing.
    pub async fn cancel(
        &self,
        command: &Command,
    ) -> Result<(CancelOutcome, Option<Timer>), StoreError> {
        commands::cancel(self, command).await
    }

    /// Claims up to `limit` `Scheduled` timers with `due_at <= now` in firing order — starting
    /// after `after` when given (the last timer the caller has in flight) and skipping those
    /// another daemon holds a live claim on — and, when no more are due, finds the next `dueAt` to
    /// wake up for. The claim is what "picked for firing" means: committed, so a cancel arriving
    /// after it comes too late, and with several daemons no two publish the same timer.
    pub async fn claim_due(
        &self,
        now: DateTime<Utc>,
        after: Option<&DuePosition>,
        limit: usize,
        claimant: &Claimant,
    ) -> Result<DueBatch, StoreError> {
        firing::claim_due(self, now, after, limit, claimant).await
    }

    /// Marks published batches `Reached`, each at its own `reached_at`, in one transaction. A
    /// row whose `due_at` changed since it was claimed (rescheduled while its event was in
    /// flight) is left `Scheduled`, so the new `dueAt` still fires. Returns the number of rows
    /// marked.
    pub async fn mark_reached(
        &self,
        batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
    ) -> Result<u64, StoreError> {
        firing::mark_reached(self, batches).await
    }

    /// One timer of one tenant. Scoped by tenant: another tenant's timer with the same
    /// `serviceCallId` is never returned.
    pub async fn get(
        &self,
        tenant_id: &str,
        service_call_id: &str,
    ) -> Result<Option<Timer>, StoreError> {
        queries::get(self, tenant_id, service_call_id).await
    }

    /// One page of a tenant's timers in `(dueAt, serviceCallId)` order, tombstones first.
    pub async fn list(
        &self,
        tenant_id: &str,
        filter: &ListFilter,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        queries::list(self, tenant_id, filter, limit).await
    }

    /// How many timers of a tenant are pending, how many of them are overdue, and the earliest
    /// pending `dueAt`.
    pub async fn stats(
        &self,
        tenant_id: &str,
        now: DateTime<Utc>,
    ) -> Result<TenantStats, StoreError> {
        queries::stats(self, tenant_id, now).await
    }

    /// Deletes up to `limit` finished timers (`Reached` or `Cancelled`) that finished before
    /// `cutoff`, oldest first, in one short transaction; returns how many. Never a pending one.
    pub async fn delete_finished(
        &self,
        cutoff: DateTime<Utc>,
        limit: usize,
    ) -> Result<u64, StoreError> {
        retention::delete_finished(self, cutoff, limit).await
    }

    /// Proves the database accepts this daemon's writes: the file is still the one opened, its
    /// filesystem has room, and a small write (`daemons.seen_at`) commits. The health probe.
    pub async fn probe(&self, daemon: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
        probe::probe(self, daemon, now).await
    }

    /// Pending timers in all. Walks the pending index, so it runs on a connection of its own,
    /// never on the writer's.
    pub async fn count_pending(&self) -> Result<u64, StoreError> {
        probe::count_pending(self).await
    }

    /// Copies into the database file the few WAL frames written since the Checkpointer's last
    /// complete checkpoint, so that the next commit starts the WAL from its beginning. Nothing
    /// on PostgreSQL.
    pub async fn catch_up_wal(&self) -> Result<(), StoreError> {
        self.backend.catch_up_wal(&self.db).await
    }

    /// Runs `work`, whose commits must be on disk before it returns (commands, cancels), at the
    /// configured durability.
    async fn durable<T>(
        &self,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.backend.raise_durability(&self.db).await?;
        let result = work.await;
        self.backend.lower_durability(&self.db).await;
        let value = result?;
        self.backend.check_written()?;
        Ok(value)
    }

    /// Runs `work`, whose transactions (begun with [`Self::begin_relaxed`]) commit without
    /// waiting for the disk: for writes whose loss to a power cut is harmless (claims, marks,
    /// retention deletes), kept off the fsync path.
    async fn relaxed<T>(
        &self,
        work: impl Future<Output = Result<T, DbErr>>,
    ) -> Result<T, StoreError> {
        let value = work.await?;
        self.backend.check_written()?;
        Ok(value)
    }

    /// A transaction for [`Self::relaxed`] work.
    async fn begin_relaxed(&self) -> Result<DatabaseTransaction, DbErr> {
        let txn = self.db.begin().await?;
        self.backend.relax(&txn).await?;
        Ok(txn)
    }
}

/// Opens the existing database at `target` and the backend that goes with it.
async fn open_backend(
    target: &DatabaseTarget,
) -> Result<(DatabaseConnection, Arc<dyn Backend>), StoreError> {
    match target {
        DatabaseTarget::Sqlite { path, settings } => {
            let db = connect(target, 1).await?;
            let backend = Sqlite::open(&db, path, settings).await?;
            Ok((db, Arc::new(backend)))
        }
        DatabaseTarget::Postgres { .. } => {
            let db = connect(target, Postgres::POOL).await?;
            Ok((db, Arc::new(Postgres)))
        }
    }
}
