//! `daemons.instance`: which process holds each daemon name (a UUID per process). Two live
//! daemons on one database must not share a name (it is `claimed_by` on the timers a daemon
//! claims): a daemon takes its name at start-up only when no other live instance holds it, and
//! its health probe writes the row only while the instance there is its own. Rows of daemons
//! from before have no instance.

use sea_orm_migration::prelude::*;

use crate::m20261122_000001_create_timer_schedules::run_all;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261124_000004_daemon_instances"
    }
}

const SQLITE_UP: &[&str] = &["ALTER TABLE daemons ADD COLUMN instance TEXT"];

const POSTGRES_UP: &[&str] = &[r#"ALTER TABLE daemons ADD COLUMN instance TEXT COLLATE "C""#];

const DOWN: &[&str] = &["ALTER TABLE daemons DROP COLUMN instance"];

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
