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
//! Every [`PROBE_INTERVAL`] it also proves that the database accepts writes (the file is the
//! one opened, its disk has room, a small write commits) and keeps the daemon's health up to
//! date with it, so readiness turns red within seconds of a fault even when nothing is being
//! stored.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::concurrency::JoinHandle;

use chrono::{DateTime, Utc};
use ractor::concurrency::OneshotReceiver;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::domain::api::{ListFilter, ListPage, TenantStats};
use crate::domain::{CancelOutcome, Command, DuePosition, DueTimer, StreamIncarnation, Timer};
use crate::health::Health;
use crate::storage::db::DatabaseTarget;
use crate::storage::{Claimant, DueBatch, Store, StoreError};

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
    probe: Option<JoinHandle<()>>,
}

type Reply<T> = RpcReplyPort<Result<T, StoreError>>;

pub enum PersistenceMsg {
    /// Apply accepted commands (ScheduleTimer and CancelTimer), in stream order per key.
    Apply {
        commands: Vec<Command>,
        reply: Reply<u64>,
    },
    /// Claim the timers due at `now` (after `after`), up to `limit`, for firing.
    ClaimDue {
        now: DateTime<Utc>,
        after: Option<DuePosition>,
        limit: usize,
        reply: Reply<DueBatch>,
    },
    /// Mark published batches `Reached`, each at its own instant, in one transaction.
    MarkReached {
        batches: Vec<(Arc<[DueTimer]>, DateTime<Utc>)>,
        reply: Reply<u64>,
    },
    Get {
        tenant_id: String,
        service_call_id: String,
        reply: Reply<Option<Timer>>,
    },
    List {
        tenant_id: String,
        filter: ListFilter,
        limit: usize,
        reply: Reply<ListPage>,
    },
    Stats {
        tenant_id: String,
        now: DateTime<Utc>,
        reply: Reply<TenantStats>,
    },
    /// Apply one CancelTimer already ordered in the command stream, reporting how it went.
    Cancel {
        command: Command,
        reply: Reply<(CancelOutcome, Option<Timer>)>,
    },
    /// The epoch of an incarnation of the command stream, recorded the first time it is met.
    CommandEpoch {
        stream: StreamIncarnation,
        reply: Reply<u32>,
    },
    /// Delete up to `limit` timers finished before `cutoff` (retention).
    DeleteFinished {
        cutoff: DateTime<Utc>,
        limit: usize,
        reply: Reply<u64>,
    },
    /// Prove the database accepts writes, and record the outcome in the health.
    Probe,
    /// Copy into the database file the few WAL frames written since the Checkpointer's last
    /// complete checkpoint (SQLite), so that the next commit starts the WAL from its beginning.
    CatchUpWal,
}

/// Opens the store when needed, runs one operation on it, and settles the outcome.
macro_rules! run {
    ($state:expr, $op:expr, $name:literal, $rows:expr, $reply:expr, |$store:ident| $work:expr) => {{
        let started = Instant::now();
        let result = match $state.open().await {
            Ok($store) => $work.await,
            Err(e) => Err(e),
        };
        $state
            .settle($op, $name, $rows, started, result, $reply)
            .await;
    }};
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
        let mut state = PersistenceState {
            args,
            store: None,
            probe: None,
        };
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
        state: &mut PersistenceState,
    ) -> Result<(), ActorProcessingErr> {
        state.probe = Some(myself.send_interval(PROBE_INTERVAL, || PersistenceMsg::Probe));
        myself.cast(PersistenceMsg::Probe)?;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut PersistenceState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(probe) = state.probe.take() {
            probe.abort();
        }
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
        let claimant = state.args.claimant.clone();
        match message {
            PersistenceMsg::Apply { commands, reply } => {
                run!(state, Op::Write, "apply", commands.len(), reply, |store| {
                    store.apply(&commands)
                })
            }
            PersistenceMsg::ClaimDue {
                now,
                after,
                limit,
                reply,
            } => run!(state, Op::Write, "claim_due", limit, reply, |store| store
                .claim_due(now, after.as_ref(), limit, &claimant)),
            PersistenceMsg::MarkReached { batches, reply } => {
                let rows = batches.iter().map(|(fired, _)| fired.len()).sum();
                run!(state, Op::Write, "mark_reached", rows, reply, |store| store
                    .mark_reached(&batches))
            }
            PersistenceMsg::Get {
                tenant_id,
                service_call_id,
                reply,
            } => run!(state, Op::Read, "get", 1, reply, |store| store
                .get(&tenant_id, &service_call_id)),
            PersistenceMsg::List {
                tenant_id,
                filter,
                limit,
                reply,
            } => run!(state, Op::Read, "list", limit, reply, |store| store
                .list(&tenant_id, &filter, limit)),
            PersistenceMsg::Stats {
                tenant_id,
                now,
                reply,
            } => run!(state, Op::Read, "stats", 1, reply, |store| store
                .stats(&tenant_id, now)),
            PersistenceMsg::Cancel { command, reply } => {
                run!(state, Op::Write, "cancel", 1, reply, |store| store
                    .cancel(&command))
            }
            PersistenceMsg::CommandEpoch { stream, reply } => {
                run!(state, Op::Write, "command_epoch", 1, reply, |store| store
                    .command_epoch(&stream, Utc::now()))
            }
            PersistenceMsg::DeleteFinished {
                cutoff,
                limit,
                reply,
            } => run!(state, Op::Write, "delete_finished", limit, reply, |store| {
                store.delete_finished(cutoff, limit)
            }),
            PersistenceMsg::Probe => {
                // Nobody waits for the answer: the health is what it is for.
                let (reply, _) = ractor::concurrency::oneshot();
                run!(state, Op::Write, "probe", 0, reply.into(), |store| store
                    .probe(&claimant.name, Utc::now()))
            }
            PersistenceMsg::CatchUpWal => {
                let (reply, _) = ractor::concurrency::oneshot();
                run!(state, Op::Read, "catch_up_wal", 0, reply.into(), |store| {
                    store.catch_up_wal()
                })
            }
        }
        Ok(())
    }
}

/// Whether an operation writes: only a committed write proves that storage works again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
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

/// Why a call to Persistence did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("persistence actor is not running (restarting?)")]
    Unavailable,
    #[error("persistence call failed: {0}")]
    Messaging(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How long a caller waits for Persistence. Far above any batch's cost; reached only when
/// SQLite is stuck, and then the caller retries rather than hanging.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Typed request-reply calls to the Persistence actor, which it looks up at each call (so a
/// restarted Persistence is reached again).
#[derive(Debug, Clone)]
pub struct PersistenceClient {
    registry: Registry,
}

impl PersistenceClient {
    pub fn new(registry: Registry) -> Self {
        Self { registry }
    }

    async fn call<T: Send + 'static>(
        &self,
        build: impl FnOnce(ractor::RpcReplyPort<Result<T, StoreError>>) -> PersistenceMsg,
    ) -> Result<T, CallError> {
        let actor: ActorRef<PersistenceMsg> = self
            .registry
            .get(Persistence::NAME)
            .ok_or(CallError::Unavailable)?;
        match actor.call(build, Some(CALL_TIMEOUT)).await {
            Ok(ractor::rpc::CallResult::Success(result)) => Ok(result?),
            Ok(ractor::rpc::CallResult::Timeout) => Err(CallError::Messaging("timed out".into())),
            Ok(ractor::rpc::CallResult::SenderError) => {
                Err(CallError::Messaging("no reply (actor stopped)".into()))
            }
            Err(e) => Err(CallError::Messaging(e.to_string())),
        }
    }

    pub async fn apply(&self, commands: Vec<Command>) -> Result<u64, CallError> {
        self.call(|reply| PersistenceMsg::Apply { commands, reply })
            .await
    }

    /// Starts applying commands and returns at once: the write is queued behind every message
    /// already sent to Persistence (so batches are applied in the order they were queued), and
    /// the receiver yields its result.
    pub fn apply_queued(
        &self,
        commands: Vec<Command>,
    ) -> Result<OneshotReceiver<Result<u64, StoreError>>, CallError> {
        let actor: ActorRef<PersistenceMsg> = self
            .registry
            .get(Persistence::NAME)
            .ok_or(CallError::Unavailable)?;
        let (reply, receiver) = ractor::concurrency::oneshot();
        actor
            .cast(PersistenceMsg::Apply {
                commands,
                reply: reply.into(),
            })
            .map_err(|e| CallError::Messaging(e.to_string()))?;
        Ok(receiver)
    }

    pub async fn claim_due(
        &self,
        now: DateTime<Utc>,
        after: Option<DuePosition>,
        limit: usize,
    ) -> Result<DueBatch, CallError> {
        self.call(|reply| PersistenceMsg::ClaimDue {
            now,
            after,
            limit,
            reply,
        })
        .await
    }

    pub async fn mark_reached(
        &self,
        batches: Vec<(Arc<[DueTimer]>, DateTime<Utc>)>,
    ) -> Result<u64, CallError> {
        self.call(|reply| PersistenceMsg::MarkReached { batches, reply })
            .await
    }

    pub async fn get(
        &self,
        tenant_id: &str,
        service_call_id: &str,
    ) -> Result<Option<Timer>, CallError> {
        let (tenant_id, service_call_id) = (tenant_id.to_owned(), service_call_id.to_owned());
        self.call(|reply| PersistenceMsg::Get {
            tenant_id,
            service_call_id,
            reply,
        })
        .await
    }

    pub async fn list(
        &self,
        tenant_id: &str,
        filter: ListFilter,
        limit: usize,
    ) -> Result<ListPage, CallError> {
        let tenant_id = tenant_id.to_owned();
        self.call(|reply| PersistenceMsg::List {
            tenant_id,
            filter,
            limit,
            reply,
        })
        .await
    }

    pub async fn stats(
        &self,
        tenant_id: &str,
        now: DateTime<Utc>,
    ) -> Result<TenantStats, CallError> {
        let tenant_id = tenant_id.to_owned();
        self.call(|reply| PersistenceMsg::Stats {
            tenant_id,
            now,
            reply,
        })
        .await
    }

    pub async fn command_epoch(&self, stream: StreamIncarnation) -> Result<u32, CallError> {
        self.call(|reply| PersistenceMsg::CommandEpoch { stream, reply })
            .await
    }

    pub async fn delete_finished(
        &self,
        cutoff: DateTime<Utc>,
        limit: usize,
    ) -> Result<u64, CallError> {
        self.call(|reply| PersistenceMsg::DeleteFinished {
            cutoff,
            limit,
            reply,
        })
        .await
    }

    /// Asks for [`PersistenceMsg::CatchUpWal`] without waiting: the outcome shows in the WAL's
    /// size at the next checkpoint.
    pub fn catch_up_wal(&self) {
        if let Some(persistence) = self.registry.get::<PersistenceMsg>(Persistence::NAME) {
            let _ = persistence.cast(PersistenceMsg::CatchUpWal);
        }
    }

    pub async fn cancel(
        &self,
        command: Command,
    ) -> Result<(CancelOutcome, Option<Timer>), CallError> {
        self.call(|reply| PersistenceMsg::Cancel { command, reply })
            .await
    }
}
