//! Janitor actor: retention. Deletes `Reached` and `Cancelled` timers that finished more than
//! `keep_finished` ago (docs/CONTRACT.md §7), so the database does not grow with every timer ever
//! fired, and the records of commands refused for a quota as old (§9).
//!
//! Deletes go through Persistence like every write, as background work that every other
//! operation of the writer goes before, in small steps: one short transaction each, one
//! message at a time, with a [`PAUSE`] between two. A step is sized to hold the writer about
//! [`STEP_TARGET`] ([`Step`]): a due timer's claim waits at most for the one step running, and
//! a backlog of a million finished rows is worked off without moving firing's lateness. A
//! sweep runs every [`INTERVAL`] and goes on step after step while a step comes back full. A
//! failed step (storage failing) waits for the next sweep; the Janitor never fails over it.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::registry::Registry;
use super::supervisor::NamedActor;
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

#[derive(Default)]
pub struct Janitor;

impl NamedActor for Janitor {
    const NAME: &'static str = "janitor";
}

#[derive(Clone)]
pub struct JanitorArgs {
    pub registry: Registry,
    pub clock: Arc<dyn Clock>,
    /// How long finished timers are kept; zero keeps them forever.
    pub keep_finished: Duration,
}

pub struct JanitorState {
    args: JanitorArgs,
    step: Step,
    /// Rows deleted in the sweep under way.
    swept: u64,
    /// A sweep is under way (its next batch is planned): the interval starts no second one,
    /// which would double the pace and, minute after minute, pile up more.
    sweeping: bool,
}

pub enum JanitorMsg {
    /// The interval: start a sweep unless one is under way.
    Sweep,
    /// The next batch of the sweep under way.
    Continue,
}

impl Actor for Janitor {
    type Msg = JanitorMsg;
    type State = JanitorState;
    type Arguments = JanitorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: JanitorArgs,
    ) -> Result<JanitorState, ActorProcessingErr> {
        Ok(JanitorState {
            args,
            step: Step::default(),
            swept: 0,
            sweeping: false,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut JanitorState,
    ) -> Result<(), ActorProcessingErr> {
        if state.args.keep_finished.is_zero() {
            tracing::info!(
                actor = Janitor::NAME,
                "retention off: finished timers are kept"
            );
            return Ok(());
        }
        // The interval task ends by itself once this actor has stopped.
        myself.send_interval(INTERVAL, || JanitorMsg::Sweep);
        myself.cast(JanitorMsg::Sweep)?;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: JanitorMsg,
        state: &mut JanitorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            JanitorMsg::Sweep if state.sweeping => {}
            JanitorMsg::Sweep | JanitorMsg::Continue => {
                state.sweeping = false;
                let keep = state.args.keep_finished;
                let rows = state.step.rows();
                match state
                    .args
                    .registry
                    .persistence()
                    .delete_finished(state.args.clock.now(), keep, rows)
                    .await
                {
                    Ok((deleted, took)) => {
                        state.step.took(took);
                        metrics::counter!(crate::telemetry::RETENTION_DELETED).increment(deleted);
                        state.swept += deleted;
                        if deleted as usize >= rows {
                            state.sweeping = true;
                            myself.send_after(PAUSE, || JanitorMsg::Continue);
                        } else if state.swept > 0 {
                            tracing::info!(actor = Janitor::NAME, deleted = state.swept,
                                keep = ?keep, "finished timers deleted");
                            state.swept = 0;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(actor = Janitor::NAME, error = %e,
                            "finished timers not deleted; trying again at the next sweep");
                        state.swept = 0;
                    }
                }
            }
        }
        Ok(())
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
