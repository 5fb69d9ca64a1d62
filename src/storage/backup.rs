//! `timer-service backup --to FILE`: a consistent copy of a running daemon's SQLite file.
//!
//! The copy is SQLite's `VACUUM INTO`, run on a connection of the backup's own: one read
//! transaction over the file, so the copy is the database as one commit left it. In WAL mode a
//! reader never blocks the writer, so the daemon keeps storing and firing throughout; what the
//! backup costs it is the WAL, which cannot be copied back into the file past the backup's
//! snapshot and grows by what is committed meanwhile (the Checkpointer catches up after).
//!
//! The copy is written beside the target under a temporary name, created owner-only like the
//! database, flushed to disk, checked, and only then linked to the target, which is never
//! overwritten: a failed backup leaves no file that looks like one. PostgreSQL has its own
//! tools (`pg_dump`); docs/operations.md, "Backup and restore", says how to restore either.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, Statement, Value};

use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use super::db::{DatabaseTarget, SqliteSettings, sqlite_pool};

/// Why a backup was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "the timers are in PostgreSQL ({0}): back them up with pg_dump \
         (docs/operations.md, \"Backup and restore\")"
    )]
    Postgres(String),
    #[error("{0} already exists: a backup never overwrites a file; name a new one")]
    TargetExists(PathBuf),
    #[error("no database file at {0} (db_path): nothing to back up")]
    NoDatabase(PathBuf),
    #[error("{0} is not a timer-service database (it has no timer_schedules table)")]
    NotTimers(PathBuf),
    #[error("the copy failed its integrity check: {0}")]
    Damaged(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("database error: {0}")]
    Db(#[from] DbErr),
}

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    pub to: PathBuf,
    pub bytes: u64,
    /// Rows of `timer_schedules` in the copy, and how many of them are pending.
    pub timers: u64,
    pub pending: u64,
    /// How long the copy (`VACUUM INTO`) took: the span the backup's snapshot was held.
    pub copy: Duration,
    /// The whole backup: copy, flush to disk, integrity check, counts.
    pub total: Duration,
}

/// Copies the database of `target` to `to`, which must not exist. SQLite only.
pub async fn backup(target: &DatabaseTarget, to: &Path) -> Result<BackupReport, BackupError> {
    let (path, settings) = match target {
        DatabaseTarget::Sqlite { path, settings } => (path, settings),
        DatabaseTarget::Postgres { .. } => return Err(BackupError::Postgres(target.describe())),
    };
    if to.symlink_metadata().is_ok() {
        return Err(BackupError::TargetExists(to.to_owned()));
    }
    if !path.is_file() {
        return Err(BackupError::NoDatabase(path.clone()));
    }
    let started = Instant::now();
    let partial = Partial::create(to)?;
    let copy = copy_into(path, settings, partial.path()).await?;
    sync(partial.path())?;
    let (timers, pending) = check(partial.path()).await?;
    let bytes = io(partial.path(), std::fs::metadata(partial.path()))?.len();
    partial.publish(to)?;
    Ok(BackupReport {
        to: to.to_owned(),
        bytes,
        timers,
        pending,
        copy,
        total: started.elapsed(),
    })
}

/// `VACUUM INTO` the empty file at `into`, on a connection of its own to the file at `path`;
/// how long it took.
async fn copy_into(
    path: &Path,
    settings: &SqliteSettings,
    into: &Path,
) -> Result<Duration, BackupError> {
    let db = open_existing(path, settings).await?;
    let result = async {
        if !has_timers(&db).await? {
            return Err(BackupError::NotTimers(path.to_owned()));
        }
        let started = Instant::now();
        let into = into.to_string_lossy().into_owned();
        db.execute_raw(Statement::from_sql_and_values(
            db.get_database_backend(),
            "VACUUM INTO ?",
            [Value::from(into)],
        ))
        .await?;
        Ok(started.elapsed())
    }
    .await;
    db.close().await?;
    result
}

async fn has_timers(db: &DatabaseConnection) -> Result<bool, DbErr> {
    let found = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'timer_schedules'",
        ))
        .await?;
    Ok(found.is_some())
}

/// Checks the copy (`PRAGMA quick_check`: every page and index entry well-formed) and counts
/// its timers, all and pending.
async fn check(copy: &Path) -> Result<(u64, u64), BackupError> {
    let db = open_read_only(copy).await?;
    let result = async {
        let statement = |sql: &str| Statement::from_string(db.get_database_backend(), sql);
        let verdict: String = db
            .query_one_raw(statement("PRAGMA quick_check"))
            .await?
            .ok_or_else(|| DbErr::Custom("quick_check returned nothing".into()))?
            .try_get_by_index(0)?;
        if verdict != "ok" {
            return Err(BackupError::Damaged(verdict));
        }
        let counts = db
            .query_one_raw(statement(
                "SELECT (SELECT COUNT(*) FROM timer_schedules), \
                        (SELECT COUNT(*) FROM timer_schedules WHERE state = 'Scheduled')",
            ))
            .await?
            .ok_or_else(|| DbErr::Custom("no counts".into()))?;
        let count = |i: usize| -> Result<u64, DbErr> {
            Ok(u64::try_from(counts.try_get_by_index::<i64>(i)?).unwrap_or(0))
        };
        Ok((count(0)?, count(1)?))
    }
    .await;
    db.close().await?;
    result
}

/// The copy under a temporary name beside the target, removed unless published.
struct Partial {
    path: Option<PathBuf>,
}

impl Partial {
    /// An empty file, readable and writable by its owner only (SQLite copies into an empty
    /// file as into a new one, keeping its mode).
    fn create(to: &Path) -> Result<Self, BackupError> {
        let name = to
            .file_name()
            .ok_or_else(|| BackupError::Io {
                path: to.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
            })?
            .to_string_lossy();
        let path = to.with_file_name(format!(".{name}.partial-{}", std::process::id()));
        // An error names the target: the temporary name is nothing the operator chose.
        io(
            to,
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path),
        )?;
        Ok(Self { path: Some(path) })
    }

    fn path(&self) -> &Path {
        self.path.as_deref().unwrap_or(Path::new(""))
    }

    /// Gives the copy its name: a hard link, which fails rather than replace a file that
    /// appeared meanwhile; then the temporary name goes and the directory is flushed.
    fn publish(mut self, to: &Path) -> Result<(), BackupError> {
        let partial = self.path.take().unwrap_or_default();
        let linked = std::fs::hard_link(&partial, to);
        let _ = std::fs::remove_file(&partial);
        match linked {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(BackupError::TargetExists(to.to_owned()));
            }
            other => io(to, other)?,
        }
        let dir = match to.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        sync(dir)
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            for suffix in ["", "-journal", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
    }
}

/// A connection of the backup's own to the database file. Only a read runs on it: nothing of
/// the daemon's settings is applied, since a setting such as the journal mode stays with the
/// file, and a file the backup refuses must be left as it was.
async fn open_existing(
    path: &Path,
    settings: &SqliteSettings,
) -> Result<DatabaseConnection, DbErr> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .busy_timeout(settings.busy_timeout);
    sqlite_pool(options, SqlitePoolOptions::new()).await
}

/// The copy, read-only, its journal mode left as the copy has it.
async fn open_read_only(path: &Path) -> Result<DatabaseConnection, DbErr> {
    let options = SqliteConnectOptions::new().filename(path).read_only(true);
    sqlite_pool(options, SqlitePoolOptions::new()).await
}

/// Flushes a file or a directory to disk.
fn sync(path: &Path) -> Result<(), BackupError> {
    io(path, std::fs::File::open(path).and_then(|f| f.sync_all()))
}

fn io<T>(path: &Path, result: std::io::Result<T>) -> Result<T, BackupError> {
    result.map_err(|source| BackupError::Io {
        path: path.to_owned(),
        source,
    })
}
