//! The store's errors, and the one place that tells a row the database refused from an outage
//! ([`StoreError::refused_row`]): only the first may reject a command, the second is waited
//! out with every command kept. [`StoreError::needs_reopen`] says when the connection itself
//! can no longer be trusted.

use std::path::PathBuf;

use sea_orm::{DbErr, RuntimeErr, SqlxPostgresError, SqlxSqliteError};

use crate::domain::StreamIncarnation;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] DbErr),
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("database file {path} was removed or replaced while open: {reason}")]
    FileMoved { path: PathBuf, reason: String },
    #[error(
        "commands of {0} cannot be ordered: a newer incarnation of that stream is known (this one was deleted)"
    )]
    StaleStream(StreamIncarnation),
    #[error("stored row ({tenant_id}, {service_call_id}) is unreadable: {reason}")]
    CorruptRow {
        tenant_id: String,
        service_call_id: String,
        reason: String,
    },
    #[error(
        "daemon name {name:?} is held by another daemon (instance {holder}); this one no longer \
         records itself under it"
    )]
    NameTaken { name: String, holder: String },
    #[error("the read ran longer than {0:?} and was stopped")]
    TooLong(std::time::Duration),
}

impl StoreError {
    /// Whether the connection may be left in an unknown state, so it must be reopened before
    /// the next transaction. After a failed `COMMIT` (a full disk, an I/O error, a lock held
    /// past the busy timeout) SQLite may or may not have rolled the transaction back, and the
    /// driver's idea of it can differ from SQLite's: its next `BEGIN` then became a `SAVEPOINT`
    /// inside a transaction that never committed, and every later "commit" wrote nothing to
    /// disk while reporting success. Closing the connection rolls back whatever is open.
    ///
    /// A row the database refused (see [`Self::refused_row`]) leaves it working: its
    /// statement failed and its transaction rolled back, so the connection is kept and the
    /// daemon stays ready.
    pub fn needs_reopen(&self) -> bool {
        !matches!(
            self,
            StoreError::CorruptRow { .. } | StoreError::StaleStream(_) | StoreError::TooLong(_)
        ) && self.refused_row().is_none()
    }

    /// The code a database error carries: SQLite's (extended) result code, PostgreSQL's
    /// SQLSTATE; `None` for anything else.
    pub fn database_code(&self) -> Option<String> {
        let StoreError::Db(
            DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)),
        ) = self
        else {
            return None;
        };
        match &**e {
            sea_orm::sqlx::Error::Database(e) => e.code().map(|code| code.into_owned()),
            _ => None,
        }
    }

    /// The database's own reason when it refused the data of a row (a value it cannot store,
    /// a constraint it breaks) rather than failing as a whole, `None` otherwise. Only such an
    /// error may reject a command: anything else (no connection, a full disk, a lock, a
    /// timeout, a moved file) is an outage, to be waited out with every command kept. The one
    /// place where the two are told apart.
    pub fn refused_row(&self) -> Option<&str> {
        let StoreError::Db(
            DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)),
        ) = self
        else {
            return None;
        };
        let sea_orm::sqlx::Error::Database(e) = &**e else {
            return None;
        };
        let refused = if let Some(pg) = e.try_downcast_ref::<SqlxPostgresError>() {
            postgres_refuses_row(pg.code())
        } else if e.try_downcast_ref::<SqlxSqliteError>().is_some() {
            e.code()
                .and_then(|code| code.parse().ok())
                .is_some_and(sqlite_refuses_row)
        } else {
            false
        };
        refused.then(|| e.message())
    }
}

/// Whether a PostgreSQL SQLSTATE is about the data of a row: class 22 (data exception: a
/// value out of range, a character the encoding lacks), 23 (integrity constraint violation)
/// or 54 (program limit exceeded: an index row too large). Connection, resource (53: disk
/// full), operator (57: a cancelled statement) and transaction (40) classes are outages.
fn postgres_refuses_row(sqlstate: &str) -> bool {
    matches!(sqlstate.get(..2), Some("22" | "23" | "54"))
}

/// Whether a SQLite (extended) result code is about the data of a row: SQLITE_CONSTRAINT (a
/// check, a trigger's `RAISE(ABORT)`, a type in a STRICT table), SQLITE_TOOBIG or
/// SQLITE_MISMATCH. Busy, locked, I/O, full and read-only codes are outages.
fn sqlite_refuses_row(code: i32) -> bool {
    const TOOBIG: i32 = 18;
    const CONSTRAINT: i32 = 19;
    const MISMATCH: i32 = 20;
    matches!(code & 0xff, TOOBIG | CONSTRAINT | MISMATCH)
}

#[cfg(test)]
mod tests {
    use sea_orm::{ConnectOptions, ConnectionTrait, Database, TransactionTrait};

    use super::*;

    #[test]
    fn postgres_data_classes_refuse_a_row_and_the_rest_are_outages() {
        // Value too long, a character the encoding lacks, NUL in text, unique, check, index
        // row too large.
        for code in ["22001", "22021", "22P05", "23505", "23514", "54000"] {
            assert!(postgres_refuses_row(code), "{code}");
        }
        // Connection lost, disk full, statement cancelled (a timeout), server shutting down,
        // serialization failure, deadlock, aborted transaction, internal error, no table.
        for code in [
            "08006", "53100", "57014", "57P01", "40001", "40P01", "25P02", "XX000", "42P01", "",
        ] {
            assert!(!postgres_refuses_row(code), "{code}");
        }
    }

    #[test]
    fn sqlite_data_codes_refuse_a_row_and_the_rest_are_outages() {
        // Trigger RAISE(ABORT), CHECK, UNIQUE, STRICT datatype, TOOBIG, MISMATCH.
        for code in [1811, 275, 2067, 3091, 18, 20] {
            assert!(sqlite_refuses_row(code), "{code}");
        }
        // ERROR, BUSY, BUSY_SNAPSHOT, LOCKED, READONLY, IOERR, IOERR_WRITE, CORRUPT, FULL,
        // CANTOPEN, NOTADB.
        for code in [1, 5, 517, 6, 8, 10, 778, 11, 13, 14, 26] {
            assert!(!sqlite_refuses_row(code), "{code}");
        }
    }

    #[tokio::test]
    async fn a_row_sqlite_refuses_is_told_apart_from_an_outage() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let connect = || {
            let mut options = ConnectOptions::new(url.clone());
            options.max_connections(1).sqlx_logging(false);
            Database::connect(options)
        };
        let db = connect().await.unwrap();
        db.execute_unprepared("CREATE TABLE t (x TEXT NOT NULL CHECK (x <> 'poison'))")
            .await
            .unwrap();

        let refused = StoreError::from(
            db.execute_unprepared("INSERT INTO t VALUES ('ok'), ('poison')")
                .await
                .unwrap_err(),
        );
        let reason = refused.refused_row().expect("a refused row");
        assert!(reason.contains("CHECK constraint failed"), "{reason}");
        assert!(!refused.needs_reopen());

        // A statement that fails as a whole, not because of a row.
        let broken = StoreError::from(
            db.execute_unprepared("INSERT INTO missing VALUES (1)")
                .await
                .unwrap_err(),
        );
        assert_eq!(broken.refused_row(), None);

        // SQLite busy: another connection holds the write lock.
        let txn = db.begin().await.unwrap();
        txn.execute_unprepared("INSERT INTO t VALUES ('held')")
            .await
            .unwrap();
        let other = connect().await.unwrap();
        other
            .execute_unprepared("PRAGMA busy_timeout = 0")
            .await
            .unwrap();
        let busy = StoreError::from(
            other
                .execute_unprepared("INSERT INTO t VALUES ('poison')")
                .await
                .unwrap_err(),
        );
        assert!(busy.to_string().contains("locked"), "{busy}");
        assert_eq!(busy.refused_row(), None);
        assert!(busy.needs_reopen());
        txn.rollback().await.unwrap();

        for outage in [
            StoreError::Unavailable("connection refused".into()),
            StoreError::FileMoved {
                path: "t.db".into(),
                reason: "replaced".into(),
            },
            StoreError::Db(DbErr::Conn(RuntimeErr::Internal("timed out".into()))),
        ] {
            assert_eq!(outage.refused_row(), None, "{outage}");
            assert!(outage.needs_reopen(), "{outage}");
        }
    }
}
