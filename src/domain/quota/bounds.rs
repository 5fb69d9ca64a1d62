//! A tenant's pending timers between two counts (docs/CONTRACT.md §9). Counting them walks the
//! tenant's range of the pending index, a cost that grows with what the tenant holds and that
//! every tenant's intake would pay if it were paid for every batch. So a count is taken at most
//! once per [`COUNT_FRESH`] per tenant, and again only when the limit may be near: between
//! counts, the last count plus every ScheduleTimer accepted since (each taken as adding a
//! timer) is never below the truth, since firing and cancelling only lower it. While that bound
//! stays within the limit, a batch's schedules are accepted without asking the database; when
//! it would not, the exact count decides, as before.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a count is trusted as the base of the bound. With several daemons the others'
/// commands are not in it, so it is kept short.
pub const COUNT_FRESH: Duration = Duration::from_secs(1);

/// The bounds known per tenant.
#[derive(Debug, Default)]
pub struct PendingBounds {
    tenants: HashMap<String, Bound>,
}

#[derive(Debug, Clone, Copy)]
struct Bound {
    /// Pending timers at most.
    most: u64,
    counted_at: Instant,
}

impl PendingBounds {
    /// Whether `schedules` more ScheduleTimers of `tenant` fit under `limit` at `now` without a
    /// count: a fresh bound that stays within the limit with each of them adding a timer.
    pub fn fits(&self, tenant: &str, schedules: u64, limit: u64, now: Instant) -> bool {
        self.tenants.get(tenant).is_some_and(|bound| {
            now.saturating_duration_since(bound.counted_at) < COUNT_FRESH
                && bound.most.saturating_add(schedules) <= limit
        })
    }

    /// A count taken at `counted_at` found `pending`, with the commands accepted since
    /// applied to it.
    pub fn counted(&mut self, tenant: &str, pending: u64, counted_at: Instant) {
        self.tenants.insert(
            tenant.to_owned(),
            Bound {
                most: pending,
                counted_at,
            },
        );
    }

    /// `schedules` ScheduleTimers of `tenant` were accepted without a count.
    pub fn accepted(&mut self, tenant: &str, schedules: u64) {
        if let Some(bound) = self.tenants.get_mut(tenant) {
            bound.most = bound.most.saturating_add(schedules);
        }
    }

    /// Forgets the bounds no longer fresh at `now`.
    pub fn forget_stale(&mut self, now: Instant) {
        self.tenants
            .retain(|_, bound| now.saturating_duration_since(bound.counted_at) < COUNT_FRESH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_bound_admits_what_fits_and_counts_it() {
        let now = Instant::now();
        let mut bounds = PendingBounds::default();
        assert!(!bounds.fits("acme", 1, 10, now), "nothing known: count");
        bounds.counted("acme", 7, now);
        assert!(bounds.fits("acme", 3, 10, now));
        assert!(
            !bounds.fits("acme", 4, 10, now),
            "might pass the limit: count"
        );
        bounds.accepted("acme", 3);
        assert!(!bounds.fits("acme", 1, 10, now));
        assert!(!bounds.fits("globex", 1, 10, now), "bounds are per tenant");
    }

    #[test]
    fn a_count_is_trusted_for_a_second_only() {
        let now = Instant::now();
        let mut bounds = PendingBounds::default();
        bounds.counted("acme", 0, now);
        assert!(bounds.fits("acme", 1, 10, now + COUNT_FRESH - Duration::from_millis(1)));
        assert!(!bounds.fits("acme", 1, 10, now + COUNT_FRESH));
        bounds.forget_stale(now + COUNT_FRESH);
        bounds.accepted("acme", 1);
        assert!(!bounds.fits("acme", 1, 10, now), "forgotten");
    }
}
