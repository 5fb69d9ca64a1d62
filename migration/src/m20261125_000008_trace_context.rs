//! `timer_schedules.trace_context`: the W3C trace context of the ScheduleTimer that set the
//! timer (`traceparent`, then `tracestate` after a newline), sent on with its DueTimeReached
//! (docs/CONTRACT.md §3). NULL for none, which every row stored before has; a nullable column
//! without a default rewrites nothing on either database.

use sea_orm_migration::prelude::*;

use crate::m20261122_000001_create_timer_schedules::run_all;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261125_000008_trace_context"
    }
}

const SQLITE_UP: &[&str] = &["ALTER TABLE timer_schedules ADD COLUMN trace_context TEXT"];

const POSTGRES_UP: &[&str] =
    &[r#"ALTER TABLE timer_schedules ADD COLUMN trace_context TEXT COLLATE "C""#];

const DOWN: &[&str] = &["ALTER TABLE timer_schedules DROP COLUMN trace_context"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(manager, SQLITE_UP, POSTGRES_UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(manager, DOWN, DOWN).await
    }
}
