//! The PostgreSQL [`Backend`]: several daemons share the table, each commit says itself
//! whether it waits for the disk, and there is no file of ours to watch.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr};

use super::StoreError;
use super::backend::Backend;

/// An instant of the server's clock (SQL) as the service's fixed-width text
/// (`YYYY-MM-DDTHH:MM:SS.sssZ`), so it compares with the stored instants. `MS` truncates to the
/// millisecond, so a timer due at `.124` is due once the clock reads `.124000` or later: never
/// early. The one place the format is written in SQL.
macro_rules! server_text {
    ($instant:expr) => {
        concat!(
            "to_char((",
            $instant,
            ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        )
    };
}

pub(super) mod fair;
pub(super) mod firing;

/// The server's clock now: `seen_at` of the daemons' rows.
pub(super) const SERVER_NOW: &str = server_text!("statement_timestamp()");

/// The server's clock `$1` milliseconds ago: the retention cutoff (by the clock that stamped
/// `reached_at`), and how recently a daemon's row must have been written for its holder to be
/// possibly alive.
pub(super) const SERVER_TIME_BEFORE: &str =
    server_text!("statement_timestamp() - $1 * interval '1 millisecond'");

/// PostgreSQL: the server's durability and files are its own business.
#[derive(Debug)]
pub(crate) struct Postgres;

impl Postgres {
    /// Connections a store holds; its actor runs one transaction at a time.
    pub(crate) const POOL: u32 = 2;
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

    fn server_clock(&self) -> bool {
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

    /// The server's `statement_timeout` of the reader's session: each statement of the reads
    /// that follow is cancelled past `limit`; `RESET` gives back the session's own.
    async fn limit_reads(
        &self,
        db: &DatabaseConnection,
        limit: Option<Duration>,
    ) -> Result<(), StoreError> {
        let statement = match limit {
            Some(limit) => format!("SET statement_timeout = {}", limit.as_millis().max(1)),
            None => "RESET statement_timeout".to_owned(),
        };
        db.execute_unprepared(&statement).await?;
        Ok(())
    }

    /// SQLSTATE 57014, `query_canceled`: the statement ran past the limit.
    fn stopped_for_time(&self, error: &StoreError) -> bool {
        error.database_code().as_deref() == Some("57014")
    }
}
