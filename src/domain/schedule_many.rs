//! `ScheduleTimers` (docs/CONTRACT.md §3): many timers of one tenant in one message. Each
//! timer follows ScheduleTimer's rules; the message is checked whole before any of it is
//! stored, so a bad timer rejects the message with the timer's position in the reason and
//! stores none of it. Its timers share the message's place in the stream (`Command::seq`)
//! and are told apart by their position in it (`Command::item`).
//!
//! Why it exists: the broker's work is per message (its delivery, its acknowledgement), so a
//! service that schedules timers by the thousand pays that once per message, not per timer
//! (BENCHMARKS.md, "ScheduleTimers").

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::command::{Arrival, CommandLimits, correlation_id, schedule_action};
use super::data::TimerData;
use super::envelope::MessageEnvelope;
use super::ids::check_service_call_id;
use super::schema_types;
use super::timer::Command;

/// The envelope `type` of the command.
pub const SCHEDULE_TIMERS: &str = "ScheduleTimers";

/// Most timers one `ScheduleTimers` may hold (the whole message is held to `max_command_bytes`
/// besides): one commit's worth, so that a message is never split over transactions.
pub const MAX_TIMERS: usize = 1_000;

/// `ScheduleTimers` payload as it appears on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleTimersPayload {
    #[schemars(with = "schema_types::TenantId")]
    pub tenant_id: String,
    /// 1 to 1,000 timers, each key at most once.
    #[schemars(length(min = 1, max = 1000))]
    pub timers: Vec<TimerSpec>,
}

/// One timer of a `ScheduleTimers`: a ScheduleTimer's payload without the tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimerSpec {
    #[schemars(with = "schema_types::ServiceCallId")]
    pub service_call_id: String,
    #[schemars(with = "schema_types::ClientInstant")]
    pub due_at: String,
    /// This timer's; without it, the envelope's; without that, a new one for this timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::CorrelationId>")]
    pub correlation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::Data>")]
    pub data: Option<TimerData>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::ExpireAfter>")]
    pub expire_after: Option<String>,
}

impl TimerSpec {
    /// A timer of `service_call_id` due at `due_at`, with nothing optional set.
    pub fn new(service_call_id: &str, due_at: &str) -> Self {
        Self {
            service_call_id: service_call_id.to_owned(),
            due_at: due_at.to_owned(),
            correlation_id: None,
            data: None,
            expire_after: None,
        }
    }
}

/// A `ScheduleTimers` as a client sends it (`client::TimerClient::schedule_timers`), stamped
/// `now`, with the envelope's correlation id (each timer without its own takes it).
pub fn schedule_timers_command(
    payload: ScheduleTimersPayload,
    correlation_id: Option<&str>,
    now: DateTime<Utc>,
) -> MessageEnvelope<ScheduleTimersPayload> {
    let tenant_id = payload.tenant_id.clone();
    let mut envelope = MessageEnvelope::new(SCHEDULE_TIMERS, &tenant_id, now, payload);
    envelope.correlation_id = correlation_id.map(str::to_owned);
    envelope
}

/// The commands of a `ScheduleTimers` whose tenant has been checked against its subject and
/// envelope, one per timer in its order, or why the whole message is refused (the first bad
/// timer, by its position).
pub(super) fn commands(
    payload: ScheduleTimersPayload,
    envelope_correlation: Option<&str>,
    limits: CommandLimits,
    arrival: Arrival,
    mut new_correlation_id: impl FnMut() -> String,
) -> Result<Vec<Command>, String> {
    let count = payload.timers.len();
    if count == 0 {
        return Err("timers is empty: a ScheduleTimers holds 1 to 1000 timers".into());
    }
    if count > MAX_TIMERS {
        return Err(format!(
            "timers holds {count} timers, more than the {MAX_TIMERS} a ScheduleTimers may hold"
        ));
    }
    let mut keys = HashSet::with_capacity(count);
    let mut commands = Vec::with_capacity(count);
    for (i, timer) in payload.timers.into_iter().enumerate() {
        let at = |reason: String| format!("timers[{i}]: {reason}");
        check_service_call_id(&timer.service_call_id).map_err(at)?;
        if !keys.insert(timer.service_call_id.clone()) {
            return Err(at(format!(
                "serviceCallId {:?} is named twice: a ScheduleTimers holds each key at most once",
                timer.service_call_id
            )));
        }
        let action = schedule_action(
            &timer.due_at,
            timer.data,
            timer.expire_after.as_deref(),
            limits,
        )
        .map_err(at)?;
        let correlation_id = correlation_id(
            timer.correlation_id,
            envelope_correlation,
            &mut new_correlation_id,
        )
        .map_err(at)?;
        commands.push(Command {
            tenant_id: payload.tenant_id.clone(),
            service_call_id: timer.service_call_id,
            correlation_id,
            action,
            seq: arrival.seq,
            received_at: arrival.at,
            trace: None,
            item: Some(i as u32),
        });
    }
    Ok(commands)
}

#[cfg(test)]
mod tests;
