//! The publishing side of the Poller: the claimed timers queued by tenant, the batches at the
//! broker and the broker's window, shared with the tasks that publish. A task whose batch the
//! broker has answered hands the next batches over itself, so the broker stays busy while the
//! Poller waits for a claim or a mark (a window of a few milliseconds of work is soon empty,
//! and a claim on PostgreSQL takes tens of them).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use ractor::ActorRef;
use ractor::concurrency::OneshotReceiver;
use tokio::sync::oneshot::error::TryRecvError;

use super::queue::{Queue, Waiting};
use super::window::BrokerWindow;
use super::{PollerArgs, PollerMsg, Published, publish};
use crate::domain::{DueTimer, Subjects};
use crate::ports::{Clock, EventBus};

#[derive(Clone)]
pub struct Pipeline {
    inner: Arc<Mutex<Inner>>,
    myself: ActorRef<PollerMsg>,
    bus: Arc<dyn EventBus>,
    clock: Arc<dyn Clock>,
    subjects: Subjects,
    batch_size: usize,
}

struct Inner {
    queue: Queue,
    /// Timers queued or at the broker, by tenant.
    held: HashMap<String, usize>,
    /// The batches handed to the broker, oldest first, each yielding its outcome.
    in_flight: VecDeque<OneshotReceiver<Published>>,
    /// Timers in batches the broker has not answered yet, and how many may be.
    publishing: usize,
    window: BrokerWindow,
}

/// Batches whose outcome is in, oldest first, and how many ended without one.
pub struct Settled {
    pub published: Vec<Published>,
    pub lost: usize,
}

impl Pipeline {
    pub fn new(myself: ActorRef<PollerMsg>, args: &PollerArgs) -> Self {
        let batch_size = args.batch_size.max(1);
        Self {
            inner: Arc::new(Mutex::new(Inner {
                queue: Queue::default(),
                held: HashMap::new(),
                in_flight: VecDeque::new(),
                publishing: 0,
                window: BrokerWindow::new(batch_size),
            })),
            myself,
            bus: args.bus.clone(),
            clock: args.clock.clone(),
            subjects: args.subjects.clone(),
            batch_size,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No code panics while holding it; should one have, the counts are still whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues claimed timers and hands what the window allows to the broker.
    pub fn hold(&self, timers: impl IntoIterator<Item = Waiting>) {
        {
            let mut inner = self.lock();
            for waiting in timers {
                *inner
                    .held
                    .entry(waiting.timer.tenant_id.clone())
                    .or_default() += 1;
                inner.queue.push(waiting);
            }
        }
        self.launch();
    }

    /// Timers queued or at the broker.
    pub fn held(&self) -> usize {
        let inner = self.lock();
        inner.queue.len() + inner.publishing
    }

    /// Tenants with timers queued or at the broker: a fair claim leaves them out (it would
    /// only step over their claimed rows).
    pub fn held_tenants(&self) -> BTreeSet<String> {
        self.lock().held.keys().cloned().collect()
    }

    pub fn queue_is_empty(&self) -> bool {
        self.lock().queue.is_empty()
    }

    /// No batch handed to the broker is waiting to be settled.
    pub fn in_flight_is_empty(&self) -> bool {
        self.lock().in_flight.is_empty()
    }

    /// The batches, oldest first, whose outcome is in; stops at the first still publishing.
    pub fn take_settled(&self) -> Settled {
        let mut inner = self.lock();
        let mut settled = Settled {
            published: Vec::new(),
            lost: 0,
        };
        while let Some(batch) = inner.in_flight.front_mut() {
            match batch.try_recv() {
                Ok(published) => settled.published.push(published),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => settled.lost += 1,
            }
            inner.in_flight.pop_front();
        }
        settled
    }

    /// Every batch at the broker, for a stop to wait for; nothing more is handed over.
    pub fn take_in_flight(&self) -> Vec<OneshotReceiver<Published>> {
        let mut inner = self.lock();
        inner.queue = Queue::default();
        inner.held.clear();
        inner.in_flight.drain(..).collect()
    }

    /// Hands queued timers to the broker, a batch at a time, while the window has room.
    pub fn launch(&self) {
        let mut inner = self.lock();
        while inner.publishing < inner.window.size() && !inner.queue.is_empty() {
            let batch = inner.queue.next_batch(self.batch_size);
            // One `reachedAt` per batch: the latest of its claims' instants, at which every one
            // of its timers was due.
            let reached_at = batch.iter().map(|w| w.reached_at).max();
            let started = batch.iter().map(|w| w.started).min();
            let (Some(reached_at), Some(started)) = (reached_at, started) else {
                break;
            };
            let timers: Vec<DueTimer> = batch.into_iter().map(|w| w.timer).collect();
            inner.publishing += timers.len();
            let outcome = self.spawn(timers, reached_at, started);
            inner.in_flight.push_back(outcome);
        }
    }

    /// Publishes one batch in the background; its outcome is in the returned receiver before
    /// the Poller is told to look at it.
    fn spawn(
        &self,
        due: Vec<DueTimer>,
        reached_at: DateTime<Utc>,
        started: std::time::Instant,
    ) -> OneshotReceiver<Published> {
        let pipeline = self.clone();
        let (outcome, receiver) = ractor::concurrency::oneshot();
        let mut tenants: HashMap<String, usize> = HashMap::new();
        for timer in &due {
            *tenants.entry(timer.tenant_id.clone()).or_default() += 1;
        }
        tokio::spawn(async move {
            let size = due.len();
            let published = publish(
                pipeline.bus.as_ref(),
                pipeline.clock.as_ref(),
                &pipeline.subjects,
                due,
                reached_at,
                started,
            )
            .await;
            {
                let mut inner = pipeline.lock();
                inner.publishing -= size;
                inner.window.observe(published.took);
                for (tenant, count) in tenants {
                    if let Some(held) = inner.held.get_mut(&tenant) {
                        *held = held.saturating_sub(count);
                        if *held == 0 {
                            inner.held.remove(&tenant);
                        }
                    }
                }
            }
            let sent = outcome.send(published).is_ok();
            pipeline.launch();
            if sent {
                let _ = pipeline.myself.cast(PollerMsg::BatchPublished);
            }
        });
        receiver
    }
}
