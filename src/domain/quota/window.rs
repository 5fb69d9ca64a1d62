//! The rate window of one tenant (`commands_per_second`, docs/CONTRACT.md §9), in the form the
//! database keeps it so that every daemon on it counts the same commands: how many commands
//! were accepted in each [`SLOT_MS`] slot of the last second, by the wall clock in
//! milliseconds.
//!
//! A command counts from its slot through the [`SLOTS`]` - 1` slots after it: at least one
//! second whatever its place in its slot, so no one-second span ever holds more than the limit.
//! The price is at most one slot: under a steady overload a tenant gets its limit per 1.01 s,
//! 1% short of it.
//!
//! Clocks differ by a few milliseconds: an instant before the newest slot recorded is taken as
//! that slot, so a command never counts for less than a second. A clock stepped back by a
//! window or more would so make the window count for as long as the step (a tenant held to its
//! limit for the whole of an hour's step): then the slots are moved back with it, keeping their
//! ages, as if the newest had been recorded at the new now.

use std::collections::VecDeque;

/// The width of a slot.
pub const SLOT_MS: i64 = 10;
/// The slots a command counts in: its own and the 100 after it.
pub const SLOTS: i64 = 101;

/// Accepted commands per slot, oldest first, and their sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotWindow {
    slots: VecDeque<(i64, u32)>,
    total: u64,
}

impl SlotWindow {
    /// Moves the window to `now_ms` and returns its slot: never before the newest one recorded
    /// (the slots moved back first when the clock went back by a window or more), and without
    /// the slots that no longer count there.
    fn advance(&mut self, now_ms: i64) -> i64 {
        let mut slot = now_ms.div_euclid(SLOT_MS);
        if let Some(&(newest, _)) = self.slots.back() {
            if newest - slot >= SLOTS {
                let step = newest - slot;
                for (recorded, _) in &mut self.slots {
                    *recorded -= step;
                }
            } else {
                slot = slot.max(newest);
            }
        }
        while let Some(&(oldest, n)) = self.slots.front() {
            if slot - oldest < SLOTS {
                break;
            }
            self.slots.pop_front();
            self.total -= u64::from(n);
        }
        slot
    }

    /// Whether one more command fits under `limit` at `now_ms`.
    pub fn has_room(&mut self, limit: u32, now_ms: i64) -> bool {
        self.advance(now_ms);
        self.total < u64::from(limit)
    }

    /// Counts one command accepted at `now_ms` (dropping what no longer counts: a tenant that
    /// only cancels never asks [`Self::has_room`]).
    pub fn record(&mut self, now_ms: i64) {
        let slot = self.advance(now_ms);
        match self.slots.back_mut() {
            Some((newest, n)) if *newest == slot => *n += 1,
            _ => self.slots.push_back((slot, 1)),
        }
        self.total += 1;
    }

    /// Commands counted at `now_ms`.
    pub fn counted(&mut self, now_ms: i64) -> u64 {
        self.advance(now_ms);
        self.total
    }

    /// The stored form: `slot:count` pairs, oldest first, separated by spaces; empty when
    /// nothing counts.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(self.slots.len() * 16);
        for (i, (slot, n)) in self.slots.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&format!("{slot}:{n}"));
        }
        out
    }

    /// Reads the stored form back.
    pub fn decode(text: &str) -> Result<Self, String> {
        let mut window = Self::default();
        for pair in text.split_ascii_whitespace() {
            let parsed = pair
                .split_once(':')
                .and_then(|(slot, n)| Some((slot.parse::<i64>().ok()?, n.parse::<u32>().ok()?)));
            let Some((slot, n)) = parsed else {
                return Err(format!("not a slot:count pair: {pair:?}"));
            };
            if window
                .slots
                .back()
                .is_some_and(|&(newest, _)| newest >= slot)
            {
                return Err(format!("slots out of order at {pair:?}"));
            }
            window.slots.push_back((slot, n));
            window.total += u64::from(n);
        }
        Ok(window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_counts_for_at_least_a_second_and_at_most_one_slot_more() {
        let mut window = SlotWindow::default();
        window.record(1_009); // late in slot 100
        assert!(!window.has_room(1, 2_008), "999 ms later");
        assert!(
            !window.has_room(1, 2_009),
            "1,000 ms later: still in the slots"
        );
        assert!(window.has_room(1, 2_010), "1,001 ms later: slot 201");
        let mut window = SlotWindow::default();
        window.record(1_000); // early in slot 100
        assert!(!window.has_room(1, 2_009), "1,009 ms later");
        assert!(window.has_room(1, 2_010), "1,010 ms later");
    }

    #[test]
    fn an_instant_before_the_newest_slot_counts_in_it() {
        let mut window = SlotWindow::default();
        window.record(5_000);
        window.record(4_950); // a daemon whose clock is 50 ms behind
        assert_eq!(window.encode(), "500:2");
        assert!(!window.has_room(2, 5_999));
        assert!(window.has_room(2, 6_010));
    }

    #[test]
    fn a_tenant_that_only_cancels_keeps_a_second_of_slots() {
        let mut window = SlotWindow::default();
        for at in (0..60_000).step_by(10) {
            window.record(at);
        }
        assert_eq!(window.slots.len() as i64, SLOTS, "a minute of cancels");
        assert_eq!(window.counted(60_000), 100);
    }

    #[test]
    fn a_clock_stepped_back_an_hour_holds_the_tenant_back_a_second_not_an_hour() {
        let mut window = SlotWindow::default();
        for at in (0..1_000).step_by(10) {
            window.record(3_600_000 + at);
        }
        // The clock goes back an hour: what was counted in the last second still counts…
        assert!(!window.has_room(100, 1_000));
        assert_eq!(window.counted(1_000), 100);
        // …for the rest of its second, not until the clock is back where it was.
        assert!(window.has_room(100, 2_000));
        // A step back within a window counts in the newest slot, as before.
        window.record(2_100);
        window.record(2_090);
        assert_eq!(window.encode(), "210:2");
    }

    #[test]
    fn the_stored_form_reads_back() {
        let mut window = SlotWindow::default();
        for at in [1_000, 1_001, 1_030, 1_500] {
            window.record(at);
        }
        let text = window.encode();
        assert_eq!(text, "100:2 103:1 150:1");
        let mut back = SlotWindow::decode(&text).unwrap();
        assert_eq!(back, window);
        assert_eq!(back.counted(2_000), 4);
        assert_eq!(back.counted(2_035), 2, "slot 100 expired");
        assert_eq!(back.counted(2_040), 1, "slot 103 expired");
        assert_eq!(SlotWindow::decode("").unwrap(), SlotWindow::default());
        assert!(SlotWindow::decode("100:x").is_err());
        assert!(SlotWindow::decode("103:1 100:2").is_err());
    }
}
