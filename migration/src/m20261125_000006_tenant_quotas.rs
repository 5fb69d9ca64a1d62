//! `tenant_quotas`: each limited tenant's quota state (docs/CONTRACT.md §9), read and locked
//! inside the transaction that stores the tenant's commands, so that every daemon on the
//! database counts against the same window and pending bound. `rate_window` is the
//! `commands_per_second` window as `slot:count` pairs (10 ms slots); `pending_most` bounds the
//! tenant's pending timers from above since the count taken at `counted_at_ms`.

use sea_orm_migration::prelude::*;

const SQLITE_UP: &[&str] = &["CREATE TABLE tenant_quotas (
        tenant_id TEXT NOT NULL PRIMARY KEY,
        rate_window TEXT NOT NULL DEFAULT '',
        pending_most BIGINT,
        counted_at_ms BIGINT
    )"];

const POSTGRES_UP: &[&str] = &[r#"CREATE TABLE tenant_quotas (
        tenant_id TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        rate_window TEXT NOT NULL DEFAULT '',
        pending_most BIGINT,
        counted_at_ms BIGINT
    )"#];

const DOWN: &[&str] = &["DROP TABLE tenant_quotas"];

statements_migration!("m20261125_000006_tenant_quotas");
