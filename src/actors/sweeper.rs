//! Sweeper actor: [`EVERY`] after its last look, looks for commands the command stream holds that no consumer
//! reads (`ports::UnreadCommands`) and hands them to the CommandHandler, which applies or
//! rejects each as if it had been pulled (docs/CONTRACT.md §3). A command is handed over only
//! when two looks in a row found it: a consumer being created (a daemon changing the lines,
//! `timer-service lines set`) is given that long to take what is its own.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;

use super::command_handler::{CommandHandler, CommandHandlerMsg};
use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::ports::{InboundCommand, UnreadCommands};

/// How often the stream is looked at: an unread command is handed over within two of these.
pub const EVERY: Duration = Duration::from_secs(2);
/// Most commands handed over per look.
const MAX_PER_LOOK: usize = 1_000;
/// A command handed over and still found later (its commit or rejection under way, or failed)
/// is handed over again only after this.
const HAND_AGAIN_AFTER: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Sweeper;

impl NamedActor for Sweeper {
    const NAME: &'static str = "sweeper";
}

#[derive(Clone)]
pub struct SweeperArgs {
    pub registry: Registry,
    pub strays: Arc<dyn UnreadCommands>,
}

/// A command by its stream incarnation and sequence.
type Key = (i64, u64);

pub struct SweeperState {
    args: SweeperArgs,
    /// What the last look found.
    seen: HashSet<Key>,
    /// What was handed over, and when.
    handed: HashMap<Key, Instant>,
}

pub enum SweeperMsg {
    Look,
}

impl Actor for Sweeper {
    type Msg = SweeperMsg;
    type State = SweeperState;
    type Arguments = SweeperArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SweeperArgs,
    ) -> Result<SweeperState, ActorProcessingErr> {
        Ok(SweeperState {
            args,
            seen: HashSet::new(),
            handed: HashMap::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut SweeperState,
    ) -> Result<(), ActorProcessingErr> {
        // Each look asks for the next once it is done: a look held up by a broker that does
        // not answer (its requests bounded at 5 s each) does not pile looks up behind it.
        myself.send_after(EVERY, || SweeperMsg::Look);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: SweeperMsg,
        state: &mut SweeperState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SweeperMsg::Look => {
                look(state).await;
                myself.send_after(EVERY, || SweeperMsg::Look);
            }
        }
        Ok(())
    }
}

async fn look(state: &mut SweeperState) {
    let found = match state.args.strays.unread(MAX_PER_LOOK).await {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!(actor = Sweeper::NAME, error = %e, "cannot look for unread commands");
            return;
        }
    };
    let now = Instant::now();
    state
        .handed
        .retain(|_, at| now.duration_since(*at) < HAND_AGAIN_AFTER);
    let key = |c: &InboundCommand| (c.stream.created_ns, c.sequence);
    let seen = found.iter().map(key).collect();
    let ready: Vec<InboundCommand> = found
        .into_iter()
        .filter(|c| state.seen.contains(&key(c)) && !state.handed.contains_key(&key(c)))
        .collect();
    state.seen = seen;
    if ready.is_empty() {
        return;
    }
    let Some(handler) = state
        .args
        .registry
        .get::<CommandHandlerMsg>(CommandHandler::NAME)
    else {
        return;
    };
    let keys: Vec<Key> = ready.iter().map(key).collect();
    tracing::info!(
        actor = Sweeper::NAME,
        commands = ready.len(),
        "commands no consumer reads handed to the command handler"
    );
    if handler.cast(CommandHandlerMsg::Deliver(ready)).is_ok() {
        state.handed.extend(keys.into_iter().map(|k| (k, now)));
    }
}
