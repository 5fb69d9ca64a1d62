//! `timer_schedules.expires_at`: `dueAt + expireAfter` of the ScheduleTimer that set the timer
//! (docs/CONTRACT.md §3), in the fixed-width format of `due_at`; NULL for none, which every row
//! stored before has. A timer fired past it is stored `Reached` like any other, its
//! `reached_at` after its `expires_at`, and shown `Expired`; undoing this migration leaves such
//! a timer `Reached`. A nullable column without a default rewrites nothing on either database.

use sea_orm_migration::prelude::*;

const SQLITE_UP: &[&str] = &["ALTER TABLE timer_schedules ADD COLUMN expires_at TEXT"];

const POSTGRES_UP: &[&str] =
    &[r#"ALTER TABLE timer_schedules ADD COLUMN expires_at TEXT COLLATE "C""#];

const DOWN: &[&str] = &["ALTER TABLE timer_schedules DROP COLUMN expires_at"];

statements_migration!("m20261128_000010_timer_expiry");
