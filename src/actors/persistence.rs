//! Persistence actor: owns the database connection and serialises every access to it, so
//! SQLite sees a single writer and never lock contention. Each message is one transaction.
//! Store errors are replied to the caller, who retries; the actor itself only fails when told
//! to by the fault hook or when the file cannot be opened at (re)start.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::domain::{DuePosition, TimerEntry};
use crate::persistence::{DueBatch, SqliteSettings, Store, StoreError};

pub struct Persistence;

#[derive(Debug, Clone)]
pub struct PersistenceArgs {
    pub db_path: PathBuf,
    pub sqlite: SqliteSettings,
}

type Reply<T> = RpcReplyPort<Result<T, StoreError>>;

pub enum PersistenceMsg {
    Upsert {
        entries: Vec<TimerEntry>,
        reply: Reply<u64>,
    },
    FindDue {
        now: DateTime<Utc>,
        after: Option<DuePosition>,
        limit: usize,
        reply: Reply<DueBatch>,
    },
    MarkReached {
        fired: Vec<TimerEntry>,
        reached_at: DateTime<Utc>,
        reply: Reply<u64>,
    },
    Get {
        tenant_id: String,
        service_call_id: String,
        reply: Reply<Option<TimerEntry>>,
    },
    /// Fault hook: fail as a crash would (drills and tests of supervision).
    Fail(String),
}

impl Actor for Persistence {
    type Msg = PersistenceMsg;
    type State = Store;
    type Arguments = PersistenceArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: PersistenceArgs,
    ) -> Result<Store, ActorProcessingErr> {
        Ok(Store::open(&args.db_path, &args.sqlite).await?)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        store: &mut Store,
    ) -> Result<(), ActorProcessingErr> {
        store.clone().close().await?;
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: PersistenceMsg,
        store: &mut Store,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PersistenceMsg::Upsert { entries, reply } => {
                let started = std::time::Instant::now();
                let result = store.upsert(&entries).await;
                tracing::debug!(
                    actor = "persistence",
                    rows = entries.len(),
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "upsert committed"
                );
                log_failure("upsert", &result);
                let _ = reply.send(result);
            }
            PersistenceMsg::FindDue {
                now,
                after,
                limit,
                reply,
            } => {
                let started = std::time::Instant::now();
                let result = store.find_due(now, after.as_ref(), limit).await;
                log_timing(
                    "find_due",
                    result.as_ref().map_or(0, |b| b.timers.len()),
                    started,
                );
                log_failure("find_due", &result);
                let _ = reply.send(result);
            }
            PersistenceMsg::MarkReached {
                fired,
                reached_at,
                reply,
            } => {
                let started = std::time::Instant::now();
                let result = store.mark_reached(&fired, reached_at).await;
                log_timing("mark_reached", fired.len(), started);
                log_failure("mark_reached", &result);
                let _ = reply.send(result);
            }
            PersistenceMsg::Get {
                tenant_id,
                service_call_id,
                reply,
            } => {
                let _ = reply.send(store.get(&tenant_id, &service_call_id).await);
            }
            PersistenceMsg::Fail(reason) => return Err(reason.into()),
        }
        Ok(())
    }
}

/// Debug-level timing of each transaction: where an operator looks when firing runs late.
fn log_timing(operation: &'static str, rows: usize, started: std::time::Instant) {
    tracing::debug!(
        actor = "persistence",
        operation,
        rows,
        elapsed_us = started.elapsed().as_micros() as u64,
        "transaction done"
    );
}

fn log_failure<T>(operation: &'static str, result: &Result<T, StoreError>) {
    if let Err(e) = result {
        tracing::error!(actor = "persistence", operation, error = %e, "database operation failed");
    }
}
