//! Opening the SQLite file: WAL journal, the configured `synchronous` level, a busy timeout,
//! foreign keys on, one connection (the Persistence actor is the single reader and writer).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, SqlxSqliteConnector, Statement};
use serde::Deserialize;

/// SQLite `synchronous` level.
///
/// `Full` is the default: WAL is fsynced at each commit, so a command acknowledged to the broker
/// survives a power loss, not only a process crash. `Normal` survives `kill -9` and is faster,
/// but an OS crash can drop the last commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum Synchronous {
    Off,
    Normal,
    #[default]
    Full,
    Extra,
}

impl FromStr for Synchronous {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "OFF" => Ok(Self::Off),
            "NORMAL" => Ok(Self::Normal),
            "FULL" => Ok(Self::Full),
            "EXTRA" => Ok(Self::Extra),
            other => Err(format!("{other:?} is not one of OFF, NORMAL, FULL, EXTRA")),
        }
    }
}

impl Synchronous {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "OFF",
            Self::Normal => "NORMAL",
            Self::Full => "FULL",
            Self::Extra => "EXTRA",
        }
    }
}

impl From<Synchronous> for SqliteSynchronous {
    fn from(s: Synchronous) -> Self {
        match s {
            Synchronous::Off => SqliteSynchronous::Off,
            Synchronous::Normal => SqliteSynchronous::Normal,
            Synchronous::Full => SqliteSynchronous::Full,
            Synchronous::Extra => SqliteSynchronous::Extra,
        }
    }
}

/// SQLite tuning the operator may set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteSettings {
    pub synchronous: Synchronous,
    pub busy_timeout: Duration,
    /// Page cache size in KiB (SQLite `cache_size = -N`).
    pub cache_kib: u32,
}

impl Default for SqliteSettings {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            cache_kib: 65_536,
        }
    }
}

/// WAL size, in pages, at which a commit checkpoints by itself.
const AUTOCHECKPOINT_BACKSTOP_PAGES: u32 = 100_000;

/// What one checkpoint did, as SQLite reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// Pages in the WAL.
    pub wal_pages: i64,
    /// Pages copied into the database file so far.
    pub checkpointed_pages: i64,
}

/// How a checkpoint treats the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Copies what it can without waiting for, or blocking, readers and the writer.
    Passive,
    /// Copies everything, then empties the WAL file; waits for the writer's current transaction
    /// and holds off the next one meanwhile. Cheap once a passive checkpoint has copied it all.
    Truncate,
}

/// Checkpoints the WAL of `db`'s file.
pub async fn checkpoint(
    db: &DatabaseConnection,
    mode: CheckpointMode,
) -> Result<Checkpoint, DbErr> {
    let pragma = match mode {
        CheckpointMode::Passive => "PRAGMA wal_checkpoint(PASSIVE)",
        CheckpointMode::Truncate => "PRAGMA wal_checkpoint(TRUNCATE)",
    };
    // All rows, so the statement runs to completion and holds no read snapshot afterwards: a
    // lingering snapshot would keep the writer from restarting the WAL, which then only grows.
    let rows = db
        .query_all_raw(Statement::from_string(db.get_database_backend(), pragma))
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| DbErr::Custom("wal_checkpoint returned no row".into()))?;
    Ok(Checkpoint {
        wal_pages: row.try_get_by_index(1)?,
        checkpointed_pages: row.try_get_by_index(2)?,
    })
}

/// Opens (creating if absent) the SQLite file at `path`.
pub async fn connect(path: &Path, settings: &SqliteSettings) -> Result<DatabaseConnection, DbErr> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(settings.synchronous.into())
        .busy_timeout(settings.busy_timeout)
        .foreign_keys(true)
        .pragma("cache_size", format!("-{}", settings.cache_kib))
        // Checkpoints are the Checkpointer actor's job, on its own connection, so that copying
        // the WAL into a large file never stalls a commit on the firing path. This threshold
        // (about 400 MB of WAL) is only a backstop should the Checkpointer be down.
        .pragma(
            "wal_autocheckpoint",
            AUTOCHECKPOINT_BACKSTOP_PAGES.to_string(),
        );
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .connect_with(options)
        .await
        .map_err(|e| DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e.into())))?;
    Ok(SqlxSqliteConnector::from_sqlx_sqlite_pool(pool))
}

/// Brings the schema of the file at `path` up to date.
pub async fn migrate(path: &Path, settings: &SqliteSettings) -> Result<(), DbErr> {
    let db = connect(path, settings).await?;
    Migrator::up(&db, None).await?;
    db.close().await
}
