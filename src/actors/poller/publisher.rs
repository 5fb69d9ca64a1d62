//! The publishing stage, owned by the Poller: claimed timers queued by tenant (`queue`), handed
//! to the broker a batch at a time while the broker's window (`window`) has room. Each batch is
//! published by a task of its own, which sends its outcome back as `PollerMsg::Published`; on
//! each outcome the next batches are handed over at once. The Poller never waits for
//! Persistence inside a message, so the broker stays busy while a claim or a mark is under way
//! (a window of a few milliseconds of work is soon empty, and a claim on PostgreSQL takes tens
//! of them).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use ractor::ActorRef;
use tokio::task::JoinHandle;

use super::marks::Fired;
use super::queue::{Queue, Waiting};
use super::window::BrokerWindow;
use super::{PollerArgs, PollerMsg};
use crate::domain::events::{TIMER_EXPIRED, due_message_id, firing_event};
use crate::domain::{DueTimer, Subjects};
use crate::ports::{Clock, EventBus, OutgoingEvent, Stored};
use crate::telemetry::spans;

/// A batch handed to the broker, named in its outcome's message.
pub type BatchId = u64;

/// What the broker made of one batch.
#[derive(Clone)]
pub struct Published {
    /// The timers it acknowledged, owed their `Reached` mark.
    pub fired: Fired,
    /// The first error, when some were not acknowledged (they stay `Scheduled`).
    pub error: Option<String>,
    /// From hand-over to the broker's last answer.
    pub took: Duration,
}

/// Outcomes that came in since the Poller last took them.
#[derive(Default)]
pub struct Answers {
    pub published: Vec<Published>,
    /// Batches whose task ended without an outcome (it panicked).
    pub lost: usize,
}

impl Answers {
    pub fn is_empty(&self) -> bool {
        self.published.is_empty() && self.lost == 0
    }
}

/// A batch at the broker.
struct AtBroker {
    /// Its timers by tenant, held until it is answered.
    tenants: HashMap<String, usize>,
    size: usize,
    /// Yields the outcome to a stop, which reads no more messages. `None`: the task panicked.
    task: JoinHandle<Option<Published>>,
}

pub struct Publisher {
    queue: Queue,
    /// Timers queued or at the broker, by tenant.
    held: HashMap<String, usize>,
    /// The batches at the broker (handed over, not answered), oldest first.
    at_broker: BTreeMap<BatchId, AtBroker>,
    /// Timers in those batches.
    publishing: usize,
    window: BrokerWindow,
    answers: Answers,
    next_batch: BatchId,
    myself: ActorRef<PollerMsg>,
    bus: Arc<dyn EventBus>,
    clock: Arc<dyn Clock>,
    subjects: Subjects,
    batch_size: usize,
}

impl Publisher {
    pub fn new(myself: ActorRef<PollerMsg>, args: &PollerArgs) -> Self {
        let batch_size = args.batch_size.max(1);
        Self {
            queue: Queue::default(),
            held: HashMap::new(),
            at_broker: BTreeMap::new(),
            publishing: 0,
            window: BrokerWindow::new(batch_size),
            answers: Answers::default(),
            next_batch: 0,
            myself,
            bus: args.bus.clone(),
            clock: args.clock.clone(),
            subjects: args.subjects.clone(),
            batch_size,
        }
    }

    /// Queues claimed timers and hands what the window allows to the broker.
    pub fn hold(&mut self, timers: impl IntoIterator<Item = Waiting>) {
        for waiting in timers {
            let tenant = waiting.timer.tenant_id.clone();
            self.queue.push(&tenant, waiting);
            *self.held.entry(tenant).or_default() += 1;
        }
        self.launch();
    }

    /// Timers queued or at the broker.
    pub fn held(&self) -> usize {
        self.queue.len() + self.publishing
    }

    /// Tenants with timers queued or at the broker.
    pub fn held_tenants(&self) -> BTreeSet<String> {
        self.held.keys().cloned().collect()
    }

    pub fn queue_is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn batches_at_broker(&self) -> bool {
        !self.at_broker.is_empty()
    }

    /// Nothing queued, at the broker, or answered and not yet taken.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.at_broker.is_empty() && self.answers.is_empty()
    }

    /// The broker answered `batch` (`None`: its task ended without an outcome): its timers are
    /// no longer held, and the next batches go to the broker at once.
    pub fn answered(&mut self, batch: BatchId, outcome: Option<Published>) {
        let Some(at_broker) = self.at_broker.remove(&batch) else {
            return;
        };
        self.publishing -= at_broker.size;
        for (tenant, count) in at_broker.tenants {
            if let Some(held) = self.held.get_mut(&tenant) {
                *held = held.saturating_sub(count);
                if *held == 0 {
                    self.held.remove(&tenant);
                }
            }
        }
        match outcome {
            Some(published) => {
                self.window.observe(published.took);
                self.answers.published.push(published);
            }
            None => self.answers.lost += 1,
        }
        self.launch();
    }

    /// The outcomes in since the last call, for the Poller to settle.
    pub fn take_answers(&mut self) -> Answers {
        std::mem::take(&mut self.answers)
    }

    /// For a stop: the outcomes in, and the batches still at the broker to wait for. The queue
    /// is dropped (its timers stay claimed, and are claimed again after a restart).
    pub fn stop(&mut self) -> (Answers, Vec<JoinHandle<Option<Published>>>) {
        self.queue = Queue::default();
        self.held.clear();
        self.publishing = 0;
        let at_broker = std::mem::take(&mut self.at_broker);
        let tasks = at_broker.into_values().map(|batch| batch.task).collect();
        (self.take_answers(), tasks)
    }

    /// Hands queued timers to the broker, a batch at a time, while the window has room.
    fn launch(&mut self) {
        while self.publishing < self.window.size() && !self.queue.is_empty() {
            let batch = self.queue.pop_many(self.batch_size);
            // One `reachedAt` per batch: the latest of its claims' instants, at which every one
            // of its timers was due. A batch with a timer that may expire is stamped when it is
            // handed over: its timers may have waited in the queue, and whether they expired is
            // decided by the stamp (`events::firing_event`). The hand-over is told by the
            // clock of the store that decided the claim (the server's on PostgreSQL): the
            // claim's instant and the time since its answer was taken (a little less than since
            // it was decided, so never later than now), never by this daemon's wall clock,
            // which may run ahead.
            let expiring = batch.iter().any(|w| w.timer.expires_at.is_some());
            let reached_at = if expiring {
                batch.iter().map(|w| w.reached_at + since(w.held_at)).max()
            } else {
                batch.iter().map(|w| w.reached_at).max()
            };
            let started = batch.iter().map(|w| w.started).min();
            let (Some(reached_at), Some(started)) = (reached_at, started) else {
                break;
            };
            let mut tenants: HashMap<String, usize> = HashMap::new();
            let timers: Vec<DueTimer> = batch.into_iter().map(|w| w.timer).collect();
            for timer in &timers {
                *tenants.entry(timer.tenant_id.clone()).or_default() += 1;
            }
            let id = self.next_batch;
            self.next_batch += 1;
            let size = timers.len();
            self.publishing += size;
            let task = self.spawn(id, timers, reached_at, started);
            self.at_broker.insert(
                id,
                AtBroker {
                    tenants,
                    size,
                    task,
                },
            );
        }
    }

    /// Publishes one batch in a task of its own, which sends the outcome back as a message and
    /// returns it too.
    fn spawn(
        &self,
        id: BatchId,
        timers: Vec<DueTimer>,
        reached_at: DateTime<Utc>,
        started: std::time::Instant,
    ) -> JoinHandle<Option<Published>> {
        let (myself, bus, clock) = (self.myself.clone(), self.bus.clone(), self.clock.clone());
        let subjects = self.subjects.clone();
        tokio::spawn(async move {
            let publishing = publish(bus.as_ref(), clock.as_ref(), &subjects, timers, reached_at);
            // A panic is an outcome too, or the window would stay taken by this batch.
            let outcome = AssertUnwindSafe(publishing).catch_unwind().await.ok().map(
                |(fired, error, took)| Published {
                    fired: Fired {
                        timers: fired.into(),
                        reached_at,
                        started,
                    },
                    error,
                    took,
                },
            );
            let _ = myself.cast(PollerMsg::Published(id, outcome.clone()));
            outcome
        })
    }
}

/// Publishes each timer's event stamped `reached_at` (its DueTimeReached, or its TimerExpired
/// past its deadline: `events::firing_event`); returns the timers the
/// broker acknowledged, the first error, and how long the broker took. Lateness is measured to
/// the broker's acknowledgement: a timer is fired when its event is stored, not when claimed.
/// An event the broker already held (a duplicate) is marked like any other but counted as
/// fired, and its lateness recorded, only once: by the publish that stored it.
async fn publish(
    bus: &dyn EventBus,
    clock: &dyn Clock,
    subjects: &Subjects,
    due: Vec<DueTimer>,
    reached_at: DateTime<Utc>,
) -> (Vec<DueTimer>, Option<String>, Duration) {
    let mut events = Vec::with_capacity(due.len());
    let mut timers = Vec::with_capacity(due.len());
    let mut spans = Vec::new();
    let (due, held_back) = hold_back_expiring(bus, due);
    for timer in due {
        match firing_event(&timer, reached_at) {
            Ok((kind, payload)) => {
                let subject = if kind == TIMER_EXPIRED {
                    subjects.expired(&timer.tenant_id)
                } else {
                    subjects.due(&timer.tenant_id)
                };
                let message_id = due_message_id(&timer);
                // The event carries its publish span on, when one is recorded.
                let span =
                    spans::publish(timer.trace.as_ref(), &subject, &message_id, payload.len());
                let trace = span.carried(timer.trace.as_ref());
                if spans::enabled() {
                    spans.push(span);
                }
                events.push(OutgoingEvent {
                    subject,
                    message_id,
                    payload: payload.into(),
                    trace,
                });
                timers.push(timer);
            }
            Err(e) => tracing::error!(actor = "poller", tenant_id = %timer.tenant_id,
                service_call_id = %timer.service_call_id, error = %e,
                "cannot encode the timer's event"),
        }
    }
    let handed_over = std::time::Instant::now();
    let results = bus.publish_all(events).await;
    let took = handed_over.elapsed();
    let acknowledged_at = clock.now();
    let lateness = metrics::histogram!(crate::telemetry::FIRE_LATENESS);
    end_spans(spans, &results);
    let mut fired = Vec::with_capacity(timers.len());
    let mut error = held_back;
    for (timer, result) in timers.into_iter().zip(results) {
        match result {
            Ok(Stored::Duplicate) => {
                metrics::counter!(crate::telemetry::EVENTS_DUPLICATE).increment(1);
                fired.push(timer);
            }
            Ok(Stored::New) => {
                let expired = timer.expired_at(reached_at);
                let lateness_ms = (reached_at - timer.due_at).num_milliseconds();
                if expired {
                    tracing::debug!(actor = "poller", tenant_id = %timer.tenant_id,
                        service_call_id = %timer.service_call_id, due_at = %timer.due_at,
                        lateness_ms, "TimerExpired published");
                } else {
                    tracing::debug!(actor = "poller", tenant_id = %timer.tenant_id,
                        service_call_id = %timer.service_call_id, due_at = %timer.due_at,
                        lateness_ms, "DueTimeReached published");
                }
                let late = (acknowledged_at - timer.due_at)
                    .to_std()
                    .unwrap_or_default();
                lateness.record(late.as_secs_f64());
                crate::telemetry::record_fired(&timer.tenant_id, late, expired);
                fired.push(timer);
            }
            Err(e) => {
                error.get_or_insert(e.0);
            }
        }
    }
    (fired, error, took)
}

/// The time since `then`, as a span of the store's clock.
fn since(then: std::time::Instant) -> chrono::Duration {
    chrono::Duration::from_std(then.elapsed()).unwrap_or_default()
}

/// While the broker link is down, the timers that may expire are kept from the client (see
/// `EventBus::link_up`): they stay claimed, fail as unpublished, and are claimed again, and
/// decided again, once the link is back. The rest go as always; the error is the batch's.
fn hold_back_expiring(bus: &dyn EventBus, due: Vec<DueTimer>) -> (Vec<DueTimer>, Option<String>) {
    if due.iter().all(|t| t.expires_at.is_none()) || bus.link_up() {
        return (due, None);
    }
    let (expiring, rest): (Vec<DueTimer>, Vec<DueTimer>) =
        due.into_iter().partition(|t| t.expires_at.is_some());
    let error = format!(
        "the broker link is down: {} timers with expireAfter wait for it",
        expiring.len()
    );
    (rest, Some(error))
}

/// Ends the publish spans (one per event, or none without an exporter) at the broker's answer.
fn end_spans(spans: Vec<spans::Span>, results: &[crate::ports::Published]) {
    let answered = std::time::SystemTime::now();
    for (span, result) in spans.into_iter().zip(results) {
        let outcome = match result {
            Ok(stored) => Ok(*stored == Stored::Duplicate),
            Err(e) => Err(e.0.as_str()),
        };
        span.answered(answered, outcome);
    }
}
