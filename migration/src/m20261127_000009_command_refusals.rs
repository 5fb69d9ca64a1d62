//! `command_refusals`: the commands a transaction refused for a quota (docs/CONTRACT.md §9),
//! written in that transaction, so that a copy the broker delivers again is refused again with
//! the same reason rather than decided afresh. `command_seq` is the command's place in the
//! order (`domain::order`: the stream incarnation's epoch and the stream sequence), the same
//! for every copy of one message, on every daemon. `quota` and `quota_limit` make the reason;
//! `refused_at_ms` is the quota clock's instant, by which the Janitor deletes records past the
//! retention of finished timers.

use sea_orm_migration::prelude::*;

const SQLITE_UP: &[&str] = &[
    "CREATE TABLE command_refusals (
        command_seq BIGINT NOT NULL PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        service_call_id TEXT NOT NULL,
        quota TEXT NOT NULL,
        quota_limit BIGINT NOT NULL,
        refused_at_ms BIGINT NOT NULL
    )",
    "CREATE INDEX idx_command_refusals_refused_at ON command_refusals (refused_at_ms)",
];

const POSTGRES_UP: &[&str] = &[
    r#"CREATE TABLE command_refusals (
        command_seq BIGINT NOT NULL PRIMARY KEY,
        tenant_id TEXT COLLATE "C" NOT NULL,
        service_call_id TEXT COLLATE "C" NOT NULL,
        quota TEXT NOT NULL,
        quota_limit BIGINT NOT NULL,
        refused_at_ms BIGINT NOT NULL
    )"#,
    "CREATE INDEX idx_command_refusals_refused_at ON command_refusals (refused_at_ms)",
];

const DOWN: &[&str] = &["DROP TABLE command_refusals"];

statements_migration!("m20261127_000009_command_refusals");
