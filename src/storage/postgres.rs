//! The PostgreSQL [`Backend`]: several daemons share the table, each commit says itself
//! whether it waits for the disk, and there is no file of ours to watch.

use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr};

use super::StoreError;
use super::backend::Backend;

/// PostgreSQL: the server's durability and files are its own business.
#[derive(Debug)]
pub(crate) struct Postgres;

impl Postgres {
    /// Connections a store holds; its actor runs one transaction at a time.
    pub(crate) const POOL: u32 = 2;

    /// Keys per `Reached` mark statement: the planner expands `(a, b, c) IN (…)` into one OR
    /// branch per key and takes time growing with the square of their number (see
    /// BENCHMARKS.md, "PostgreSQL").
    const KEYS_PER_MARK: usize = 50;
}

#[async_trait::async_trait]
impl Backend for Postgres {
    /// Every commit waits for the disk unless its transaction says otherwise.
    async fn raise_durability(&self, _db: &DatabaseConnection) -> Result<(), StoreError> {
        Ok(())
    }

    async fn lower_durability(&self, _db: &DatabaseConnection) {}

    async fn relax(&self, txn: &DatabaseTransaction) -> Result<(), DbErr> {
        txn.execute_unprepared("SET LOCAL synchronous_commit = off")
            .await?;
        Ok(())
    }

    fn statement_is_transaction(&self) -> bool {
        false
    }

    fn keys_per_mark(&self) -> usize {
        Self::KEYS_PER_MARK
    }

    fn shared(&self) -> bool {
        true
    }

    fn check_written(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn check_room(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn catch_up_wal(&self, _db: &DatabaseConnection) -> Result<(), StoreError> {
        Ok(())
    }
}
