//! Timers and the commands that write them: the rules table of docs/CONTRACT.md §3, as a reference
//! model the SQL of the store is tested against.
//!
//! - [`Timer`]: one stored row, as the query API shows it.
//! - [`DueTimer`]: what firing needs of a row.
//! - [`Command`]: an accepted `ScheduleTimer` or `CancelTimer`, with its stream sequence.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;

use super::data::TimerData;
use super::trace::TraceContext;

/// Lifecycle of a timer. `Reached` and `Expired` are final: a fired timer never fires again
/// and cannot be cancelled. `Cancelled` is not: a newer `ScheduleTimer` schedules it again.
///
/// `Expired` is a `Reached` row whose firing came after its `expireAfter` deadline
/// (`expiry`): the database stores both as `Reached`, and the state is read from the row's
/// `reached_at` and `expires_at`, so that a release without expiry reads every fired row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum TimerState {
    Scheduled,
    Reached,
    Cancelled,
    Expired,
}

impl TimerState {
    pub const ALL: [TimerState; 4] = [
        TimerState::Scheduled,
        TimerState::Reached,
        TimerState::Cancelled,
        TimerState::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TimerState::Scheduled => "Scheduled",
            TimerState::Reached => "Reached",
            TimerState::Cancelled => "Cancelled",
            TimerState::Expired => "Expired",
        }
    }

    /// Fired, whether its event was DueTimeReached or TimerExpired: nothing changes it again.
    pub fn is_fired(self) -> bool {
        matches!(self, TimerState::Reached | TimerState::Expired)
    }

    /// The state stored for this one: `Expired` is stored as `Reached`.
    pub fn stored(self) -> TimerState {
        match self {
            TimerState::Expired => TimerState::Reached,
            state => state,
        }
    }
}

impl fmt::Display for TimerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TimerState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TimerState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown timer state {s:?}: expected Scheduled, Reached, Cancelled or Expired"
                )
            })
    }
}

/// A place in firing order: timers fire by `dueAt`, ties broken by tenant then service call.
/// The Poller reads due timers after the last one it has in flight.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DuePosition {
    pub due_at: DateTime<Utc>,
    pub tenant_id: String,
    pub service_call_id: String,
}

/// One row of `timer_schedules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    pub tenant_id: String,
    pub service_call_id: String,
    pub correlation_id: String,
    /// `None` only for a tombstone: a key cancelled before any `ScheduleTimer` for it.
    pub due_at: Option<DateTime<Utc>>,
    pub registered_at: DateTime<Utc>,
    pub reached_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub state: TimerState,
    /// Broker sequence of the newest command applied to this row; a command with a lower one
    /// is a stale redelivery and changes nothing.
    pub command_seq: u64,
    /// While `Cancelled`: the sequence of the command that cancelled it (the first of several
    /// cancels), so whoever applied it, the API can tell which cancel did.
    pub cancelled_seq: Option<u64>,
    /// The `data` of the ScheduleTimer that scheduled it last, if it had any.
    pub data: Option<TimerData>,
    /// `dueAt + expireAfter` of the ScheduleTimer that scheduled it last, if it had one.
    pub expires_at: Option<DateTime<Utc>>,
    /// The W3C trace context the ScheduleTimer that scheduled it last carried, if any.
    pub trace: Option<TraceContext>,
}

/// What the Poller needs of a due timer to publish its `DueTimeReached` and mark it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueTimer {
    pub tenant_id: String,
    pub service_call_id: String,
    pub correlation_id: String,
    pub due_at: DateTime<Utc>,
    pub data: Option<TimerData>,
    /// Its ScheduleTimer's trace context, sent on with its DueTimeReached.
    pub trace: Option<TraceContext>,
    /// Its deadline (`expiry`), past which it publishes TimerExpired instead.
    pub expires_at: Option<DateTime<Utc>>,
}

impl DueTimer {
    /// Whether its firing stamped `reached_at` publishes TimerExpired (`expiry::is_expired`).
    pub fn expired_at(&self, reached_at: DateTime<Utc>) -> bool {
        super::expiry::is_expired(self.expires_at, reached_at)
    }

    pub fn position(&self) -> DuePosition {
        DuePosition {
            due_at: self.due_at,
            tenant_id: self.tenant_id.clone(),
            service_call_id: self.service_call_id.clone(),
        }
    }
}

/// What one accepted command asks of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Schedule {
        due_at: DateTime<Utc>,
        data: Option<TimerData>,
        /// `dueAt + expireAfter`, when the command set an `expireAfter`.
        expires_at: Option<DateTime<Utc>>,
    },
    Cancel,
}

/// One accepted command, ready to apply: `ScheduleTimer` or `CancelTimer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub tenant_id: String,
    pub service_call_id: String,
    /// The timer's correlation id for a schedule; for a cancel, the one a tombstone keeps
    /// (a cancel of an existing timer keeps the timer's own).
    pub correlation_id: String,
    pub action: Action,
    /// JetStream stream sequence: the order of commands, across both subjects.
    pub seq: u64,
    /// When the service accepted it: `registeredAt` of a new row, `cancelledAt` of a cancel.
    pub received_at: DateTime<Utc>,
    /// The W3C trace context of its message, stored with a schedule for its DueTimeReached.
    pub trace: Option<TraceContext>,
    /// Its position among the timers of its `ScheduleTimers`, whose timers share the
    /// message's `seq`; `None` for a command of one timer.
    pub item: Option<u32>,
}

impl Command {
    /// The row this command creates when its key has none.
    pub fn new_row(&self) -> Timer {
        let (due_at, state, cancelled_at, cancelled_seq, data, expires_at) = match &self.action {
            Action::Schedule {
                due_at,
                data,
                expires_at,
            } => (
                Some(*due_at),
                TimerState::Scheduled,
                None,
                None,
                data.clone(),
                *expires_at,
            ),
            Action::Cancel => (
                None,
                TimerState::Cancelled,
                Some(self.received_at),
                Some(self.seq),
                None,
                None,
            ),
        };
        Timer {
            tenant_id: self.tenant_id.clone(),
            service_call_id: self.service_call_id.clone(),
            correlation_id: self.correlation_id.clone(),
            due_at,
            registered_at: self.received_at,
            reached_at: None,
            cancelled_at,
            state,
            command_seq: self.seq,
            cancelled_seq,
            data,
            expires_at,
            trace: match self.action {
                Action::Schedule { .. } => self.trace.clone(),
                Action::Cancel => None,
            },
        }
    }
}

/// What a command does to the stored row of its key (docs/CONTRACT.md §3), or `None` when it
/// changes nothing. `being_fired` says the row was picked for firing (claimed): a cancel then
/// comes too late, like one after `Reached`, whether or not the claim has lapsed since — a
/// claimed timer fires (its daemon publishes it, or another takes it over once the claim
/// lapses), so a cancel that let a lapsed claim go would cancel a timer whose event may be out.
/// A refused cancel still counts as applied for the order of commands: its sequence is
/// remembered, so an older command arriving after it changes nothing. The store expresses the
/// same rule in SQL; this is the reference it is tested against.
pub fn apply_command(
    stored: Option<&Timer>,
    command: &Command,
    being_fired: bool,
) -> Option<Timer> {
    let Some(row) = stored else {
        return Some(command.new_row());
    };
    if row.state.is_fired() || command.seq <= row.command_seq {
        return None;
    }
    let mut next = row.clone();
    next.command_seq = command.seq;
    match &command.action {
        Action::Schedule {
            due_at,
            data,
            expires_at,
        } => {
            next.due_at = Some(*due_at);
            next.correlation_id = command.correlation_id.clone();
            // Replaced, or cleared by a ScheduleTimer without data (or without expireAfter).
            next.data = data.clone();
            next.expires_at = *expires_at;
            next.trace = command.trace.clone();
            next.state = TimerState::Scheduled;
            next.cancelled_at = None;
            next.cancelled_seq = None;
        }
        Action::Cancel if row.state == TimerState::Scheduled && being_fired => {}
        Action::Cancel => {
            next.state = TimerState::Cancelled;
            next.cancelled_at = row.cancelled_at.or(Some(command.received_at));
            next.cancelled_seq = row.cancelled_seq.or(Some(command.seq));
        }
    }
    Some(next)
}

/// How a cancel went, as the query API reports it (docs/CONTRACT.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[schemars(rename_all = "snake_case")]
pub enum CancelOutcome {
    Cancelled,
    AlreadyCancelled,
    /// Fired (DueTimeReached or TimerExpired), or picked for firing (its event is published or
    /// on its way).
    AlreadyReached,
    /// No timer had the key: a tombstone now keeps an older `ScheduleTimer` from creating one.
    NotFound,
}

impl CancelOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelOutcome::Cancelled => "cancelled",
            CancelOutcome::AlreadyCancelled => "already_cancelled",
            CancelOutcome::AlreadyReached => "already_reached",
            CancelOutcome::NotFound => "not_found",
        }
    }

    /// The outcome of the cancel with sequence `seq`, read from the row once it has been
    /// applied: whoever applied it first (the API or the CommandHandler meeting the same
    /// command), the row tells what it did.
    pub fn of(after: Option<&Timer>, seq: u64) -> Self {
        let Some(row) = after else {
            return CancelOutcome::NotFound;
        };
        match row.state {
            TimerState::Reached | TimerState::Expired => CancelOutcome::AlreadyReached,
            // A newer ScheduleTimer came after this cancel: in stream order the cancel
            // happened and was superseded (the timer returned shows it).
            TimerState::Scheduled if row.command_seq > seq => CancelOutcome::Cancelled,
            // Otherwise the cancel met a timer picked for firing, and changed nothing.
            TimerState::Scheduled => CancelOutcome::AlreadyReached,
            TimerState::Cancelled => match row.cancelled_seq {
                Some(by) if by < seq => CancelOutcome::AlreadyCancelled,
                _ if row.due_at.is_none() => CancelOutcome::NotFound,
                _ => CancelOutcome::Cancelled,
            },
        }
    }
}

/// Splits a batch into rounds with at most one command per key, each key's commands in stream
/// order across the rounds: applying round after round is applying every command in order,
/// while each round stays one multi-row statement (which no SQL backend lets touch a row twice).
/// Nearly every batch is a single round. The rounds borrow the commands: a commit's thousands
/// are not copied to be split.
pub fn rounds<'a>(commands: impl IntoIterator<Item = &'a Command>) -> Vec<Vec<&'a Command>> {
    let mut commands: Vec<&Command> = commands.into_iter().collect();
    commands.sort_by_key(|c| c.seq);
    let mut seen: HashMap<(&str, &str), usize> = HashMap::with_capacity(commands.len());
    let mut rounds: Vec<Vec<&Command>> = Vec::new();
    for command in commands {
        let key = (command.tenant_id.as_str(), command.service_call_id.as_str());
        let round = seen.entry(key).or_insert(0);
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(command);
        *round += 1;
    }
    rounds
}

#[cfg(test)]
pub(crate) mod tests;
