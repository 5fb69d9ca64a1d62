//! Persistence actor: the one owner of every database connection. It runs lanes (`lanes`), each
//! a queue with connections of its own, so that no kind of work waits behind another: on
//! SQLite the writer (claims and marks ahead of command commits and retention) and reader
//! connections for the API's reads and counts; on PostgreSQL also a lane of its own for firing.
//!
//! A message carries one [`Operation`]: a [`Store`](crate::storage::Store) method boxed with
//! its reply and its [`Class`], sent by the [`PersistenceClient`]; the actor hands it to its
//! lane at once and never waits on the database itself. Adding a query is adding its `Store`
//! method and one client method. Storage faults are replied to the caller (`worker`), never
//! fail the actor; a lane's connection that ends unexpectedly (a panic) fails the actor, and
//! the Supervisor restarts it with fresh lanes.
//!
//! Every [`PROBE_INTERVAL`] it proves that the database accepts writes (the file is the one
//! opened, its disk has room, a small write commits) and keeps the daemon's health up to date
//! with it; a watchdog keeps the write proof honest while an operation hangs ([`crate::health`]).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinSet;
use tokio_util::task::AbortOnDropHandle;

use super::supervisor::NamedActor;
use crate::health::{Health, PROBE_INTERVAL};
use crate::stop::{Reserve, StopDeadline};
use crate::storage::db::DatabaseTarget;
use crate::storage::{Claimant, PostgresSettings};

mod client;
mod lanes;
mod operation;
mod worker;
pub use client::{CallError, PersistenceClient};
use lanes::Lane;
pub use lanes::{LaneSpec, layout};
pub use operation::{Class, Operation, Rank};
use worker::Worker;
pub use worker::{Op, ReadLimit, Work};

/// How often the watchdog brings the health's write proof up to date.
const WATCHDOG_INTERVAL: Duration = Duration::from_millis(250);

/// How long an abandoned connection is given to close in the background (and each connection
/// at the actor's stop, on PostgreSQL).
const ABANDON_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The name of the health probe's operation.
const PROBE: &str = "probe";

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
    /// Connections of the reader lane.
    pub read_connections: usize,
    /// Longest an API read may run before it is stopped and answered as too long.
    pub read_timeout: Duration,
    /// The daemon's stop: the lanes run what was queued before it, within their share.
    pub stop: StopDeadline,
}

/// What every connection of every lane needs.
#[derive(Debug)]
struct Setup {
    database: DatabaseTarget,
    health: Health,
    claimant: Claimant,
    postgres: PostgresSettings,
    read_timeout: Duration,
}

pub struct PersistenceState {
    lanes: Vec<Arc<Lane>>,
    stop: StopDeadline,
    /// Watches the connections' tasks (see [`watch`]); dropping it ends them.
    workers: Option<AbortOnDropHandle<()>>,
    /// Ends with the actor.
    _watchdog: AbortOnDropHandle<()>,
}

pub enum PersistenceMsg {
    /// One operation on the store (see [`PersistenceClient::run`]), which replies itself.
    Run(Operation),
    /// Prove the database accepts writes, and record the outcome in the health.
    Probe,
    /// A lane's connection ended without being asked to.
    LaneEnded(String),
}

impl Actor for Persistence {
    type Msg = PersistenceMsg;
    type State = PersistenceState;
    type Arguments = PersistenceArgs;

    /// Starts the lanes' connections, each opening in a task of its own: nothing here waits on
    /// the database.
    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
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
        let specs = layout(&args.database, args.read_connections);
        let stop = args.stop;
        let setup = Arc::new(Setup {
            database: args.database,
            health: args.health,
            claimant: args.claimant,
            postgres: args.postgres,
            read_timeout: args.read_timeout,
        });
        let mut lanes = Vec::new();
        let mut workers = JoinSet::new();
        for spec in specs {
            let lane = Arc::new(Lane::new(spec));
            for _ in 0..lane.spec.connections {
                let worker = Worker::new(lane.spec.name, setup.clone(), lane.spec.reader);
                workers.spawn(serve(lane.clone(), worker));
            }
            lanes.push(lane);
        }
        Ok(PersistenceState {
            lanes,
            stop,
            workers: Some(watch(myself, workers)),
            _watchdog: AbortOnDropHandle::new(watchdog),
        })
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

    /// Lets the lanes run what was queued before the stop (a stopping Poller's marks, say),
    /// then closes their connections.
    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut PersistenceState,
    ) -> Result<(), ActorProcessingErr> {
        for lane in &state.lanes {
            lane.close();
        }
        if let Some(workers) = state.workers.take()
            && tokio::time::timeout_at(state.stop.until(Reserve::ForBroker), workers)
                .await
                .is_err()
        {
            tracing::warn!(
                actor = Persistence::NAME,
                "database operations still running at the stop were abandoned"
            );
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: PersistenceMsg,
        state: &mut PersistenceState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PersistenceMsg::Run(operation) => submit(state, operation),
            PersistenceMsg::Probe => {
                // A probe already waiting proves as much as a second one would.
                let waiting = state
                    .lanes
                    .iter()
                    .filter(|lane| lane.serves(&Class::Probe))
                    .map(|lane| lane.waiting(Rank::Probe))
                    .sum::<usize>();
                if waiting == 0 {
                    submit(state, probe());
                }
            }
            PersistenceMsg::LaneEnded(reason) => return Err(reason.into()),
        }
        Ok(())
    }
}

/// Hands `operation` to the lane that serves its class.
fn submit(state: &PersistenceState, operation: Operation) {
    match state
        .lanes
        .iter()
        .find(|lane| lane.serves(&operation.class))
    {
        Some(lane) => lane.submit(operation),
        None => {
            let name = operation.name;
            operation.fail(crate::storage::StoreError::Unavailable(format!(
                "{name}: no lane serves it"
            )));
        }
    }
}

/// The health probe; nobody waits for its answer, the health is what it is for.
fn probe() -> Operation {
    let (reply, _) = ractor::concurrency::oneshot();
    Operation::new(
        PROBE,
        Class::Probe,
        Op::Write,
        0,
        Box::new(|store, claimant| Box::pin(store.probe(&claimant.name, Utc::now()))),
        reply.into(),
    )
}

/// One connection of `lane`: opens it, then runs the lane's operations one after another until
/// the lane closes. A connection that cannot be opened at start is opened by the first
/// operation instead: failing would turn a storage outage into restarts, and restarts into a
/// stopped daemon.
async fn serve(lane: Arc<Lane>, mut worker: Worker) -> &'static str {
    worker.warm_up().await;
    while let Some(taken) = lane.next().await {
        taken.operation.run(&mut worker).await;
        lane.done(taken.key);
    }
    worker.close().await;
    lane.spec.name
}

/// Watches the connections' tasks: one that ends while the actor runs (a panic in an
/// operation) fails the actor, and the Supervisor restarts Persistence with fresh lanes. Ends
/// when every task has ended (after the lanes close, at the stop).
fn watch(
    myself: ActorRef<PersistenceMsg>,
    mut workers: JoinSet<&'static str>,
) -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(tokio::spawn(async move {
        while let Some(ended) = workers.join_next().await {
            if let Err(e) = ended
                && !e.is_cancelled()
            {
                let reason = format!("a database connection's task ended: {e}");
                tracing::error!(actor = Persistence::NAME, reason = %reason);
                let _ = myself.cast(PersistenceMsg::LaneEnded(reason));
            }
        }
    }))
}
