//! Janitor actor: retention. Deletes `Reached` and `Cancelled` timers that finished more than
//! `keep_finished` ago (docs/CONTRACT.md §7), so the database does not grow with every timer ever
//! fired.
//!
//! Deletes go through Persistence like every write, in batches of [`BATCH`] rows, one short
//! transaction each and one message at a time, with a [`PAUSE`] between two: whatever the
//! Poller or the CommandHandler sends meanwhile is served first, so a backlog of a million
//! finished rows never holds the writer for longer than one batch (a few milliseconds) and
//! leaves it idle most of the time. A sweep runs every [`INTERVAL`] and goes on batch after
//! batch while a batch comes back full. A failed batch (storage failing) waits for the next
//! sweep; the Janitor itself never fails over it.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::ports::Clock;

/// Finished rows deleted per transaction: small enough that firing never waits long behind a
/// batch when their keys are scattered over the indexes, as real ids are.
pub const BATCH: usize = 100;
/// Between two batches of a sweep: the writer is the Poller's and the CommandHandler's first,
/// and the disk too. A deleted row writes much WAL (it touches pages all over the primary key
/// and the correlation index), and a shorter pause let checkpoints delay commits; this pace
/// still deletes about twice what a service firing 1,000 timers/s leaves behind.
pub const PAUSE: Duration = Duration::from_millis(40);
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
                match state
                    .args
                    .registry
                    .persistence()
                    .delete_finished(state.args.clock.now(), keep, BATCH)
                    .await
                {
                    Ok(deleted) => {
                        metrics::counter!(crate::telemetry::RETENTION_DELETED).increment(deleted);
                        state.swept += deleted;
                        if deleted as usize >= BATCH {
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
