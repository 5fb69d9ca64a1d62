//! Poller actor: fires due timers.
//!
//! It wakes at the exact instant the earliest `Scheduled` timer is due (and earlier when the
//! CommandHandler reports a new, earlier one); the periodic tick is only a safety net. On each
//! wake it reads what is due from Persistence (the database is the truth; memory holds only
//! the next wake-up time), publishes `DueTimeReached` through the EventBus, waits for the
//! broker's acknowledgements, and only then marks those timers `Reached`. A timer whose
//! publish failed stays `Scheduled` and is retried.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::registry::Registry;
use crate::domain::events::{due_message_id, due_time_reached};
use crate::domain::{Subjects, TimerEntry};
use crate::ports::{Clock, EventBus, OutgoingEvent};

const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

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
    /// Consecutive rounds that could not publish or read, for the retry backoff.
    failed_rounds: u32,
}

pub enum PollerMsg {
    /// The safety-net tick.
    Tick,
    /// A wake-up this actor arranged: fire what is due.
    Wake,
    /// A timer due at this instant was just stored: wake then if that is earlier than planned.
    WakeAt(DateTime<Utc>),
    /// Fault hook: fail as a crash would (drills and tests of supervision).
    Fail(String),
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
            failed_rounds: 0,
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

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut PollerState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(tick) = state.tick.take() {
            tick.abort();
        }
        if let Some((_, wake)) = state.wake.take() {
            wake.abort();
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
            PollerMsg::Tick | PollerMsg::Wake => fire_due(&myself, state).await,
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

/// Schedules a retry after a failed round, backing off while failures repeat.
fn retry_later(myself: &ActorRef<PollerMsg>, state: &mut PollerState) {
    state.failed_rounds += 1;
    let delay = (Duration::from_millis(100) * 2u32.saturating_pow(state.failed_rounds.min(8)))
        .min(MAX_RETRY_BACKOFF);
    let at = state.args.clock.now() + chrono::Duration::from_std(delay).unwrap_or_default();
    wake_at(myself, state, at);
}

/// Fires one batch of due timers, then arranges the next wake-up: at once when more are due,
/// otherwise at the earliest pending `dueAt`.
async fn fire_due(myself: &ActorRef<PollerMsg>, state: &mut PollerState) {
    let persistence = state.args.registry.persistence();
    let now = state.args.clock.now();
    let due = match persistence.find_due(now, state.args.batch_size).await {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(actor = "poller", error = %e, "cannot read due timers; retrying");
            return retry_later(myself, state);
        }
    };
    let full_batch = due.len() >= state.args.batch_size;
    if !due.is_empty() {
        let (fired, failure) = publish(&state.args, due, now).await;
        if !fired.is_empty() {
            let count = fired.len();
            if let Err(e) = persistence.mark_reached(fired, now).await {
                // The events are out; the rows stay Scheduled and are published again on the
                // next round, with the same Nats-Msg-Id, so the broker drops the duplicate.
                tracing::error!(actor = "poller", error = %e, count,
                    "published timers could not be marked Reached; they will be re-published");
                return retry_later(myself, state);
            }
        }
        if let Some(error) = failure {
            tracing::warn!(actor = "poller", error = %error,
                "DueTimeReached not acknowledged by the broker; timers stay Scheduled and are retried");
            return retry_later(myself, state);
        }
    }
    if state.failed_rounds > 0 {
        tracing::info!(actor = "poller", "firing again after failures");
        state.failed_rounds = 0;
    }
    if full_batch {
        let _ = myself.cast(PollerMsg::Wake);
        return;
    }
    match persistence.next_due_at().await {
        Ok(Some(at)) => wake_at(myself, state, at),
        Ok(None) => {
            if let Some((_, wake)) = state.wake.take() {
                wake.abort();
            }
        }
        Err(e) => {
            tracing::warn!(actor = "poller", error = %e, "cannot read the next due time; retrying");
            retry_later(myself, state);
        }
    }
}

/// Publishes `DueTimeReached` for each timer, stamped `reached_at`. Returns the timers the
/// broker acknowledged and, when any was not, the first error.
async fn publish(
    args: &PollerArgs,
    due: Vec<TimerEntry>,
    reached_at: DateTime<Utc>,
) -> (Vec<TimerEntry>, Option<String>) {
    let mut events = Vec::with_capacity(due.len());
    let mut timers = Vec::with_capacity(due.len());
    for timer in due {
        match serde_json::to_vec(&due_time_reached(&timer, reached_at)) {
            Ok(payload) => {
                events.push(OutgoingEvent {
                    subject: args.subjects.due(&timer.tenant_id),
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
    let results = args.bus.publish_all(events).await;
    let mut fired = Vec::with_capacity(timers.len());
    let mut failure = None;
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
                failure.get_or_insert(e.0);
            }
        }
    }
    (fired, failure)
}
