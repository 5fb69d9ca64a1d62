//! How many timers may be at the broker at once. The broker takes them in order, so a timer
//! handed over waits for every one before it: enough in flight keeps the broker busy, more
//! only makes the next timer (another tenant's, due a moment ago) wait. The window follows the
//! broker's pace: it shrinks while a batch waits longer than its tolerance behind the others,
//! from hand-over to its last acknowledgement, and grows while it waits less than half of that.
//!
//! What a batch waits behind the others is what it took beyond the round trip, which no window
//! shortens: the round trip is the shortest a batch took lately ([`BASE_MEMORY`]), as TCP
//! Vegas and BBR take it. The tolerance is [`TARGET`] plus a quarter of the round trip, since a
//! long path varies by more than 10 ms by itself. Judging what a batch took by [`TARGET`]
//! alone held a distant broker (200 ms each way) to one batch per round trip, 250 timers a
//! second.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a batch may wait behind the others at a nearby broker before the window shrinks.
pub const TARGET: Duration = Duration::from_millis(10);
/// The window a Poller starts with.
pub const START: usize = 500;
/// The largest window, whatever the broker's pace.
pub const MAX: usize = 5_000;
/// How long the shortest batch counts as the round trip: long enough that batches which all
/// waited behind others (a standing queue at the broker) do not pass for the round trip.
pub const BASE_MEMORY: Duration = Duration::from_secs(10);

/// Timers at the broker at once, at most (`hold_limit` bounds the timers held in all).
pub struct BrokerWindow {
    size: usize,
    /// One batch: the window never closes.
    least: usize,
    /// What batches took over the last [`BASE_MEMORY`], each shorter than every later one
    /// (a monotonic queue: the front is the shortest).
    shortest: VecDeque<(Instant, Duration)>,
}

impl BrokerWindow {
    pub fn new(batch_size: usize) -> Self {
        let least = batch_size.max(1);
        Self {
            size: START.max(least),
            least,
            shortest: VecDeque::new(),
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// A batch took `took` at the broker.
    pub fn observe(&mut self, took: Duration) {
        self.observe_at(Instant::now(), took);
    }

    fn observe_at(&mut self, now: Instant, took: Duration) {
        while self.shortest.back().is_some_and(|(_, t)| *t >= took) {
            self.shortest.pop_back();
        }
        self.shortest.push_back((now, took));
        while self
            .shortest
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > BASE_MEMORY)
        {
            self.shortest.pop_front();
        }
        let round_trip = self.shortest.front().map_or(took, |(_, t)| *t);
        let waited = took.saturating_sub(round_trip);
        let tolerance = TARGET + round_trip / 4;
        if waited > tolerance {
            self.size = (self.size * 3 / 4).max(self.least);
        } else if waited < tolerance / 2 {
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
        // A batch at the broker's pace, then batches that wait 39 ms behind others.
        window.observe(Duration::from_millis(1));
        for _ in 0..50 {
            window.observe(Duration::from_millis(40));
        }
        assert_eq!(window.size(), 100);
        window.observe(TARGET * 3 / 4 + Duration::from_millis(1));
        assert_eq!(window.size(), 100, "near the target it stays");
        for _ in 0..100 {
            window.observe(Duration::from_millis(1));
        }
        assert_eq!(window.size(), MAX);
    }

    #[test]
    fn a_distant_broker_keeps_the_window_open() {
        let mut window = BrokerWindow::new(100);
        let start = Instant::now();
        // 400 ms round trip, which varies by tens of milliseconds.
        for i in 0..100u64 {
            let at = start + Duration::from_millis(50 * i);
            window.observe_at(at, Duration::from_millis(400 + i % 40));
        }
        assert_eq!(window.size(), MAX, "the round trip is no reason to shrink");
        // A standing queue at the broker on top of the round trip shrinks it.
        for i in 0..50u64 {
            let at = start + Duration::from_millis(5_000 + 50 * i);
            window.observe_at(at, Duration::from_millis(520));
        }
        assert_eq!(window.size(), 100);
    }

    #[test]
    fn the_round_trip_follows_a_broker_that_moved_away_within_the_memory() {
        let mut window = BrokerWindow::new(100);
        let start = Instant::now();
        window.observe_at(start, Duration::from_millis(1));
        let later = start + BASE_MEMORY + Duration::from_millis(1);
        window.observe_at(later, Duration::from_millis(400));
        let grown = window.size();
        window.observe_at(later, Duration::from_millis(401));
        assert!(window.size() > grown, "400 ms is now the round trip");
    }

    #[test]
    fn a_batch_larger_than_the_start_is_still_one_batch() {
        let mut window = BrokerWindow::new(10_000);
        assert_eq!(window.size(), 10_000);
        window.observe(Duration::from_secs(1));
        assert_eq!(window.size(), 10_000);
    }
}
