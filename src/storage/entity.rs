//! SeaORM entity of `timer_schedules`. Timestamps stay text here: the fixed-width format is
//! what the indexes order by, and conversion happens once, in `store`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "timer_schedules")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub service_call_id: String,
    pub correlation_id: String,
    /// NULL only for a tombstone.
    pub due_at: Option<String>,
    pub registered_at: String,
    pub reached_at: Option<String>,
    pub cancelled_at: Option<String>,
    pub state: String,
    pub command_seq: i64,
    /// While `Cancelled`: the sequence of the command that cancelled it.
    pub cancelled_seq: Option<i64>,
    /// The daemon that picked this timer for firing, and until when its claim holds.
    pub claimed_by: Option<String>,
    pub claim_until: Option<String>,
    /// The timer's `data`: the JSON text its ScheduleTimer carried, NULL for none.
    pub data: Option<String>,
    /// Its ScheduleTimer's W3C trace context (`TraceContext::encode`), NULL for none.
    pub trace_context: Option<String>,
    /// `dueAt + expireAfter`, NULL for none: a firing after it is a TimerExpired.
    pub expires_at: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
