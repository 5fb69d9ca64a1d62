//! Stand-alone migration CLI (`cargo run -p migration -- up`), for operators who manage the
//! schema outside the daemon.

use sea_orm_migration::prelude::*;

#[tokio::main]
async fn main() {
    cli::run_cli(migration::Migrator).await;
}
