//! How many timers may be at the broker at once. The broker takes them in order, so a timer
//! handed over waits for every one before it: enough in flight keeps the broker busy, more
//! only makes the next timer (another tenant's, due a moment ago) wait. The window follows the
//! broker's pace: it shrinks while a batch takes longer than [`TARGET`] from hand-over to its
//! last acknowledgement, and grows while batches take less than half of it.

use std::time::Duration;

/// How long a batch may take at the broker before the window shrinks.
pub const TARGET: Duration = Duration::from_millis(10);
/// The window a Poller starts with.
pub const START: usize = 500;
/// The largest window, whatever the broker's pace.
pub const MAX: usize = 5_000;

/// Timers at the broker at once, at most (`hold_limit` bounds the timers held in all).
pub struct BrokerWindow {
    size: usize,
    /// One batch: the window never closes.
    least: usize,
}

impl BrokerWindow {
    pub fn new(batch_size: usize) -> Self {
        let least = batch_size.max(1);
        Self {
            size: START.max(least),
            least,
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// A batch took `took` at the broker.
    pub fn observe(&mut self, took: Duration) {
        if took > TARGET {
            self.size = (self.size * 3 / 4).max(self.least);
        } else if took < TARGET / 2 {
            self.size = (self.size + self.least).min(MAX.max(self.least));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_shrinks_to_one_batch_while_the_broker_is_slow_and_grows_back() {
        let mut window = BrokerWindow::new(100);
        assert_eq!(window.size(), START);
        for _ in 0..50 {
            window.observe(Duration::from_millis(40));
        }
        assert_eq!(window.size(), 100);
        window.observe(TARGET * 3 / 4);
        assert_eq!(window.size(), 100, "near the target it stays");
        for _ in 0..100 {
            window.observe(Duration::from_millis(1));
        }
        assert_eq!(window.size(), MAX);
    }

    #[test]
    fn a_batch_larger_than_the_start_is_still_one_batch() {
        let mut window = BrokerWindow::new(10_000);
        assert_eq!(window.size(), 10_000);
        window.observe(Duration::from_secs(1));
        assert_eq!(window.size(), 10_000);
    }
}
