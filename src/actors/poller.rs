//! Poller actor: fires due timers.
//!
//! It wakes at the exact instant the earliest `Scheduled` timer is due (and earlier when the
//! CommandHandler reports a new, earlier one); the periodic tick is only a safety net. On each
//! wake it claims what is due through Persistence (the database is the truth; memory holds only
//! the next wake-up and the batches in flight; the claim is the committed "picked for firing"
//! that a racing cancel loses to), publishes `DueTimeReached` through the EventBus,
//! and once the broker has acknowledged them marks exactly those timers `Reached`. A timer whose
//! publish failed stays `Scheduled` and is retried after a backoff.
//!
//! Timers the broker acknowledged but that could not be marked `Reached` (the database fails)
//! are kept and marked, with backoff, before anything new is read or fired: re-reading them
//! while still `Scheduled` would publish them again.
//!
//! Several batches travel together: one claim takes [`claim_size`] timers (at least
//! [`CLAIM_AT_LEAST`], whatever the batch size), which are published as batches of at most
//! `batch_size`; while the broker acknowledges them, Persistence already claims the next (after
//! the last timer claimed, and fenced off the claims still held, so none is published twice),
//! and settled batches are marked together, [`MARK_AT_LEAST`] or more at a time. Memory stays
//! bounded by [`hold_limit`] timers held, whatever the number of pending timers.
//!
//! Tenants take turns (docs/CONTRACT.md §9). Claimed timers wait in a queue by tenant
//! (`poller::queue`), and batches are filled one timer per tenant in turn; only as many timers
//! are at the broker at once as it acknowledges within about 10 ms (`poller::window`), and the
//! publishing tasks hand over the next batches themselves (`poller::pipeline`), so a timer put
//! in the queue is published within milliseconds however many are claimed. While a backlog
//! lasts, a fair claim (`storage::fair`) every [`FAIR_EVERY`] takes a share of the due timers of
//! each tenant that has none held: one tenant's burst makes its own timers late, not another's
//! due a moment after. With nothing backlogged, firing is as before: one claim of everything
//! due.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::task::AbortOnDropHandle;

use super::registry::Registry;
use super::supervisor::NamedActor;

mod pipeline;
mod queue;
mod window;
use crate::backoff;
use crate::domain::events::{due_message_id, due_time_reached};
use crate::domain::{DuePosition, DueTimer, Subjects};
use crate::ports::{Clock, EventBus, OutgoingEvent};
use pipeline::Pipeline;
use queue::Waiting;

/// Timers one claim takes at least. A claim's cost is mostly fixed, whatever its size, so one
/// claim per small batch would make claims the limit.
pub const CLAIM_AT_LEAST: usize = 2_000;

/// Timers one claim takes: whole batches, at least [`CLAIM_AT_LEAST`].
pub fn claim_size(batch_size: usize) -> usize {
    let batch_size = batch_size.max(1);
    CLAIM_AT_LEAST.div_ceil(batch_size) * batch_size
}

/// Timers held for publishing (queued or at the broker) at most before a claim in `dueAt` order:
/// two claims, so that one is claimed while the other is published. Not the broker's window
/// (`poller::window`), which bounds the timers at the broker alone.
pub fn hold_limit(batch_size: usize) -> usize {
    2 * claim_size(batch_size)
}

/// Published timers marked `Reached` together, at least, while batches are in flight.
pub const MARK_AT_LEAST: usize = 1_000;

/// How often, at most, a fair claim looks for tenants with nothing waiting while a backlog lasts.
pub const FAIR_EVERY: Duration = Duration::from_millis(10);

/// Timers one fair claim takes at most, shared equally among the tenants it serves.
pub const FAIR_CLAIM: usize = 1_000;

const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);
/// How long a graceful stop waits, in all, for the batches in flight to be acknowledged.
const STOP_GRACE: Duration = Duration::from_secs(5);

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
}

/// The timer task that delivers a planned wake-up; aborted when a new plan replaces it (or the
/// actor ends).
type WakeTask = AbortOnDropHandle<Result<(), ractor::MessagingErr<PollerMsg>>>;

pub struct PollerState {
    args: PollerArgs,
    /// The pending wake-up: when (by the store's clock), and the timer task that will deliver
    /// it.
    wake: Option<(DateTime<Utc>, WakeTask)>,
    /// The store's clock minus this daemon's, learned at each claim: zero on SQLite, the
    /// database server's lead on PostgreSQL. Wake-ups are planned by the store's clock, which
    /// decides what is due, so a daemon whose own clock is off neither wakes before its timers
    /// are due nor after.
    clock_offset: chrono::Duration,
    /// When the best sample of `clock_offset` was taken (see [`learn_offset`]).
    offset_learned: Option<tokio::time::Instant>,
    /// Claimed timers queued by tenant and the batches at the broker (`poller::pipeline`).
    pipe: Pipeline,
    /// The last timer claimed in `dueAt` order; while timers are held (queued or in flight),
    /// reading resumes after it.
    cursor: Option<DuePosition>,
    /// While timers are held: this daemon's claims whose lease ends at or after this instant
    /// were made since they began to be held, and are not taken again (see
    /// `Store::claim_due_fenced`).
    fence: Option<DateTime<Utc>>,
    /// When the last fair claim was made, and where the next goes on.
    last_fair: Option<tokio::time::Instant>,
    fair_resume: Option<String>,
    /// The last claim came back full: more may be due now, so claim again as batches settle.
    /// Otherwise the planned wake-up is the next time to claim.
    more_due: bool,
    /// A timer due before the cursor was stored while batches were in flight (a claim after
    /// the cursor cannot see it): claim from the start once they are settled.
    recheck: bool,
    /// Published and acknowledged, not yet marked `Reached`: waiting for [`MARK_AT_LEAST`] of
    /// them, or for the batches in flight to settle, or for a retry after a failed mark.
    unmarked: Vec<Published>,
    /// The last mark failed: nothing new is claimed before these are marked.
    mark_failed: bool,
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
}

/// What the broker made of one batch.
pub struct Published {
    /// Acknowledged by the broker: to be marked `Reached` (shared, so a mark can be retried
    /// without copying the batch).
    fired: Arc<[DueTimer]>,
    reached_at: DateTime<Utc>,
    /// When the round began (the claim): `timer_polling_duration_seconds` runs to the mark.
    started: std::time::Instant,
    /// The first error, when some were not acknowledged (they stay `Scheduled`).
    error: Option<String>,
    /// From hand-over to the broker's last answer.
    took: Duration,
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
            pipe: Pipeline::new(myself, &args),
            args,
            wake: None,
            clock_offset: chrono::Duration::zero(),
            offset_learned: None,
            cursor: None,
            fence: None,
            last_fair: None,
            fair_resume: None,
            more_due: false,
            recheck: false,
            unmarked: Vec::new(),
            mark_failed: false,
            failed_rounds: 0,
            backoff_until: None,
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

    /// A graceful stop lets the batches in flight finish and marks them, so a restart does not
    /// publish them again.
    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut PollerState,
    ) -> Result<(), ActorProcessingErr> {
        state.wake = None;
        // One deadline for them all: each batch's own wait is bounded too, but a hundred of
        // them one after another would not be.
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        for batch in state.pipe.take_in_flight() {
            match tokio::time::timeout_at(deadline, batch).await {
                Ok(Ok(published)) => settle(&myself, state, vec![published]).await,
                _ => tracing::warn!(
                    actor = "poller",
                    "a batch in flight did not finish before the stop; it will be published again"
                ),
            }
        }
        if !mark_unmarked(state).await {
            tracing::warn!(
                actor = "poller",
                "published timers could not be marked Reached before the stop; they will be published again"
            );
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
                // Settle, oldest first, every batch whose outcome is in: one mark for them all.
                let settled = state.pipe.take_settled();
                for _ in 0..settled.lost {
                    tracing::error!(
                        actor = "poller",
                        "a publishing task ended without an outcome"
                    );
                    retry_later(&myself, state);
                }
                settle(&myself, state, settled.published).await;
                if holds_nothing(state) {
                    end_run(state);
                }
                let recheck = holds_nothing(state) && std::mem::take(&mut state.recheck);
                if state.more_due || recheck || !state.pipe.queue_is_empty() {
                    fill(&myself, state).await;
                }
            }
            PollerMsg::WakeAt(at) => {
                if state
                    .cursor
                    .as_ref()
                    .is_some_and(|cursor| at <= cursor.due_at)
                {
                    state.recheck = true;
                }
                if state.wake.as_ref().is_none_or(|(planned, _)| at < *planned) {
                    wake_at(&myself, state, at);
                }
            }
        }
        Ok(())
    }
}

/// How long a sample of the store's lead stands against smaller ones: a clock that was stepped
/// back is followed within this.
const OFFSET_SAMPLE_LIFE: Duration = Duration::from_secs(30);

/// Learns the store's lead over this daemon's clock from `sample`: the server's instant at the
/// claim minus this clock as the answer arrived. The statement ran before the answer came, so a
/// sample is never above the true lead, and is below it by the time the statement took and the
/// way back: the largest recent sample is the closest. Planned by it, a wake-up comes that much
/// late at most, never early.
fn learn_offset(state: &mut PollerState, sample: chrono::Duration) {
    let now = tokio::time::Instant::now();
    let stale = state
        .offset_learned
        .is_none_or(|at| now.duration_since(at) > OFFSET_SAMPLE_LIFE);
    if stale || sample >= state.clock_offset {
        state.clock_offset = sample;
        state.offset_learned = Some(now);
    }
}

/// The store's clock now (see `PollerState::clock_offset`).
fn store_now(state: &PollerState) -> DateTime<Utc> {
    state.args.clock.now() + state.clock_offset
}

/// Arranges the next wake-up at `at` by the store's clock (now, if `at` has passed), replacing
/// any other.
fn wake_at(myself: &ActorRef<PollerMsg>, state: &mut PollerState, at: DateTime<Utc>) {
    let delay = (at - store_now(state)).to_std().unwrap_or(Duration::ZERO);
    let task = myself.send_after(delay, || PollerMsg::Wake);
    // Replacing the plan drops (and so aborts) the previous wake-up.
    state.wake = Some((at, AbortOnDropHandle::new(task)));
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
    let at = store_now(state) + chrono::Duration::from_std(delay).unwrap_or_default();
    wake_at(myself, state, at);
}

/// Whether no claimed timer is queued, in flight, or published and not yet marked.
fn holds_nothing(state: &PollerState) -> bool {
    state.pipe.in_flight_is_empty() && state.pipe.queue_is_empty() && state.unmarked.is_empty()
}

/// Nothing is held any more: the next claim starts from the first due timer, and may take
/// this daemon's own claims again (what is left of them was not published).
fn end_run(state: &mut PollerState) {
    state.cursor = None;
    state.fence = None;
    state.fair_resume = None;
}

/// Claims due timers and queues them for publishing, until the hold limit is reached or nothing more
/// is due, then arranges the wake-up for the next `dueAt`; while a backlog lasts, lets the
/// tenants with nothing held have their share (a fair claim).
async fn fill(myself: &ActorRef<PollerMsg>, state: &mut PollerState) {
    fill_claims(myself, state).await;
    state.pipe.launch();
}

async fn fill_claims(myself: &ActorRef<PollerMsg>, state: &mut PollerState) {
    let persistence = state.args.registry.persistence();
    let batch_size = state.args.batch_size.max(1);
    let claim = claim_size(batch_size);
    // A backlog: the last claim came back full (or its round was cut short), or timers wait.
    let mut backlog = state.more_due || !state.pipe.queue_is_empty();
    // Whatever stops this round before it has planned the next wake-up (the hold limit is reached,
    // published timers wait for their mark) leaves batches in flight: claim again once they
    // settle, so no wake-up is lost.
    state.more_due = true;
    if let Some(until) = state.backoff_until {
        let now = tokio::time::Instant::now();
        if now < until {
            return wake_in(myself, state, until - now);
        }
        state.backoff_until = None;
    }
    if state.mark_failed {
        if !state.pipe.in_flight_is_empty() {
            // Marked once the batches in flight are settled.
            return;
        }
        if !mark_unmarked(state).await {
            return retry_later(myself, state);
        }
        tracing::info!(
            actor = "poller",
            "published timers marked Reached after failures"
        );
    }
    loop {
        // In every turn: while the broker fires what is held, this loop may go on claiming for
        // as long as a backlog lasts, and the other tenants' turns must come all the same.
        if backlog && !claim_fair(myself, state).await {
            return;
        }
        if state.pipe.held() + claim > hold_limit(batch_size) {
            return;
        }
        let now = state.args.clock.now();
        let started = std::time::Instant::now();
        let after = if holds_nothing(state) {
            None
        } else {
            state.cursor.clone()
        };
        let batch = match persistence.claim_due(now, after, claim, state.fence).await {
            Ok(batch) => {
                if let Some(server_now) = batch.server_now {
                    learn_offset(state, server_now - state.args.clock.now());
                }
                batch
            }
            Err(e) => {
                tracing::warn!(actor = "poller", error = %e, "cannot read due timers; retrying");
                return retry_later(myself, state);
            }
        };
        // The instant the timers were found due, by the clock that decided it: their
        // `reachedAt`.
        let decided_at = batch.server_now.unwrap_or(now);
        let full = batch.timers.len() >= claim;
        state.more_due = full;
        if let Some(last) = batch.timers.last() {
            state.cursor = Some(last.position());
        }
        hold(state, batch.timers, decided_at, started);
        if !full {
            // Nothing more is due now: sleep until the next timer is.
            match batch.next_due_at {
                Some(at) => wake_at(myself, state, at),
                None => state.wake = None,
            }
            return;
        }
        backlog = true;
    }
}

/// Queues claimed timers for publishing. The first claim of a run fences this daemon's own
/// claims: those made from now on are held, and no claim takes them again while they are.
fn hold(
    state: &mut PollerState,
    timers: Vec<DueTimer>,
    decided_at: DateTime<Utc>,
    started: std::time::Instant,
) {
    if timers.is_empty() {
        return;
    }
    if state.fence.is_none() {
        // A claim's lease ends at its instant plus the lease (to the millisecond, truncated):
        // a millisecond less is below every lease of this run's claims.
        let lease = chrono::Duration::from_std(state.args.lease).unwrap_or_default();
        state.fence = Some(decided_at + lease - chrono::Duration::milliseconds(1));
    }
    state.pipe.hold(timers.into_iter().map(|timer| Waiting {
        timer,
        reached_at: decided_at,
        started,
    }));
}

/// While timers are queued, at most every [`FAIR_EVERY`]: claims a share of the due timers of
/// every tenant that has none queued or at the broker. Returns false when the claim failed (a retry is
/// arranged).
async fn claim_fair(myself: &ActorRef<PollerMsg>, state: &mut PollerState) -> bool {
    let due_for_one = state.last_fair.is_none_or(|at| at.elapsed() >= FAIR_EVERY);
    // Between runs (the broker fired everything held before the next claim came back), no
    // claim of this daemon's is taken again by a fair claim: the claim in `dueAt` order, which
    // follows, takes those.
    let fence = state.fence.unwrap_or(DateTime::UNIX_EPOCH);
    if !due_for_one || state.pipe.held() >= 2 * hold_limit(state.args.batch_size) {
        return true;
    }
    state.last_fair = Some(tokio::time::Instant::now());
    let now = state.args.clock.now();
    let started = std::time::Instant::now();
    let claimed = state
        .args
        .registry
        .persistence()
        .claim_fair(
            now,
            state.pipe.held_tenants(),
            state.fair_resume.clone(),
            FAIR_CLAIM,
            fence,
        )
        .await;
    match claimed {
        Ok(fair) => {
            if let Some(server_now) = fair.batch.server_now {
                learn_offset(state, server_now - state.args.clock.now());
            }
            state.fair_resume = fair.resume_after;
            tracing::debug!(
                actor = "poller",
                claimed = fair.batch.timers.len(),
                "fair claim for the tenants with nothing held"
            );
            let decided_at = fair.batch.server_now.unwrap_or(now);
            hold(state, fair.batch.timers, decided_at, started);
            true
        }
        Err(e) => {
            tracing::warn!(actor = "poller", error = %e, "cannot read due timers; retrying");
            retry_later(myself, state);
            false
        }
    }
}

/// Marks what the broker acknowledged, in one transaction for all the batches settled; schedules
/// a retry for what it did not acknowledge.
async fn settle(myself: &ActorRef<PollerMsg>, state: &mut PollerState, settled: Vec<Published>) {
    let mut error = None;
    for mut published in settled {
        if let Some(e) = published.error.take() {
            error.get_or_insert(e);
        }
        if !published.fired.is_empty() {
            state.unmarked.push(published);
        }
    }
    let waiting: usize = state.unmarked.iter().map(|p| p.fired.len()).sum();
    // One mark for many batches: a transaction per batch cost more than the marks themselves
    // (on PostgreSQL, four round trips each). Before anything is claimed from the first due
    // timer again, every one is marked: nothing is in flight then.
    let due = waiting >= MARK_AT_LEAST || (waiting > 0 && state.pipe.in_flight_is_empty());
    if due && !mark_unmarked(state).await {
        return retry_later(myself, state);
    }
    match error {
        Some(error) => {
            tracing::warn!(actor = "poller", error = %error,
                "DueTimeReached not acknowledged by the broker; timers stay Scheduled and are retried");
            // They are behind the cursor, and claimed by this run: claim from the first due
            // timer once nothing is held, whatever wake-up is planned by then.
            state.recheck = true;
            retry_later(myself, state);
        }
        None if state.failed_rounds > 0 => {
            tracing::info!(actor = "poller", "firing again after failures");
            state.failed_rounds = 0;
        }
        None => {}
    }
}

/// Marks every published batch still waiting for its `Reached` mark, in one transaction;
/// returns whether all are marked. What fails stays waiting (the events are out; the rows stay
/// `Scheduled` until then) and one error is logged for the attempt.
async fn mark_unmarked(state: &mut PollerState) -> bool {
    let batches: Vec<(Arc<[DueTimer]>, DateTime<Utc>)> = state
        .unmarked
        .iter()
        .map(|p| (p.fired.clone(), p.reached_at))
        .collect();
    match state
        .args
        .registry
        .persistence()
        .mark_reached(batches)
        .await
    {
        Ok(marked) => {
            state.mark_failed = false;
            metrics::counter!(crate::telemetry::SCHEDULES_PROCESSED).increment(marked);
            let round = metrics::histogram!(crate::telemetry::POLLING_DURATION);
            for published in state.unmarked.drain(..) {
                round.record(published.started.elapsed().as_secs_f64());
            }
            true
        }
        Err(e) => {
            state.mark_failed = true;
            let waiting: usize = state.unmarked.iter().map(|p| p.fired.len()).sum();
            tracing::error!(actor = "poller", error = %e, waiting,
                "published timers not marked Reached; retrying before firing more");
            false
        }
    }
}

/// Publishes `DueTimeReached` for each timer, stamped `reached_at`. Lateness is measured to
/// the broker's acknowledgement: a timer is fired when its event is stored, not when claimed.
async fn publish(
    bus: &dyn EventBus,
    clock: &dyn Clock,
    subjects: &Subjects,
    due: Vec<DueTimer>,
    reached_at: DateTime<Utc>,
    started: std::time::Instant,
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
    let handed_over = std::time::Instant::now();
    let results = bus.publish_all(events).await;
    let took = handed_over.elapsed();
    let acknowledged_at = clock.now();
    let lateness = metrics::histogram!(crate::telemetry::FIRE_LATENESS);
    let mut fired = Vec::with_capacity(timers.len());
    let mut error = None;
    for (timer, result) in timers.into_iter().zip(results) {
        match result {
            Ok(()) => {
                tracing::debug!(actor = "poller", tenant_id = %timer.tenant_id,
                    service_call_id = %timer.service_call_id, due_at = %timer.due_at,
                    lateness_ms = (reached_at - timer.due_at).num_milliseconds(),
                    "DueTimeReached published");
                let late = (acknowledged_at - timer.due_at)
                    .to_std()
                    .unwrap_or_default();
                lateness.record(late.as_secs_f64());
                crate::telemetry::record_fired(&timer.tenant_id, late);
                fired.push(timer);
            }
            Err(e) => {
                error.get_or_insert(e.0);
            }
        }
    }
    Published {
        fired: fired.into(),
        reached_at,
        started,
        error,
        took,
    }
}
