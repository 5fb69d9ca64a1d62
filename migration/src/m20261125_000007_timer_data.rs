//! `timer_schedules.data`: the optional JSON a ScheduleTimer carries, stored as the text the
//! client wrote, echoed in the timer's DueTimeReached (docs/CONTRACT.md §3). NULL for none,
//! which every row stored before has. Adding a nullable column without a default rewrites
//! nothing on either database.

use sea_orm_migration::prelude::*;

use crate::m20261122_000001_create_timer_schedules::run_all;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261125_000007_timer_data"
    }
}

const SQLITE_UP: &[&str] = &["ALTER TABLE timer_schedules ADD COLUMN data TEXT"];

const POSTGRES_UP: &[&str] = &[r#"ALTER TABLE timer_schedules ADD COLUMN data TEXT COLLATE "C""#];

const DOWN: &[&str] = &["ALTER TABLE timer_schedules DROP COLUMN data"];

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
