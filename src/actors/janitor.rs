//! Janitor actor: retention. Deletes `Reached` and `Cancelled` timers that finished more than
//! `keep_finished` ago (docs/CONTRACT.md §7), so the database does not grow with every timer ever
//! fired, and the records of commands refused for a quota as old (§9).
//!
//! Deletes go through Persistence like every write, as background work that every other
//! operation of the writer goes before, in small steps: one short transaction each, one
//! message at a time, with a [`PAUSE`] between two. A step is sized to hold the writer about
//! [`STEP_TARGET`] ([`Step`]): a due timer's claim waits at most for the one step running, and
//! a backlog of a million finished rows is worked off without moving firing's lateness. A
//! sweep starts [`INTERVAL`] after the last one ended and goes on step after step while a step
//! comes back full. A failed step (storage failing) is retried by the one retry policy, within
//! the interval (`periodic`); the Janitor never fails over it.

use std::sync::Arc;
use std::time::Duration;

use super::periodic::{Every, Next, Periodic};
use super::registry::Registry;
use crate::ports::Clock;

/// How long one step may hold the writer: a claim that arrives meanwhile waits that long at
/// most. A row whose keys are scattered over the indexes (as real ids are) costs tens of
/// microseconds to delete.
pub const STEP_TARGET: Duration = Duration::from_millis(2);
/// Rows the first step of a sweep deletes, and the bounds of later steps.
pub const FIRST_STEP: usize = 25;
pub const MIN_STEP: usize = 5;
pub const MAX_STEP: usize = 500;
/// Between two steps of a sweep: the writer is the Poller's and the CommandHandler's first,
/// and the disk too (a deleted row writes much WAL: it touches pages all over the primary key
/// and the correlation index). At this pace a sweep still deletes well above what a service
/// firing 1,000 timers/s leaves behind.
pub const PAUSE: Duration = Duration::from_millis(10);
/// Time between sweeps.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// The Janitor: retention, round after round ([`Every`]).
pub type Janitor = Every<Retention>;

#[derive(Clone)]
pub struct JanitorArgs {
    pub registry: Registry,
    pub clock: Arc<dyn Clock>,
    /// How long finished timers are kept; zero keeps them forever.
    pub keep_finished: Duration,
}

/// The Janitor's work: a sweep of steps, one per round.
pub struct Retention {
    args: JanitorArgs,
    step: Step,
    /// Rows deleted in the sweep under way.
    swept: u64,
}

impl Periodic for Retention {
    const NAME: &'static str = "janitor";
    const EVERY: Duration = INTERVAL;
    const AT_START: bool = true;
    type Args = JanitorArgs;

    fn new(args: JanitorArgs) -> Self {
        if args.keep_finished.is_zero() {
            tracing::info!(
                actor = Self::NAME,
                "retention off: finished timers are kept"
            );
        }
        Self {
            args,
            step: Step::default(),
            swept: 0,
        }
    }

    fn registry(&self) -> &Registry {
        &self.args.registry
    }

    fn enabled(&self) -> bool {
        !self.args.keep_finished.is_zero()
    }

    /// One step of the sweep: the next [`PAUSE`] after it while steps come back full.
    async fn round(&mut self) -> Result<Next, String> {
        let keep = self.args.keep_finished;
        let rows = self.step.rows();
        let deleted = self
            .args
            .registry
            .persistence()
            .delete_finished(self.args.clock.now(), keep, rows)
            .await;
        let (deleted, took) = deleted.map_err(|e| {
            self.swept = 0;
            e.to_string()
        })?;
        self.step.took(took);
        metrics::counter!(crate::telemetry::RETENTION_DELETED).increment(deleted);
        self.swept += deleted;
        if deleted as usize >= rows {
            return Ok(Next::After(PAUSE));
        }
        if self.swept > 0 {
            tracing::info!(actor = Self::NAME, deleted = self.swept, keep = ?keep,
                "finished timers deleted");
            self.swept = 0;
        }
        Ok(Next::Scheduled)
    }

    fn failed(&self) -> &'static str {
        "finished timers not deleted"
    }
}

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
