//! Supervisor: starts its children from a table of [`ChildSpec`]s (in table order, linked to
//! itself), restarts a child that fails or stops unasked (after a backoff), and gives up —
//! stopping the daemon with an error — when one child needs more restarts than allowed within
//! the window, so the process manager takes over. Every start, stop, failure and restart is one
//! log event naming the actor; every restart also counts in `timer_actor_restarts_total`.
//!
//! Adding an actor is adding one spec to the table the daemon hands over; nothing here names
//! any particular child.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;
use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr,
    SupervisionEvent,
};

use super::registry::Registry;
use crate::backoff::Retry;
use crate::config::SupervisorSettings;
use crate::health::Health;
use crate::stop::Reserve;
use crate::telemetry;

/// An actor the Supervisor can start: a unit struct with a name of its own, unique within a
/// daemon (its registry name, and the `actor` field of its log lines).
pub trait NamedActor: Actor + Default {
    const NAME: &'static str;
}

type Spawn =
    dyn Fn(String, ActorCell) -> BoxFuture<'static, Result<ActorCell, SpawnErr>> + Send + Sync;

/// One child of the Supervisor: its name, how to (re)start it, and whether the others call it
/// while they stop.
#[derive(Clone)]
pub struct ChildSpec {
    pub name: &'static str,
    spawn: Arc<Spawn>,
    stops_last: bool,
}

impl ChildSpec {
    /// A child that is `A`, (re)started with a clone of `args` each time.
    pub fn of<A>(args: A::Arguments) -> Self
    where
        A: NamedActor,
        A::Arguments: Clone + Sync,
    {
        Self {
            name: A::NAME,
            spawn: Arc::new(move |registered, supervisor| {
                let args = args.clone();
                Box::pin(async move {
                    let (actor, _) =
                        Actor::spawn_linked(Some(registered), A::default(), args, supervisor)
                            .await?;
                    Ok(actor.get_cell())
                })
            }),
            stops_last: false,
        }
    }

    /// The other children call this one while they stop (Persistence): it stops after them.
    pub fn stopped_last(mut self) -> Self {
        self.stops_last = true;
        self
    }
}

pub struct Supervisor;

/// Everything needed to (re)start each child.
#[derive(Clone)]
pub struct SupervisorArgs {
    pub registry: Registry,
    pub settings: SupervisorSettings,
    /// Where actors that are down are listed (readiness).
    pub health: Health,
    /// The children, in start order: Persistence first, since the others call it.
    pub children: Vec<ChildSpec>,
    /// Where the Supervisor leaves the reason it stopped the daemon on its own.
    pub exit: Arc<Mutex<Option<String>>>,
}

pub struct SupervisorState {
    args: SupervisorArgs,
    children: HashMap<ActorId, &'static str>,
    running: HashMap<&'static str, ActorCell>,
    restarts: HashMap<&'static str, VecDeque<Instant>>,
    shutting_down: bool,
}

pub enum SupervisorMsg {
    /// Start a child again after its backoff.
    Restart(&'static str),
    /// Stop every child (`stop_children`), then the Supervisor.
    Shutdown(RpcReplyPort<()>),
    /// Fault hook for drills and tests: kill one child as a crash would (no graceful stop).
    InjectFault(String),
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        tracing::info!(actor = "supervisor", "supervisor starting");
        let mut state = SupervisorState {
            args,
            children: HashMap::new(),
            running: HashMap::new(),
            restarts: HashMap::new(),
            shutting_down: false,
        };
        for spec in state.args.children.clone() {
            start_child(&myself, &mut state, &spec).await?;
            tracing::info!(actor = spec.name, "actor started");
        }
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        _state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        tracing::info!(actor = "supervisor", "supervisor stopped");
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Restart(name) if !state.shutting_down => {
                let Some(spec) = state.args.children.iter().find(|s| s.name == name).cloned()
                else {
                    return Ok(());
                };
                match start_child(&myself, state, &spec).await {
                    Ok(()) => {
                        metrics::counter!(telemetry::ACTOR_RESTARTS, "actor" => name).increment(1);
                        tracing::info!(actor = name, "actor restarted");
                    }
                    Err(e) => {
                        tracing::error!(actor = name, reason = %e, "actor failed to restart");
                        child_down(&myself, state, name).await;
                    }
                }
            }
            SupervisorMsg::Restart(_) => {}
            SupervisorMsg::Shutdown(reply) => {
                tracing::info!(actor = "supervisor", "shutting down");
                stop_children(state).await;
                let _ = reply.send(());
                myself.stop(Some("shutdown".into()));
            }
            SupervisorMsg::InjectFault(name) => match state.running.get(name.as_str()) {
                Some(cell) => {
                    tracing::warn!(actor = %name, "injecting fault: killing the actor");
                    cell.kill();
                }
                None => tracing::warn!(actor = %name, "fault not injected: actor not running"),
            },
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                if let Some(name) = forget(state, &cell) {
                    tracing::error!(actor = name, reason = %error, "actor failed");
                    state.args.health.actor_failed(name, &error.to_string());
                    if !state.shutting_down {
                        child_down(&myself, state, name).await;
                    }
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if let Some(name) = forget(state, &cell) {
                    let reason = reason.unwrap_or_else(|| "none given".into());
                    if state.shutting_down {
                        tracing::info!(actor = name, %reason, "actor stopped");
                    } else {
                        tracing::error!(actor = name, %reason, "actor stopped unexpectedly");
                        state
                            .args
                            .health
                            .actor_failed(name, &format!("stopped: {reason}"));
                        child_down(&myself, state, name).await;
                    }
                }
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
        }
        Ok(())
    }
}

async fn start_child(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    spec: &ChildSpec,
) -> Result<(), SpawnErr> {
    let registered = state.args.registry.name(spec.name);
    let cell = (spec.spawn)(registered, myself.get_cell()).await?;
    state.children.insert(cell.get_id(), spec.name);
    state.running.insert(spec.name, cell);
    state.args.health.actor_up(spec.name);
    Ok(())
}

fn forget(state: &mut SupervisorState, cell: &ActorCell) -> Option<&'static str> {
    let name = state.children.remove(&cell.get_id())?;
    state.running.remove(name);
    state.args.health.actor_down(name);
    Some(name)
}

/// Counts a restart of `name` in the sliding window and either schedules it after a backoff
/// or, past the limit, stops the daemon.
async fn child_down(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    name: &'static str,
) {
    let settings = state.args.settings.clone();
    let now = Instant::now();
    let history = state.restarts.entry(name).or_default();
    while history
        .front()
        .is_some_and(|t| now.duration_since(*t) > settings.restart_window)
    {
        history.pop_front();
    }
    history.push_back(now);
    let attempt = history.len();
    if attempt > settings.max_restarts {
        let reason = format!(
            "{name} needed more than {} restarts within {:?}",
            settings.max_restarts, settings.restart_window
        );
        tracing::error!(actor = "supervisor", failed_actor = name, %reason,
            "restart limit reached; stopping the daemon");
        if let Ok(mut exit) = state.args.exit.lock() {
            exit.get_or_insert(reason.clone());
        }
        stop_children(state).await;
        myself.stop(Some(reason));
        return;
    }
    let delay = Retry::new(settings.min_backoff, settings.max_backoff)
        .delay(u32::try_from(attempt).unwrap_or(u32::MAX));
    tracing::warn!(
        actor = name,
        attempt,
        delay_ms = delay.as_millis() as u64,
        "restarting actor after backoff"
    );
    myself.send_after(delay, move || SupervisorMsg::Restart(name));
}

/// Stops the children within the stop's budget (`crate::stop`, begun here if the daemon stops
/// on its own): all together but those stopped last, which the others call while they stop
/// (Persistence); then those. A child still running when its share of the budget ends is
/// killed: what it held is what a crash would leave, never a loss.
async fn stop_children(state: &mut SupervisorState) {
    state.shutting_down = true;
    let stop = state.args.registry.stop().clone();
    stop.begin(state.args.settings.shutdown_timeout);
    let specs = state.args.children.clone();
    for (last, reserve) in [(false, Reserve::ForStorage), (true, Reserve::ForBroker)] {
        let mut stopping = Vec::new();
        for spec in specs.iter().filter(|spec| spec.stops_last == last) {
            if let Some(cell) = state.running.remove(spec.name) {
                state.children.remove(&cell.get_id());
                stopping.push((spec.name, cell));
            }
        }
        let left = stop
            .until_settled(reserve)
            .saturating_duration_since(tokio::time::Instant::now());
        futures::future::join_all(stopping.into_iter().map(|(name, cell)| async move {
            match cell
                .stop_and_wait(Some("shutdown".into()), Some(left))
                .await
            {
                Ok(()) => tracing::info!(actor = name, reason = "shutdown", "actor stopped"),
                Err(e) => {
                    tracing::warn!(actor = name, error = %e,
                        "actor did not stop within its share of the stop's budget; killing it");
                    cell.kill();
                }
            }
        }))
        .await;
    }
}
