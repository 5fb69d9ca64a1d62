//! A refusal is final (docs/CONTRACT.md §9): the transaction that refuses a command for a
//! quota records it, and a copy of that command the broker delivers again (the same place in
//! the order, `domain::order`, on any daemon) is refused again with the recorded reason,
//! without being decided afresh or counted again. Without the record, a copy decided in a
//! later second of the rate window could be stored, its timer firing after a
//! TimerCommandRejected said it would not.

use std::collections::HashMap;

use super::Exceeded;
use crate::domain::timer::Command;

/// A command refused for a quota, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub tenant_id: String,
    pub service_call_id: String,
    pub exceeded: Exceeded,
}

/// The refusals recorded for a batch's commands, by the command's order.
pub type Recorded = HashMap<u64, Refusal>;

/// The recorded refusal of `command`: one of the same order, tenant and key (every copy of a
/// message has all three). A timer of a `ScheduleTimers` matches on the order and tenant
/// alone: such a message is refused whole (`decide_batch`), and its record names its first
/// timer.
pub fn refused_before(recorded: &Recorded, command: &Command) -> Option<Exceeded> {
    recorded
        .get(&command.seq)
        .filter(|r| {
            r.tenant_id == command.tenant_id
                && (command.item.is_some() || r.service_call_id == command.service_call_id)
        })
        .map(|r| r.exceeded)
}
