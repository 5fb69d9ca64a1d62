//! Reader connections: the query API's reads and the gauges' counts run on connections of their
//! own beside the writer (SQLite's WAL lets readers read while the writer commits), so a slow
//! read never holds up a claim or a commit. An API read has a time limit: past it the read is
//! stopped (SQLite: interrupted at its next step; PostgreSQL: the server's `statement_timeout`,
//! per statement) and fails as [`StoreError::TooLong`], so what one read costs is bounded
//! however many timers a tenant holds.

use std::sync::Arc;
use std::time::Duration;

use super::db::{DatabaseTarget, connect_postgres_reader, open_sqlite_reader};
use super::postgres::Postgres;
use super::sqlite::{ReadDeadline, Sqlite};
use super::{PostgresSettings, Store, StoreError};

impl Store {
    /// Opens a reader connection to the existing database: reads only (SQLite refuses a write
    /// on it), and [`Self::read_within`] can stop its reads.
    pub async fn open_reader(
        target: &DatabaseTarget,
        postgres: &PostgresSettings,
    ) -> Result<Self, StoreError> {
        let (db, backend): (_, Arc<dyn super::backend::Backend>) = match target {
            DatabaseTarget::Sqlite { path, settings } => {
                let deadline = Arc::new(ReadDeadline::default());
                let passed = {
                    let deadline = deadline.clone();
                    move || deadline.passed()
                };
                let db = open_sqlite_reader(path, settings, passed).await?;
                let backend = Sqlite::reader(&db, path, settings, deadline).await?;
                (db, Arc::new(backend))
            }
            DatabaseTarget::Postgres { url } => (
                connect_postgres_reader(url, postgres).await?,
                Arc::new(Postgres),
            ),
        };
        Ok(Self {
            db,
            backend,
            callers_clock: false,
        })
    }

    /// Runs the reads of `work` for at most `limit`; past it they are stopped and this fails as
    /// [`StoreError::TooLong`]. The connection stays usable either way.
    pub async fn read_within<T>(
        &self,
        limit: Duration,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.backend.limit_reads(&self.db, Some(limit)).await?;
        let result = work.await;
        // A limit left in place would stop the next reads: a failure to lift it is a failure
        // of the connection (reopened).
        self.backend.limit_reads(&self.db, None).await?;
        result.map_err(|e| {
            if self.backend.stopped_for_time(&e) {
                StoreError::TooLong(limit)
            } else {
                e
            }
        })
    }
}
