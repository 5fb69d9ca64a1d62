//! Persistence actor: owns the database connection and serialises every access to it, so
//! SQLite sees a single writer and never lock contention. Each message is one transaction.
//!
//! A storage fault (a full disk, an I/O error, a file made read-only, a lock held past the busy
//! timeout, the file removed or replaced) is replied to the caller, who keeps the work and
//! retries; it never fails the actor, so a long outage cannot use up the Supervisor's restart
//! budget and stop the daemon. After any failed operation the connection is closed (which rolls
//! back whatever SQLite still had open) and the next message opens a fresh one: each
//! transaction starts from a known state. While the file cannot be opened, every message is
//! answered "unavailable" until it can.
//!
//! A message carries one [`Operation`]: a [`Store`] method boxed with its reply, sent by the
//! [`PersistenceClient`]. Adding a query is adding its `Store` method and one client method.
//!
//! Every [`PROBE_INTERVAL`] it also proves that the database accepts writes (the file is the
//! one opened, its disk has room, a small write commits) and keeps the daemon's health up to
//! date with it, so readiness turns red within seconds of a fault even when nothing is being
//! stored.

use std::any::Any;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::future::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::supervisor::NamedActor;
use crate::health::Health;
use crate::storage::db::DatabaseTarget;
use crate::storage::{Claimant, Store, StoreError};

mod client;
pub use client::{CallError, PersistenceClient};

/// How often the health probe writes.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct Persistence;

impl NamedActor for Persistence {
    const NAME: &'static str = "persistence";
}

#[derive(Debug, Clone)]
pub struct PersistenceArgs {
    pub database: DatabaseTarget,
    pub health: Health,
    /// Who this daemon is when it claims due timers, and for how long.
    pub claimant: Claimant,
}

pub struct PersistenceState {
    args: PersistenceArgs,
    /// The open connection; `None` after a failure, until the next message reopens it.
    store: Option<Store>,
}

type Reply<T> = RpcReplyPort<Result<T, StoreError>>;

pub enum PersistenceMsg {
    /// One operation on the store (see [`PersistenceClient::run`]), which replies itself.
    Run(Operation),
    /// Prove the database accepts writes, and record the outcome in the health.
    Probe,
}

/// The work of one operation: what it does with the store (and this daemon's claimant),
/// borrowing them for the time of one transaction.
pub type Work<T> =
    Box<dyn for<'s> FnOnce(&'s Store, &'s Claimant) -> BoxFuture<'s, Result<T, StoreError>> + Send>;

/// One operation sent to Persistence: its name, whether it writes and how many rows it
/// concerns (for its log line and the health), and the work with its reply.
pub struct Operation {
    pub name: &'static str,
    pub kind: Op,
    pub rows: usize,
    job: Box<dyn Job>,
}

impl Operation {
    pub fn new<T: Send + 'static>(
        name: &'static str,
        kind: Op,
        rows: usize,
        work: Work<T>,
        reply: Reply<T>,
    ) -> Self {
        Self {
            name,
            kind,
            rows,
            job: Box::new(Typed { work, reply }),
        }
    }

    /// Answers the operation without running it: for a stand-in of Persistence in a test. An
    /// answer of another type than the operation's is dropped, and its caller sees no reply.
    pub fn answer<T: Send + 'static>(self, result: Result<T, StoreError>) {
        self.job.answer(Box::new(result));
    }
}

/// An operation with its result type erased, so that one message carries any of them.
trait Job: Send {
    fn run<'a>(
        self: Box<Self>,
        state: &'a mut PersistenceState,
        kind: Op,
        name: &'static str,
        rows: usize,
    ) -> BoxFuture<'a, ()>;

    fn answer(self: Box<Self>, result: Box<dyn Any + Send>);
}

struct Typed<T> {
    work: Work<T>,
    reply: Reply<T>,
}

impl<T: Send + 'static> Job for Typed<T> {
    /// Opens the store when needed, runs the work on it, and settles the outcome.
    fn run<'a>(
        self: Box<Self>,
        state: &'a mut PersistenceState,
        kind: Op,
        name: &'static str,
        rows: usize,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let started = Instant::now();
            let claimant = state.args.claimant.clone();
            let result = match state.open().await {
                Ok(store) => (self.work)(store, &claimant).await,
                Err(e) => Err(e),
            };
            state
                .settle(kind, name, rows, started, result, self.reply)
                .await;
        })
    }

    fn answer(self: Box<Self>, result: Box<dyn Any + Send>) {
        if let Ok(result) = result.downcast::<Result<T, StoreError>>() {
            let _ = self.reply.send(*result);
        }
    }
}

impl Actor for Persistence {
    type Msg = PersistenceMsg;
    type State = PersistenceState;
    type Arguments = PersistenceArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: PersistenceArgs,
    ) -> Result<PersistenceState, ActorProcessingErr> {
        let mut state = PersistenceState { args, store: None };
        // Opened now when possible; when not, the first message tries again. Failing here
        // would turn a storage outage into restarts, and restarts into a stopped daemon.
        if let Err(e) = state.open().await {
            tracing::warn!(actor = "persistence", error = %e,
                "database not available at start; retrying with each request");
        }
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut PersistenceState,
    ) -> Result<(), ActorProcessingErr> {
        // ractor ends the interval with the actor.
        myself.send_interval(PROBE_INTERVAL, || PersistenceMsg::Probe);
        myself.cast(PersistenceMsg::Probe)?;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut PersistenceState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(store) = state.store.take() {
            store.close().await?;
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: PersistenceMsg,
        state: &mut PersistenceState,
    ) -> Result<(), ActorProcessingErr> {
        let operation = match message {
            PersistenceMsg::Run(operation) => operation,
            PersistenceMsg::Probe => {
                // Nobody waits for the answer: the health is what it is for.
                let (reply, _) = ractor::concurrency::oneshot();
                Operation::new(
                    "probe",
                    Op::Write,
                    0,
                    Box::new(|store, claimant| Box::pin(store.probe(&claimant.name, Utc::now()))),
                    reply.into(),
                )
            }
        };
        let Operation {
            name,
            kind,
            rows,
            job,
        } = operation;
        job.run(state, kind, name, rows).await;
        Ok(())
    }
}

/// Whether an operation writes: only a committed write proves that storage works again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

impl PersistenceState {
    /// The open store, opening the file first when the last operation closed it.
    async fn open(&mut self) -> Result<&Store, StoreError> {
        if self.store.is_none() {
            let store = Store::open(&self.args.database)
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            tracing::debug!(actor = "persistence", database = %self.args.database.describe(),
                "database opened");
            self.store = Some(store);
        }
        self.store
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("not open".into()))
    }

    /// Records the outcome (the connection closed after a failure, the health updated, the
    /// duration logged at debug: where an operator looks when firing runs late) and replies.
    /// Failures are logged by the caller, who knows what it will do about them.
    async fn settle<T>(
        &mut self,
        op: Op,
        operation: &'static str,
        rows: usize,
        started: Instant,
        result: Result<T, StoreError>,
        reply: Reply<T>,
    ) {
        let elapsed_us = started.elapsed().as_micros() as u64;
        match &result {
            Ok(_) => {
                tracing::debug!(
                    actor = "persistence",
                    operation,
                    rows,
                    elapsed_us,
                    "transaction done"
                );
                if op == Op::Write {
                    self.args.health.storage_ok();
                }
            }
            Err(e) => {
                tracing::debug!(actor = "persistence", operation, rows, elapsed_us, error = %e,
                    "database operation failed");
                if e.needs_reopen() {
                    if self.args.health.status().storage_error.is_none() {
                        tracing::warn!(actor = Persistence::NAME, operation, error = %e,
                            "the database does not accept writes; not ready until it does");
                    }
                    self.args.health.storage_failed(e.to_string());
                    if let Some(store) = self.store.take()
                        && let Err(close) = store.close().await
                    {
                        tracing::debug!(actor = "persistence", error = %close,
                            "closing the failed connection reported an error");
                    }
                }
            }
        }
        let _ = reply.send(result);
    }
}
