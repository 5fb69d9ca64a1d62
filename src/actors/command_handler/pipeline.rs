//! The storing pipeline: accepted commands are gathered while transactions are under way (as
//! many at once as the database commits side by side: `commits_in_flight`), up to
//! [`GROUP_MAX`], and handed to Persistence together as the next one (`storing`), so under load
//! a commit carries thousands whatever `batch_size` is. The outcomes of finished transactions
//! decide the backoff: while the database fails, one batch at a time probes it until one is
//! stored.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use ractor::concurrency::JoinHandle;

use super::CommandHandlerArgs;
use super::storing::{Accepted, Stored, store};
use crate::backoff::Retries;

/// Most commands gathered into one transaction while others are under way (with the
/// transactions in flight, about the consumer's 10,000 unacknowledged commands at most: past
/// them the broker sends no more until a commit is acknowledged).
pub const GROUP_MAX: usize = 4_000;
/// Least time between the starts of two commits while commands keep arriving: commits of two
/// or three commands each kept Persistence busy and delayed the Poller's claims; gathered for
/// this long, they share one fsync. A command arriving after a quiet spell is committed at once.
const COMMIT_SPACING: Duration = Duration::from_millis(5);

/// A transaction handed to Persistence: the hashes of its keys, and its task.
struct InFlight {
    keys: HashSet<u64>,
    task: JoinHandle<Stored>,
}

#[derive(Default)]
pub(super) struct Pipeline {
    /// Transactions handed to Persistence and not yet acknowledged, at most: as many as the
    /// database commits side by side (`DatabaseTarget::command_connections`; one on SQLite,
    /// whose single writer runs them one after another anyway). Everything that arrives while
    /// they commit joins the next, so a commit carries many commands and leaves the Poller's
    /// claims less to queue behind.
    depth: usize,
    /// Accepted commands waiting for room, to be stored together as the next transaction.
    gathered: Vec<Accepted>,
    /// Transactions being committed and acknowledged, oldest first, with their keys. Two side
    /// by side never write one key: a group holding a key of a transaction under way waits
    /// for it. The rules table keeps the newest command of a key whatever the order, but a
    /// cancel keeps the `dueAt` and data of the row it meets: applied before the schedule just
    /// ahead of it in the stream, it kept the older ones, and the schedule, older than the
    /// cancel, was then dropped (docs/CONTRACT.md §3).
    storing: VecDeque<InFlight>,
    /// Hashes the keys of [`InFlight`]: a collision only makes a group wait.
    keys: RandomState,
    /// When the last transaction was handed to Persistence (see [`COMMIT_SPACING`]).
    last_commit: Option<tokio::time::Instant>,
    /// Consecutive attempts that could not store their batch (the one retry policy); while
    /// any, one batch at a time is handed to Persistence.
    failed_stores: Retries,
    /// Outcomes collected since the last check: whether a batch was stored, and the last cause
    /// of a batch that was not.
    stored_any: bool,
    store_failure: Option<String>,
}

impl Pipeline {
    pub fn new(depth: usize) -> Self {
        Self {
            depth: depth.max(1),
            ..Self::default()
        }
    }

    /// The commands accepted and not yet handed to Persistence.
    pub fn gathered(&self) -> &[Accepted] {
        &self.gathered
    }

    pub fn gather(&mut self, accepted: Vec<Accepted>) {
        self.gathered.extend(accepted);
    }

    pub fn is_full(&self) -> bool {
        self.gathered.len() >= GROUP_MAX
    }

    /// Whether a transaction that finished since the last pull could not be stored: the
    /// database fails now, and the commands it held go back to the broker. Failures before a
    /// pull that was let through do not count: with every batch holding a `CancelTimers`, a
    /// count of them kept handing the cancels back (each hand-back a failure of its own), and
    /// their lines crawled at the longest backoff long after the database was back.
    pub fn failed_now(&self) -> bool {
        self.store_failure.is_some()
    }

    /// Notes commands handed back because they could not be stored now (`cause`), as a failed
    /// transaction: the handler backs off before pulling again.
    pub fn not_stored(&mut self, cause: String) {
        self.store_failure = Some(cause);
    }

    /// Hands what is gathered to Persistence as one transaction, when the pipeline has room
    /// and the last commit started [`COMMIT_SPACING`] ago (or the group is full); also notes
    /// the outcome of transactions that have finished.
    pub fn store_gathered(&mut self, args: &Arc<CommandHandlerArgs>) {
        self.start_gathered(|batch| store(args, batch));
    }

    /// [`Self::store_gathered`], with `start` handing a transaction's commands to storage.
    fn start_gathered(&mut self, start: impl FnOnce(Vec<Accepted>) -> JoinHandle<Stored>) {
        while let Some(oldest) = self.storing.front_mut() {
            // Collects a finished transaction's outcome without waiting for an unfinished one.
            match (&mut oldest.task).now_or_never() {
                Some(outcome) => {
                    self.storing.pop_front();
                    self.note(outcome);
                }
                None => break,
            }
        }
        // While the database fails, one batch at a time probes it.
        let depth = match self.failed_stores.failures() {
            0 => self.depth,
            _ => 1,
        };
        if self.gathered.is_empty() || self.storing.len() >= depth {
            return;
        }
        let now = tokio::time::Instant::now();
        let spaced = self
            .last_commit
            .is_none_or(|last| now >= last + COMMIT_SPACING);
        if !spaced && !self.is_full() {
            return;
        }
        let under_way = |a: &Accepted| {
            let key = self.key_of(a);
            self.storing.iter().any(|t| t.keys.contains(&key))
        };
        if !self.storing.is_empty() && self.gathered.iter().any(under_way) {
            // The handler waits for the oldest transaction and asks again.
            return;
        }
        self.last_commit = Some(now);
        let batch = self.take_group();
        // With one transaction at a time (SQLite), no group is ever checked against its keys.
        let keys = if self.depth > 1 {
            batch.iter().map(|a| self.key_of(a)).collect()
        } else {
            HashSet::new()
        };
        self.storing.push_back(InFlight {
            keys,
            task: start(batch),
        });
    }

    /// The hash a command's key is known by in [`InFlight`].
    fn key_of(&self, accepted: &Accepted) -> u64 {
        let command = &accepted.command;
        self.keys
            .hash_one((&command.tenant_id, &command.service_call_id))
    }

    /// The next transaction's commands: the gathered ones up to [`GROUP_MAX`], and the rest of
    /// a `ScheduleTimers` cut there (its timers are always stored together, and a pull of
    /// them could hold far more than a transaction should).
    fn take_group(&mut self) -> Vec<Accepted> {
        if self.gathered.len() <= GROUP_MAX {
            return std::mem::take(&mut self.gathered);
        }
        let last = &self.gathered[GROUP_MAX - 1].command;
        let same_message = |a: &Accepted| {
            last.item.is_some() && a.command.item.is_some() && a.command.seq == last.seq
        };
        let end = GROUP_MAX
            + self.gathered[GROUP_MAX..]
                .iter()
                .take_while(|a| same_message(a))
                .count();
        let rest = self.gathered.split_off(end);
        std::mem::replace(&mut self.gathered, rest)
    }

    /// Waits for the oldest transaction being stored and notes its outcome.
    pub async fn settle_oldest(&mut self) {
        if let Some(oldest) = self.storing.pop_front() {
            let outcome = oldest.task.await;
            self.note(outcome);
        }
    }

    /// Stores everything gathered and waits for every transaction: for a graceful stop.
    pub async fn finish(&mut self, args: &Arc<CommandHandlerArgs>) {
        self.finish_with(|batch| store(args, batch)).await;
    }

    /// [`Self::finish`], with `start` handing a transaction's commands to storage.
    async fn finish_with(&mut self, mut start: impl FnMut(Vec<Accepted>) -> JoinHandle<Stored>) {
        while !self.gathered.is_empty() {
            self.settle_oldest().await;
            self.last_commit = None;
            self.start_gathered(&mut start);
        }
        while !self.storing.is_empty() {
            self.settle_oldest().await;
        }
    }

    /// Before each pull: collects the outcomes of transactions being stored (all of them while
    /// the database is failing, so that one batch at a time probes it) and, when one could not
    /// be stored, returns how long to wait before pulling again. Logs one error per failed
    /// attempt.
    pub async fn backoff(&mut self) -> Option<Duration> {
        while self
            .storing
            .front()
            .is_some_and(|oldest| oldest.task.is_finished() || self.failed_stores.failures() > 0)
        {
            self.settle_oldest().await;
        }
        if let Some(cause) = self.store_failure.take() {
            self.stored_any = false;
            let delay = self.failed_stores.failed();
            tracing::error!(actor = "command_handler", error = %cause,
                attempt = self.failed_stores.failures(),
                retry_in_ms = delay.as_millis() as u64,
                "commands not stored; they stay in the broker and are retried");
            return Some(delay);
        }
        if std::mem::take(&mut self.stored_any) {
            let attempts = self.failed_stores.succeeded();
            if attempts > 0 {
                tracing::info!(
                    actor = "command_handler",
                    attempts,
                    "storing commands again"
                );
            }
        }
        None
    }

    fn note(&mut self, outcome: Result<Stored, tokio::task::JoinError>) {
        match outcome {
            Ok(Ok(())) => self.stored_any = true,
            Ok(Err(cause)) => self.store_failure = Some(cause),
            Err(e) => self.store_failure = Some(format!("storing task failed: {e}")),
        }
    }
}

#[cfg(test)]
mod tests;
