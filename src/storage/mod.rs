//! Storage: the only code that touches SeaORM and the database.
//!
//! Every query of the service, as batch-shaped methods of [`Store`]: one call, one
//! transaction, multi-row statements off the per-timer path. The shared modules are written
//! once; where SQLite and PostgreSQL differ they call the `Backend` and never ask which it is.
//!
//! - this file: the store's face ([`Store`], [`DueBatch`], [`Claimant`]) and opening it.
//! - `error`: [`StoreError`], and refused rows told apart from outages.
//! - `backend`: the `Backend` trait; `sqlite/` and `postgres/` implement it, each with its
//!   `firing` (claim in `dueAt` order, mark) and `fair` (walk, shares) SQL and its clock.
//! - `commands`: commands, cancels, the command stream's epochs. `firing`: claims, marks.
//!   `fair`: claims by tenant in turn. `retention`: deleting finished timers.
//! - `queries`: the query API's reads; `quotas`: what the pending limit needs; `refusals`:
//!   the commands refused for a quota, recorded so that a copy is refused again; `probe`: the
//!   health probe, the daemon's name, the pending count.
//! - `backup`: a consistent copy of a running daemon's SQLite file.
//! - `rows`: stored rows ↔ the domain's types; `entity`, `daemons`, `command_streams`: the
//!   tables; `db`: connecting, settings, migrations, checkpoints, free space.

pub mod backup;
pub mod cancel_many;
pub mod census;
pub mod command_streams;
pub mod daemons;
pub mod db;
pub mod downgrade;
pub mod entity;
pub mod fair;
pub mod firing;
pub mod queries;
pub mod quotas;

mod backend;
pub use cancel_many::CancelStep;
mod commands;
mod error;
mod postgres;
mod probe;
mod profile;
mod reader;
mod refusals;
mod retention;
mod rows;
mod sqlite;
mod upsert;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr, TransactionTrait};

use crate::domain::api::{ListFilter, ListPage, TenantStats};
use crate::domain::forecast::{ForecastMinute, ForecastWindow};
use crate::domain::quota::Quotas;
use crate::domain::{CancelOutcome, Command, DueTimer, StreamIncarnation, Timer};
use backend::{Backend, Now};
use db::{DatabaseTarget, connect_with};
use postgres::Postgres;
use sqlite::Sqlite;

pub use db::{PostgresSettings, SqliteSettings, Synchronous};

/// The PostgreSQL claim statement in `dueAt` order as the store runs it, with the settings of
/// its transaction: for tests that read its plan.
#[doc(hidden)]
pub fn postgres_claim_statement(
    claimant: &Claimant,
    limit: usize,
) -> (&'static str, sea_orm::Statement) {
    (
        postgres::firing::FIRING_SETTINGS,
        postgres::firing::claim_statement(backend::ClaimDue {
            now: Now {
                at: Utc::now(),
                callers_clock: false,
            },
            after: None,
            limit,
            fence: None,
            claimant,
        }),
    )
}
/// The PostgreSQL mark statement for `keys` (tenant, service call id, `dueAt`) as the store runs
/// it, with the settings of its transaction: for tests that read its plan.
#[doc(hidden)]
pub fn postgres_mark_statement(
    keys: &[(&str, &str, DateTime<Utc>)],
) -> (&'static str, sea_orm::Statement) {
    (
        postgres::firing::FIRING_SETTINGS,
        postgres::firing::mark_statement(keys, Utc::now()),
    )
}
pub use commands::Applied;
pub use error::StoreError;
pub use probe::{MIN_FREE_BYTES, NameHold};
pub use queries::PendingCounts;

/// Rows per statement: 12 bound values per upserted row stays far below SQLite's limit of
/// 32,766 variables.
const ROWS_PER_STATEMENT: usize = 1_000;

/// The condition the partial index `idx_timer_schedules_pending` is defined with. Written as a
/// literal: SQLite only uses a partial index when the query repeats its condition as-is, and a
/// bound parameter would not.
const PENDING: &str = "state = 'Scheduled'";

/// A batch of due timers, and when the next one falls due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueBatch {
    /// Due timers in firing order, at most the limit asked for, each now claimed.
    pub timers: Vec<DueTimer>,
    /// When to look again: the earliest `dueAt` still pending after `now`, or the lapse of
    /// another daemon's claim on a due timer if sooner. Looked up when the batch is not full
    /// (nothing more is due now), so that the caller need not ask again to learn it.
    pub next_due_at: Option<DateTime<Utc>>,
    /// The instant the claim was decided at by the database server's clock, where that clock
    /// decides what is due (PostgreSQL); `None` where the caller's `now` did (SQLite). The
    /// caller plans its wake-ups against this clock, so that its own clock's error does not
    /// move them.
    pub server_now: Option<DateTime<Utc>>,
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
    /// Whether the `now` a caller passes decides what is due even where the server's clock
    /// would (see [`Self::with_callers_clock`]).
    callers_clock: bool,
}

impl Store {
    /// Opens the existing database. The schema must already be migrated.
    pub async fn open(target: &DatabaseTarget) -> Result<Self, StoreError> {
        Self::open_pool(target, &PostgresSettings::default(), Postgres::POOL).await
    }

    /// Opens the existing database on one connection, with the given PostgreSQL limits (unused
    /// on SQLite): a lane's connection, which runs one operation at a time. A pool of two let
    /// a transaction begun right after a commit open a second connection while the first was
    /// still being handed back, and a daemon held more connections than it accounts for.
    pub async fn open_connection(
        target: &DatabaseTarget,
        postgres: &PostgresSettings,
    ) -> Result<Self, StoreError> {
        Self::open_pool(target, postgres, 1).await
    }

    /// Opens the existing database, on PostgreSQL as a pool of at most `pool` connections.
    async fn open_pool(
        target: &DatabaseTarget,
        postgres: &PostgresSettings,
        pool: u32,
    ) -> Result<Self, StoreError> {
        let (db, backend) = open_backend(target, postgres, pool).await?;
        Ok(Self {
            db,
            backend,
            callers_clock: false,
        })
    }

    /// The same store, with the `now` its callers pass deciding what is due, when claims lapse
    /// and what is old enough to delete, on PostgreSQL too: for tests of the rules at instants
    /// they choose. A daemon never uses it: on PostgreSQL the server's clock is the one clock.
    pub fn with_callers_clock(mut self) -> Self {
        self.callers_clock = true;
        self
    }

    /// The caller's `now`, for the backend to decide by or to set aside for its server's clock.
    fn now(&self, at: DateTime<Utc>) -> Now {
        Now {
            at,
            callers_clock: self.callers_clock,
        }
    }

    pub async fn close(self) -> Result<(), StoreError> {
        Ok(self.db.close().await?)
    }

    /// Applies a batch of accepted commands, each by the rules of docs/CONTRACT.md §3 (see
    /// [`crate::domain::timer::apply_command`], which this SQL follows), in stream order per key.
    /// Returns the number of rows written.
    pub async fn apply(&self, commands: &[Command]) -> Result<u64, StoreError> {
        let applied = commands::apply(self, commands, &Quotas::default(), 0).await?;
        Ok(applied.written)
    }

    /// [`Self::apply`], with each command first decided against its tenant's quotas at
    /// `now_ms` (the wall clock, in milliseconds) in the same transaction, as every daemon on
    /// the database sees them (docs/CONTRACT.md §9): the refused ones are not stored.
    pub async fn apply_within_quotas(
        &self,
        commands: &[Command],
        quotas: &Quotas,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        commands::apply(self, commands, quotas, now_ms).await
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

    /// For the pending limit of each tenant in `asked` (docs/CONTRACT.md §9): how many timers
    /// it holds pending, and the stored state of the keys (service call ids) asked about that
    /// have a row. One count over all the tenants, then the keys by primary key.
    pub async fn pending_of(
        &self,
        asked: &[(String, Vec<String>)],
    ) -> Result<std::collections::HashMap<String, crate::domain::quota::TenantPending>, StoreError>
    {
        quotas::pending_of(self, asked).await
    }

    /// How many timers of a tenant are pending, and how many of them are overdue: one walk of
    /// the tenant's pending index range (the Gauges actor's per-tenant count).
    pub async fn pending_counts(
        &self,
        tenant_id: &str,
        now: DateTime<Utc>,
    ) -> Result<PendingCounts, StoreError> {
        queries::pending_counts(self, tenant_id, now).await
    }

    /// How many of a tenant's pending timers fall due in each minute of `window`, from now on
    /// (docs/CONTRACT.md §6).
    pub async fn forecast(
        &self,
        tenant_id: &str,
        window: &ForecastWindow,
    ) -> Result<Vec<ForecastMinute>, StoreError> {
        queries::forecast(self, tenant_id, window).await
    }

    /// Deletes up to `limit` finished timers (`Reached` or `Cancelled`) that finished more than
    /// `keep` before now (`now` on SQLite, the server's clock on PostgreSQL, which stamped
    /// `reached_at`), oldest first, then records of refused commands as old, in one short
    /// transaction; returns how many rows. Never a pending timer.
    pub async fn delete_finished(
        &self,
        now: DateTime<Utc>,
        keep: Duration,
        limit: usize,
    ) -> Result<u64, StoreError> {
        retention::delete_finished(self, now, keep, limit).await
    }

    /// Proves the database accepts this daemon's writes: the file is still the one opened, its
    /// filesystem has room, and a small write (`daemons.seen_at`) commits. The health probe.
    /// Also proves the daemon still holds its name: the write is made only while the row is this
    /// process's, and fails when another daemon has taken the name (see [`Self::take_name`]).
    pub async fn probe(&self, daemon: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
        probe::probe(self, daemon, now).await
    }

    /// Takes `name` for this process (see [`daemons::instance`]) unless a live daemon holds
    /// it. On PostgreSQL, where daemons share the table, a row another instance wrote within
    /// `watch` (by the server's clock) is watched for up to `watch`: written again, its holder
    /// lives and the name stays its; not written, its holder is dead and the name is taken. On
    /// SQLite, one daemon per file, the name is taken at once.
    pub async fn take_name(&self, name: &str, watch: Duration) -> Result<NameHold, StoreError> {
        probe::take_name(self, name, watch).await
    }

    /// Gives up `name` if this process holds it, so that a daemon started next under it takes
    /// it without watching: at a graceful stop, once the Poller has stopped. Gives up too the
    /// claims still held under the name (timers claimed and not published, or published and
    /// not marked), so that the other daemons fire them at once rather than when their lease
    /// lapses (docs/CONTRACT.md §8). Returns how many claims it gave up.
    pub async fn release_name(&self, name: &str, now: DateTime<Utc>) -> Result<u64, StoreError> {
        probe::release_name(self, name, now).await
    }

    /// Every tenant's pending and overdue timers, those in trouble first (at most
    /// [`crate::domain::census::CENSUS_TENANTS`]): the console's overview. One walk of the
    /// pending rows, so a reader connection's, bounded by its read deadline.
    pub async fn census(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<crate::domain::census::TenantCensus>, StoreError> {
        census::census(self, now).await
    }

    /// The daemons sharing the database, as their health probes last recorded them.
    pub async fn daemons_seen(&self) -> Result<Vec<crate::domain::census::DaemonSeen>, StoreError> {
        census::daemons_seen(self).await
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

/// Opens the existing database at `target` (on PostgreSQL, a pool of at most `pool`
/// connections) and the backend that goes with it.
async fn open_backend(
    target: &DatabaseTarget,
    postgres: &PostgresSettings,
    pool: u32,
) -> Result<(DatabaseConnection, Arc<dyn Backend>), StoreError> {
    match target {
        DatabaseTarget::Sqlite { path, settings } => {
            let db = connect_with(target, 1, postgres).await?;
            let backend = Sqlite::open(&db, path, settings).await?;
            Ok((db, Arc::new(backend)))
        }
        DatabaseTarget::Postgres { .. } => {
            let db = connect_with(target, pool, postgres).await?;
            Ok((db, Arc::new(Postgres)))
        }
    }
}
