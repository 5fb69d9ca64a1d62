//! Poller actor: fires due timers.
//!
//! It wakes at the exact instant the earliest `Scheduled` timer is due (and earlier when the
//! CommandHandler reports a new, earlier one); the periodic tick is only a safety net. On each
//! wake it reads what is due from Persistence (the database is the truth; memory holds only the
//! next wake-up and the batches in flight), publishes `DueTimeReached` through the EventBus,
//! and once the broker has acknowledged them marks exactly those timers `Reached`. A timer whose
//! publish failed stays `Scheduled` and is retried after a backoff.
//!
//! Up to [`PIPELINE_DEPTH`] batches are in flight at once: while the broker acknowledges one,
//! Persistence already reads the next (after the last timer in flight, so none is published
//! twice) or marks the previous one. Memory stays bounded by depth × batch size, whatever the
//! number of pending timers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::concurrency::{JoinHandle, OneshotReceiver};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot::error::TryRecvError;

use super::registry::Registry;
use crate::backoff;
use crate::domain::events::{due_message_id, due_time_reached};
use crate::domain::{DuePosition, Subjects, TimerEntry};
use crate::ports::{Clock, EventBus, OutgoingEvent};

/// Batches published but not yet marked, at most.
pub const PIPELINE_DEPTH: usize = 2;
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);
/// How long a graceful stop waits for the batches in flight to be acknowledged and marked.
const STOP_GRACE: Duration = Duration::from_secs(5);

pub struct Poller;

#[derive(Clone)]
pub struct PollerArgs {
    pub registry: Registry,
    pub bus: Arc<dyn EventBus>,
    pub clock: Arc<dyn Clock>,
    pub subjects: Subjects,
    pub batch_size: usize,
    pub polling_interval: Duration,
}

/// The timer task that delivers a planned wake-up; aborted when a new plan replaces it.
type WakeTask = JoinHandle<Result<(), ractor::MessagingErr<PollerMsg>>>;

pub struct PollerState {
    args: PollerArgs,
    tick: Option<JoinHandle<()>>,
    /// The pending wake-up: when, and the timer task that will deliver it.
    wake: Option<(DateTime<Utc>, WakeTask)>,
    /// Publishing batches, oldest first: each yields its outcome when the broker has answered.
    in_flight: VecDeque<OneshotReceiver<Published>>,
    /// The last timer handed to the bus; while batches are in flight, reading resumes after it.
    cursor: Option<DuePosition>,
    /// Consecutive failed rounds, for the retry backoff.
    failed_rounds: u32,
    /// After a failure, no batch starts before this instant (monotonic: a backoff is about
    /// the broker and the disk, not about timer time).
    backoff_until: Option<tokio::time::Instant>,
}

pub enum PollerMsg {
    /// The safety-net tick.
    Tick,
    /// A wake-up this actor arranged: fire what is due.
    Wake,
    /// A timer due at this instant was just stored: wake then if that is earlier than planned.
    WakeAt(DateTime<Utc>),
    /// A batch in flight finished publishing.
    BatchPublished,
    /// Fault hook: fail as a crash would (drills and tests of supervision).
    Fail(String),
}

/// What the broker made of one batch.
pub struct Published {
    /// Acknowledged by the broker: to be marked `Reached`.
    fired: Vec<TimerEntry>,
    reached_at: DateTime<Utc>,
    /// The first error, when some were not acknowledged (they stay `Scheduled`).
    error: Option<String>,
}

impl Actor for Poller {
    type Msg = PollerMsg;
    type State = PollerState;
    type Arguments = PollerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: PollerArgs,
    ) -> Result<PollerState, ActorProcessingErr> {
        Ok(PollerState {
            args,
            tick: None,
            wake: None,
            in_flight: VecDeque::new(),
            cursor: None,
            failed_rounds: 0,
            backoff_until: None,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut PollerState,
    ) -> Result<(), ActorProcessingErr> {
        state.tick = Some(myself.send_interval(state.args.polling_interval, || PollerMsg::Tick));
        // Whatever became due while the daemon was down fires now.
        myself.cast(PollerMsg::Wake)?;
        Ok(())
    }

    /// A graceful stop lets the batches in flight finish and marks them, so a restart does not
    /// publish them again.
    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut PollerState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(tick) = state.tick.take() {
            tick.abort();
        }
        if let Some((_, wake)) = state.wake.take() {
            wake.abort();
        }
        while let Some(batch) = state.in_flight.pop_front() {
            match tokio::time::timeout(STOP_GRACE, batch).await {
                Ok(Ok(published)) => settle(&myself, state, published).await,
                _ => tracing::warn!(
                    actor = "poller",
                    "a batch in flight did not finish before the stop; it will be published again"
                ),
            }
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: PollerMsg,
        state: &mut PollerState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PollerMsg::Tick | PollerMsg::Wake => fill(&myself, state).await,
            PollerMsg::BatchPublished => {
                // Settle, oldest first, every batch whose outcome is in.
                while let Some(batch) = state.in_flight.front_mut() {
                    match batch.try_recv() {
                        Ok(published) => {
                            state.in_flight.pop_front();
                            settle(&myself, state, published).await;
                        }
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Closed) => {
                            state.in_flight.pop_front();
                            tracing::error!(
                                actor = "poller",
                                "a publishing task ended without an outcome"
                            );
                            retry_later(&myself, state);
                        }
                    }
                }
                if state.in_flight.is_empty() {
                    state.cursor = None;
                }
                fill(&myself, state).await;
            }
            PollerMsg::WakeAt(at) => {
                if state.wake.as_ref().is_none_or(|(planned, _)| at < *planned) {
                    wake_at(&myself, state, at);
                }
            }
            PollerMsg::Fail(reason) => return Err(reason.into()),
        }
        Ok(())
    }
}

/// Arranges the next wake-up at `at` (now, if `at` has passed), replacing any other.
fn wake_at(myself: &ActorRef<PollerMsg>, state: &mut PollerState, at: DateTime<Utc>) {
    if let Some((_, previous)) = state.wake.take() {
        previous.abort();
    }
    let delay = (at - state.args.clock.now())
        .to_std()
        .unwrap_or(Duration::ZERO);
    let task = myself.send_after(delay, || PollerMsg::Wake);
    state.wake = Some((at, task));
}

/// Pauses new batches after a failed round, backing off while failures repeat.
fn retry_later(myself: &ActorRef<PollerMsg>, state: &mut PollerState) {
    state.failed_rounds += 1;
    let delay = backoff::exponential(state.failed_rounds, FIRST_RETRY, MAX_RETRY_BACKOFF);
    state.backoff_until = Some(tokio::time::Instant::now() + delay);
    wake_in(myself, state, delay);
}

/// Arranges the next wake-up `delay` from now.
fn wake_in(myself: &ActorRef<PollerMsg>, state: &mut PollerState, delay: Duration) {
    let at = state.args.clock.now() + chrono::Duration::from_std(delay).unwrap_or_default();
    wake_at(myself, state, at);
}

/// Starts publishing due batches until the pipeline is full or nothing more is due, then
/// arranges the wake-up for the next `dueAt`.
async fn fill(myself: &ActorRef<PollerMsg>, state: &mut PollerState) {
    let persistence = state.args.registry.persistence();
    while state.in_flight.len() < PIPELINE_DEPTH {
        if let Some(until) = state.backoff_until {
            let now = tokio::time::Instant::now();
            if now < until {
                return wake_in(myself, state, until - now);
            }
            state.backoff_until = None;
        }
        let now = state.args.clock.now();
        let after = if state.in_flight.is_empty() {
            None
        } else {
            state.cursor.clone()
        };
        let batch = match persistence
            .find_due(now, after, state.args.batch_size)
            .await
        {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!(actor = "poller", error = %e, "cannot read due timers; retrying");
                return retry_later(myself, state);
            }
        };
        let full = batch.timers.len() >= state.args.batch_size;
        if let Some(last) = batch.timers.last() {
            state.cursor = Some(last.position());
            state
                .in_flight
                .push_back(spawn_publish(myself, &state.args, batch.timers, now));
        }
        if !full {
            if !state.in_flight.is_empty() && batch.next_due_at.is_none() {
                // Nothing more is due now; once the batches in flight are settled, the next
                // read finds nothing due and brings the next wake-up time.
                return;
            }
            match batch.next_due_at {
                Some(at) => wake_at(myself, state, at),
                None => {
                    if let Some((_, wake)) = state.wake.take() {
                        wake.abort();
                    }
                }
            }
            return;
        }
    }
}

/// Publishes one batch in the background; the outcome is in the returned receiver before the
/// Poller is told to look at it.
fn spawn_publish(
    myself: &ActorRef<PollerMsg>,
    args: &PollerArgs,
    due: Vec<TimerEntry>,
    reached_at: DateTime<Utc>,
) -> OneshotReceiver<Published> {
    let (myself, bus, subjects) = (myself.clone(), args.bus.clone(), args.subjects.clone());
    let (outcome, receiver) = ractor::concurrency::oneshot();
    tokio::spawn(async move {
        let published = publish(bus.as_ref(), &subjects, due, reached_at).await;
        if outcome.send(published).is_ok() {
            let _ = myself.cast(PollerMsg::BatchPublished);
        }
    });
    receiver
}

/// Marks what the broker acknowledged; schedules a retry for what it did not.
async fn settle(myself: &ActorRef<PollerMsg>, state: &mut PollerState, published: Published) {
    let count = published.fired.len();
    if count > 0 {
        let persistence = state.args.registry.persistence();
        if let Err(e) = persistence
            .mark_reached(published.fired, published.reached_at)
            .await
        {
            // The events are out; the rows stay Scheduled and are published again, with the
            // same Nats-Msg-Id, so the broker drops the duplicate inside its window.
            tracing::error!(actor = "poller", error = %e, count,
                "published timers could not be marked Reached; they will be published again");
            return retry_later(myself, state);
        }
    }
    match published.error {
        Some(error) => {
            tracing::warn!(actor = "poller", error = %error,
                "DueTimeReached not acknowledged by the broker; timers stay Scheduled and are retried");
            retry_later(myself, state);
        }
        None if state.failed_rounds > 0 => {
            tracing::info!(actor = "poller", "firing again after failures");
            state.failed_rounds = 0;
        }
        None => {}
    }
}

/// Publishes `DueTimeReached` for each timer, stamped `reached_at`.
async fn publish(
    bus: &dyn EventBus,
    subjects: &Subjects,
    due: Vec<TimerEntry>,
    reached_at: DateTime<Utc>,
) -> Published {
    let mut events = Vec::with_capacity(due.len());
    let mut timers = Vec::with_capacity(due.len());
    for timer in due {
        match serde_json::to_vec(&due_time_reached(&timer, reached_at)) {
            Ok(payload) => {
                events.push(OutgoingEvent {
                    subject: subjects.due(&timer.tenant_id),
                    message_id: due_message_id(&timer),
                    payload: payload.into(),
                });
                timers.push(timer);
            }
            Err(e) => tracing::error!(actor = "poller", tenant_id = %timer.tenant_id,
                service_call_id = %timer.service_call_id, error = %e,
                "cannot encode DueTimeReached"),
        }
    }
    let results = bus.publish_all(events).await;
    let mut fired = Vec::with_capacity(timers.len());
    let mut error = None;
    for (timer, result) in timers.into_iter().zip(results) {
        match result {
            Ok(()) => {
                tracing::debug!(actor = "poller", tenant_id = %timer.tenant_id,
                    service_call_id = %timer.service_call_id, due_at = %timer.due_at,
                    lateness_ms = (reached_at - timer.due_at).num_milliseconds(),
                    "DueTimeReached published");
                fired.push(timer);
            }
            Err(e) => {
                error.get_or_insert(e.0);
            }
        }
    }
    Published {
        fired,
        reached_at,
        error,
    }
}
