//! `timer_schedules.data`: the optional JSON a ScheduleTimer carries, stored as the text the
//! client wrote, echoed in the timer's DueTimeReached (docs/CONTRACT.md §3). NULL for none,
//! which every row stored before has. Adding a nullable column without a default rewrites
//! nothing on either database.

use sea_orm_migration::prelude::*;

const SQLITE_UP: &[&str] = &["ALTER TABLE timer_schedules ADD COLUMN data TEXT"];

const POSTGRES_UP: &[&str] = &[r#"ALTER TABLE timer_schedules ADD COLUMN data TEXT COLLATE "C""#];

const DOWN: &[&str] = &["ALTER TABLE timer_schedules DROP COLUMN data"];

statements_migration!("m20261125_000007_timer_data");
