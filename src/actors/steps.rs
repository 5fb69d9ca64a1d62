//! Time-sized steps of background writes on the one writer (the Janitor's deletes, the
//! Canceller's cancels): each step is one short transaction, sized to hold the writer about
//! [`STEP_TARGET`], with a [`PAUSE`] after it, so that a due timer's claim waits at most for
//! the one step running and the disk is firing's first.

use std::time::Duration;

/// How long one step may hold the writer: a claim that arrives meanwhile waits that long at
/// most. A row whose keys are scattered over the indexes (as real ids are) costs tens of
/// microseconds to delete.
pub const STEP_TARGET: Duration = Duration::from_millis(2);
/// Rows of a first step, and the bounds of later steps.
pub const FIRST_STEP: usize = 25;
pub const MIN_STEP: usize = 5;
pub const MAX_STEP: usize = 500;
/// Between two steps: the writer is the Poller's and the CommandHandler's first, and the disk
/// too (a row deleted or cancelled writes much WAL: it touches pages all over the indexes). At
/// this pace a sweep still deletes well above what a service firing 1,000 timers/s leaves
/// behind.
pub const PAUSE: Duration = Duration::from_millis(10);

/// The rows of the next step: fewer while steps take longer than [`STEP_TARGET`] (scattered
/// keys, a busy disk), more while they take under half of it.
#[derive(Debug, Clone, Copy)]
pub struct Step(usize);

impl Default for Step {
    fn default() -> Self {
        Self(FIRST_STEP)
    }
}

impl Step {
    pub fn rows(self) -> usize {
        self.0
    }

    /// The last step held the writer `took` (its wait in the lane not counted).
    pub fn took(&mut self, took: Duration) {
        if took > STEP_TARGET {
            self.0 = (self.0 * 3 / 4).max(MIN_STEP);
        } else if took < STEP_TARGET / 2 {
            self.0 = (self.0 + self.0 / 4 + 1).min(MAX_STEP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_shrink_while_slow_and_grow_while_quick() {
        let mut step = Step::default();
        for _ in 0..20 {
            step.took(Duration::from_millis(10));
        }
        assert_eq!(step.rows(), MIN_STEP);
        step.took(STEP_TARGET * 3 / 4);
        assert_eq!(step.rows(), MIN_STEP, "near the target it stays");
        for _ in 0..50 {
            step.took(Duration::from_micros(100));
        }
        assert_eq!(step.rows(), MAX_STEP);
    }
}
