//! Persistence actor: owns the database connection and serialises every access to it, so
//! SQLite sees a single writer and never lock contention. Each message is one transaction.
//! Store errors are replied to the caller, who retries; the actor itself only fails when told
//! to by the fault hook or when the file cannot be opened at (re)start.

use std::path::PathBuf;
use std::time::Instant;

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
                let started = Instant::now();
                let result = store.upsert(&entries).await;
                respond("upsert", entries.len(), started, result, reply);
            }
            PersistenceMsg::FindDue {
                now,
                after,
                limit,
                reply,
            } => {
                let started = Instant::now();
                let result = store.find_due(now, after.as_ref(), limit).await;
                let rows = result.as_ref().map_or(0, |b| b.timers.len());
                respond("find_due", rows, started, result, reply);
            }
            PersistenceMsg::MarkReached {
                fired,
                reached_at,
                reply,
            } => {
                let started = Instant::now();
                let result = store.mark_reached(&fired, reached_at).await;
                respond("mark_reached", fired.len(), started, result, reply);
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

/// Logs one transaction (its duration at debug: where an operator looks when firing runs late;
/// a failure at error) and replies with its result.
fn respond<T>(
    operation: &'static str,
    rows: usize,
    started: Instant,
    result: Result<T, StoreError>,
    reply: Reply<T>,
) {
    let elapsed_us = started.elapsed().as_micros() as u64;
    match &result {
        Ok(_) => tracing::debug!(
            actor = "persistence",
            operation,
            rows,
            elapsed_us,
            "transaction done"
        ),
        Err(e) => tracing::error!(actor = "persistence", operation, rows, error = %e,
            "database operation failed"),
    }
    let _ = reply.send(result);
}
