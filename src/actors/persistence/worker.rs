//! One connection of a lane and what it does with each operation: opens the store when needed,
//! runs the operation within its deadline, and settles the outcome (the health, the connection
//! after a failure, the log line).
//!
//! A storage fault is replied to the caller, who keeps the work and retries; it never fails the
//! actor. After a failure that may leave the connection in an unknown state, the connection is
//! closed (which rolls back whatever SQLite still had open) and the next operation opens a
//! fresh one. On PostgreSQL every operation has a deadline (`[postgres] operation_timeout`, the
//! probe's shorter one for the probe): past it the operation fails as "unavailable" and its
//! connection is abandoned, never waited for. SQLite operations have no deadline of the
//! daemon's own: a statement given up on would keep running in the driver's worker thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::{ABANDON_CLOSE_TIMEOUT, Setup};
use crate::health::PROBE_TIMEOUT;
use crate::storage::{Claimant, Store, StoreError};

/// Whether an operation writes: only a committed write proves that storage works again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

/// The work of one operation: what it does with the store (and this daemon's claimant),
/// borrowing them for the time of one transaction.
pub type Work<T> =
    Box<dyn for<'s> FnOnce(&'s Store, &'s Claimant) -> BoxFuture<'s, Result<T, StoreError>> + Send>;

/// How long a read may run before it is stopped (besides the lane's own deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReadLimit {
    /// The API's read time limit (`[api] read_timeout`).
    Api,
    /// This long.
    Within(std::time::Duration),
    /// None: the daemon's own reads, one at a time.
    Unlimited,
}

/// What a worker needs to know of an operation besides its work.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meta {
    pub name: &'static str,
    pub kind: Op,
    pub rows: usize,
    /// When a read is stopped.
    pub limit: ReadLimit,
    /// The health probe, which has a shorter deadline of its own.
    pub probe: bool,
}

/// How long operations are answered "unavailable" at once, on PostgreSQL, after the database
/// could not be reached.
const REOPEN_PAUSE: Duration = Duration::from_secs(1);

pub(super) struct Worker {
    /// The lane's name, in log lines and the health's record of waits.
    lane: &'static str,
    setup: Arc<Setup>,
    /// Opens a reader connection (reads only, stopped past the read time limit when asked).
    reader: bool,
    /// The open connection; `None` after a failure, until the next operation reopens it.
    store: Option<Store>,
    /// Until when, and why, operations fail at once (see [`Worker::pause_reopening`]).
    reopen_after: Option<(Instant, String)>,
}

impl Worker {
    pub(super) fn new(lane: &'static str, setup: Arc<Setup>, reader: bool) -> Self {
        Self {
            lane,
            setup,
            reader,
            store: None,
            reopen_after: None,
        }
    }

    /// The deadline of an operation, the database's own (`DatabaseTarget::operation_deadline`);
    /// the probe's is no longer than the health's wait for it.
    fn deadline(&self, probe: bool) -> Option<Duration> {
        let probe_limit = probe.then_some(PROBE_TIMEOUT);
        self.setup
            .database
            .operation_deadline(&self.setup.postgres, probe_limit)
    }

    /// Opens the connection now, so that the first operation finds it; a failure is logged and
    /// the first operation tries again.
    pub(super) async fn warm_up(&mut self) {
        let deadline = self.deadline(false);
        let lane = self.lane;
        let (opened, _) = within(deadline, "open", async { self.open().await.map(|_| ()) }).await;
        if let Err(e) = opened {
            self.abandon();
            tracing::warn!(actor = "persistence", lane, error = %e,
                "database not available at start; retrying with each request");
        }
    }

    /// Runs `work` on this connection: opens it when needed, bounds it by the deadline (and the
    /// read's limit, `meta.limit`), and settles the outcome.
    pub(super) async fn execute<T>(&mut self, meta: Meta, work: Work<T>) -> Result<T, StoreError> {
        let started = Instant::now();
        let setup = self.setup.clone();
        let deadline = self.deadline(meta.probe);
        let limit = match meta.limit {
            ReadLimit::Api => Some(setup.read_timeout),
            ReadLimit::Within(limit) => Some(limit),
            ReadLimit::Unlimited => None,
        };
        // Only the writing lanes speak for the database's health: a slow read is the reader's.
        let watched = deadline.is_some() && !self.reader;
        if watched {
            setup.health.waiting_on_database(self.lane, true);
        }
        let run = async {
            let store = self.open().await?;
            let work = work(store, &setup.claimant);
            match limit {
                Some(limit) => store.read_within(limit, work).await,
                None => work.await,
            }
        };
        let (result, timed_out) = within(deadline, meta.name, run).await;
        if watched {
            setup.health.waiting_on_database(self.lane, false);
        }
        if timed_out {
            self.abandon();
            if let Err(e) = &result {
                self.pause_reopening(e);
            }
        }
        self.settle(meta, started, result.as_ref().err()).await;
        result
    }

    /// The open store, opening it first when the last operation closed it.
    async fn open(&mut self) -> Result<&Store, StoreError> {
        if self.store.is_none() {
            if let Some((until, cause)) = &self.reopen_after
                && Instant::now() < *until
            {
                return Err(StoreError::Unavailable(cause.clone()));
            }
            let (database, postgres) = (&self.setup.database, &self.setup.postgres);
            let opened = if self.reader {
                Store::open_reader(database, postgres).await
            } else {
                Store::open_connection(database, postgres).await
            };
            let store = opened.map_err(|e| {
                let e = StoreError::Unavailable(e.to_string());
                self.pause_reopening(&e);
                e
            })?;
            self.reopen_after = None;
            tracing::debug!(actor = "persistence", lane = self.lane,
                database = %self.setup.database.describe(), "database opened");
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
        if self.deadline(false).is_some() {
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

    /// Closes the connection at the actor's stop, within a bound where the server may not
    /// answer.
    pub(super) async fn close(&mut self) {
        let Some(store) = self.store.take() else {
            return;
        };
        let closed = match self.deadline(false) {
            None => store.close().await,
            Some(_) => tokio::time::timeout(ABANDON_CLOSE_TIMEOUT, store.close())
                .await
                .unwrap_or(Ok(())),
        };
        if let Err(e) = closed {
            tracing::debug!(actor = "persistence", lane = self.lane, error = %e,
                "closing the connection reported an error");
        }
    }

    /// Records the outcome: the connection closed after a failure that needs it, the health
    /// updated, the duration logged at debug (where an operator looks when firing runs late).
    /// Failures are logged by the caller, who knows what it will do about them.
    async fn settle(&mut self, meta: Meta, started: Instant, failure: Option<&StoreError>) {
        let elapsed_us = started.elapsed().as_micros() as u64;
        let (operation, rows, lane) = (meta.name, meta.rows, self.lane);
        let health = &self.setup.health;
        match failure {
            None => {
                tracing::debug!(
                    actor = "persistence",
                    lane,
                    operation,
                    rows,
                    elapsed_us,
                    "transaction done"
                );
                if meta.kind == Op::Write {
                    health.storage_ok();
                }
            }
            Some(e) => {
                tracing::debug!(actor = "persistence", lane, operation, rows, elapsed_us,
                    error = %e, "database operation failed");
                if e.needs_reopen() {
                    if health.status().storage_error.is_none() {
                        tracing::warn!(actor = "persistence", lane, operation, error = %e,
                            "the database does not accept writes; not ready until it does");
                    }
                    health.storage_failed(e.to_string());
                    if self.deadline(false).is_some() {
                        // A server that stopped answering would hold the close too.
                        self.abandon();
                    } else if let Some(store) = self.store.take()
                        && let Err(close) = store.close().await
                    {
                        tracing::debug!(actor = "persistence", lane, error = %close,
                            "closing the failed connection reported an error");
                    }
                }
            }
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
