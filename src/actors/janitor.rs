//! Janitor actor: retention. Deletes `Reached` and `Cancelled` timers that finished more than
//! `keep_finished` ago (docs/CONTRACT.md §7), so the database does not grow with every timer ever
//! fired, and the records of commands refused for a quota as old (§9).
//!
//! Deletes go through Persistence like every write, as background work that every other
//! operation of the writer goes before, in small steps: one short transaction each, one
//! message at a time, with a [`PAUSE`] between two. A step is sized to hold the writer about
//! `steps::STEP_TARGET` ([`Step`]): a due timer's claim waits at most for the one step running, and
//! a backlog of a million finished rows is worked off without moving firing's lateness. A
//! sweep starts [`INTERVAL`] after the last one ended and goes on step after step while a step
//! comes back full. A failed step (storage failing) is retried by the one retry policy, within
//! the interval (`periodic`); the Janitor never fails over it.

use std::sync::Arc;
use std::time::Duration;

use super::periodic::{Every, Next, Periodic};
use super::registry::Registry;
use super::steps::{PAUSE, Step};
use crate::ports::Clock;

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
