//! Retry delays: the one exponential backoff every retrying part of the daemon uses.

use std::time::Duration;

/// The delay before retry number `attempt` (1 for the first): `first`, doubled per further
/// attempt, never more than `max`.
pub fn exponential(attempt: u32, first: Duration, max: Duration) -> Duration {
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
}
