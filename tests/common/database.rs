//! The database a test runs on. By default a SQLite file in the test's scratch directory; with
//! `TEST_DATABASE=postgres` a PostgreSQL database of its own, created for the test on
//! the server at `TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`)
//! and dropped when the test ends — so the whole suite runs against either backend.

use std::future::Future;

use sea_orm::ConnectionTrait;
use timer_service::storage::db::{self, DatabaseTarget};

/// Whether this run puts the tests on PostgreSQL.
pub fn postgres_run() -> bool {
    std::env::var("TEST_DATABASE").is_ok_and(|v| v.eq_ignore_ascii_case("postgres"))
}

/// The server's administrative URL.
pub fn postgres_admin_url() -> String {
    std::env::var("TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// Runs `work` to completion on a runtime of its own, from sync code (constructors, `Drop`).
pub fn blocking<F: Future + Send>(work: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime")
                    .block_on(work)
            })
            .join()
            .expect("the work finished")
    })
}

/// A PostgreSQL database of one test's own, dropped (connections and all) when it goes.
pub struct PostgresDatabase {
    name: String,
    pub url: String,
}

impl PostgresDatabase {
    /// Creates a fresh database, or says why it cannot (no server here).
    pub fn create() -> Result<Self, String> {
        use sea_orm::ConnectionTrait;
        let admin = postgres_admin_url();
        let name = format!("timer_test_{}", uuid::Uuid::now_v7().simple());
        blocking(async {
            let db = sea_orm::Database::connect(admin.as_str()).await?;
            db.execute_unprepared(&format!("CREATE DATABASE {name}"))
                .await?;
            db.close().await
        })
        .map_err(|e| format!("PostgreSQL at {admin} unavailable: {e}"))?;
        let base = admin
            .rsplit_once('/')
            .map_or(admin.as_str(), |(base, _)| base);
        let url = format!("{base}/{name}");
        Ok(Self { name, url })
    }
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        use sea_orm::ConnectionTrait;
        let admin = postgres_admin_url();
        let name = self.name.clone();
        let dropped = blocking(async move {
            let db = sea_orm::Database::connect(admin.as_str()).await?;
            db.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await?;
            db.close().await
        });
        if let Err(e) = dropped {
            eprintln!("could not drop the test database {}: {e}", self.name);
        }
    }
}

/// Makes the database refuse any timer whose correlation id is `poison`, a value validation
/// accepts: a CHECK constraint on PostgreSQL, triggers on SQLite (whose tables cannot gain a
/// CHECK in place).
pub async fn poison(database: &DatabaseTarget) {
    db::migrate(database).await.expect("migrate");
    let conn = db::connect(database, 1).await.expect("connect");
    let statements: &[&str] = match database {
        DatabaseTarget::Postgres { .. } => &[
            "ALTER TABLE timer_schedules ADD CONSTRAINT poison CHECK (correlation_id <> 'poison')",
        ],
        DatabaseTarget::Sqlite { .. } => &[
            "CREATE TRIGGER poison_insert BEFORE INSERT ON timer_schedules
             WHEN NEW.correlation_id = 'poison' BEGIN SELECT RAISE(ABORT, 'poison'); END",
            "CREATE TRIGGER poison_update BEFORE UPDATE ON timer_schedules
             WHEN NEW.correlation_id = 'poison' BEGIN SELECT RAISE(ABORT, 'poison'); END",
        ],
    };
    for sql in statements {
        conn.execute_unprepared(sql)
            .await
            .expect("poison the table");
    }
    conn.close().await.expect("close");
}
