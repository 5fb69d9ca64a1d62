//! Where SQLite and PostgreSQL differ, in one place: the [`Backend`] trait, implemented once
//! per database ([`super::sqlite`], [`super::postgres`]). The queries are written once, against
//! SeaORM; they ask the backend only what differs: how a commit waits (or not) for the disk,
//! whether one statement is a transaction of its own, what must be checked of the storage after a write, whose clock decides what is due,
//! and the WAL catch-up. A change for one database touches its own file only.

use std::fmt::Debug;
use std::time::Duration;

use sea_orm::{DatabaseConnection, DatabaseTransaction, DbErr};

use super::StoreError;

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

    /// Whether a write of one statement may skip the BEGIN and COMMIT round trips: one
    /// statement is a transaction of its own that commits at the connection's level. Not on
    /// PostgreSQL, where a relaxed commit is asked for inside its transaction.
    fn statement_is_transaction(&self) -> bool;

    /// Whether several daemons share the table, so that the database server's clock, not
    /// the caller's, decides what is due and when a claim lapses (its firing path then is
    /// `postgres::firing`).
    fn server_clock(&self) -> bool;

    /// Fails when what was just committed may not be where the store reads from (a file
    /// removed or replaced while open).
    fn check_written(&self) -> Result<(), StoreError>;

    /// Fails when the storage is too full to take the next batch of timers.
    fn check_room(&self) -> Result<(), StoreError>;

    /// Copies into the database what its write-ahead log still holds, when that is the
    /// writer's job.
    async fn catch_up_wal(&self, db: &DatabaseConnection) -> Result<(), StoreError>;

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
