//! SeaORM entity of `command_streams`: each incarnation of the command stream met, and its
//! epoch in the order of commands (see [`crate::domain::order`]).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "command_streams")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub stream_name: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub created_ns: i64,
    pub epoch: i64,
    pub seen_at: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
