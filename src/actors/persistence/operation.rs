//! What one message to Persistence carries: a [`Store`] method boxed with its reply, the
//! [`Class`] of work it is (which decides its lane and its turn there), and what its log line
//! and the health need to know of it.

use futures::future::BoxFuture;
use ractor::RpcReplyPort;

use super::worker::{Meta, Op, ReadLimit, Work, Worker};
use crate::storage::StoreError;

/// Which kind of work an operation is. A lane serves its classes in this order of priority: a
/// due timer's claim or mark never waits behind a queued command commit, a read or a retention
/// batch, only behind the one operation its connection is running.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// Claims and marks: due timers wait on these.
    Firing,
    /// The health probe: readiness waits on it.
    Probe,
    /// Command commits, the API's cancel, the steps of a CancelTimers (a command's work, which
    /// another tenant's burst of commits must not hold back) and stream epochs: taken first in,
    /// first out, and run side by side where the lane has several connections (PostgreSQL),
    /// which the rules table allows (a key's commands settle by their sequence, whichever
    /// commits first).
    Commands,
    /// Retention deletes and the WAL catch-up: whenever nothing else waits.
    Background,
    /// A read on a reader connection, beside the writer. Reads take turns by `key` (a tenant;
    /// the daemon's own counts have the empty key), so one tenant's flood of reads waits behind
    /// itself, and stops past its [`ReadLimit`].
    Read { key: String, limit: ReadLimit },
}

impl Class {
    /// A read of `tenant`'s, stopped past the read time limit: the API's reads.
    pub fn tenant_read(tenant: &str) -> Self {
        Self::tenant_read_within(tenant, ReadLimit::Api)
    }

    /// A read of `tenant`'s in its turns, stopped past `limit`: the console's background
    /// forecasts, which nobody waits for and which may take longer than an API read.
    pub fn tenant_read_within(tenant: &str, limit: ReadLimit) -> Self {
        Self::Read {
            key: tenant.to_owned(),
            limit,
        }
    }

    /// A read of the daemon's own (the gauges' counts): no time limit.
    pub fn own_read() -> Self {
        Self::Read {
            key: String::new(),
            limit: ReadLimit::Unlimited,
        }
    }

    /// A read of the daemon's own that takes its turns under `key` (which no tenant id can be:
    /// it starts with `#`), so it neither waits behind the other own reads nor holds them up:
    /// the console's count of every tenant walks every pending row. No time limit.
    pub fn own_read_as(key: &'static str) -> Self {
        debug_assert!(key.starts_with('#'));
        Self::Read {
            key: key.to_owned(),
            limit: ReadLimit::Unlimited,
        }
    }

    /// The key reads of this class take turns by (empty for the first-in-first-out classes).
    pub fn key(&self) -> &str {
        match self {
            Self::Read { key, .. } => key,
            _ => "",
        }
    }

    /// This class without its key: what a lane orders by.
    pub fn rank(&self) -> Rank {
        match self {
            Self::Firing => Rank::Firing,
            Self::Probe => Rank::Probe,
            Self::Commands => Rank::Commands,
            Self::Background => Rank::Background,
            Self::Read { .. } => Rank::Read,
        }
    }
}

/// A [`Class`] without its key, in order of priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rank {
    Firing,
    Probe,
    Commands,
    Background,
    Read,
}

pub(super) type Reply<T> = RpcReplyPort<Result<T, StoreError>>;

/// One operation sent to Persistence: its name, class, whether it writes and how many rows it
/// concerns (for its log line and the health), and the work with its reply.
pub struct Operation {
    pub name: &'static str,
    pub class: Class,
    pub kind: Op,
    pub rows: usize,
    job: Box<dyn Job>,
}

impl Operation {
    pub fn new<T: Send + 'static>(
        name: &'static str,
        class: Class,
        kind: Op,
        rows: usize,
        work: Work<T>,
        reply: Reply<T>,
    ) -> Self {
        Self {
            name,
            class,
            kind,
            rows,
            job: Box::new(Typed { work, reply }),
        }
    }

    /// Answers the operation with `error` without running it (no lane serves it): its caller
    /// hears at once, whatever the type of the answer it waits for.
    pub fn fail(self, error: StoreError) {
        self.job.fail(error);
    }

    /// Runs the operation on `worker`'s connection, which replies.
    pub(super) async fn run(self, worker: &mut Worker) {
        let Operation {
            name,
            class,
            kind,
            rows,
            job,
        } = self;
        let limit = match class {
            Class::Read { limit, .. } => limit,
            _ => ReadLimit::Unlimited,
        };
        job.run(
            worker,
            Meta {
                name,
                kind,
                rows,
                limit,
                probe: class == Class::Probe,
            },
        )
        .await;
    }
}

/// An operation whose result type only its own reply knows, so that one message carries any
/// of them: it is either run, its reply sent the work's own result, or failed; nothing else
/// can answer it, so no answer of a wrong type can be sent.
trait Job: Send {
    fn run<'a>(self: Box<Self>, worker: &'a mut Worker, meta: Meta) -> BoxFuture<'a, ()>;

    fn fail(self: Box<Self>, error: StoreError);
}

struct Typed<T> {
    work: Work<T>,
    reply: Reply<T>,
}

impl<T: Send + 'static> Job for Typed<T> {
    fn run<'a>(self: Box<Self>, worker: &'a mut Worker, meta: Meta) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Typed { work, reply } = *self;
            let result = worker.execute(meta, work).await;
            let _ = reply.send(result);
        })
    }

    fn fail(self: Box<Self>, error: StoreError) {
        let _ = self.reply.send(Err(error));
    }
}
