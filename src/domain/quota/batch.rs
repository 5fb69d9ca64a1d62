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

use super::{Exceeded, KeyState, Quotas, SlotWindow, TenantPending, decide};
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
/// `settled` are the positions of commands their key has already applied ([`settled`]): a
/// redelivery after a lost acknowledgement, or an older command. Storing them changes
/// nothing, so they take nothing from a quota and are never refused: refusing one would
/// publish a TimerCommandRejected for a timer that is stored and will fire. Keys are known for
/// counted tenants and read for crowded ones ([`crowded_keys`]); a command of a tenant whose
/// window holds the whole batch is decided without, and may so count in the window.
pub fn decide_batch(
    quotas: &Quotas,
    stored: &mut HashMap<String, TenantQuota>,
    mut counted: HashMap<String, TenantPending>,
    commands: &[Command],
    settled: &BTreeSet<usize>,
    now_ms: i64,
) -> Vec<(usize, Exceeded)> {
    let mut refused = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        let limits = quotas.limits(&command.tenant_id);
        if limits.is_unlimited() || settled.contains(&i) {
            continue;
        }
        let quota = stored.entry(command.tenant_id.clone()).or_default();
        let window = limits.commands_per_second.map(|_| &mut quota.window);
        let pending = counted.get_mut(&command.tenant_id);
        let bound_only = pending.is_none();
        match decide(limits, window, pending, command, now_ms) {
            Ok(()) if bound_only && limits.max_pending.is_some() && is_schedule(command) => {
                quota.pending_most = quota.pending_most.map(|most| most + 1);
            }
            Ok(()) => {}
            Err(exceeded) => refused.push((i, exceeded)),
        }
    }
    for (tenant, pending) in counted {
        let quota = stored.entry(tenant).or_default();
        quota.pending_most = Some(pending.pending);
        quota.counted_at_ms = Some(now_ms);
    }
    refused
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
mod tests {
    use super::*;
    use crate::domain::quota::tests::schedule;
    use crate::domain::quota::{Limits, Quota};

    const NOW: i64 = 1_700_000_000_000;

    fn quotas(limits: Limits) -> Quotas {
        Quotas::new(
            Limits::default(),
            HashMap::from([("acme".to_owned(), limits)]),
        )
    }

    fn none() -> BTreeSet<usize> {
        BTreeSet::new()
    }

    fn batch(tenant: &str, from: u64, n: u64) -> Vec<Command> {
        (from..from + n)
            .map(|i| schedule(tenant, &format!("k-{i}"), i))
            .collect()
    }

    #[test]
    fn transactions_of_several_daemons_share_one_window() {
        let quotas = quotas(Limits {
            commands_per_second: Some(50),
            ..Limits::default()
        });
        let mut stored = HashMap::new();
        // Three daemons' transactions within the same second, each with 30 of acme's commands
        // and 10 of a tenant without limits.
        let mut refused = 0;
        for daemon in 0..3 {
            let mut commands = batch("acme", daemon * 30, 30);
            commands.extend(batch("globex", daemon * 10, 10));
            let out = decide_batch(
                &quotas,
                &mut stored,
                HashMap::new(),
                &commands,
                &none(),
                NOW + daemon as i64,
            );
            assert!(
                out.iter()
                    .all(|(i, e)| *i < 30 && e.quota == Quota::CommandsPerSecond)
            );
            refused += out.len();
        }
        assert_eq!(refused, 40, "50 of 90 accepted");
        assert_eq!(stored.len(), 1, "only limited tenants hold a state");
    }

    #[test]
    fn the_pending_bound_spares_counts_until_the_limit_may_be_near() {
        let quotas = quotas(Limits {
            max_pending: Some(100),
            ..Limits::default()
        });
        let mut stored = HashMap::new();
        let first = batch("acme", 0, 40);
        assert_eq!(
            to_count(&quotas, &stored, &first, NOW),
            ["acme"],
            "nothing known"
        );
        let counted = HashMap::from([("acme".to_owned(), TenantPending::default())]);
        assert!(decide_batch(&quotas, &mut stored, counted, &first, &none(), NOW).is_empty());
        assert_eq!(stored["acme"].pending_most, Some(40));

        // Another daemon's 50: within the bound, no count.
        let second = batch("acme", 40, 50);
        assert!(to_count(&quotas, &stored, &second, NOW + 10).is_empty());
        assert!(
            decide_batch(
                &quotas,
                &mut stored,
                HashMap::new(),
                &second,
                &none(),
                NOW + 10
            )
            .is_empty()
        );
        assert_eq!(stored["acme"].pending_most, Some(90));

        // 20 more might pass the limit: counted, and exactly the excess refused.
        let third = batch("acme", 90, 20);
        assert_eq!(to_count(&quotas, &stored, &third, NOW + 20), ["acme"]);
        let counted = HashMap::from([(
            "acme".to_owned(),
            TenantPending {
                pending: 90,
                ..TenantPending::default()
            },
        )]);
        let refused = decide_batch(&quotas, &mut stored, counted, &third, &none(), NOW + 20);
        assert_eq!(refused.len(), 10);
        assert!(
            refused
                .iter()
                .all(|(i, e)| *i >= 10 && e.quota == Quota::MaxPending)
        );
        assert_eq!(stored["acme"].pending_most, Some(100));

        // A bound older than a second is counted again.
        let quiet = HashMap::from([(
            "acme".to_owned(),
            TenantQuota {
                pending_most: Some(0),
                counted_at_ms: Some(NOW),
                ..TenantQuota::default()
            },
        )]);
        assert!(to_count(&quotas, &quiet, &batch("acme", 0, 1), NOW + 999).is_empty());
        assert_eq!(
            to_count(&quotas, &quiet, &batch("acme", 0, 1), NOW + 1_000),
            ["acme"]
        );
    }

    #[test]
    fn a_command_its_key_already_applied_is_never_refused_and_takes_no_place() {
        let quotas = quotas(Limits {
            commands_per_second: Some(3),
            ..Limits::default()
        });
        // k-0..k-4, then k-9 again: its first delivery committed (seq 9) and its
        // acknowledgement was lost. k-1 (seq 1) was stored by a newer command (seq 20); k-4's
        // stored command (seq 3) is older than the one here.
        let mut commands = batch("acme", 0, 5);
        commands.push(schedule("acme", "k-9", 9));
        let mut stored = HashMap::new();
        let none_counted = HashMap::new();
        let crowded = crowded_keys(&quotas, &stored, &none_counted, &commands, NOW);
        assert_eq!(
            crowded,
            [(
                "acme".to_owned(),
                ["k-0", "k-1", "k-2", "k-3", "k-4", "k-9"]
                    .map(String::from)
                    .to_vec()
            )],
            "six commands cannot all fit a window of three: every key is read"
        );
        let read = HashMap::from([(
            "acme".to_owned(),
            HashMap::from([
                ("k-9".to_owned(), key(9)),
                ("k-4".to_owned(), key(3)),
                ("k-1".to_owned(), key(20)),
            ]),
        )]);
        let settled = settled(&commands, &none_counted, &read);
        assert_eq!(settled, BTreeSet::from([1, 5]));

        let refused = decide_batch(
            &quotas,
            &mut stored,
            HashMap::new(),
            &commands,
            &settled,
            NOW,
        );
        assert_eq!(
            positions(&refused),
            [4],
            "k-1 and k-9 neither refused nor counted"
        );
        assert_eq!(stored["acme"].window.clone().counted(NOW), 3);

        // A window that holds the whole batch reads nothing.
        let fits = batch("globex", 0, 3);
        assert!(crowded_keys(&quotas, &HashMap::new(), &none_counted, &fits, NOW).is_empty());
    }

    #[test]
    fn the_keys_read_with_a_count_settle_without_another_read() {
        let quotas = quotas(Limits {
            commands_per_second: Some(1),
            max_pending: Some(10),
        });
        let commands = vec![schedule("acme", "k-0", 0), schedule("acme", "k-1", 1)];
        let counted = HashMap::from([(
            "acme".to_owned(),
            TenantPending {
                pending: 1,
                keys: HashMap::from([("k-1".to_owned(), key(1))]),
            },
        )]);
        assert!(crowded_keys(&quotas, &HashMap::new(), &counted, &commands, NOW).is_empty());
        let settled = settled(&commands, &counted, &HashMap::new());
        assert_eq!(settled, BTreeSet::from([1]));
        let mut stored = HashMap::new();
        let refused = decide_batch(&quotas, &mut stored, counted, &commands, &settled, NOW);
        assert!(refused.is_empty(), "k-1 takes no place, so k-0 fits");
    }

    fn positions(refused: &[(usize, Exceeded)]) -> Vec<usize> {
        refused.iter().map(|(i, _)| *i).collect()
    }

    fn key(seq: u64) -> KeyState {
        KeyState {
            state: crate::domain::TimerState::Scheduled,
            seq,
        }
    }

    #[test]
    fn limited_tenants_come_sorted_once_each() {
        let quotas = Quotas::new(
            Limits {
                commands_per_second: Some(1),
                ..Limits::default()
            },
            HashMap::from([("free".to_owned(), Limits::default())]),
        );
        let mut commands = batch("zeta", 0, 2);
        commands.extend(batch("free", 0, 2));
        commands.extend(batch("acme", 0, 2));
        assert_eq!(limited_tenants(&quotas, &commands), ["acme", "zeta"]);
    }
}
