//! PostgreSQL only: `timer_schedules` leaves half of each page free, so that the claim of a
//! due timer (which sets only `claimed_by` and `claim_until`, columns no index holds) is a HOT
//! update, written beside the row and touching no index. With full pages every claim was a
//! new row version in every index: measured, a claim of 5,000 timers took about 4 times
//! longer (BENCHMARKS.md, "PostgreSQL"). Existing pages keep their layout until rewritten;
//! new rows get the space. SQLite has no such setting: nothing to do there.

use sea_orm_migration::prelude::*;

use crate::m20261122_000001_create_timer_schedules::run_all;

pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261124_000005_postgres_fill_factor"
    }
}

const POSTGRES_UP: &[&str] = &["ALTER TABLE timer_schedules SET (fillfactor = 50)"];

const POSTGRES_DOWN: &[&str] = &["ALTER TABLE timer_schedules RESET (fillfactor)"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(manager, &[], POSTGRES_UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(manager, &[], POSTGRES_DOWN).await
    }
}
