//! The client of the Persistence actor: each operation is a [`Store`] method called through
//! [`PersistenceClient::run`] (or [`PersistenceClient::run_queued`]), which sends it to the
//! actor and brings its result back.

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use ractor::ActorRef;
use ractor::concurrency::OneshotReceiver;

use super::{Class, Op, Operation, Persistence, PersistenceMsg, ReadLimit};
use crate::actors::registry::Registry;
use crate::actors::supervisor::NamedActor;
use crate::domain::api::{ListFilter, ListPage, TenantStats};
use crate::domain::forecast::{ForecastMinute, ForecastWindow};
use crate::domain::quota::Quotas;
use crate::domain::{CancelOutcome, Command, DuePosition, DueTimer, StreamIncarnation, Timer};
use crate::storage::fair::FairBatch;
use crate::storage::{Applied, Claimant, DueBatch, PendingCounts, Store, StoreError};

mod cancel_many;
mod overview;

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
/// restarted Persistence is reached again). An operation is a [`Store`] method and one line
/// here.
#[derive(Debug, Clone)]
pub struct PersistenceClient {
    registry: Registry,
}

impl Registry {
    /// A client of the Persistence actor that looks it up at each call.
    pub fn persistence(&self) -> PersistenceClient {
        PersistenceClient::new(self.clone())
    }
}

impl PersistenceClient {
    pub fn new(registry: Registry) -> Self {
        Self { registry }
    }

    fn actor(&self) -> Result<ActorRef<PersistenceMsg>, CallError> {
        self.registry
            .get(Persistence::NAME)
            .ok_or(CallError::Unavailable)
    }

    /// Runs `work` on the store as one operation called `name` of `class`, after every
    /// operation of its class already sent to Persistence (reads: of its key), and waits (at
    /// most `CALL_TIMEOUT`) for its result. `rows` is how many rows it concerns, for its log
    /// line.
    pub async fn run<T, F>(
        &self,
        name: &'static str,
        class: Class,
        kind: Op,
        rows: usize,
        work: F,
    ) -> Result<T, CallError>
    where
        T: Send + 'static,
        F: for<'s> FnOnce(&'s Store, &'s Claimant) -> BoxFuture<'s, Result<T, StoreError>>
            + Send
            + 'static,
    {
        let build = |reply| {
            PersistenceMsg::Run(Operation::new(
                name,
                class,
                kind,
                rows,
                Box::new(work),
                reply,
            ))
        };
        match self.actor()?.call(build, Some(CALL_TIMEOUT)).await {
            Ok(ractor::rpc::CallResult::Success(result)) => Ok(result?),
            Ok(ractor::rpc::CallResult::Timeout) => Err(CallError::Messaging("timed out".into())),
            Ok(ractor::rpc::CallResult::SenderError) => {
                Err(CallError::Messaging("no reply (actor stopped)".into()))
            }
            Err(e) => Err(CallError::Messaging(e.to_string())),
        }
    }

    /// Like [`Self::run`], but returns at once: the operation is queued behind every operation
    /// of its class already sent (so operations queued one after another run in that order),
    /// and the receiver yields its result.
    pub fn run_queued<T, F>(
        &self,
        name: &'static str,
        class: Class,
        kind: Op,
        rows: usize,
        work: F,
    ) -> Result<OneshotReceiver<Result<T, StoreError>>, CallError>
    where
        T: Send + 'static,
        F: for<'s> FnOnce(&'s Store, &'s Claimant) -> BoxFuture<'s, Result<T, StoreError>>
            + Send
            + 'static,
    {
        let (reply, receiver) = ractor::concurrency::oneshot();
        let operation = Operation::new(name, class, kind, rows, Box::new(work), reply.into());
        self.actor()?
            .cast(PersistenceMsg::Run(operation))
            .map_err(|e| CallError::Messaging(e.to_string()))?;
        Ok(receiver)
    }

    /// Applies accepted commands (ScheduleTimer and CancelTimer), in stream order per key, and
    /// waits for the commit.
    pub async fn apply(&self, commands: Vec<Command>) -> Result<u64, CallError> {
        let rows = commands.len();
        self.run(
            "apply",
            Class::Commands,
            Op::Write,
            rows,
            move |store, _| Box::pin(async move { store.apply(&commands).await }),
        )
        .await
    }

    /// Starts applying the commands at `part` of a batch, each decided against `quotas` in
    /// the same transaction (see [`Store::apply_within_quotas`]; at the wall clock's instant
    /// the transaction begins), and returns at once (see [`Self::run_queued`]): batches are
    /// applied in the order they were queued. The whole batch at first, then the parts it is
    /// split into when the database refuses some of its commands, without copying them for
    /// each part. Positions of refused commands are in the part.
    pub fn apply_part_queued(
        &self,
        commands: Arc<[Command]>,
        part: Range<usize>,
        quotas: Arc<Quotas>,
    ) -> Result<OneshotReceiver<Result<Applied, StoreError>>, CallError> {
        let rows = part.len();
        self.run_queued(
            "apply",
            Class::Commands,
            Op::Write,
            rows,
            move |store, _| {
                Box::pin(async move {
                    let now_ms = Utc::now().timestamp_millis();
                    store
                        .apply_within_quotas(&commands[part], &quotas, now_ms)
                        .await
                })
            },
        )
    }

    /// Claims the timers due at `now` (after `after`), up to `limit`, for firing; of this
    /// daemon's own claims, only those whose lease ends before `fence` (see
    /// [`crate::storage::Store::claim_due_fenced`]).
    pub async fn claim_due(
        &self,
        now: DateTime<Utc>,
        after: Option<DuePosition>,
        limit: usize,
        fence: Option<DateTime<Utc>>,
    ) -> Result<DueBatch, CallError> {
        self.run(
            "claim_due",
            Class::Firing,
            Op::Write,
            limit,
            move |store, claimant| {
                Box::pin(async move {
                    store
                        .claim_due_fenced(now, after.as_ref(), limit, fence, claimant)
                        .await
                })
            },
        )
        .await
    }

    /// Claims a share of each tenant's due timers but for those in `skip` (see
    /// [`crate::storage::Store::claim_fair`]).
    pub async fn claim_fair(
        &self,
        now: DateTime<Utc>,
        skip: BTreeSet<String>,
        resume_after: Option<String>,
        limit: usize,
        fence: DateTime<Utc>,
    ) -> Result<FairBatch, CallError> {
        self.run(
            "claim_fair",
            Class::Firing,
            Op::Write,
            limit,
            move |store, claimant| {
                Box::pin(async move {
                    store
                        .claim_fair(now, &skip, resume_after.as_deref(), limit, fence, claimant)
                        .await
                })
            },
        )
        .await
    }

    /// Marks published batches `Reached`, each at its own instant, in one transaction.
    pub async fn mark_reached(
        &self,
        batches: Vec<(Arc<[DueTimer]>, DateTime<Utc>)>,
    ) -> Result<u64, CallError> {
        let rows = batches.iter().map(|(fired, _)| fired.len()).sum();
        self.run(
            "mark_reached",
            Class::Firing,
            Op::Write,
            rows,
            move |store, _| Box::pin(async move { store.mark_reached(&batches).await }),
        )
        .await
    }

    pub async fn get(
        &self,
        tenant_id: &str,
        service_call_id: &str,
    ) -> Result<Option<Timer>, CallError> {
        let (tenant_id, service_call_id) = (tenant_id.to_owned(), service_call_id.to_owned());
        self.run(
            "get",
            Class::tenant_read(&tenant_id),
            Op::Read,
            1,
            move |store, _| Box::pin(async move { store.get(&tenant_id, &service_call_id).await }),
        )
        .await
    }

    pub async fn list(
        &self,
        tenant_id: &str,
        filter: ListFilter,
        limit: usize,
    ) -> Result<ListPage, CallError> {
        let tenant_id = tenant_id.to_owned();
        self.run(
            "list",
            Class::tenant_read(&tenant_id),
            Op::Read,
            limit,
            move |store, _| Box::pin(async move { store.list(&tenant_id, &filter, limit).await }),
        )
        .await
    }

    pub async fn stats(
        &self,
        tenant_id: &str,
        now: DateTime<Utc>,
    ) -> Result<TenantStats, CallError> {
        let tenant_id = tenant_id.to_owned();
        self.run(
            "stats",
            Class::tenant_read(&tenant_id),
            Op::Read,
            1,
            move |store, _| Box::pin(async move { store.stats(&tenant_id, now).await }),
        )
        .await
    }

    /// Pending timers in all: a read of the daemon's own, on a reader connection.
    pub async fn count_pending(&self) -> Result<u64, CallError> {
        self.run(
            "count_pending",
            Class::own_read(),
            Op::Read,
            0,
            |store, _| Box::pin(store.count_pending()),
        )
        .await
    }

    /// How many of a tenant's timers are pending and overdue at `now`: a read of the daemon's
    /// own (the labelled tenants' gauges), on a reader connection.
    pub async fn pending_counts(
        &self,
        tenant_id: &str,
        now: DateTime<Utc>,
    ) -> Result<PendingCounts, CallError> {
        let tenant_id = tenant_id.to_owned();
        self.run(
            "pending_counts",
            Class::own_read(),
            Op::Read,
            1,
            move |store, _| Box::pin(async move { store.pending_counts(&tenant_id, now).await }),
        )
        .await
    }

    /// A tenant's pending timers due in each minute of `window`.
    pub async fn forecast(
        &self,
        tenant_id: &str,
        window: ForecastWindow,
    ) -> Result<Vec<ForecastMinute>, CallError> {
        self.forecast_within(tenant_id, window, ReadLimit::Api)
            .await
    }

    /// [`Self::forecast`], stopped past `limit` rather than the API's read limit.
    pub async fn forecast_within(
        &self,
        tenant_id: &str,
        window: ForecastWindow,
        limit: ReadLimit,
    ) -> Result<Vec<ForecastMinute>, CallError> {
        let tenant_id = tenant_id.to_owned();
        self.run(
            "forecast",
            Class::tenant_read_within(&tenant_id, limit),
            Op::Read,
            1,
            move |store, _| Box::pin(async move { store.forecast(&tenant_id, &window).await }),
        )
        .await
    }

    /// The epoch of an incarnation of the command stream, recorded the first time it is met.
    pub async fn command_epoch(&self, stream: StreamIncarnation) -> Result<u32, CallError> {
        self.run(
            "command_epoch",
            Class::Commands,
            Op::Write,
            1,
            move |store, _| Box::pin(async move { store.command_epoch(&stream, Utc::now()).await }),
        )
        .await
    }

    /// Deletes up to `limit` timers finished more than `keep` ago (retention); returns how
    /// many, and how long the transaction held its connection (not counting its wait in the
    /// lane: what a claim arriving meanwhile waits for).
    pub async fn delete_finished(
        &self,
        now: DateTime<Utc>,
        keep: std::time::Duration,
        limit: usize,
    ) -> Result<(u64, Duration), CallError> {
        self.run(
            "delete_finished",
            Class::Background,
            Op::Write,
            limit,
            move |store, _| {
                Box::pin(async move {
                    let started = std::time::Instant::now();
                    let deleted = store.delete_finished(now, keep, limit).await?;
                    Ok((deleted, started.elapsed()))
                })
            },
        )
        .await
    }

    /// Copies into the database file the few WAL frames written since the Checkpointer's last
    /// complete checkpoint (SQLite), so that the next commit starts the WAL from its beginning.
    /// Does not wait: the outcome shows in the WAL's size at the next checkpoint.
    pub fn catch_up_wal(&self) {
        let _ = self.run_queued(
            "catch_up_wal",
            Class::Background,
            Op::Read,
            0,
            |store, _| Box::pin(store.catch_up_wal()),
        );
    }

    /// Applies one CancelTimer already ordered in the command stream, reporting how it went.
    pub async fn cancel(
        &self,
        command: Command,
    ) -> Result<(CancelOutcome, Option<Timer>), CallError> {
        self.run("cancel", Class::Commands, Op::Write, 1, move |store, _| {
            Box::pin(async move { store.cancel(&command).await })
        })
        .await
    }
}
