//! Each of Persistence's lanes as the console shows it (docs/CONTRACT.md §7): the operations
//! waiting now, and the longest an operation waited before it ran over the last ten seconds or
//! so (two 5 s slots). Recorded beside the lanes' metrics, in the process as they are.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use serde::Serialize;

/// One slot's span, in milliseconds.
const SLOT_MS: i64 = 5_000;

#[derive(Debug, Clone, Copy, Default)]
struct Lane {
    depth: usize,
    /// The slot number and the longest wait in it, for the current slot and the one before.
    current: (i64, Duration),
    previous: (i64, Duration),
}

/// A lane, now.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneView {
    pub lane: &'static str,
    /// Operations waiting (not yet running).
    pub waiting: usize,
    /// The longest an operation waited before it ran, over the last 5 to 10 s.
    pub longest_wait_ms: f64,
}

#[derive(Default)]
pub struct Lanes {
    lanes: Mutex<BTreeMap<&'static str, Lane>>,
}

impl Lanes {
    fn with(&self, lane: &'static str, change: impl FnOnce(&mut Lane)) {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        change(lanes.entry(lane).or_default());
    }

    /// `depth` operations wait in `lane` now.
    pub fn depth(&self, lane: &'static str, depth: usize) {
        self.with(lane, |l| l.depth = depth);
    }

    /// An operation of `lane` waited `waited` before it ran, at `now_ms`.
    pub fn waited(&self, lane: &'static str, waited: Duration, now_ms: i64) {
        let slot = now_ms.div_euclid(SLOT_MS);
        self.with(lane, |l| {
            if l.current.0 != slot {
                l.previous = if l.current.0 == slot - 1 {
                    l.current
                } else {
                    (slot - 1, Duration::ZERO)
                };
                l.current = (slot, Duration::ZERO);
            }
            l.current.1 = l.current.1.max(waited);
        });
    }

    /// Every lane seen, by name.
    pub fn view(&self, now_ms: i64) -> Vec<LaneView> {
        let slot = now_ms.div_euclid(SLOT_MS);
        let lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        lanes
            .iter()
            .map(|(name, l)| {
                let recent = |(number, wait): (i64, Duration)| {
                    if number == slot || number == slot - 1 {
                        wait
                    } else {
                        Duration::ZERO
                    }
                };
                let longest = recent(l.current).max(recent(l.previous));
                LaneView {
                    lane: name,
                    waiting: l.depth,
                    longest_wait_ms: longest.as_secs_f64() * 1_000.0,
                }
            })
            .collect()
    }
}

/// The process's lanes.
pub fn lanes() -> &'static Lanes {
    static LANES: LazyLock<Lanes> = LazyLock::new(Lanes::default);
    &LANES
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000;

    #[test]
    fn the_longest_wait_of_the_last_two_slots_is_shown_then_forgotten() {
        let lanes = Lanes::default();
        lanes.depth("writer", 3);
        lanes.waited("writer", Duration::from_millis(40), T0);
        lanes.waited("writer", Duration::from_millis(7), T0 + SLOT_MS);
        let view = lanes.view(T0 + SLOT_MS);
        assert_eq!(view[0].waiting, 3);
        assert_eq!(view[0].longest_wait_ms, 40.0);
        assert_eq!(lanes.view(T0 + 2 * SLOT_MS)[0].longest_wait_ms, 7.0);
        assert_eq!(lanes.view(T0 + 3 * SLOT_MS)[0].longest_wait_ms, 0.0);
    }
}
