//! Poller actor: fires due timers in three steps (docs/CONTRACT.md §5): claim them at
//! Persistence (the committed "picked for firing" that a racing cancel loses to), publish
//! `DueTimeReached` through the EventBus, mark `Reached` what the broker acknowledged. It wakes
//! at the earliest pending `dueAt` (the tick is a safety net) and never waits inside a message:
//! each call to Persistence and each batch at the broker answers by message.
//!
//! - `phase`: what is at Persistence (one call at a time, or a claim beside a mark where the
//!   database serves them side by side) and the round of claims; `firing`
//!   takes the next step after each message, `calls` makes the calls and reads their answers.
//! - `publisher`: claimed timers queued by tenant (`queue`), the broker's window (`window`).
//! - `run`: cursor and fence while claimed timers are left; `marks`: published, not `Reached`.
//! - `fairness`: fair claims while a backlog lasts (CONTRACT.md §9); `wake`: wake-ups planned
//!   by the store's clock.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::backoff::Retries;
use crate::domain::Subjects;
use crate::ports::{Clock, EventBus};

mod calls;
mod fairness;
mod firing;
mod marks;
mod phase;
mod publisher;
mod queue;
mod run;
mod wake;
mod window;

pub use fairness::{FAIR_CLAIM, FAIR_EVERY};
pub use marks::MARK_AT_LEAST;

use calls::Claimed;
use fairness::Fairness;
use marks::{Marked, Marks};
use phase::{NextClaim, Phase};
use publisher::{BatchId, Published, Publisher};
use run::Run;
use wake::WakeUps;

/// Timers one claim takes at least. A claim's cost is mostly fixed, whatever its size, so one
/// claim per small batch would make claims the limit.
pub const CLAIM_AT_LEAST: usize = 2_000;

/// Timers one claim in `dueAt` order takes: whole batches, at least [`CLAIM_AT_LEAST`].
pub fn claim_size(batch_size: usize) -> usize {
    let batch_size = batch_size.max(1);
    CLAIM_AT_LEAST.div_ceil(batch_size) * batch_size
}

/// Timers held for publishing (queued or at the broker) at most before a claim in `dueAt` order:
/// two claims, so that one is claimed while the other is published. (Published timers awaiting
/// their mark are bounded by the marks; a fair claim may go to twice this, `fairness`.)
pub fn hold_limit(batch_size: usize) -> usize {
    2 * claim_size(batch_size)
}

#[derive(Default)]
pub struct Poller;

impl NamedActor for Poller {
    const NAME: &'static str = "poller";
}

#[derive(Clone)]
pub struct PollerArgs {
    pub registry: Registry,
    pub bus: Arc<dyn EventBus>,
    pub clock: Arc<dyn Clock>,
    pub subjects: Subjects,
    pub batch_size: usize,
    pub polling_interval: Duration,
    /// How long a claim holds its timers (`claim_lease`): fences this daemon's own claims.
    pub lease: Duration,
    /// Keep claims and marks short while tenants share a backlog (`fairness`) whatever they
    /// take: the database's answer (`DatabaseTarget::short_writes_while_sharing`). Elsewhere
    /// they are kept short when a full claim is seen to be long (`fairness::WritePace`).
    pub short_writes: bool,
    /// A claim may be at Persistence while a mark is: the database serves them on connections
    /// of their own (`DatabaseTarget::claims_beside_marks`).
    pub claims_beside_marks: bool,
}

pub enum PollerMsg {
    /// The safety-net tick: claim what is due.
    Tick,
    /// A wake-up this actor planned: claim what is due.
    Wake,
    /// A timer due at this instant was just stored: wake then if that is earlier than planned,
    /// and let the next claim in `dueAt` order see it even if it is due before the cursor.
    WakeAt(chrono::DateTime<chrono::Utc>),
    /// A claim answered (sent by the Poller's own tasks).
    Claimed(Claimed),
    /// A mark answered (sent by the Poller's own tasks).
    Marked(Marked),
    /// The broker answered a batch; `None`: its task ended without an outcome (sent by the
    /// publishing tasks).
    Published(BatchId, Option<Published>),
}

pub struct PollerState {
    args: PollerArgs,
    /// What is at Persistence, if anything, and the backoff after a failure.
    phase: Phase,
    /// A tick, a wake-up or a settled batch asked for a round of claims: it begins once nothing
    /// is at Persistence and no backoff holds it.
    round_asked: bool,
    /// When the next claim in `dueAt` order is due.
    next_claim: NextClaim,
    /// While claimed timers are left (queued, at the broker or owed a mark): cursor and fence.
    run: Option<Run>,
    /// The earliest `dueAt` stored since the last claim in `dueAt` order was asked: where that
    /// claim starts when it is not after the run's cursor (`Run::claim_after`).
    stored_since_claim: Option<chrono::DateTime<chrono::Utc>>,
    fairness: Fairness,
    marks: Marks,
    publisher: Publisher,
    wake: WakeUps,
    /// Consecutive failures (claims, marks, publishes), for the retry backoff; none once a
    /// batch is published again.
    failures: Retries,
}

impl Actor for Poller {
    type Msg = PollerMsg;
    type State = PollerState;
    type Arguments = PollerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: PollerArgs,
    ) -> Result<PollerState, ActorProcessingErr> {
        Ok(PollerState {
            publisher: Publisher::new(myself, &args),
            wake: WakeUps::new(args.clock.clone()),
            phase: Phase::new(args.claims_beside_marks),
            args,
            round_asked: false,
            next_claim: NextClaim::AtWakeUp,
            run: None,
            stored_since_claim: None,
            fairness: Fairness::default(),
            marks: Marks::default(),
            failures: Retries::new(firing::RETRY),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut PollerState,
    ) -> Result<(), ActorProcessingErr> {
        // The interval task ends by itself once this actor has stopped.
        myself.send_interval(state.args.polling_interval, || PollerMsg::Tick);
        // Whatever became due while the daemon was down fires now.
        myself.cast(PollerMsg::Wake)?;
        Ok(())
    }

    /// A graceful stop lets the batches at the broker finish and marks what they fired, so a
    /// restart does not publish them again.
    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut PollerState,
    ) -> Result<(), ActorProcessingErr> {
        state.stop().await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: PollerMsg,
        state: &mut PollerState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PollerMsg::Tick | PollerMsg::Wake => state.round_asked = true,
            PollerMsg::WakeAt(at) => {
                let stored = state.stored_since_claim.get_or_insert(at);
                *stored = (*stored).min(at);
                if state.wake.is_before_plan(at) {
                    state.wake.at(&myself, at);
                }
            }
            PollerMsg::Claimed(claimed) => state.claimed(&myself, claimed)?,
            PollerMsg::Marked(marked) => state.marked(&myself, marked)?,
            PollerMsg::Published(batch, outcome) => state.publisher.answered(batch, outcome),
        }
        state.advance(&myself);
        Ok(())
    }
}
