//! The lanes of Persistence: each a queue of operations and the connections that serve it, so
//! that no kind of work waits behind another.
//!
//! - SQLite: `writer` (one connection: claims and marks first, then the probe, command
//!   commits, retention) and `reader` (`read_connections` connections, beside the writer in
//!   WAL mode: API reads and counts).
//! - PostgreSQL: `firing` (claims and marks on [`DatabaseTarget::firing_connections`]
//!   connections of their own, never behind a command commit's fsync: a mark beside the next
//!   claim), `writer` (the probe, commands, retention, on
//!   [`DatabaseTarget::command_connections`] connections: two commits side by side) and
//!   `reader`.
//!
//! Within a lane, a class of higher [`Rank`] goes first; reads take turns by tenant
//! ([`Turns`]), and a tenant's reads run on one connection at a time: its flood of reads
//! takes one reader connection (one core of the database), never all of them. Each lane's
//! queue depth and each operation's wait in it are metrics.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::Notify;

use super::operation::{Class, Operation, Rank};
use crate::storage::db::DatabaseTarget;
use crate::turns::Turns;

/// One lane: its name, the ranks it serves (in priority order), how many connections serve
/// it, and whether they are reader connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneSpec {
    pub name: &'static str,
    pub ranks: Vec<Rank>,
    pub connections: usize,
    pub reader: bool,
}

/// The lanes of a database (see the module docs).
pub fn layout(database: &DatabaseTarget, read_connections: usize) -> Vec<LaneSpec> {
    let reader = LaneSpec {
        name: "reader",
        ranks: vec![Rank::Read],
        connections: read_connections.max(1),
        reader: true,
    };
    let writer = |ranks: Vec<Rank>| LaneSpec {
        name: "writer",
        ranks,
        connections: database.command_connections(),
        reader: false,
    };
    match database.firing_connections() {
        0 => vec![
            writer(vec![
                Rank::Firing,
                Rank::Probe,
                Rank::Commands,
                Rank::Background,
            ]),
            reader,
        ],
        firing => vec![
            LaneSpec {
                name: "firing",
                ranks: vec![Rank::Firing],
                connections: firing,
                reader: false,
            },
            writer(vec![Rank::Probe, Rank::Commands, Rank::Background]),
            reader,
        ],
    }
}

/// An operation waiting in a lane, and since when.
pub(super) struct Queued {
    pub operation: Operation,
    pub since: Instant,
}

/// An operation taken from a lane: its key counts as running until [`Lane::done`].
pub(super) struct Taken {
    pub operation: Operation,
    pub key: (Rank, String),
}

/// A lane's queue, shared by the connections that serve it.
pub(super) struct Lane {
    pub spec: LaneSpec,
    queue: Mutex<LaneQueue>,
    ready: Notify,
    closing: AtomicBool,
}

/// One queue per rank the lane serves, in priority order; within a rank, turns by key.
struct LaneQueue {
    ranks: Vec<(Rank, Turns<Queued>)>,
    len: usize,
    /// Read keys with an operation running: their next waits.
    running: HashSet<(Rank, String)>,
}

impl LaneQueue {
    fn new(ranks: &[Rank]) -> Self {
        Self {
            ranks: ranks.iter().map(|r| (*r, Turns::default())).collect(),
            len: 0,
            running: HashSet::new(),
        }
    }

    fn push(&mut self, queued: Queued) -> Result<(), Queued> {
        let rank = queued.operation.class.rank();
        let Some((_, turns)) = self.ranks.iter_mut().find(|(r, _)| *r == rank) else {
            return Err(queued);
        };
        let key = queued.operation.class.key().to_owned();
        turns.push(&key, queued);
        self.len += 1;
        Ok(())
    }

    /// The next operation of the highest rank, of a key with none running where it reads;
    /// its key now runs. Only reads wait for their key: a tenant's flood of reads takes one
    /// connection. Operations of the other ranks run side by side on the connections their
    /// lane has (PostgreSQL's writer: two commits of commands at once).
    fn pop(&mut self) -> Option<(Queued, (Rank, String))> {
        let running = &self.running;
        let (rank, key, queued) = self.ranks.iter_mut().find_map(|(rank, turns)| {
            let (key, queued) = turns.pop_eligible(|key| {
                *rank != Rank::Read || !running.contains(&(*rank, key.to_owned()))
            })?;
            Some((*rank, key, queued))
        })?;
        self.len -= 1;
        if rank == Rank::Read {
            self.running.insert((rank, key.clone()));
        }
        Some((queued, (rank, key)))
    }

    fn waiting(&self, rank: Rank) -> usize {
        self.ranks
            .iter()
            .find(|(r, _)| *r == rank)
            .map_or(0, |(_, turns)| turns.len())
    }
}

impl Lane {
    pub fn new(spec: LaneSpec) -> Self {
        Self {
            queue: Mutex::new(LaneQueue::new(&spec.ranks)),
            spec,
            ready: Notify::new(),
            closing: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LaneQueue> {
        // Nothing panics while holding it; should something have, the queue is still whole.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn serves(&self, class: &Class) -> bool {
        self.spec.ranks.contains(&class.rank())
    }

    /// Queues an operation for the next free connection of this lane.
    pub fn submit(&self, operation: Operation) {
        let depth = {
            let mut queue = self.lock();
            let queued = Queued {
                operation,
                since: Instant::now(),
            };
            if let Err(queued) = queue.push(queued) {
                // Routing sends every class to a lane that serves it; answer rather than lose.
                let name = queued.operation.name;
                queued
                    .operation
                    .fail(crate::storage::StoreError::Unavailable(format!(
                        "{name}: no lane serves it"
                    )));
                return;
            }
            queue.len
        };
        self.record_depth(depth);
        self.ready.notify_one();
    }

    /// Operations of `rank` waiting (not yet started).
    pub fn waiting(&self, rank: Rank) -> usize {
        self.lock().waiting(rank)
    }

    /// The next operation to run, waiting for one; `None` once the lane closes and its queue is
    /// empty (what was queued before the close still runs). Its key runs until [`Self::done`].
    pub async fn next(&self) -> Option<Taken> {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (popped, depth, empty) = {
                let mut queue = self.lock();
                let popped = queue.pop();
                (popped, queue.len, queue.len == 0)
            };
            if let Some((queued, key)) = popped {
                self.record_depth(depth);
                let waited = queued.since.elapsed();
                metrics::histogram!(crate::telemetry::DATABASE_WAIT, "lane" => self.spec.name)
                    .record(waited.as_secs_f64());
                crate::telemetry::lanes::lanes().waited(
                    self.spec.name,
                    waited,
                    crate::telemetry::recent::now_ms(),
                );
                return Some(Taken {
                    operation: queued.operation,
                    key,
                });
            }
            if empty && self.closing.load(Ordering::Acquire) {
                return None;
            }
            notified.await;
        }
    }

    /// The operation taken as `key` has run: the key's next may run.
    pub fn done(&self, key: (Rank, String)) {
        self.lock().running.remove(&key);
        // A connection may be waiting for this key's next operation.
        self.ready.notify_one();
    }

    /// No more operations are taken once the queue is empty.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.ready.notify_waiters();
    }

    fn record_depth(&self, depth: usize) {
        metrics::gauge!(crate::telemetry::DATABASE_QUEUE_DEPTH, "lane" => self.spec.name)
            .set(depth as f64);
        crate::telemetry::lanes::lanes().depth(self.spec.name, depth);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::persistence::worker::Op;

    fn operation(name: &'static str, class: Class) -> Operation {
        let (reply, _) = ractor::concurrency::oneshot();
        Operation::new::<()>(
            name,
            class,
            Op::Read,
            0,
            Box::new(|_, _| Box::pin(async { Ok(()) })),
            reply.into(),
        )
    }

    /// What the lane runs, one operation after another.
    fn names(lane: &Lane, n: usize) -> Vec<&'static str> {
        (0..n)
            .filter_map(|_| {
                let (queued, key) = lane.lock().pop()?;
                lane.done(key);
                Some(queued.operation.name)
            })
            .collect()
    }

    #[test]
    fn firing_goes_before_queued_commands_and_retention_last() {
        let sqlite = layout(&DatabaseTarget::sqlite("t.db"), 2);
        let lane = Lane::new(sqlite[0].clone());
        lane.submit(operation("retention", Class::Background));
        lane.submit(operation("apply-1", Class::Commands));
        lane.submit(operation("apply-2", Class::Commands));
        lane.submit(operation("probe", Class::Probe));
        lane.submit(operation("claim", Class::Firing));
        assert_eq!(
            names(&lane, 6),
            ["claim", "probe", "apply-1", "apply-2", "retention"]
        );
    }

    #[test]
    fn reads_take_turns_by_tenant() {
        let sqlite = layout(&DatabaseTarget::sqlite("t.db"), 2);
        assert_eq!(sqlite[1].connections, 2);
        let lane = Lane::new(sqlite[1].clone());
        for name in ["whale-1", "whale-2", "whale-3"] {
            lane.submit(operation(name, Class::tenant_read("whale")));
        }
        lane.submit(operation("small-1", Class::tenant_read("small")));
        lane.submit(operation("gauges", Class::own_read()));
        assert_eq!(lane.waiting(Rank::Read), 5);
        assert_eq!(
            names(&lane, 5),
            ["whale-1", "small-1", "gauges", "whale-2", "whale-3"]
        );
    }

    #[test]
    fn a_tenants_reads_run_on_one_connection_at_a_time() {
        let lane = Lane::new(layout(&DatabaseTarget::sqlite("t.db"), 2)[1].clone());
        for name in ["whale-1", "whale-2"] {
            lane.submit(operation(name, Class::tenant_read("whale")));
        }
        lane.submit(operation("small-1", Class::tenant_read("small")));
        let (first, whale) = lane.lock().pop().unwrap();
        assert_eq!(first.operation.name, "whale-1");
        let (second, small) = lane.lock().pop().unwrap();
        assert_eq!(
            second.operation.name, "small-1",
            "the other connection serves small"
        );
        assert!(lane.lock().pop().is_none(), "whale-2 waits for whale-1");
        lane.done(small);
        assert!(lane.lock().pop().is_none(), "still waiting for whale-1");
        lane.done(whale);
        assert_eq!(lane.lock().pop().unwrap().0.operation.name, "whale-2");
    }

    #[test]
    fn postgres_fires_on_a_lane_of_its_own() {
        let url = "postgres://x@h/db".to_owned();
        let lanes = layout(&DatabaseTarget::Postgres { url }, 0);
        let names: Vec<_> = lanes.iter().map(|l| l.name).collect();
        assert_eq!(names, ["firing", "writer", "reader"]);
        let firing = Lane::new(lanes[0].clone());
        assert!(firing.serves(&Class::Firing) && !firing.serves(&Class::Commands));
        assert_eq!(lanes[0].connections, 2, "a mark beside a claim");
        assert_eq!(lanes[2].connections, 1, "at least one reader");
    }

    #[test]
    fn postgres_commits_commands_on_two_connections_side_by_side() {
        let url = "postgres://x@h/db".to_owned();
        let writer = layout(&DatabaseTarget::Postgres { url }, 1)[1].clone();
        assert_eq!((writer.name, writer.connections), ("writer", 2));
        let lane = Lane::new(writer);
        lane.submit(operation("apply-1", Class::Commands));
        lane.submit(operation("apply-2", Class::Commands));
        let (first, _) = lane.lock().pop().unwrap();
        let (second, _) = lane.lock().pop().unwrap();
        assert_eq!(
            (first.operation.name, second.operation.name),
            ("apply-1", "apply-2"),
            "taken in order, the second while the first runs"
        );
    }

    #[tokio::test]
    async fn a_closed_lane_runs_what_was_queued_then_ends() {
        let lane = Lane::new(layout(&DatabaseTarget::sqlite("t.db"), 1)[0].clone());
        lane.submit(operation("apply", Class::Commands));
        lane.close();
        let taken = lane.next().await.unwrap();
        assert_eq!(taken.operation.name, "apply");
        lane.done(taken.key);
        assert!(lane.next().await.is_none());
    }

    #[tokio::test]
    async fn an_operation_no_lane_serves_is_answered_whatever_its_answer_type() {
        let lane = Lane::new(LaneSpec {
            name: "reader",
            ranks: vec![Rank::Read],
            connections: 1,
            reader: true,
        });
        let (reply, answer) = ractor::concurrency::oneshot();
        lane.submit(Operation::new::<u64>(
            "apply",
            Class::Commands,
            Op::Write,
            1,
            Box::new(|_, _| Box::pin(async { Ok(1) })),
            reply.into(),
        ));
        let answered = tokio::time::timeout(std::time::Duration::from_secs(1), answer)
            .await
            .expect("answered at once")
            .expect("a reply, not a dropped port");
        assert!(
            matches!(answered, Err(crate::storage::StoreError::Unavailable(_))),
            "{answered:?}"
        );
    }
}
