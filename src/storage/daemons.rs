//! SeaORM entity of `daemons`: each daemon's name, when its health probe last wrote, and which
//! process holds the name.

use std::sync::LazyLock;

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "daemons")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub name: String,
    pub seen_at: String,
    /// The process holding the name ([`instance`]); none in rows from before it was recorded.
    pub instance: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// This process, as recorded with the name it holds. One per process rather than per daemon:
/// the health probe (which writes the row) is reached only with the daemon's name, and a
/// process runs one daemon (tests that restart a daemon in one process then take its name back
/// at once).
pub fn instance() -> &'static str {
    static INSTANCE: LazyLock<String> = LazyLock::new(|| uuid::Uuid::now_v7().to_string());
    &INSTANCE
}
