//! Opening the database: a SQLite file (the default) or PostgreSQL (`database_url`).
//!
//! SQLite: WAL journal, the configured `synchronous` level, a busy timeout, foreign keys on,
//! one connection (the Persistence actor is the single reader and writer). PostgreSQL: a small
//! pool per actor that needs one; several daemons share the database.
//!
//! Only [`migrate`] creates the SQLite file. Every other open expects it: a file that vanished while
//! the daemon ran (its directory removed or replaced) is a storage fault to wait out, and
//! creating an empty one in its place would silently forget every pending timer.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use migration::{Migrator, MigratorTrait};
use sea_orm::sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, SqlxSqliteConnector, Statement};

pub use crate::config::{PostgresSettings, SqliteSettings, Synchronous};

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

/// WAL size, in pages, at which a commit checkpoints by itself.
const AUTOCHECKPOINT_BACKSTOP_PAGES: u32 = 100_000;

/// Rows a statement's thread hands over before it waits for the caller to take them: a claim's
/// whole batch (`poller::claim_size`, 2,000 at the default batch) and more.
const ROW_BUFFER: usize = 4_096;

/// What one checkpoint did, as SQLite reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// Pages in the WAL.
    pub wal_pages: i64,
    /// Pages copied into the database file so far.
    pub checkpointed_pages: i64,
}

/// Checkpoints the WAL of `db`'s file in `PASSIVE` mode: copies what it can without waiting
/// for, or blocking, readers and the writer.
pub async fn checkpoint(db: &DatabaseConnection) -> Result<Checkpoint, DbErr> {
    let pragma = "PRAGMA wal_checkpoint(PASSIVE)";
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

/// Which file a path names (device and inode). A file removed or replaced while open keeps
/// taking writes through the open connection, and those writes vanish with the last handle:
/// comparing the identity at the path with the one opened tells a commit that reached the
/// database from one that went into a file nobody will read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    device: u64,
    inode: u64,
}

impl FileIdentity {
    pub fn of(path: &Path) -> std::io::Result<Self> {
        Ok(Self::from(&std::fs::metadata(path)?))
    }

    /// The identity of a file already open, whatever its path names now.
    pub fn of_file(file: &std::fs::File) -> std::io::Result<Self> {
        Ok(Self::from(&file.metadata()?))
    }

    fn from(metadata: &std::fs::Metadata) -> Self {
        Self {
            device: metadata.dev(),
            inode: metadata.ino(),
        }
    }
}

/// Bytes available to this process on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stats = rustix::fs::statvfs(dir)?;
    Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// Where the timers are kept. Its `Debug` shows the PostgreSQL URL redacted, like
/// [`DatabaseTarget::describe`].
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    Sqlite {
        path: PathBuf,
        settings: SqliteSettings,
    },
    Postgres {
        url: String,
    },
}

impl DatabaseTarget {
    /// Where `config` keeps the timers: PostgreSQL when `database_url` is set, else the
    /// SQLite file.
    pub fn of(config: &crate::config::Config) -> Self {
        match &config.database_url {
            Some(url) => Self::Postgres { url: url.clone() },
            None => Self::Sqlite {
                path: config.db_path.clone(),
                settings: config.sqlite.clone(),
            },
        }
    }

    /// The SQLite file at `path` with default settings.
    pub fn sqlite(path: impl Into<PathBuf>) -> Self {
        Self::Sqlite {
            path: path.into(),
            settings: SqliteSettings::default(),
        }
    }

    /// For logs and errors: the file, or the PostgreSQL URL without its password (in the
    /// user part or in the query string).
    pub fn describe(&self) -> String {
        match self {
            Self::Sqlite { path, .. } => path.display().to_string(),
            Self::Postgres { url } => crate::config::redact_url(url),
        }
    }
}

impl std::fmt::Debug for DatabaseTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite { path, settings } => f
                .debug_struct("Sqlite")
                .field("path", path)
                .field("settings", settings)
                .finish(),
            Self::Postgres { .. } => f
                .debug_struct("Postgres")
                .field("url", &self.describe())
                .finish(),
        }
    }
}

/// Opens the existing database with the default PostgreSQL settings; `pool` is the most
/// PostgreSQL connections to hold (SQLite is always one).
pub async fn connect(target: &DatabaseTarget, pool: u32) -> Result<DatabaseConnection, DbErr> {
    connect_with(target, pool, &PostgresSettings::default()).await
}

/// Opens the existing database; on PostgreSQL every connection of the pool is opened within
/// `postgres.connect_timeout` and carries the server-side limits and keepalives of
/// `postgres` as session settings (see [`PostgresSettings::session_options`]).
pub async fn connect_with(
    target: &DatabaseTarget,
    pool: u32,
    postgres: &PostgresSettings,
) -> Result<DatabaseConnection, DbErr> {
    match target {
        DatabaseTarget::Sqlite { path, settings } => open(path, settings, false).await,
        DatabaseTarget::Postgres { url } => {
            connect_postgres(url, pool, postgres.session_options(), postgres).await
        }
    }
}

/// A reader connection to PostgreSQL (see `storage::reader`): its statements run in one
/// process of the server, never with parallel workers, so that one read (a tenant's forecast
/// over hundreds of thousands of timers) takes one core of the server at most, not all of them
/// with the claims that wait for a core beside it.
pub(super) async fn connect_postgres_reader(
    url: &str,
    postgres: &PostgresSettings,
) -> Result<DatabaseConnection, DbErr> {
    let mut session = postgres.session_options();
    session.push(("max_parallel_workers_per_gather", "0".to_owned()));
    connect_postgres(url, 1, session, postgres).await
}

async fn connect_postgres(
    url: &str,
    pool: u32,
    session: Vec<(&'static str, String)>,
    postgres: &PostgresSettings,
) -> Result<DatabaseConnection, DbErr> {
    let mut options = sea_orm::ConnectOptions::new(url.to_owned());
    // sqlx bounds the opening of a connection (and its retries while the server refuses) by
    // the pool's acquire timeout only; SeaORM's `connect_timeout` sets the same, so one value
    // serves both.
    options
        .max_connections(pool.max(1))
        .min_connections(1)
        .acquire_timeout(postgres.connect_timeout)
        .sqlx_logging(false)
        .map_sqlx_postgres_opts(move |opts| opts.options(session.clone()));
    sea_orm::Database::connect(options).await
}

async fn open(
    path: &Path,
    settings: &SqliteSettings,
    create: bool,
) -> Result<DatabaseConnection, DbErr> {
    sqlite_pool(
        sqlite_options(path, settings, create),
        SqlitePoolOptions::new(),
    )
    .await
}

/// The connection settings of the SQLite file at `path`.
fn sqlite_options(path: &Path, settings: &SqliteSettings, create: bool) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(create)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(settings.synchronous.into())
        .busy_timeout(settings.busy_timeout)
        .foreign_keys(true)
        .pragma("cache_size", format!("-{}", settings.cache_kib))
        // A claim returns thousands of rows, each handed from the connection's thread to the
        // caller through a channel of this many: at sqlx's 50, the thread stopped and was woken
        // again dozens of times per claim.
        .row_buffer_size(ROW_BUFFER)
        // Checkpoints are the Checkpointer actor's job, on its own connection, so that copying
        // the WAL into a large file never stalls a commit on the firing path. This threshold
        // (about 400 MB of WAL) is only a backstop should the Checkpointer be down.
        .pragma(
            "wal_autocheckpoint",
            AUTOCHECKPOINT_BACKSTOP_PAGES.to_string(),
        )
}

/// One connection to SQLite, kept for the life of the store.
pub(super) async fn sqlite_pool(
    options: SqliteConnectOptions,
    pool: SqlitePoolOptions,
) -> Result<DatabaseConnection, DbErr> {
    let pool = pool
        .max_connections(1)
        .min_connections(1)
        // Never replaced behind the store's back: a reader's connection carries its interrupt
        // handler, and a new one would lack it.
        .idle_timeout(None)
        .max_lifetime(None)
        // sqlx pings the connection before every use by default: for SQLite that is one more
        // round trip to its worker thread per statement, on the firing path. A broken
        // connection shows in the statement's own error, after which Persistence reopens it.
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .map_err(|e| DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e.into())))?;
    Ok(SqlxSqliteConnector::from_sqlx_sqlite_pool(pool))
}

/// A reader connection to the SQLite file at `path` (see `storage::reader`): it refuses writes
/// (`query_only`), keeps a smaller cache than the writer's, and stops a statement as soon as
/// `interrupt` says so.
pub(super) async fn open_sqlite_reader(
    path: &Path,
    settings: &SqliteSettings,
    interrupt: impl Fn() -> bool + Send + Sync + Clone + 'static,
) -> Result<DatabaseConnection, DbErr> {
    let reader = SqliteSettings {
        cache_kib: (settings.cache_kib / 4).max(2_048),
        ..settings.clone()
    };
    let options = sqlite_options(path, &reader, false).pragma("query_only", "ON");
    let pool = SqlitePoolOptions::new().after_connect(move |connection, _| {
        let interrupt = interrupt.clone();
        Box::pin(async move {
            let mut handle = connection.lock_handle().await?;
            // Asked every thousand virtual-machine steps (a few microseconds of work).
            handle.set_progress_handler(1_000, move || !interrupt());
            Ok(())
        })
    });
    sqlite_pool(options, pool).await
}

/// Key of the PostgreSQL advisory lock that migrations hold.
const MIGRATION_LOCK: i64 = 0x7469_6d65_7273; // "timers"

/// Creates the SQLite file at `path` readable and writable by its owner only (docs/CONTRACT.md §4;
/// SQLite gives its `-wal` and `-shm` files the same mode), unless it exists: an operator's
/// file keeps the mode it was given, with a warning if others may read it. Says whether it
/// created the file.
fn create_owner_only(path: &Path) -> Result<bool, DbErr> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let failed = |e: std::io::Error| DbErr::Custom(format!("{}: {e}", path.display()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        // An empty file is an empty database to SQLite.
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(path)
                .map_err(failed)?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                tracing::warn!(
                    path = %path.display(),
                    mode = format!("{:o}", mode & 0o777),
                    "the database file is open to other users; chmod 600 it"
                );
            }
            Ok(false)
        }
        Err(e) => Err(failed(e)),
    }
}

/// Brings the schema up to date with the default PostgreSQL settings (see [`migrate_with`]).
pub async fn migrate(target: &DatabaseTarget) -> Result<(), DbErr> {
    migrate_with(target, &PostgresSettings::default()).await
}

/// Brings the schema up to date, creating the SQLite file when absent. On PostgreSQL, daemons
/// starting together take turns (an advisory lock, on the one connection migrations use):
/// concurrent `CREATE TABLE`s of the same table fail there.
///
/// A PostgreSQL server that cannot be reached (refusing, frozen, starting up) is waited for,
/// one attempt after another, as the broker is: a daemon started before its database (or
/// during its restart) comes up by itself. Any other error (a bad password, no such database)
/// stops start-up. The migration's own statements have no time limit: the advisory lock is
/// held while another daemon migrates, and a migration of a large table may take long.
///
/// Logs what it opened: a relative `db_path` read from another working directory would
/// otherwise create a new, empty database unnoticed.
pub async fn migrate_with(
    target: &DatabaseTarget,
    postgres: &PostgresSettings,
) -> Result<(), DbErr> {
    match target {
        DatabaseTarget::Sqlite { path, settings } => {
            let created = create_owner_only(path)?;
            let absolute = std::fs::canonicalize(path)
                .or_else(|_| std::path::absolute(path))
                .unwrap_or_else(|_| path.clone());
            tracing::info!(path = %absolute.display(), created, "database file opened");
            let db = open(path, settings, true).await?;
            Migrator::up(&db, None).await?;
            db.close().await
        }
        DatabaseTarget::Postgres { .. } => {
            let unlimited = PostgresSettings {
                statement_timeout: Duration::ZERO,
                lock_timeout: Duration::ZERO,
                ..postgres.clone()
            };
            let db = loop {
                match connect_with(target, 1, &unlimited).await {
                    Ok(db) => break db,
                    Err(e) if unreachable(&e) => {
                        tracing::warn!(url = %target.describe(), error = %e,
                            "database not reachable; waiting for it");
                        tokio::time::sleep(UNREACHABLE_RETRY).await;
                    }
                    Err(e) => return Err(e),
                }
            };
            tracing::info!(url = %target.describe(), "database opened");
            db.execute_unprepared(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"))
                .await?;
            let migrated = Migrator::up(&db, None).await;
            let unlocked = db
                .execute_unprepared(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"))
                .await;
            migrated?;
            unlocked?;
            db.close().await
        }
    }
}

/// Pause between two attempts to reach a PostgreSQL server at start-up (each attempt itself
/// lasts up to `connect_timeout`).
const UNREACHABLE_RETRY: Duration = Duration::from_secs(1);

/// Whether opening a connection failed for want of a server that answers (refused, timed out,
/// reset), rather than one that answered no.
fn unreachable(error: &DbErr) -> bool {
    use sea_orm::sqlx::Error;
    matches!(error, DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e))
        if matches!(**e, Error::PoolTimedOut | Error::Io(_)))
}
