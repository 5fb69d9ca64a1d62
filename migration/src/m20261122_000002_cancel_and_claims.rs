//! Cancelled timers, claims for firing, and the indexes of the query API.
//!
//! - `state` gains `Cancelled`, `cancelled_at` records when and `cancelled_seq` by which
//!   command; `due_at` becomes NULL-able for a tombstone (a key cancelled before any
//!   `ScheduleTimer`), which only a `Cancelled` row may be.
//! - `claimed_by` / `claim_until`: a due timer is claimed, in the same statement that picks it
//!   for firing, so a cancel racing the firing is decided by the row, and (with several daemons)
//!   a daemon's claim lapses when it dies.
//! - `idx_timer_schedules_tenant_state (tenant_id, state, due_at, service_call_id)` serves
//!   `list` by state and due range in `(dueAt, serviceCallId)` order, and `stats`;
//!   `idx_timer_schedules_correlation` gains `(due_at, service_call_id)` so `list` by
//!   correlation id needs no sort.
//! - Partial indexes on `reached_at` of `Reached` rows and `cancelled_at` of `Cancelled` rows
//!   let retention find the oldest finished rows without a scan.
//! - `daemons`: each daemon's name and when it last proved the database accepts its writes
//!   (the health probe writes it every few seconds).
//!
//! PostgreSQL changes the table in place. SQLite cannot change a column's constraints in place:
//! the table is rebuilt, copying every row, inside one transaction (a crash half-way leaves the
//! old table). It runs once, at the
//! first start of the new version: 3.0 s for a million rows on a 2-core machine, needing free
//! space of about the file's size meanwhile.

use sea_orm_migration::prelude::*;

use crate::m20261122_000001_create_timer_schedules::run_all;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261122_000002_cancel_and_claims"
    }
}

const SQLITE_UP: &[&str] = &[
    "CREATE TABLE timer_schedules_v2 (
        tenant_id       TEXT    NOT NULL,
        service_call_id TEXT    NOT NULL,
        correlation_id  TEXT    NOT NULL,
        due_at          TEXT,
        registered_at   TEXT    NOT NULL,
        reached_at      TEXT,
        cancelled_at    TEXT,
        state           TEXT    NOT NULL CHECK (state IN ('Scheduled', 'Reached', 'Cancelled')),
        command_seq     INTEGER NOT NULL,
        cancelled_seq   INTEGER,
        claimed_by      TEXT,
        claim_until     TEXT,
        CHECK (due_at IS NOT NULL OR state = 'Cancelled'),
        PRIMARY KEY (tenant_id, service_call_id)
    ) STRICT",
    "INSERT INTO timer_schedules_v2
        (tenant_id, service_call_id, correlation_id, due_at, registered_at, reached_at, state, command_seq)
     SELECT tenant_id, service_call_id, correlation_id, due_at, registered_at, reached_at, state, command_seq
     FROM timer_schedules",
    "DROP TABLE timer_schedules",
    "ALTER TABLE timer_schedules_v2 RENAME TO timer_schedules",
    "CREATE INDEX idx_timer_schedules_pending ON timer_schedules (due_at, tenant_id, service_call_id)
        WHERE state = 'Scheduled'",
    "CREATE INDEX idx_timer_schedules_tenant_state
        ON timer_schedules (tenant_id, state, due_at, service_call_id)",
    "CREATE INDEX idx_timer_schedules_correlation
        ON timer_schedules (tenant_id, correlation_id, due_at, service_call_id)",
    "CREATE INDEX idx_timer_schedules_reached ON timer_schedules (reached_at)
        WHERE state = 'Reached'",
    "CREATE INDEX idx_timer_schedules_cancelled ON timer_schedules (cancelled_at)
        WHERE state = 'Cancelled'",
    "CREATE TABLE daemons (
        name    TEXT NOT NULL PRIMARY KEY,
        seen_at TEXT NOT NULL
    ) STRICT",
];

const SQLITE_DOWN: &[&str] = &[
    "DROP TABLE daemons",
    "DELETE FROM timer_schedules WHERE state = 'Cancelled'",
    "CREATE TABLE timer_schedules_v1 (
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
    "INSERT INTO timer_schedules_v1
     SELECT tenant_id, service_call_id, correlation_id, due_at, registered_at, reached_at, state, command_seq
     FROM timer_schedules",
    "DROP TABLE timer_schedules",
    "ALTER TABLE timer_schedules_v1 RENAME TO timer_schedules",
    "CREATE INDEX idx_timer_schedules_pending ON timer_schedules (due_at, tenant_id, service_call_id)
        WHERE state = 'Scheduled'",
    "CREATE INDEX idx_timer_schedules_correlation ON timer_schedules (tenant_id, correlation_id)",
];

const POSTGRES_UP: &[&str] = &[
    r#"ALTER TABLE timer_schedules
        ALTER COLUMN due_at DROP NOT NULL,
        ADD COLUMN cancelled_at  TEXT COLLATE "C",
        ADD COLUMN cancelled_seq BIGINT,
        ADD COLUMN claimed_by    TEXT COLLATE "C",
        ADD COLUMN claim_until   TEXT COLLATE "C",
        DROP CONSTRAINT timer_schedules_state_check,
        ADD CONSTRAINT timer_schedules_state_check
            CHECK (state IN ('Scheduled', 'Reached', 'Cancelled')),
        ADD CONSTRAINT timer_schedules_due_check CHECK (due_at IS NOT NULL OR state = 'Cancelled')"#,
    "DROP INDEX idx_timer_schedules_correlation",
    "CREATE INDEX idx_timer_schedules_tenant_state
        ON timer_schedules (tenant_id, state, due_at, service_call_id)",
    "CREATE INDEX idx_timer_schedules_correlation
        ON timer_schedules (tenant_id, correlation_id, due_at, service_call_id)",
    "CREATE INDEX idx_timer_schedules_reached ON timer_schedules (reached_at)
        WHERE state = 'Reached'",
    "CREATE INDEX idx_timer_schedules_cancelled ON timer_schedules (cancelled_at)
        WHERE state = 'Cancelled'",
    r#"CREATE TABLE daemons (
        name    TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        seen_at TEXT COLLATE "C" NOT NULL
    )"#,
];

const POSTGRES_DOWN: &[&str] = &[
    "DROP TABLE daemons",
    "DELETE FROM timer_schedules WHERE state = 'Cancelled'",
    "DROP INDEX idx_timer_schedules_cancelled",
    "DROP INDEX idx_timer_schedules_reached",
    "DROP INDEX idx_timer_schedules_correlation",
    "DROP INDEX idx_timer_schedules_tenant_state",
    "CREATE INDEX idx_timer_schedules_correlation ON timer_schedules (tenant_id, correlation_id)",
    "ALTER TABLE timer_schedules
        DROP CONSTRAINT timer_schedules_due_check,
        DROP CONSTRAINT timer_schedules_state_check,
        ADD CONSTRAINT timer_schedules_state_check CHECK (state IN ('Scheduled', 'Reached')),
        DROP COLUMN claim_until,
        DROP COLUMN claimed_by,
        DROP COLUMN cancelled_seq,
        DROP COLUMN cancelled_at,
        ALTER COLUMN due_at SET NOT NULL",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// One transaction on every backend: the rebuild is all or nothing.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(manager, SQLITE_UP, POSTGRES_UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(manager, SQLITE_DOWN, POSTGRES_DOWN).await
    }
}
