//! `ScheduleTimer` and `CancelTimer`: parsing and validation of the commands the service
//! accepts (docs/CONTRACT.md §3). Every way a command can be wrong ends in a [`Rejection`] with a
//! reason a person can act on; nothing here panics on input.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::cancel_many::{CANCEL_TIMERS, CancelMany, CancelTimersPayload};
use super::data::TimerData;
use super::envelope::MessageEnvelope;
use super::expiry::{expires_at, parse_expire_after};
use super::ids::{check_correlation_id, check_service_call_id};
use super::quota::Quota;
use super::schedule_many::{self, SCHEDULE_TIMERS, ScheduleTimersPayload};
use super::schema_types;
use super::subjects::{CommandKind, Subjects, UNKNOWN_TENANT};
use super::tenant::check_tenant_id;
use super::timer::{Action, Command};
use super::timestamp::parse_due_at;

/// The envelope `type` of each command.
pub const SCHEDULE_TIMER: &str = "ScheduleTimer";
pub const CANCEL_TIMER: &str = "CancelTimer";

impl CommandKind {
    /// The envelope `type` a command on this subject must carry.
    pub fn message_type(self) -> &'static str {
        match self {
            CommandKind::Schedule => SCHEDULE_TIMER,
            CommandKind::Cancel => CANCEL_TIMER,
            CommandKind::CancelMany => CANCEL_TIMERS,
            CommandKind::ScheduleMany => SCHEDULE_TIMERS,
        }
    }
}

/// `ScheduleTimer` payload as it appears on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleTimerPayload {
    #[schemars(with = "schema_types::TenantId")]
    pub tenant_id: String,
    #[schemars(with = "schema_types::ServiceCallId")]
    pub service_call_id: String,
    #[schemars(with = "schema_types::ClientInstant")]
    pub due_at: String,
    #[serde(default)]
    #[schemars(with = "Option<schema_types::CorrelationId>")]
    pub correlation_id: Option<String>,
    /// Any JSON value, stored with the timer and echoed in its DueTimeReached; `null` is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::Data>")]
    pub data: Option<TimerData>,
    /// How late the timer may still fire (docs/CONTRACT.md §3): past `dueAt + expireAfter` it
    /// publishes TimerExpired instead of DueTimeReached. Absent: it fires however late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<schema_types::ExpireAfter>")]
    pub expire_after: Option<String>,
}

impl ScheduleTimerPayload {
    /// A ScheduleTimer of `service_call_id` due at `due_at`, with nothing optional set.
    pub fn new(tenant_id: &str, service_call_id: &str, due_at: &str) -> Self {
        Self {
            tenant_id: tenant_id.to_owned(),
            service_call_id: service_call_id.to_owned(),
            due_at: due_at.to_owned(),
            correlation_id: None,
            data: None,
            expire_after: None,
        }
    }
}

/// `CancelTimer` payload as it appears on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelTimerPayload {
    #[schemars(with = "schema_types::TenantId")]
    pub tenant_id: String,
    #[schemars(with = "schema_types::ServiceCallId")]
    pub service_call_id: String,
}

/// Why a command was refused, and which tenant the refusal is reported to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The tenant read from the subject when it is well-formed; [`UNKNOWN_TENANT`] otherwise.
    pub tenant_id: String,
    pub reason: String,
    pub kind: RejectionKind,
}

/// What sort of refusal a [`Rejection`] is: a few fixed kinds, so that rejections can be
/// counted by kind where the reason, free text quoting the command, could not be a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectionKind {
    /// The command breaks the contract's rules (§3): not JSON, a bad field, a wrong subject.
    Invalid,
    /// The command cannot be placed in the order of its key's commands (its stream sequence is
    /// out of range).
    Order,
    /// The database refused to store it.
    Refused,
    /// Its tenant is past this quota (§9).
    Quota(Quota),
}

impl RejectionKind {
    /// Every kind (each quota's: both count under the one label `quota`).
    pub const ALL: [RejectionKind; 5] = [
        Self::Invalid,
        Self::Order,
        Self::Refused,
        Self::Quota(Quota::MaxPending),
        Self::Quota(Quota::CommandsPerSecond),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Order => "order",
            Self::Refused => "refused",
            Self::Quota(_) => "quota",
        }
    }
}

/// The sizes a command is held to (`max_command_bytes`, `max_data_bytes`, `max_data_depth`,
/// `max_data_number_chars`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandLimits {
    /// The whole message, in bytes.
    pub max_bytes: usize,
    /// A ScheduleTimer's `data`, in bytes of its JSON text.
    pub max_data_bytes: usize,
    /// Arrays and objects open at once in `data`.
    pub max_data_depth: usize,
    /// Characters of the longest number in `data`.
    pub max_data_number_chars: usize,
}

/// Why `data` is refused, if it is: too large, too deep or with too long a number.
fn check_data(data: &TimerData, limits: CommandLimits) -> Result<(), String> {
    if data.len() > limits.max_data_bytes {
        return Err(format!(
            "data is {} bytes, more than the {}-byte limit (max_data_bytes)",
            data.len(),
            limits.max_data_bytes
        ));
    }
    let shape = data.shape();
    if shape.depth > limits.max_data_depth {
        return Err(format!(
            "data nests {} arrays or objects deep, more than the {} allowed (max_data_depth)",
            shape.depth, limits.max_data_depth
        ));
    }
    if shape.longest_number > limits.max_data_number_chars {
        return Err(format!(
            "data has a number of {} characters, more than the {} allowed (max_data_number_chars)",
            shape.longest_number, limits.max_data_number_chars
        ));
    }
    Ok(())
}

/// Where and when a command arrived: its JetStream stream sequence (the order of commands) and
/// the instant the service accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub seq: u64,
    pub at: DateTime<Utc>,
}

/// A command as parsed: one timer's, the timers of a `ScheduleTimers`, or a `CancelTimers` of
/// many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    One(Command),
    /// A `ScheduleTimers`' timers, in its order, each with its position (`Command::item`).
    Timers(Vec<Command>),
    Many(CancelMany),
}

/// Parses and validates one command delivered on `subject` that names one timer
/// (`ScheduleTimer`, `CancelTimer`); see [`parse_message`].
pub fn parse_command(
    subjects: &Subjects,
    subject: &str,
    bytes: &[u8],
    limits: CommandLimits,
    arrival: Arrival,
    new_correlation_id: impl FnMut() -> String,
) -> Result<Command, Rejection> {
    match parse_message(
        subjects,
        subject,
        bytes,
        limits,
        arrival,
        new_correlation_id,
    )? {
        Parsed::One(command) => Ok(command),
        Parsed::Many(many) => Err(Rejection {
            tenant_id: many.tenant_id,
            reason: "a CancelTimers names no single timer".into(),
            kind: RejectionKind::Invalid,
        }),
        Parsed::Timers(timers) => Err(Rejection {
            tenant_id: timers
                .first()
                .map_or_else(|| UNKNOWN_TENANT.to_owned(), |t| t.tenant_id.clone()),
            reason: "a ScheduleTimers names no single timer".into(),
            kind: RejectionKind::Invalid,
        }),
    }
}

/// Parses and validates one command delivered on `subject`.
///
/// `limits` bound the message and its data; `new_correlation_id` is called only when the
/// command carries no correlation id (payload first, then envelope).
pub fn parse_message(
    subjects: &Subjects,
    subject: &str,
    bytes: &[u8],
    limits: CommandLimits,
    arrival: Arrival,
    mut new_correlation_id: impl FnMut() -> String,
) -> Result<Parsed, Rejection> {
    let report_to = subjects
        .command_tenant(subject)
        .filter(|t| check_tenant_id(t).is_ok())
        .unwrap_or(UNKNOWN_TENANT)
        .to_owned();
    let reject = |reason: String| Rejection {
        tenant_id: report_to.clone(),
        reason,
        kind: RejectionKind::Invalid,
    };

    if bytes.len() > limits.max_bytes {
        return Err(reject(format!(
            "message is {} bytes, more than the {}-byte limit",
            bytes.len(),
            limits.max_bytes
        )));
    }
    let Some((kind, tenant_id)) = subjects.command_of(subject) else {
        return Err(reject(format!(
            "unknown command subject {subject:?}: expected {}, {}, {} or {}",
            subjects.schedule("<tenantId>"),
            subjects.schedule_many("<tenantId>"),
            subjects.cancel("<tenantId>"),
            subjects.cancel_many("<tenantId>")
        )));
    };
    check_tenant_id(tenant_id).map_err(|e| reject(format!("subject {subject:?}: {e}")))?;

    // The payload stays raw until the type is known: one pass over the bytes, no JSON tree.
    let envelope: MessageEnvelope<Box<RawValue>> = serde_json::from_slice(bytes)
        .map_err(|e| reject(format!("not a valid MessageEnvelope: {e}")))?;
    if envelope.message_type != kind.message_type() {
        return Err(reject(format!(
            "unknown message type {:?} on {subject:?}: expected {:?}",
            envelope.message_type,
            kind.message_type()
        )));
    }
    if envelope.tenant_id != tenant_id {
        return Err(reject(format!(
            "tenant mismatch: envelope tenantId {:?} differs from subject tenant {tenant_id:?}",
            envelope.tenant_id
        )));
    }
    let payload_tenant_matches = |payload_tenant: &str| {
        if payload_tenant == tenant_id {
            Ok(())
        } else {
            Err(reject(format!(
                "tenant mismatch: payload tenantId {payload_tenant:?} differs from subject tenant {tenant_id:?}"
            )))
        }
    };
    let (service_call_id, payload_correlation, action) = match kind {
        CommandKind::Schedule => {
            let payload: ScheduleTimerPayload = serde_json::from_str(envelope.payload.get())
                .map_err(|e| reject(format!("invalid ScheduleTimer payload: {e}")))?;
            payload_tenant_matches(&payload.tenant_id)?;
            check_service_call_id(&payload.service_call_id).map_err(reject)?;
            let action = schedule_action(
                &payload.due_at,
                payload.data,
                payload.expire_after.as_deref(),
                limits,
            )
            .map_err(reject)?;
            (payload.service_call_id, payload.correlation_id, action)
        }
        CommandKind::Cancel => {
            let payload: CancelTimerPayload = serde_json::from_str(envelope.payload.get())
                .map_err(|e| reject(format!("invalid CancelTimer payload: {e}")))?;
            payload_tenant_matches(&payload.tenant_id)?;
            check_service_call_id(&payload.service_call_id).map_err(reject)?;
            (payload.service_call_id, None, Action::Cancel)
        }
        CommandKind::CancelMany => {
            let payload: CancelTimersPayload = serde_json::from_str(envelope.payload.get())
                .map_err(|e| reject(format!("invalid CancelTimers payload: {e}")))?;
            payload_tenant_matches(&payload.tenant_id)?;
            let filter = payload.filter.check().map_err(reject)?;
            return Ok(Parsed::Many(CancelMany {
                tenant_id: tenant_id.to_owned(),
                filter,
                seq: arrival.seq,
                received_at: arrival.at,
            }));
        }
        CommandKind::ScheduleMany => {
            let payload: ScheduleTimersPayload = serde_json::from_str(envelope.payload.get())
                .map_err(|e| reject(format!("invalid ScheduleTimers payload: {e}")))?;
            payload_tenant_matches(&payload.tenant_id)?;
            let commands = schedule_many::commands(
                payload,
                envelope.correlation_id.as_deref(),
                limits,
                arrival,
                &mut new_correlation_id,
            )
            .map_err(reject)?;
            return Ok(Parsed::Timers(commands));
        }
    };
    let correlation_id = correlation_id(
        payload_correlation,
        envelope.correlation_id.as_deref(),
        new_correlation_id,
    )
    .map_err(reject)?;

    Ok(Parsed::One(Command {
        tenant_id: tenant_id.to_owned(),
        service_call_id,
        correlation_id,
        action,
        seq: arrival.seq,
        received_at: arrival.at,
        trace: None,
        item: None,
    }))
}

/// The action of a ScheduleTimer's timer (or of one of a ScheduleTimers'), its fields checked.
pub(super) fn schedule_action(
    due_at: &str,
    data: Option<TimerData>,
    expire_after: Option<&str>,
    limits: CommandLimits,
) -> Result<Action, String> {
    let due_at = parse_due_at(due_at)?;
    if let Some(data) = &data {
        check_data(data, limits)?;
    }
    let expires_at = expire_after
        .map(parse_expire_after)
        .transpose()?
        .map(|after| expires_at(due_at, after));
    Ok(Action::Schedule {
        due_at,
        data,
        expires_at,
    })
}

/// The correlation id stored with a command's timer, checked: the payload's first, then the
/// envelope's, else a new one.
pub(super) fn correlation_id(
    payload: Option<String>,
    envelope: Option<&str>,
    new_correlation_id: impl FnOnce() -> String,
) -> Result<String, String> {
    match (payload, envelope) {
        (Some(id), _) => {
            check_correlation_id(&id).map_err(|e| format!("payload {e}"))?;
            Ok(id)
        }
        (None, Some(id)) => {
            check_correlation_id(id).map_err(|e| format!("envelope {e}"))?;
            Ok(id.to_owned())
        }
        (None, None) => Ok(new_correlation_id()),
    }
}

/// A `CancelTimers` as a client sends it (the query API does, for its `cancelMany`), stamped
/// `now`.
pub fn cancel_timers_command(
    payload: CancelTimersPayload,
    correlation_id: &str,
    now: DateTime<Utc>,
) -> MessageEnvelope<CancelTimersPayload> {
    let tenant_id = payload.tenant_id.clone();
    let mut envelope = MessageEnvelope::new(CANCEL_TIMERS, &tenant_id, now, payload);
    envelope.correlation_id = Some(correlation_id.to_owned());
    envelope
}

/// A `ScheduleTimer` as a client sends it (the CLI does), stamped `now`.
pub fn schedule_timer_command(
    payload: ScheduleTimerPayload,
    now: DateTime<Utc>,
) -> MessageEnvelope<ScheduleTimerPayload> {
    let (tenant_id, service_call_id) = (payload.tenant_id.clone(), payload.service_call_id.clone());
    let mut envelope = MessageEnvelope::new(SCHEDULE_TIMER, &tenant_id, now, payload);
    envelope.aggregate_id = Some(service_call_id);
    envelope
}

/// A `CancelTimer` as a client sends it (the query API does, for its `cancel`), stamped `now`.
pub fn cancel_timer_command(
    tenant_id: &str,
    service_call_id: &str,
    correlation_id: &str,
    now: DateTime<Utc>,
) -> MessageEnvelope<CancelTimerPayload> {
    let mut envelope = MessageEnvelope::new(
        CANCEL_TIMER,
        tenant_id,
        now,
        CancelTimerPayload {
            tenant_id: tenant_id.to_owned(),
            service_call_id: service_call_id.to_owned(),
        },
    );
    envelope.correlation_id = Some(correlation_id.to_owned());
    envelope.aggregate_id = Some(service_call_id.to_owned());
    envelope
}

/// A correlation id for a command that came without one: UUID v7, so it sorts by time.
pub fn generated_correlation_id() -> String {
    Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests;
