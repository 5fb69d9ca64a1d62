//! Supervisor: starts Persistence, Checkpointer, Poller and CommandHandler linked to itself, restarts a child
//! that fails or stops unasked (after a backoff), and gives up — stopping the daemon with an
//! error — when one child needs more restarts than allowed within the window, so the process
//! manager takes over. Every start, stop, failure and restart is one log event naming the actor.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr,
    SupervisionEvent,
};

use super::checkpointer::{Checkpointer, CheckpointerArgs, CheckpointerMsg};
use super::command_handler::{CommandHandler, CommandHandlerArgs, CommandHandlerMsg};
use super::persistence::{Persistence, PersistenceArgs, PersistenceMsg};
use super::poller::{Poller, PollerArgs, PollerMsg};
use super::registry::{ActorKind, Registry};
use crate::backoff;
use crate::config::SupervisorSettings;

/// How long a child may take to stop gracefully before the shutdown moves on.
const CHILD_STOP_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Supervisor;

/// Everything needed to (re)start each child.
#[derive(Clone)]
pub struct SupervisorArgs {
    pub registry: Registry,
    pub settings: SupervisorSettings,
    pub persistence: PersistenceArgs,
    pub poller: PollerArgs,
    pub command_handler: CommandHandlerArgs,
    /// Where the Supervisor leaves the reason it stopped the daemon on its own.
    pub exit: Arc<Mutex<Option<String>>>,
}

pub struct SupervisorState {
    args: SupervisorArgs,
    children: HashMap<ActorId, ActorKind>,
    running: HashMap<ActorKind, ActorCell>,
    restarts: HashMap<ActorKind, VecDeque<Instant>>,
    shutting_down: bool,
}

pub enum SupervisorMsg {
    /// Start a child again after its backoff.
    Restart(ActorKind),
    /// Stop every child in reverse start order, then the Supervisor.
    Shutdown(RpcReplyPort<()>),
    /// Fault hook: make one child fail as a crash would.
    InjectFault(ActorKind, String),
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
        for kind in ActorKind::START_ORDER {
            start_child(&myself, &mut state, kind).await?;
            tracing::info!(actor = %kind, "actor started");
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
            SupervisorMsg::Restart(kind) if !state.shutting_down => {
                match start_child(&myself, state, kind).await {
                    Ok(()) => tracing::info!(actor = %kind, "actor restarted"),
                    Err(e) => {
                        tracing::error!(actor = %kind, reason = %e, "actor failed to restart");
                        child_down(&myself, state, kind).await;
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
            SupervisorMsg::InjectFault(kind, reason) => inject_fault(state, kind, reason),
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
                if let Some(kind) = forget(state, &cell) {
                    tracing::error!(actor = %kind, reason = %error, "actor failed");
                    if !state.shutting_down {
                        child_down(&myself, state, kind).await;
                    }
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if let Some(kind) = forget(state, &cell) {
                    let reason = reason.unwrap_or_else(|| "none given".into());
                    if state.shutting_down {
                        tracing::info!(actor = %kind, %reason, "actor stopped");
                    } else {
                        tracing::error!(actor = %kind, %reason, "actor stopped unexpectedly");
                        child_down(&myself, state, kind).await;
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
    kind: ActorKind,
) -> Result<(), SpawnErr> {
    let name = Some(state.args.registry.name(kind));
    let me = myself.get_cell();
    let args = &state.args;
    let cell = match kind {
        ActorKind::Persistence => {
            Actor::spawn_linked(name, Persistence, args.persistence.clone(), me)
                .await?
                .0
                .get_cell()
        }
        ActorKind::Checkpointer => {
            let checkpointer = CheckpointerArgs {
                db_path: args.persistence.db_path.clone(),
                sqlite: args.persistence.sqlite.clone(),
            };
            Actor::spawn_linked(name, Checkpointer, checkpointer, me)
                .await?
                .0
                .get_cell()
        }
        ActorKind::Poller => Actor::spawn_linked(name, Poller, args.poller.clone(), me)
            .await?
            .0
            .get_cell(),
        ActorKind::CommandHandler => {
            Actor::spawn_linked(name, CommandHandler, args.command_handler.clone(), me)
                .await?
                .0
                .get_cell()
        }
    };
    state.children.insert(cell.get_id(), kind);
    state.running.insert(kind, cell);
    Ok(())
}

fn forget(state: &mut SupervisorState, cell: &ActorCell) -> Option<ActorKind> {
    let kind = state.children.remove(&cell.get_id())?;
    state.running.remove(&kind);
    Some(kind)
}

/// Counts a restart of `kind` in the sliding window and either schedules it after a backoff or,
/// past the limit, stops the daemon.
async fn child_down(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    kind: ActorKind,
) {
    let settings = state.args.settings.clone();
    let now = Instant::now();
    let history = state.restarts.entry(kind).or_default();
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
            "{kind} needed more than {} restarts within {:?}",
            settings.max_restarts, settings.restart_window
        );
        tracing::error!(actor = "supervisor", failed_actor = %kind, %reason,
            "restart limit reached; stopping the daemon");
        if let Ok(mut exit) = state.args.exit.lock() {
            exit.get_or_insert(reason.clone());
        }
        stop_children(state).await;
        myself.stop(Some(reason));
        return;
    }
    let delay = backoff::exponential(
        u32::try_from(attempt).unwrap_or(u32::MAX),
        settings.min_backoff,
        settings.max_backoff,
    );
    tracing::warn!(actor = %kind, attempt, delay_ms = delay.as_millis() as u64,
        "restarting actor after backoff");
    myself.send_after(delay, move || SupervisorMsg::Restart(kind));
}

/// Stops the children in reverse start order: the CommandHandler first (no new commands),
/// Persistence last (the others may still need it while they finish).
async fn stop_children(state: &mut SupervisorState) {
    state.shutting_down = true;
    for kind in ActorKind::START_ORDER.iter().rev() {
        let Some(cell) = state.running.remove(kind) else {
            continue;
        };
        state.children.remove(&cell.get_id());
        match cell
            .stop_and_wait(Some("shutdown".into()), Some(CHILD_STOP_TIMEOUT))
            .await
        {
            Ok(()) => tracing::info!(actor = %kind, reason = "shutdown", "actor stopped"),
            Err(e) => {
                tracing::warn!(actor = %kind, error = %e, "actor did not stop in time; killing it");
                cell.kill();
            }
        }
    }
}

fn inject_fault(state: &SupervisorState, kind: ActorKind, reason: String) {
    let Some(cell) = state.running.get(&kind) else {
        tracing::warn!(actor = %kind, "fault not injected: actor not running");
        return;
    };
    tracing::warn!(actor = %kind, %reason, "injecting fault");
    let sent = match kind {
        ActorKind::Persistence => ActorRef::<PersistenceMsg>::from(cell.clone())
            .cast(PersistenceMsg::Fail(reason))
            .is_ok(),
        ActorKind::Checkpointer => ActorRef::<CheckpointerMsg>::from(cell.clone())
            .cast(CheckpointerMsg::Fail(reason))
            .is_ok(),
        ActorKind::Poller => ActorRef::<PollerMsg>::from(cell.clone())
            .cast(PollerMsg::Fail(reason))
            .is_ok(),
        ActorKind::CommandHandler => ActorRef::<CommandHandlerMsg>::from(cell.clone())
            .cast(CommandHandlerMsg::Fail(reason))
            .is_ok(),
    };
    if !sent {
        tracing::warn!(actor = %kind, "fault not injected: actor mailbox closed");
    }
}
