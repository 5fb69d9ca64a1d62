//! `timer_schedules` (docs/CONTRACT.md §4), on SQLite and PostgreSQL.
//!
//! Written as SQL because SQLite's `STRICT` tables and partial indexes have no builder form.
//! - `STRICT` makes SQLite refuse a value of the wrong type instead of storing it.
//! - On PostgreSQL every text column is `COLLATE "C"`: byte order, as SQLite and the service
//!   compare, whatever the database's default collation (a locale's order would sort keys and
//!   cursors differently from the service's merge of `list` pages).
//! - Timestamps are fixed-width UTC text, so comparing text compares instants.
//! - `command_seq` is the broker sequence of the command that last wrote the row; an upsert
//!   with a lower one changes nothing (a redelivery never undoes a reschedule).
//! - `idx_timer_schedules_pending` is partial: it holds only `Scheduled` rows, so the polling
//!   query and "earliest pending dueAt" stay index look-ups however many fired rows accumulate.
//!   Its key is the full firing order `(due_at, tenant_id, service_call_id)`, so the Poller can
//!   resume reading after the last timer it has in flight without sorting.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261122_000001_create_timer_schedules"
    }
}

const UP: &[&str] = &[
    "CREATE TABLE timer_schedules (
        tenant_id       TEXT    NOT NULL,
        service_call_id TEXT    NOT NULL,
        correlation_id  TEXT    NOT NULL,
        due_at          TEXT    NOT NULL,
        registered_at   TEXT    NOT NULL,
        reached_at      TEXT,
        state           TEXT    NOT NULL CHECK (state IN ('Scheduled', 'Reached')),
        command_seq     INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, service_call_id)
    ) STRICT",
    "CREATE INDEX idx_timer_schedules_pending ON timer_schedules (due_at, tenant_id, service_call_id)
        WHERE state = 'Scheduled'",
    "CREATE INDEX idx_timer_schedules_correlation ON timer_schedules (tenant_id, correlation_id)",
];

const POSTGRES_UP: &[&str] = &[
    r#"CREATE TABLE timer_schedules (
        tenant_id       TEXT COLLATE "C" NOT NULL,
        service_call_id TEXT COLLATE "C" NOT NULL,
        correlation_id  TEXT COLLATE "C" NOT NULL,
        due_at          TEXT COLLATE "C" NOT NULL,
        registered_at   TEXT COLLATE "C" NOT NULL,
        reached_at      TEXT COLLATE "C",
        state           TEXT COLLATE "C" NOT NULL
            CONSTRAINT timer_schedules_state_check CHECK (state IN ('Scheduled', 'Reached')),
        command_seq     BIGINT NOT NULL,
        PRIMARY KEY (tenant_id, service_call_id)
    )"#,
    "CREATE INDEX idx_timer_schedules_pending ON timer_schedules (due_at, tenant_id, service_call_id)
        WHERE state = 'Scheduled'",
    "CREATE INDEX idx_timer_schedules_correlation ON timer_schedules (tenant_id, correlation_id)",
];

const DOWN: &[&str] = &["DROP TABLE timer_schedules"];

/// Runs the statements of the connection's backend.
pub(crate) async fn run_all(
    manager: &SchemaManager<'_>,
    sqlite: &[&str],
    postgres: &[&str],
) -> Result<(), DbErr> {
    let statements = match manager.get_database_backend() {
        DbBackend::Sqlite => sqlite,
        DbBackend::Postgres => postgres,
        other => {
            return Err(DbErr::Migration(format!(
                "timer_schedules is defined for SQLite and PostgreSQL, not {other:?}"
            )));
        }
    };
    let db = manager.get_connection();
    for sql in statements {
        db.execute_unprepared(sql).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(manager, UP, POSTGRES_UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(manager, DOWN, DOWN).await
    }
}
