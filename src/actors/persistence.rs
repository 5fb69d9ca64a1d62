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
//!
//! On PostgreSQL every operation (the opening of the connection included) has a deadline,
//! `[postgres] operation_timeout` ([`PROBE_TIMEOUT`] for the probe): a frozen or unreachable
//! server answers nothing, not even the errors of its own time limits. An operation past its
//! deadline fails as "unavailable" like any outage: its caller keeps the work and retries, and
//! a commit that may or may not have happened counts as not done (a command is then applied
//! again, which changes nothing). Its connection is abandoned, never waited for. Meanwhile a
//! watchdog task keeps the health's write proof honest ([`crate::health`]), since nothing else
//! happens in this actor while an operation hangs. SQLite operations have no deadline: the
//! file is local, and a statement given up on keeps running in the driver's worker thread,
//! holding the write lock the next connection would wait for.

use std::any::Any;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::future::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio_util::task::AbortOnDropHandle;

use super::supervisor::NamedActor;
use crate::health::Health;
use crate::storage::db::DatabaseTarget;
use crate::storage::{Claimant, PostgresSettings, Store, StoreError};

mod client;
pub use client::{CallError, PersistenceClient};

/// How often the health probe writes.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// The probe's own deadline on PostgreSQL (shorter than other operations': it is one small
/// write, and its failure is what readiness waits for).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How often the watchdog brings the health's write proof up to date.
const WATCHDOG_INTERVAL: Duration = Duration::from_millis(250);

/// How long operations are answered "unavailable" at once, on PostgreSQL, after the database
/// could not be reached.
const REOPEN_PAUSE: Duration = Duration::from_secs(1);

/// How long an abandoned connection is given to close in the background (and the connection
/// at the actor's stop, on PostgreSQL).
const ABANDON_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// Time limits on PostgreSQL (unused on SQLite).
    pub postgres: PostgresSettings,
}

impl PersistenceArgs {
    /// The deadline of an operation: `[postgres] operation_timeout` on PostgreSQL (the probe's
    /// shorter one for the probe); none on SQLite.
    fn deadline(&self, operation: &str) -> Option<Duration> {
        match self.database {
            DatabaseTarget::Sqlite { .. } => None,
            DatabaseTarget::Postgres { .. } if operation == PROBE => {
                Some(PROBE_TIMEOUT.min(self.postgres.operation_timeout))
            }
            DatabaseTarget::Postgres { .. } => Some(self.postgres.operation_timeout),
        }
    }
}

/// The name of the health probe's operation.
const PROBE: &str = "probe";

pub struct PersistenceState {
    args: PersistenceArgs,
    /// The open connection; `None` after a failure, until the next message reopens it.
    store: Option<Store>,
    /// When the last probe started: probes queued behind a slow operation are run once, not
    /// one after another.
    last_probe: Option<Instant>,
    /// Until when, and why, operations fail at once (see [`PersistenceState::pause_reopening`]).
    reopen_after: Option<(Instant, String)>,
    /// Ends with the actor.
    _watchdog: AbortOnDropHandle<()>,
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
            let deadline = state.args.deadline(name);
            let health = state.args.health.clone();
            let Typed { work, reply } = *self;
            let work = async {
                match state.open().await {
                    Ok(store) => work(store, &claimant).await,
                    Err(e) => Err(e),
                }
            };
            if deadline.is_some() {
                health.waiting_on_database(true);
            }
            let (result, timed_out) = within(deadline, name, work).await;
            if deadline.is_some() {
                health.waiting_on_database(false);
            }
            if timed_out {
                state.abandon();
                if let Err(e) = &result {
                    state.pause_reopening(e);
                }
            }
            state.settle(kind, name, rows, started, result, reply).await;
        })
    }

    fn answer(self: Box<Self>, result: Box<dyn Any + Send>) {
        if let Ok(result) = result.downcast::<Result<T, StoreError>>() {
            let _ = self.reply.send(*result);
        }
    }
}

/// Runs `work` within `deadline` when there is one (PostgreSQL: a frozen server never
/// answers); past it, fails as "unavailable", and says that it timed out.
async fn within<T>(
    deadline: Option<Duration>,
    name: &str,
    work: impl Future<Output = Result<T, StoreError>>,
) -> (Result<T, StoreError>, bool) {
    let Some(limit) = deadline else {
        return (work.await, false);
    };
    match tokio::time::timeout(limit, work).await {
        Ok(result) => (result, false),
        Err(_) => (
            Err(StoreError::Unavailable(format!(
                "{name} timed out after {limit:?} (the database does not answer)"
            ))),
            true,
        ),
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
        let health = args.health.clone();
        let watchdog = tokio::spawn(async move {
            let mut every = tokio::time::interval(WATCHDOG_INTERVAL);
            loop {
                every.tick().await;
                health.check_storage();
            }
        });
        let deadline = args.deadline("open");
        let mut state = PersistenceState {
            args,
            store: None,
            last_probe: None,
            reopen_after: None,
            _watchdog: AbortOnDropHandle::new(watchdog),
        };
        // Opened now when possible; when not, the first message tries again. Failing here
        // would turn a storage outage into restarts, and restarts into a stopped daemon.
        let (opened, _) = within(deadline, "open", async { state.open().await.map(|_| ()) }).await;
        if let Err(e) = opened {
            state.abandon();
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
            match state.args.deadline("close") {
                None => store.close().await?,
                // A server that does not answer must not hold the daemon's stop.
                Some(_) => {
                    if let Ok(closed) =
                        tokio::time::timeout(ABANDON_CLOSE_TIMEOUT, store.close()).await
                    {
                        closed?;
                    }
                }
            }
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
                // Probes that queued up behind a slow operation prove nothing more than one.
                if state
                    .last_probe
                    .is_some_and(|at| at.elapsed() < PROBE_INTERVAL / 2)
                {
                    return Ok(());
                }
                state.last_probe = Some(Instant::now());
                // Nobody waits for the answer: the health is what it is for.
                let (reply, _) = ractor::concurrency::oneshot();
                Operation::new(
                    PROBE,
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
            if let Some((until, cause)) = &self.reopen_after
                && Instant::now() < *until
            {
                return Err(StoreError::Unavailable(cause.clone()));
            }
            let opened = Store::open_with(&self.args.database, &self.args.postgres).await;
            let store = opened.map_err(|e| {
                let e = StoreError::Unavailable(e.to_string());
                self.pause_reopening(&e);
                e
            })?;
            self.reopen_after = None;
            tracing::debug!(actor = "persistence", database = %self.args.database.describe(),
                "database opened");
            self.store = Some(store);
        }
        self.store
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("not open".into()))
    }

    /// On PostgreSQL, answers the operations of the next [`REOPEN_PAUSE`] with `cause` instead
    /// of trying to connect: each attempt on a server that does not answer lasts the connect
    /// timeout, and the operations queued meanwhile (every caller's retries, each API request)
    /// would otherwise each wait that long in turn, their callers' patience running out long
    /// after the server is back.
    fn pause_reopening(&mut self, cause: &StoreError) {
        if self.args.deadline("open").is_some() {
            let cause = match cause {
                StoreError::Unavailable(cause) => cause.clone(),
                other => other.to_string(),
            };
            self.reopen_after = Some((Instant::now() + REOPEN_PAUSE, cause));
        }
    }

    /// Lets go of a connection whose operation was given up on, without waiting: closing it
    /// would wait for the server that does not answer. It is closed in the background, within
    /// a bound; whatever it still holds on the server is released when its socket closes.
    fn abandon(&mut self) {
        if let Some(store) = self.store.take() {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(ABANDON_CLOSE_TIMEOUT, store.close()).await;
            });
        }
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
                    if self.args.deadline(operation).is_some() {
                        // A server that stopped answering would hold the close too.
                        self.abandon();
                    } else if let Some(store) = self.store.take()
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
