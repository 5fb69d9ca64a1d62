//! One transaction's commands decided against their tenants' quotas as the database holds them
//! (docs/CONTRACT.md §9). The storage reads and locks each limited tenant's [`TenantQuota`]
//! inside the transaction that stores the commands, so every daemon on the database decides
//! against the same state, one after the other per tenant, and a transaction that does not
//! commit took nothing from any quota.
//!
//! Counting a tenant's pending timers walks its range of the pending index, a cost that grows
//! with what it holds. So a count is taken at most once per [`COUNT_FRESH_MS`] per tenant, and
//! again only when the limit may be near: between counts, the stored bound (the last count plus
//! every ScheduleTimer accepted since, by any daemon, each taken as adding a timer) is never
//! below the truth, since firing and cancelling only lower it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{
    Exceeded, KeyState, Quotas, Recorded, SlotWindow, TenantPending, decide, refused_before,
};
use crate::domain::timer::{Action, Command};

/// How long a count is trusted as the base of the bound. Only daemons that apply a pending
/// limit add to the bound: after a reload gives a tenant a limit, daemons still without it
/// are out of the bound for at most this long.
pub const COUNT_FRESH_MS: i64 = 1_000;

/// A tenant's quota state as the database keeps it, shared by every daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantQuota {
    /// Commands accepted in the last second, for `commands_per_second`.
    pub window: SlotWindow,
    /// Pending timers at most, for `max_pending`: unknown until counted.
    pub pending_most: Option<u64>,
    /// When that bound was counted, by the wall clock in milliseconds.
    pub counted_at_ms: Option<i64>,
}

impl TenantQuota {
    /// Whether `schedules` more ScheduleTimers fit under `limit` at `now_ms` without a count.
    fn fits(&self, schedules: u64, limit: u64, now_ms: i64) -> bool {
        let fresh = self
            .counted_at_ms
            .is_some_and(|at| (0..COUNT_FRESH_MS).contains(&(now_ms - at)));
        fresh
            && self
                .pending_most
                .is_some_and(|most| most.saturating_add(schedules) <= limit)
    }
}

fn is_schedule(command: &Command) -> bool {
    matches!(command.action, Action::Schedule { .. })
}

/// The tenants of `commands` with a quota, whose state the transaction reads and locks; in
/// order, so that two transactions lock them in the same order.
pub fn limited_tenants(quotas: &Quotas, commands: &[Command]) -> Vec<String> {
    let mut tenants: Vec<String> = commands
        .iter()
        .filter(|c| !quotas.limits(&c.tenant_id).is_unlimited())
        .map(|c| c.tenant_id.clone())
        .collect();
    tenants.sort_unstable();
    tenants.dedup();
    tenants
}

/// The tenants of `commands` with a pending limit, a ScheduleTimer in the batch, and no fresh
/// bound showing that their schedules fit: their pending timers must be counted.
pub fn to_count(
    quotas: &Quotas,
    stored: &HashMap<String, TenantQuota>,
    commands: &[Command],
    now_ms: i64,
) -> Vec<String> {
    let mut schedules: HashMap<&str, u64> = HashMap::new();
    for command in commands {
        if quotas.limits(&command.tenant_id).max_pending.is_some() && is_schedule(command) {
            *schedules.entry(&command.tenant_id).or_default() += 1;
        }
    }
    let mut tenants: Vec<String> = schedules
        .into_iter()
        .filter(|(tenant, n)| {
            let limit = quotas.limits(tenant).max_pending.unwrap_or(u64::MAX);
            !stored
                .get(*tenant)
                .is_some_and(|quota| quota.fits(*n, limit, now_ms))
        })
        .map(|(tenant, _)| tenant.to_owned())
        .collect();
    tenants.sort_unstable();
    tenants
}

/// Decides `commands`, in their order, at `now_ms`: returns the refused ones by position, and
/// brings `stored` up to date with the accepted ones. `counted` holds the pending state of the
/// tenants [`to_count`] named, counted inside the same transaction.
///
/// `recorded` are the refusals recorded for commands of the batch ([`refused_before`]): a
/// copy of a command refused before is refused again with the same reason, and takes nothing
/// from a quota. `settled` are the positions of commands their key has already applied
/// ([`settled`]): a redelivery after a lost acknowledgement, or an older command. Storing them
/// changes nothing, so they take nothing from a quota and are never refused: refusing one
/// would publish a TimerCommandRejected for a timer that is stored and will fire. Keys are
/// known for counted tenants and read for crowded ones ([`crowded_keys`]); a command of a
/// tenant whose window holds the whole batch is decided without, and may so count in the
/// window. Two copies of one command in the batch are decided once: the second has the
/// first's outcome and counts nowhere.
pub fn decide_batch(
    quotas: &Quotas,
    stored: &mut HashMap<String, TenantQuota>,
    mut counted: HashMap<String, TenantPending>,
    commands: &[Command],
    settled: &BTreeSet<usize>,
    recorded: &Recorded,
    now_ms: i64,
) -> Vec<(usize, Exceeded)> {
    let mut refused = Vec::new();
    // The outcome of each command decided so far, for its copies further on.
    let mut decided: HashMap<(u64, &str, &str), Option<Exceeded>> = HashMap::new();
    let mut start = 0;
    while start < commands.len() {
        let end = message_end(commands, start);
        let tenant = commands[start].tenant_id.clone();
        let limits = quotas.limits(&tenant);
        // A ScheduleTimers is decided whole: should one of its timers be past a quota, the
        // tenant's state goes back to what it was before the message, and every timer of it
        // is refused for that quota.
        let before = (end - start > 1)
            .then(|| (stored.get(&tenant).cloned(), counted.get(&tenant).cloned()));
        let mut first_refusal = None;
        for (i, command) in commands.iter().enumerate().take(end).skip(start) {
            let outcome = decide_one(
                limits,
                stored,
                &mut counted,
                &mut decided,
                command,
                settled,
                i,
                recorded,
                now_ms,
            );
            match (&before, outcome) {
                (None, Some(exceeded)) => refused.push((i, exceeded)),
                (Some(_), Some(exceeded)) => {
                    first_refusal.get_or_insert(exceeded);
                }
                _ => {}
            }
        }
        if let (Some((quota, pending)), Some(exceeded)) = (before, first_refusal) {
            match quota {
                Some(quota) => stored.insert(tenant.clone(), quota),
                None => stored.remove(&tenant),
            };
            if let Some(pending) = pending {
                counted.insert(tenant, pending);
            }
            refused.extend((start..end).map(|i| (i, exceeded)));
        }
        start = end;
    }
    for (tenant, pending) in counted {
        let quota = stored.entry(tenant).or_default();
        quota.pending_most = Some(pending.pending);
        quota.counted_at_ms = Some(now_ms);
    }
    refused
}

/// Where the message of the command at `start` ends: past the run of timers of one
/// `ScheduleTimers` (same order and tenant, each with its position), or right after a command
/// of one timer.
fn message_end(commands: &[Command], start: usize) -> usize {
    let first = &commands[start];
    if first.item.is_none() {
        return start + 1;
    }
    let same =
        |c: &Command| c.item.is_some() && c.seq == first.seq && c.tenant_id == first.tenant_id;
    start + 1 + commands[start + 1..].iter().take_while(|c| same(c)).count()
}

/// Decides one command (at position `i`), as [`decide_batch`] says: its refusal, if any.
#[allow(clippy::too_many_arguments)]
fn decide_one<'c>(
    limits: super::Limits,
    stored: &mut HashMap<String, TenantQuota>,
    counted: &mut HashMap<String, TenantPending>,
    decided: &mut HashMap<(u64, &'c str, &'c str), Option<Exceeded>>,
    command: &'c Command,
    settled: &BTreeSet<usize>,
    i: usize,
    recorded: &Recorded,
    now_ms: i64,
) -> Option<Exceeded> {
    if let Some(exceeded) = refused_before(recorded, command) {
        return Some(exceeded);
    }
    if limits.is_unlimited() || settled.contains(&i) {
        return None;
    }
    let copy_of = (
        command.seq,
        command.tenant_id.as_str(),
        command.service_call_id.as_str(),
    );
    if let Some(outcome) = decided.get(&copy_of) {
        return *outcome;
    }
    let quota = stored.entry(command.tenant_id.clone()).or_default();
    let window = limits.commands_per_second.map(|_| &mut quota.window);
    let pending = counted.get_mut(&command.tenant_id);
    let bound_only = pending.is_none();
    let outcome = decide(limits, window, pending, command, now_ms);
    if outcome.is_ok() && bound_only && limits.max_pending.is_some() && is_schedule(command) {
        quota.pending_most = quota.pending_most.map(|most| most + 1);
    }
    decided.insert(copy_of, outcome.err());
    outcome.err()
}

/// The keys the `commands` name, by tenant, in tenant order.
pub fn keys_by_tenant<'a>(
    commands: impl IntoIterator<Item = &'a Command>,
) -> Vec<(String, Vec<String>)> {
    let mut keys: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for command in commands {
        keys.entry(&command.tenant_id)
            .or_default()
            .insert(&command.service_call_id);
    }
    keys.into_iter()
        .map(|(tenant, ids)| {
            (
                tenant.to_owned(),
                ids.into_iter().map(str::to_owned).collect(),
            )
        })
        .collect()
}

/// The keys whose stored state the storage must read to find the [settled](decide_batch)
/// commands of tenants not `counted` (whose keys were read with their count): those of each
/// rate-limited tenant whose window may not hold all its commands of the batch at `now_ms`.
/// While it holds them all, nothing is read, and a command already applied counts like any
/// other.
pub fn crowded_keys(
    quotas: &Quotas,
    stored: &HashMap<String, TenantQuota>,
    counted: &HashMap<String, TenantPending>,
    commands: &[Command],
    now_ms: i64,
) -> Vec<(String, Vec<String>)> {
    let mut in_batch: HashMap<&str, u64> = HashMap::new();
    for command in commands {
        *in_batch.entry(&command.tenant_id).or_default() += 1;
    }
    let crowded = |tenant: &str| {
        let Some(limit) = quotas.limits(tenant).commands_per_second else {
            return false;
        };
        if counted.contains_key(tenant) {
            return false;
        }
        let mut window = stored
            .get(tenant)
            .map(|quota| quota.window.clone())
            .unwrap_or_default();
        window.counted(now_ms) + in_batch[tenant] > u64::from(limit)
    };
    keys_by_tenant(commands.iter().filter(|c| crowded(&c.tenant_id)))
}

/// The positions of the `commands` whose key has already applied them, by the key states
/// `counted` with the pending counts and those `read` for [`crowded_keys`].
pub fn settled(
    commands: &[Command],
    counted: &HashMap<String, TenantPending>,
    read: &HashMap<String, HashMap<String, KeyState>>,
) -> BTreeSet<usize> {
    commands
        .iter()
        .enumerate()
        .filter(|(_, command)| {
            let keys = counted
                .get(&command.tenant_id)
                .map(|pending| &pending.keys)
                .or_else(|| read.get(&command.tenant_id));
            keys.and_then(|keys| keys.get(&command.service_call_id))
                .is_some_and(|key| key.has_applied(command))
        })
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests;
