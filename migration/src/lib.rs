//! Schema migrations of timer-service, run at daemon start-up and by `timer-service migrate`.

pub use sea_orm_migration::prelude::*;

/// A migration of plain statements run in one transaction: `SQLITE_UP` or `POSTGRES_UP` (the
/// consts of the module that calls it) by the backend, and `DOWN` to undo them on either.
macro_rules! statements_migration {
    ($name:literal) => {
        pub struct Migration;

        impl MigrationName for Migration {
            fn name(&self) -> &str {
                $name
            }
        }

        #[async_trait::async_trait]
        impl MigrationTrait for Migration {
            fn use_transaction(&self) -> Option<bool> {
                Some(true)
            }

            async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                $crate::m20261122_000001_create_timer_schedules::run_all(
                    manager,
                    SQLITE_UP,
                    POSTGRES_UP,
                )
                .await
            }

            async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                $crate::m20261122_000001_create_timer_schedules::run_all(manager, DOWN, DOWN).await
            }
        }
    };
}

mod m20261122_000001_create_timer_schedules;
mod m20261122_000002_cancel_and_claims;
mod m20261123_000003_command_streams;
mod m20261124_000004_daemon_instances;
mod m20261124_000005_postgres_fill_factor;
mod m20261125_000006_tenant_quotas;
mod m20261125_000007_timer_data;
mod m20261125_000008_trace_context;
mod m20261127_000009_command_refusals;
mod m20261128_000010_timer_expiry;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_create_timer_schedules::Migration),
            Box::new(m20261122_000002_cancel_and_claims::Migration),
            Box::new(m20261123_000003_command_streams::Migration),
            Box::new(m20261124_000004_daemon_instances::Migration),
            Box::new(m20261124_000005_postgres_fill_factor::Migration),
            Box::new(m20261125_000006_tenant_quotas::Migration),
            Box::new(m20261125_000007_timer_data::Migration),
            Box::new(m20261125_000008_trace_context::Migration),
            Box::new(m20261127_000009_command_refusals::Migration),
            Box::new(m20261128_000010_timer_expiry::Migration),
        ]
    }
}
