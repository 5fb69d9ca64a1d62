//! `TimerEntry`: one stored timer, and the rules that decide what a batch of commands writes.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};

use super::command::ScheduleTimer;

/// Lifecycle of a timer. `Reached` is final: a fired timer never fires again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimerState {
    Scheduled,
    Reached,
}

impl TimerState {
    pub fn as_str(self) -> &'static str {
        match self {
            TimerState::Scheduled => "Scheduled",
            TimerState::Reached => "Reached",
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
        match s {
            "Scheduled" => Ok(TimerState::Scheduled),
            "Reached" => Ok(TimerState::Reached),
            other => Err(format!("unknown timer state {other:?}")),
        }
    }
}

/// The identity of a timer: one timer per `(tenantId, serviceCallId)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    pub tenant_id: String,
    pub service_call_id: String,
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
pub struct TimerEntry {
    pub tenant_id: String,
    pub service_call_id: String,
    pub correlation_id: String,
    pub due_at: DateTime<Utc>,
    pub registered_at: DateTime<Utc>,
    pub reached_at: Option<DateTime<Utc>>,
    pub state: TimerState,
    /// Broker sequence of the command that last wrote this row; a command with a lower one is a
    /// stale redelivery and changes nothing.
    pub command_seq: u64,
}

impl TimerEntry {
    /// The row a freshly accepted command would create.
    pub fn scheduled(command: ScheduleTimer, command_seq: u64, now: DateTime<Utc>) -> Self {
        Self {
            tenant_id: command.tenant_id,
            service_call_id: command.service_call_id,
            correlation_id: command.correlation_id,
            due_at: command.due_at,
            registered_at: now,
            reached_at: None,
            state: TimerState::Scheduled,
            command_seq,
        }
    }

    pub fn position(&self) -> DuePosition {
        DuePosition {
            due_at: self.due_at,
            tenant_id: self.tenant_id.clone(),
            service_call_id: self.service_call_id.clone(),
        }
    }

    pub fn key(&self) -> TimerKey {
        TimerKey {
            tenant_id: self.tenant_id.clone(),
            service_call_id: self.service_call_id.clone(),
        }
    }
}

/// Keeps, for each key, only the entry written by the newest command (highest sequence).
///
/// A batch may carry the same key twice (a client retry, a reschedule right behind the first
/// command). Deciding here keeps the stored upsert one row per key, which every SQL backend
/// accepts in a single multi-row statement.
pub fn newest_per_key(entries: Vec<TimerEntry>) -> Vec<TimerEntry> {
    let mut newest: HashMap<TimerKey, TimerEntry> = HashMap::with_capacity(entries.len());
    for entry in entries {
        match newest.entry(entry.key()) {
            Entry::Occupied(mut kept) => {
                if kept.get().command_seq < entry.command_seq {
                    kept.insert(entry);
                }
            }
            Entry::Vacant(slot) => {
                slot.insert(entry);
            }
        }
    }
    let mut out: Vec<TimerEntry> = newest.into_values().collect();
    out.sort_by_key(|e| e.command_seq);
    out
}

/// What an upsert does to a stored row, per the rules of CONTRACT.md §3. The persistence layer
/// expresses the same rule in SQL; this is the reference it is tested against.
pub fn apply_command(stored: Option<&TimerEntry>, incoming: &TimerEntry) -> Option<TimerEntry> {
    match stored {
        None => Some(incoming.clone()),
        Some(row) if row.state == TimerState::Reached => None,
        Some(row) if incoming.command_seq <= row.command_seq => None,
        Some(row) => Some(TimerEntry {
            due_at: incoming.due_at,
            correlation_id: incoming.correlation_id.clone(),
            command_seq: incoming.command_seq,
            ..row.clone()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    pub(crate) fn entry(scid: &str, seq: u64, due_ms: i64) -> TimerEntry {
        TimerEntry {
            tenant_id: "acme".into(),
            service_call_id: scid.into(),
            correlation_id: format!("c{seq}"),
            due_at: Utc.timestamp_millis_opt(due_ms).unwrap(),
            registered_at: Utc.timestamp_millis_opt(0).unwrap(),
            reached_at: None,
            state: TimerState::Scheduled,
            command_seq: seq,
        }
    }

    #[test]
    fn newest_command_per_key_wins_whatever_the_order() {
        let out = newest_per_key(vec![
            entry("a", 3, 30),
            entry("a", 1, 10),
            entry("b", 2, 20),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(
            out.iter()
                .find(|e| e.service_call_id == "a")
                .unwrap()
                .command_seq,
            3
        );
    }

    #[test]
    fn upsert_rules_of_the_contract() {
        let stored = entry("a", 5, 100);
        assert_eq!(apply_command(None, &stored), Some(stored.clone()));
        let newer = apply_command(Some(&stored), &entry("a", 6, 200)).unwrap();
        assert_eq!(
            (newer.due_at.timestamp_millis(), newer.command_seq),
            (200, 6)
        );
        assert_eq!(newer.registered_at, stored.registered_at);
        assert_eq!(apply_command(Some(&stored), &entry("a", 4, 50)), None);
        let reached = TimerEntry {
            state: TimerState::Reached,
            ..stored
        };
        assert_eq!(apply_command(Some(&reached), &entry("a", 9, 300)), None);
    }

    #[test]
    fn state_text_round_trips() {
        for s in [TimerState::Scheduled, TimerState::Reached] {
            assert_eq!(s.as_str().parse::<TimerState>().unwrap(), s);
        }
        assert!("Fired".parse::<TimerState>().is_err());
    }
}
