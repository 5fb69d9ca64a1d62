//! Retry delays: the one retry policy every retrying part of the daemon uses — a delay that
//! starts at `first` and doubles per consecutive failure up to `max` ([`Retry`]), counted by
//! [`Retries`]. Each part names its own bounds where they differ from [`Retry::DEFAULT`].

use std::time::Duration;

/// Delays that double from `first` to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub first: Duration,
    pub max: Duration,
}

impl Retry {
    /// 100 ms, doubling to 5 s: a second or two to come back from a short outage, and a
    /// broken dependency asked every 5 s at most.
    pub const DEFAULT: Retry = Retry::new(Duration::from_millis(100), Duration::from_secs(5));

    pub const fn new(first: Duration, max: Duration) -> Self {
        Self { first, max }
    }

    /// The delay before retry number `attempt` (1 for the first).
    pub fn delay(&self, attempt: u32) -> Duration {
        exponential(attempt, self.first, self.max)
    }
}

impl Default for Retry {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Consecutive failures of one thing, and the delay before its next try.
#[derive(Debug, Clone, Default)]
pub struct Retries {
    policy: Retry,
    failures: u32,
}

impl Retries {
    pub fn new(policy: Retry) -> Self {
        Self {
            policy,
            failures: 0,
        }
    }

    /// One more failure: the delay before the next try.
    pub fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.policy.delay(self.failures)
    }

    /// A success: the failures before it (0 when there were none), now forgotten.
    pub fn succeeded(&mut self) -> u32 {
        std::mem::take(&mut self.failures)
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// The delay before retry number `attempt` (1 for the first): `first`, doubled per further
/// attempt, never more than `max`.
fn exponential(attempt: u32, first: Duration, max: Duration) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    first.saturating_mul(1 << doublings).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_first_up_to_max() {
        let ms = Duration::from_millis;
        let delays: Vec<_> = (1..=6).map(|a| exponential(a, ms(100), ms(1000))).collect();
        assert_eq!(
            delays,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        assert_eq!(exponential(0, ms(100), ms(1000)), ms(100));
        assert_eq!(exponential(u32::MAX, ms(100), ms(1000)), ms(1000));
    }

    #[test]
    fn retries_count_failures_until_a_success() {
        let ms = Duration::from_millis;
        let mut retries = Retries::new(Retry::new(ms(100), ms(300)));
        assert_eq!(
            [retries.failed(), retries.failed(), retries.failed()],
            [ms(100), ms(200), ms(300)]
        );
        assert_eq!(retries.failures(), 3);
        assert_eq!(retries.succeeded(), 3);
        assert_eq!(retries.succeeded(), 0);
        assert_eq!(
            retries.failed(),
            ms(100),
            "a new run of failures starts over"
        );
    }
}
