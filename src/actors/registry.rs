//! How the actors of one daemon find each other.
//!
//! Each actor is registered under a name unique to its daemon and looked up at each use, so a
//! sibling restarted by the Supervisor is reached under the same name and no actor holds a
//! reference to a dead peer. The per-daemon prefix lets several daemons share one process
//! (tests do), since actor names are process-global.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::ActorRef;

use super::persistence::PersistenceMsg;
use super::poller::PollerMsg;
use ractor::concurrency::OneshotReceiver;

use crate::domain::{DuePosition, TimerEntry};
use crate::persistence::{DueBatch, StoreError};

/// The children of the Supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActorKind {
    Persistence,
    Checkpointer,
    Poller,
    CommandHandler,
}

impl ActorKind {
    /// Start order: Persistence first, since the others call it. Shutdown runs in reverse.
    pub const START_ORDER: [ActorKind; 4] = [
        ActorKind::Persistence,
        ActorKind::Checkpointer,
        ActorKind::Poller,
        ActorKind::CommandHandler,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::Persistence => "persistence",
            ActorKind::Checkpointer => "checkpointer",
            ActorKind::Poller => "poller",
            ActorKind::CommandHandler => "command_handler",
        }
    }
}

impl fmt::Display for ActorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names of one daemon's actors.
#[derive(Debug, Clone)]
pub struct Registry {
    prefix: String,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        static DAEMONS: AtomicU64 = AtomicU64::new(1);
        Self {
            prefix: format!("daemon-{}", DAEMONS.fetch_add(1, Ordering::Relaxed)),
        }
    }

    pub fn name(&self, kind: ActorKind) -> String {
        format!("{}/{}", self.prefix, kind.as_str())
    }

    pub fn supervisor_name(&self) -> String {
        format!("{}/supervisor", self.prefix)
    }

    pub fn poller(&self) -> Option<ActorRef<PollerMsg>> {
        ActorRef::where_is(self.name(ActorKind::Poller))
    }

    /// A client of the Persistence actor that looks it up at each call.
    pub fn persistence(&self) -> PersistenceClient {
        PersistenceClient {
            registry: self.clone(),
        }
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

/// Typed request-reply calls to the Persistence actor.
#[derive(Debug, Clone)]
pub struct PersistenceClient {
    registry: Registry,
}

impl PersistenceClient {
    async fn call<T: Send + 'static>(
        &self,
        build: impl FnOnce(ractor::RpcReplyPort<Result<T, StoreError>>) -> PersistenceMsg,
    ) -> Result<T, CallError> {
        let actor: ActorRef<PersistenceMsg> =
            ActorRef::where_is(self.registry.name(ActorKind::Persistence))
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

    pub async fn upsert(&self, entries: Vec<TimerEntry>) -> Result<u64, CallError> {
        self.call(|reply| PersistenceMsg::Upsert { entries, reply })
            .await
    }

    /// Starts an upsert and returns at once: the write is queued behind every message already
    /// sent to Persistence (so batches are applied in the order they were queued), and the
    /// receiver yields its result.
    pub fn upsert_queued(
        &self,
        entries: Vec<TimerEntry>,
    ) -> Result<OneshotReceiver<Result<u64, StoreError>>, CallError> {
        let actor: ActorRef<PersistenceMsg> =
            ActorRef::where_is(self.registry.name(ActorKind::Persistence))
                .ok_or(CallError::Unavailable)?;
        let (reply, receiver) = ractor::concurrency::oneshot();
        actor
            .cast(PersistenceMsg::Upsert {
                entries,
                reply: reply.into(),
            })
            .map_err(|e| CallError::Messaging(e.to_string()))?;
        Ok(receiver)
    }

    pub async fn find_due(
        &self,
        now: DateTime<Utc>,
        after: Option<DuePosition>,
        limit: usize,
    ) -> Result<DueBatch, CallError> {
        self.call(|reply| PersistenceMsg::FindDue {
            now,
            after,
            limit,
            reply,
        })
        .await
    }

    pub async fn mark_reached(
        &self,
        fired: Vec<TimerEntry>,
        reached_at: DateTime<Utc>,
    ) -> Result<u64, CallError> {
        self.call(|reply| PersistenceMsg::MarkReached {
            fired,
            reached_at,
            reply,
        })
        .await
    }

    pub async fn get(
        &self,
        tenant_id: &str,
        service_call_id: &str,
    ) -> Result<Option<TimerEntry>, CallError> {
        let (tenant_id, service_call_id) = (tenant_id.to_owned(), service_call_id.to_owned());
        self.call(|reply| PersistenceMsg::Get {
            tenant_id,
            service_call_id,
            reply,
        })
        .await
    }
}
