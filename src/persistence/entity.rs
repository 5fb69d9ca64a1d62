//! SeaORM entity of `timer_schedules`. Timestamps stay text here: the fixed-width format is
//! what the index orders by, and conversion happens once, in `store`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "timer_schedules")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub service_call_id: String,
    pub correlation_id: String,
    pub due_at: String,
    pub registered_at: String,
    pub reached_at: Option<String>,
    pub state: String,
    pub command_seq: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
