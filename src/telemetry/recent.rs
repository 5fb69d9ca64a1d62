//! What each tenant's timers and commands did over the last five minutes, for the web console
//! (docs/CONTRACT.md §7): timers fired and how late (a histogram), fired as TimerExpired,
//! commands accepted and rejected. Counted in the process, as the metrics are: on PostgreSQL
//! with several daemons, each shows what it did itself.
//!
//! Bounded whoever writes: 10 s slots over five minutes, for at most [`MAX_TENANTS`] tenants;
//! when a new one comes past that, the one idle longest is forgotten. Recording is a map
//! lookup and a few adds under a lock held for nothing else.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use serde::Serialize;

/// One slot's span.
pub const SLOT_MS: i64 = 10_000;
/// Slots kept: five minutes.
pub const SLOTS: usize = 30;
/// Tenants followed at most.
pub const MAX_TENANTS: usize = 2_000;
/// Upper bounds of the lateness buckets, in milliseconds; one more bucket holds the rest.
pub const LATENESS_BOUNDS_MS: [u64; 15] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
];
const BUCKETS: usize = LATENESS_BOUNDS_MS.len() + 1;

/// One tenant's counts in one slot.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The slot's number (its start divided by [`SLOT_MS`]); a slot of an older number is stale.
    number: i64,
    fired: u32,
    expired: u32,
    accepted: u32,
    rejected: u32,
    lateness: [u32; BUCKETS],
}

#[derive(Debug, Clone)]
struct Activity {
    slots: [Slot; SLOTS],
    /// The last slot number written.
    last: i64,
}

impl Activity {
    fn new() -> Self {
        Self {
            slots: [Slot::default(); SLOTS],
            last: 0,
        }
    }

    /// The slot of `now_ms`, emptied first when it held an older slot's counts.
    fn slot(&mut self, now_ms: i64) -> &mut Slot {
        let number = now_ms.div_euclid(SLOT_MS);
        self.last = self.last.max(number);
        let slot = &mut self.slots[number.rem_euclid(SLOTS as i64) as usize];
        if slot.number != number {
            *slot = Slot {
                number,
                ..Slot::default()
            };
        }
        slot
    }

    /// The slots within the last `span` slots before `now_ms` (the current one included).
    fn within(&self, now_ms: i64, span: usize) -> impl Iterator<Item = &Slot> {
        let now = now_ms.div_euclid(SLOT_MS);
        self.slots
            .iter()
            .filter(move |s| s.number <= now && s.number > now - span as i64)
    }
}

/// A tenant's last five minutes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantActivity {
    /// Not sent: the row or page it is part of names the tenant.
    #[serde(skip)]
    pub tenant_id: String,
    /// Timers fired (DueTimeReached or TimerExpired) in the last minute.
    pub fired_last_minute: u64,
    /// Over the last five minutes:
    pub fired: u64,
    pub expired: u64,
    pub accepted: u64,
    pub rejected: u64,
    /// Commands accepted a second, in the busiest 10 s of the last minute: what the
    /// `commands_per_second` quota is measured against.
    pub peak_commands_per_second: f64,
    /// How late half and 99% of the timers fired, at most (`"≤ 5 ms"`, `"> 60 s"`).
    pub lateness_p50: Option<String>,
    pub lateness_p99: Option<String>,
    /// The histogram: one count per bucket of [`lateness_labels`].
    pub lateness: Vec<u64>,
    /// The bucket of `lateness_p99`, for ordering by trouble (higher is later).
    #[serde(skip)]
    pub p99_bucket: Option<usize>,
}

impl TenantActivity {
    /// A tenant that did nothing lately.
    pub fn idle(tenant_id: &str) -> Self {
        summary(tenant_id, &Activity::new(), 0)
    }
}

/// The buckets' labels, in order: `≤ 1 ms` … `≤ 60 s`, `> 60 s`.
pub fn lateness_labels() -> Vec<String> {
    let mut labels: Vec<String> = LATENESS_BOUNDS_MS
        .iter()
        .map(|&ms| format!("≤ {}", readable(ms)))
        .collect();
    labels.push(format!(
        "> {}",
        readable(LATENESS_BOUNDS_MS[LATENESS_BOUNDS_MS.len() - 1])
    ));
    labels
}

fn readable(ms: u64) -> String {
    if ms >= 1_000 {
        format!("{} s", ms / 1_000)
    } else {
        format!("{ms} ms")
    }
}

fn bucket(lateness: Duration) -> usize {
    let ms = lateness.as_secs_f64() * 1_000.0;
    LATENESS_BOUNDS_MS
        .iter()
        .position(|&bound| ms <= bound as f64)
        .unwrap_or(BUCKETS - 1)
}

/// The bucket holding quantile `q` of `counts`, if any were counted.
fn quantile(counts: &[u64], q: f64) -> Option<usize> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    counts.iter().position(|&c| {
        seen += c;
        seen >= rank
    })
}

/// Every followed tenant's activity.
#[derive(Default)]
pub struct Recent {
    tenants: Mutex<HashMap<String, Activity>>,
}

impl Recent {
    fn record(&self, tenant_id: &str, now_ms: i64, add: impl FnOnce(&mut Slot)) {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        if !tenants.contains_key(tenant_id) && tenants.len() >= MAX_TENANTS {
            let idlest = tenants
                .iter()
                .min_by_key(|(_, activity)| activity.last)
                .map(|(tenant, _)| tenant.clone());
            if let Some(idlest) = idlest {
                tenants.remove(&idlest);
            }
        }
        let activity = tenants
            .entry(tenant_id.to_owned())
            .or_insert_with(Activity::new);
        add(activity.slot(now_ms));
    }

    /// A timer fired `lateness` after its `dueAt`, as TimerExpired when `expired`.
    pub fn fired(&self, tenant_id: &str, lateness: Duration, expired: bool, now_ms: i64) {
        self.record(tenant_id, now_ms, |slot| {
            slot.fired += 1;
            slot.expired += u32::from(expired);
            slot.lateness[bucket(lateness)] += 1;
        });
    }

    /// `n` commands of the tenant were stored.
    pub fn accepted(&self, tenant_id: &str, n: u32, now_ms: i64) {
        self.record(tenant_id, now_ms, |slot| slot.accepted += n);
    }

    /// A command of the tenant was rejected.
    pub fn rejected(&self, tenant_id: &str, now_ms: i64) {
        self.record(tenant_id, now_ms, |slot| slot.rejected += 1);
    }

    /// The activity of every tenant that did anything in the last five minutes.
    pub fn all(&self, now_ms: i64) -> Vec<TenantActivity> {
        let tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        tenants
            .iter()
            .map(|(tenant, activity)| summary(tenant, activity, now_ms))
            .filter(|a| a.fired + a.accepted + a.rejected > 0)
            .collect()
    }

    /// One tenant's activity (all zero when it did nothing lately).
    pub fn of(&self, tenant_id: &str, now_ms: i64) -> TenantActivity {
        let tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        match tenants.get(tenant_id) {
            Some(activity) => summary(tenant_id, activity, now_ms),
            None => TenantActivity::idle(tenant_id),
        }
    }
}

fn summary(tenant_id: &str, activity: &Activity, now_ms: i64) -> TenantActivity {
    let mut lateness = vec![0u64; BUCKETS];
    let (mut fired, mut expired, mut accepted, mut rejected) = (0, 0, 0, 0);
    for slot in activity.within(now_ms, SLOTS) {
        fired += u64::from(slot.fired);
        expired += u64::from(slot.expired);
        accepted += u64::from(slot.accepted);
        rejected += u64::from(slot.rejected);
        for (total, count) in lateness.iter_mut().zip(slot.lateness) {
            *total += u64::from(count);
        }
    }
    let last_minute = || activity.within(now_ms, 6);
    let fired_last_minute = last_minute().map(|s| u64::from(s.fired)).sum();
    let peak = last_minute().map(|s| s.accepted).max().unwrap_or(0);
    let labels = lateness_labels();
    let (p50, p99) = (quantile(&lateness, 0.5), quantile(&lateness, 0.99));
    TenantActivity {
        tenant_id: tenant_id.to_owned(),
        fired_last_minute,
        fired,
        expired,
        accepted,
        rejected,
        peak_commands_per_second: f64::from(peak) * 1_000.0 / SLOT_MS as f64,
        lateness_p50: p50.map(|b| labels[b].clone()),
        lateness_p99: p99.map(|b| labels[b].clone()),
        lateness,
        p99_bucket: p99,
    }
}

/// The process's activity record.
pub fn recent() -> &'static Recent {
    static RECENT: LazyLock<Recent> = LazyLock::new(Recent::default);
    &RECENT
}

/// Now, in milliseconds since the epoch, for the record.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000;

    #[test]
    fn counts_fall_into_their_slots_and_age_out_after_five_minutes() {
        let recent = Recent::default();
        recent.fired("acme", Duration::from_millis(3), false, T0);
        recent.fired("acme", Duration::from_millis(3), true, T0 + 1);
        recent.accepted("acme", 40, T0);
        recent.rejected("acme", T0);
        let now = recent.of("acme", T0 + 5_000);
        assert_eq!(
            (now.fired, now.expired, now.accepted, now.rejected),
            (2, 1, 40, 1)
        );
        assert_eq!(now.fired_last_minute, 2);
        assert_eq!(now.peak_commands_per_second, 4.0);
        assert_eq!(now.lateness_p50.as_deref(), Some("≤ 5 ms"));
        let later = recent.of("acme", T0 + 2 * 60_000);
        assert_eq!((later.fired, later.fired_last_minute), (2, 0));
        let gone = recent.of("acme", T0 + 5 * 60_000 + SLOT_MS);
        assert_eq!(gone.fired, 0);
        assert!(recent.all(T0 + 5 * 60_000 + SLOT_MS).is_empty());
    }

    #[test]
    fn a_slot_reused_a_round_later_starts_from_zero() {
        let recent = Recent::default();
        recent.fired("acme", Duration::ZERO, false, T0);
        let round = SLOT_MS * SLOTS as i64;
        recent.fired("acme", Duration::ZERO, false, T0 + round);
        assert_eq!(recent.of("acme", T0 + round).fired, 1);
    }

    #[test]
    fn quantiles_name_the_bucket_that_holds_them() {
        let recent = Recent::default();
        for _ in 0..98 {
            recent.fired("acme", Duration::from_millis(4), false, T0);
        }
        recent.fired("acme", Duration::from_millis(700), false, T0);
        recent.fired("acme", Duration::from_secs(90), false, T0);
        let activity = recent.of("acme", T0);
        assert_eq!(activity.lateness_p50.as_deref(), Some("≤ 5 ms"));
        assert_eq!(activity.lateness_p99.as_deref(), Some("≤ 1 s"));
        assert_eq!(activity.lateness.iter().sum::<u64>(), 100);
        assert_eq!(activity.lateness[BUCKETS - 1], 1);
        assert_eq!(lateness_labels()[BUCKETS - 1], "> 60 s");
    }

    #[test]
    fn past_the_limit_the_idlest_tenant_is_forgotten() {
        let recent = Recent::default();
        recent.accepted("idle", 1, T0 - 60_000);
        for i in 0..MAX_TENANTS - 1 {
            recent.accepted(&format!("t{i}"), 1, T0);
        }
        recent.accepted("new", 1, T0);
        let tenants = recent.tenants.lock().unwrap();
        assert_eq!(tenants.len(), MAX_TENANTS);
        assert!(!tenants.contains_key("idle"));
        assert!(tenants.contains_key("new"));
    }
}
