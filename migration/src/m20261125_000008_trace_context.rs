//! `timer_schedules.trace_context`: the W3C trace context of the ScheduleTimer that set the
//! timer (`traceparent`, then `tracestate` after a newline), sent on with its DueTimeReached
//! (docs/CONTRACT.md §3). NULL for none, which every row stored before has; a nullable column
//! without a default rewrites nothing on either database.

use sea_orm_migration::prelude::*;

const SQLITE_UP: &[&str] = &["ALTER TABLE timer_schedules ADD COLUMN trace_context TEXT"];

const POSTGRES_UP: &[&str] =
    &[r#"ALTER TABLE timer_schedules ADD COLUMN trace_context TEXT COLLATE "C""#];

const DOWN: &[&str] = &["ALTER TABLE timer_schedules DROP COLUMN trace_context"];

statements_migration!("m20261125_000008_trace_context");
