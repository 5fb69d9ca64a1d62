//! Where SQLite and PostgreSQL differ, in one place: the [`Backend`] trait, implemented once
//! per database (`sqlite/`, `postgres/`), as River's drivers implement one interface. The
//! shared modules call `store.backend` for what differs and never ask which database it is:
//!
//! - durability: how a commit waits (or not) for the disk;
//! - the checks only a file has (its identity at its path, the free space of its disk);
//! - the firing path: the claim in `dueAt` order, the mark, the fair claim's walk and shares
//!   (one writer on SQLite; `FOR UPDATE SKIP LOCKED` by the server's clock on PostgreSQL);
//! - the clock: whose clock decides what is due, and the retention cutoff by it;
//! - taking a daemon's name, and the WAL catch-up.
//!
//! A claim reaches the backend as one value ([`ClaimDue`], [`ClaimShares`]) built once by the
//! store with its clock, not as positional parameters passed on through each layer.
//!
//! A backend module imports the shared ones (rows, constants, `fair::choose`'s limits), never
//! the other way round. A change for one database touches its own directory only.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, SimpleExpr};
use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr};

use super::{Claimant, DueBatch, NameHold, Store, StoreError};
use crate::domain::timestamp::format_utc;
use crate::domain::{DuePosition, DueTimer};

/// The `now` a caller passed, and whether it decides even where the server's clock would: the
/// backend decides whose clock it goes by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    /// The caller's clock.
    pub(crate) at: DateTime<Utc>,
    /// Set by `Store::with_callers_clock`, for tests of the rules at instants they choose.
    pub(crate) callers_clock: bool,
}

impl Now {
    /// `ago` before the caller's clock, as stored text; `None` when no instant is that far
    /// back.
    pub(crate) fn before(self, ago: Duration) -> Option<SimpleExpr> {
        let then = chrono::Duration::from_std(ago)
            .ok()
            .and_then(|ago| self.at.checked_sub_signed(ago))?;
        Some(Expr::value(format_utc(then)))
    }
}

/// A claim in firing order (see `Store::claim_due_fenced`): up to `limit` due timers after
/// `after`, taking again only those of the claimant's own claims whose lease ends before
/// `fence`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimDue<'a> {
    pub(crate) now: Now,
    pub(crate) after: Option<&'a DuePosition>,
    pub(crate) limit: usize,
    pub(crate) fence: Option<DateTime<Utc>>,
    pub(crate) claimant: &'a Claimant,
}

/// The fair claim's shares (see `storage::fair`): up to `share` due timers of each of
/// `tenants`, each tenant's in `dueAt` order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimShares<'a> {
    pub(crate) now: Now,
    pub(crate) tenants: &'a [String],
    pub(crate) share: usize,
    pub(crate) fence: DateTime<Utc>,
    pub(crate) claimant: &'a Claimant,
}

/// What one database does its own way. Methods that have nothing to do on a database are
/// no-ops there.
#[async_trait::async_trait]
pub(crate) trait Backend: Debug + Send + Sync {
    /// Before work whose commits must be on disk when it returns (commands, cancels): raises
    /// the connection to the configured durability if it rests below it.
    async fn raise_durability(&self, db: &DatabaseConnection) -> Result<(), StoreError>;

    /// After that work: lowers the connection to its resting level again. A failure leaves it
    /// at the configured level (slower, never less safe), so it is only logged.
    async fn lower_durability(&self, db: &DatabaseConnection);

    /// Makes `txn` commit without waiting for the disk, for writes whose loss to a power cut is
    /// harmless (claims, marks, retention deletes).
    async fn relax(&self, txn: &DatabaseTransaction) -> Result<(), DbErr>;

    /// Has the statements of `txn` planned for their values each time, not by a plan cached
    /// for any values: for work that repeats one statement over a table whose statistics may
    /// be stale (a cancel's steps over a tenant's timers just scheduled).
    async fn plan_for_values(&self, txn: &DatabaseTransaction) -> Result<(), DbErr>;

    /// Whether a write of one statement may skip the BEGIN and COMMIT round trips: one
    /// statement is a transaction of its own that commits at the connection's level. Not on
    /// PostgreSQL, where a relaxed commit is asked for inside its transaction.
    fn statement_is_transaction(&self) -> bool;

    /// Fails when what was just committed may not be where the store reads from (a file
    /// removed or replaced while open).
    fn check_written(&self) -> Result<(), StoreError>;

    /// Fails when the storage is too full to take the next batch of timers.
    fn check_room(&self) -> Result<(), StoreError>;

    /// Copies into the database what its write-ahead log still holds, when that is the
    /// writer's job.
    async fn catch_up_wal(&self, db: &DatabaseConnection) -> Result<(), StoreError>;

    /// See `Store::claim_due_fenced`: claims due timers in firing order, and when the batch is
    /// not full finds when to look again.
    async fn claim_due(&self, store: &Store, claim: ClaimDue<'_>) -> Result<DueBatch, StoreError>;

    /// See `Store::mark_reached`; `batches` holds at least one timer.
    async fn mark_reached(
        &self,
        store: &Store,
        batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
    ) -> Result<u64, StoreError>;

    /// The fair claim's walk (see `storage::fair`): the tenants holding rows after
    /// `resume_after`, at most `fair::TENANTS_PER_WALK`, each with whether a timer of theirs is
    /// due.
    async fn walk_tenants(
        &self,
        store: &Store,
        now: Now,
        resume_after: Option<&str>,
    ) -> Result<Vec<(String, bool)>, StoreError>;

    /// The fair claim's shares, in one statement.
    async fn claim_shares(
        &self,
        store: &Store,
        claim: ClaimShares<'_>,
    ) -> Result<DueBatch, StoreError>;

    /// Now by the store's clock, as stored text (the daemons' `seen_at`): the caller's `now`
    /// where one daemon has the database, the server's clock where daemons share it.
    fn clock_now(&self, now: DateTime<Utc>) -> SimpleExpr;

    /// Now in milliseconds since the epoch by the clock quota windows are kept by, for the
    /// statement that locks a batch's tenant rows to return: the caller's where one daemon has
    /// the database, the server's where daemons share it (read as each row is returned, after
    /// its lock was granted), so that daemons whose clocks disagree count in one window.
    fn quota_clock_ms(&self, now: Now) -> SimpleExpr;

    /// The retention cutoff: `keep` before now by the clock that stamped `reached_at`, as
    /// stored text. `None` when no instant is that far back (nothing to delete).
    fn retention_cutoff(&self, now: Now, keep: Duration) -> Option<SimpleExpr>;

    /// See `Store::take_name`: at once where one daemon has the database to itself, after
    /// watching a recent holder's row where daemons share it.
    async fn take_name(
        &self,
        store: &Store,
        name: &str,
        watch: Duration,
    ) -> Result<NameHold, StoreError>;

    /// Limits how long the reads that follow on a reader connection may run (`None`: lifts
    /// the limit). See `storage::reader`.
    async fn limit_reads(
        &self,
        db: &DatabaseConnection,
        limit: Option<Duration>,
    ) -> Result<(), StoreError>;

    /// Whether `error` is a read stopped by that limit.
    fn stopped_for_time(&self, error: &StoreError) -> bool;
}
