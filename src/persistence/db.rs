//! Opening the SQLite file: WAL journal, the configured `synchronous` level, a busy timeout,
//! foreign keys on, one connection (the Persistence actor is the single reader and writer).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sea_orm::{DatabaseConnection, DbErr, SqlxSqliteConnector};
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

/// Opens (creating if absent) the SQLite file at `path`.
pub async fn connect(path: &Path, settings: &SqliteSettings) -> Result<DatabaseConnection, DbErr> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(settings.synchronous.into())
        .busy_timeout(settings.busy_timeout)
        .foreign_keys(true)
        .pragma("cache_size", format!("-{}", settings.cache_kib));
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
