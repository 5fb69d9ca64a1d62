//! Per-tenant quotas (docs/CONTRACT.md §9): the limits in force, the window that counts
//! commands per second, the count of pending timers as a batch changes it, and the decisions.
//! No I/O: the storage brings the instant and the stored state, inside the transaction that
//! stores the commands, so that every daemon on one database decides against the same counts.
//!
//! - [`Quotas`]: the default limits and the overrides by tenant id.
//! - [`SlotWindow`]: a tenant's commands accepted within the last second, by 10 ms slot.
//! - [`TenantPending`]: a tenant's pending timers, and the stored state of the keys a batch
//!   names, brought up to date command by command.
//! - [`decide`]: accept one command, or say which limit it exceeds.
//! - [`TenantQuota`], [`to_count`], [`decide_batch`]: a tenant's stored state, and one
//!   transaction's commands decided against it; [`crowded_keys`], [`settled`]: which commands
//!   their keys had already applied, so that a redelivery is never refused.
//! - [`Refusal`], [`refused_before`]: refusals recorded, so that a copy of a refused command
//!   is refused again.

use std::collections::HashMap;
use std::fmt;

use super::timer::{Action, Command, TimerState};

mod batch;
mod refusal;
mod window;
pub use batch::{
    COUNT_FRESH_MS, TenantQuota, crowded_keys, decide_batch, keys_by_tenant, limited_tenants,
    settled, to_count,
};
pub use refusal::{Recorded, Refusal, refused_before};
pub use window::{SLOT_MS, SLOTS, SlotWindow};

/// The metric label of a tenant without an override of its own: the label set stays bounded by
/// the configured overrides, whatever the number of tenants.
pub const OTHER_TENANTS: &str = "_other";

/// One tenant's limits; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Most pending (`Scheduled`) timers the tenant may hold.
    pub max_pending: Option<u64>,
    /// Most commands accepted from the tenant within any one-second span.
    pub commands_per_second: Option<u32>,
}

impl Limits {
    pub fn is_unlimited(&self) -> bool {
        self.max_pending.is_none() && self.commands_per_second.is_none()
    }
}

/// The quotas in force: limits for every tenant, and overrides by tenant id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Quotas {
    default: Limits,
    tenants: HashMap<String, Limits>,
}

impl Quotas {
    /// `tenants` are complete limits (an override's absent key already filled in from the
    /// default).
    pub fn new(default: Limits, tenants: HashMap<String, Limits>) -> Self {
        Self { default, tenants }
    }

    /// The limits of `tenant`: its override, else the default.
    pub fn limits(&self, tenant: &str) -> Limits {
        self.tenants.get(tenant).copied().unwrap_or(self.default)
    }

    /// Whether no tenant has any limit: then nothing is counted at all.
    pub fn is_unlimited(&self) -> bool {
        self.default.is_unlimited() && self.tenants.values().all(Limits::is_unlimited)
    }

    /// The tenant label of the quota metrics: the tenant id when it has an override, else
    /// [`OTHER_TENANTS`].
    pub fn metric_tenant<'a>(&self, tenant: &'a str) -> &'a str {
        if self.tenants.contains_key(tenant) {
            tenant
        } else {
            OTHER_TENANTS
        }
    }
}

impl fmt::Display for Quotas {
    /// One line for the log: the default, then each override in tenant order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn limits(f: &mut fmt::Formatter<'_>, l: &Limits) -> fmt::Result {
            let show = |v: Option<u64>| v.map_or("unlimited".to_owned(), |v| v.to_string());
            write!(
                f,
                "max_pending={} commands_per_second={}",
                show(l.max_pending),
                show(l.commands_per_second.map(u64::from))
            )
        }
        f.write_str("default: ")?;
        limits(f, &self.default)?;
        let mut tenants: Vec<_> = self.tenants.iter().collect();
        tenants.sort_by(|a, b| a.0.cmp(b.0));
        for (tenant, l) in tenants {
            write!(f, "; {tenant}: ")?;
            limits(f, l)?;
        }
        Ok(())
    }
}

/// Which limit a command exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quota {
    MaxPending,
    CommandsPerSecond,
}

impl Quota {
    /// The setting's name: in the rejection reason and the metric's `quota` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Quota::MaxPending => "max_pending",
            Quota::CommandsPerSecond => "commands_per_second",
        }
    }

    /// The quota named `name` (as [`Self::as_str`] writes it).
    pub fn from_name(name: &str) -> Option<Self> {
        [Quota::MaxPending, Quota::CommandsPerSecond]
            .into_iter()
            .find(|q| q.as_str() == name)
    }
}

/// A command past a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded {
    pub quota: Quota,
    pub limit: u64,
}

impl Exceeded {
    /// The rejection reason: `quota exceeded: max_pending 1000 for tenant acme`.
    pub fn reason(&self, tenant: &str) -> String {
        format!(
            "quota exceeded: {} {} for tenant {tenant}",
            self.quota.as_str(),
            self.limit
        )
    }
}

/// What is stored for one key, as far as quotas care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyState {
    pub state: TimerState,
    /// The order of the newest command applied to the key (see `domain::order`).
    pub seq: u64,
}

impl KeyState {
    /// Whether the key has applied `command` or a newer one: storing it changes nothing.
    pub fn has_applied(&self, command: &Command) -> bool {
        command.seq <= self.seq
    }
}

/// One tenant's pending timers and the stored state of the keys a batch names, as the database
/// had them, then brought up to date by each command accepted since ([`Self::apply`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantPending {
    pub pending: u64,
    /// Keys (service call ids) asked about that have a row; a key absent here has none.
    pub keys: HashMap<String, KeyState>,
}

impl TenantPending {
    /// Whether `command` would add a pending timer: a ScheduleTimer for a key with no row or a
    /// cancelled one, newer than what the key last applied. A reschedule of a pending key, a
    /// schedule of a fired one, a stale redelivery and every cancel add none.
    pub fn adds(&self, command: &Command) -> bool {
        if !matches!(command.action, Action::Schedule { .. }) {
            return false;
        }
        match self.keys.get(&command.service_call_id) {
            None => true,
            Some(key) => key.state == TimerState::Cancelled && !key.has_applied(command),
        }
    }

    /// Brings the count and the key's state up to date with an accepted `command`, by the
    /// rules of docs/CONTRACT.md §3. A cancel of a pending key frees its place: the timer
    /// either is cancelled or, claimed for firing already, is about to be `Reached`.
    pub fn apply(&mut self, command: &Command) {
        let current = self.keys.get(&command.service_call_id).copied();
        let next = match (current, &command.action) {
            (Some(key), _) if key.state.is_fired() || key.has_applied(command) => {
                return;
            }
            (None, Action::Schedule { .. }) => {
                self.pending += 1;
                TimerState::Scheduled
            }
            (None, Action::Cancel) => TimerState::Cancelled,
            (Some(key), Action::Schedule { .. }) => {
                if key.state == TimerState::Cancelled {
                    self.pending += 1;
                }
                TimerState::Scheduled
            }
            (Some(key), Action::Cancel) => {
                if key.state == TimerState::Scheduled {
                    self.pending = self.pending.saturating_sub(1);
                }
                TimerState::Cancelled
            }
        };
        self.keys.insert(
            command.service_call_id.clone(),
            KeyState {
                state: next,
                seq: command.seq,
            },
        );
    }
}

/// Decides one command of its tenant at `now_ms` (the wall clock, in milliseconds): accepted
/// (then counted in `rate` and applied to `pending`) or past a limit. The rate is checked
/// first; a command refused by either limit takes no place in the window. `rate` is the
/// tenant's window when it has a rate limit, `pending` its count when it has a pending limit
/// and was counted.
///
/// A CancelTimer is never refused: refusing one would let fire a timer its client wanted
/// stopped, and the query API's `cancel`, applied before the command reaches this point,
/// would be contradicted. It still takes its place in the window, so a flood of cancels
/// leaves no room for schedules.
pub fn decide(
    limits: Limits,
    mut rate: Option<&mut SlotWindow>,
    pending: Option<&mut TenantPending>,
    command: &Command,
    now_ms: i64,
) -> Result<(), Exceeded> {
    let schedule = matches!(command.action, Action::Schedule { .. });
    if let (Some(limit), Some(rate)) = (limits.commands_per_second, rate.as_deref_mut())
        && schedule
        && !rate.has_room(limit, now_ms)
    {
        return Err(Exceeded {
            quota: Quota::CommandsPerSecond,
            limit: limit.into(),
        });
    }
    if let (Some(limit), Some(pending)) = (limits.max_pending, pending) {
        if pending.adds(command) && pending.pending >= limit {
            return Err(Exceeded {
                quota: Quota::MaxPending,
                limit,
            });
        }
        pending.apply(command);
    }
    if let (Some(_), Some(rate)) = (limits.commands_per_second, rate) {
        rate.record(now_ms);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
