//! CommandHandler actor: pulls commands in batches, validates each (`intake`), hands the valid
//! ones to Persistence in one transaction (`pipeline`, `storing`) and acknowledges them to the
//! broker only after the commit.
//!
//! A crash before the ack means the broker delivers the commands again (within its short ack
//! wait; until then the command source reports what it delivered in progress), and the upsert
//! is idempotent.
//! Every delivered command is held by a value that settles it: acknowledged once stored,
//! terminated once rejected, handed back when it cannot be stored now, and handed back too if
//! it is dropped unsettled. A bad command, or one its transaction found past its tenant's quota
//! (`quota`), is rejected and terminated; it never holds up the good ones around it. When a batch cannot be
//! stored its commands are handed back, and the handler backs off, letting one batch at a time
//! probe the database until one is stored.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio_util::task::TaskTracker;

use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::backoff::Retries;
use crate::domain::{CommandLimits, Subjects};
use crate::ports::{Clock, CommandSource, CommandSourceFactory, EventBus, InboundCommand};
use crate::stop::Reserve;

mod intake;
mod pipeline;
mod quota;
mod rejection;
mod split;
mod storing;
use intake::{Epochs, handle_batch};
pub use pipeline::GROUP_MAX;
use pipeline::Pipeline;
pub use quota::QuotaHandle;

/// How long one pull waits for commands before the actor looks at its mailbox again; also the
/// longest a graceful stop waits for a pull request in flight.
const FETCH_WAIT: Duration = Duration::from_millis(500);
/// How long a pull waits for more while commands are already gathered: only what is there.
const GATHER_WAIT: Duration = Duration::from_millis(1);

#[derive(Default)]
pub struct CommandHandler;

impl NamedActor for CommandHandler {
    const NAME: &'static str = "command_handler";
}

#[derive(Clone)]
pub struct CommandHandlerArgs {
    pub registry: Registry,
    pub source: Arc<dyn CommandSourceFactory>,
    pub bus: Arc<dyn EventBus>,
    pub clock: Arc<dyn Clock>,
    pub subjects: Subjects,
    pub batch_size: usize,
    /// `max_command_bytes`, `max_data_bytes`.
    pub limits: CommandLimits,
    /// The per-tenant quotas in force.
    pub quotas: QuotaHandle,
    /// Transactions of commands committed at once (`DatabaseTarget::command_connections`).
    pub commits_in_flight: usize,
}

pub struct CommandHandlerState {
    /// Shared with the tasks that store batches, which reject what the database refuses.
    args: Arc<CommandHandlerArgs>,
    source: Box<dyn CommandSource>,
    /// Consecutive failed pulls, for the backoff while the broker is away.
    failed_pulls: Retries,
    pipeline: Pipeline,
    epochs: Epochs,
    /// The intake's rejections under way (`intake`): a graceful stop lets them settle their
    /// commands within its budget; a crash leaves them running to the end.
    rejections: TaskTracker,
}

pub enum CommandHandlerMsg {
    /// Pull the next batch.
    Fetch,
    /// Take commands found in the stream outside every consumer (the Sweeper's), as if pulled.
    Deliver(Vec<InboundCommand>),
}

impl Actor for CommandHandler {
    type Msg = CommandHandlerMsg;
    type State = CommandHandlerState;
    type Arguments = CommandHandlerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: CommandHandlerArgs,
    ) -> Result<CommandHandlerState, ActorProcessingErr> {
        let pipeline = Pipeline::new(args.commits_in_flight);
        Ok(CommandHandlerState {
            source: args.source.create(),
            args: Arc::new(args),
            failed_pulls: Retries::default(),
            pipeline,
            epochs: Epochs::new(),
            rejections: TaskTracker::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut CommandHandlerState,
    ) -> Result<(), ActorProcessingErr> {
        myself.cast(CommandHandlerMsg::Fetch)?;
        Ok(())
    }

    /// On a graceful stop, the commands the broker already sent on the open pull request are
    /// handled too, so none waits out the redelivery timeout, and the rejections under way are
    /// published; within the stop's budget (`crate::stop`): what is not committed or rejected
    /// by then is not settled, and the broker delivers it again.
    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut CommandHandlerState,
    ) -> Result<(), ActorProcessingErr> {
        let until = state.args.registry.stop().until(Reserve::ForStorage);
        if tokio::time::timeout_at(until, finish(state)).await.is_err() {
            tracing::warn!(
                actor = "command_handler",
                "commands delivered before the stop were not all stored within the stop's budget; \
                 the broker delivers them again"
            );
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: CommandHandlerMsg,
        state: &mut CommandHandlerState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CommandHandlerMsg::Deliver(commands) => handle_batch(state, commands).await,
            CommandHandlerMsg::Fetch => {
                if let Some(delay) = state.pipeline.backoff().await {
                    myself.send_after(delay, || CommandHandlerMsg::Fetch);
                    return Ok(());
                }
                state.pipeline.store_gathered(&state.args);
                if state.pipeline.is_full() {
                    // A full group waits for room: the oldest transaction to finish.
                    state.pipeline.settle_oldest().await;
                    state.pipeline.store_gathered(&state.args);
                    myself.cast(CommandHandlerMsg::Fetch)?;
                    return Ok(());
                }
                let gathering = !state.pipeline.gathered().is_empty();
                let wait = if gathering { GATHER_WAIT } else { FETCH_WAIT };
                match state.source.next_batch(state.args.batch_size, wait).await {
                    Ok(commands) => {
                        if state.failed_pulls.succeeded() > 0 {
                            tracing::info!(actor = "command_handler", "pulling commands again");
                        }
                        if commands.is_empty() && gathering {
                            // Nothing more to gather now: wait for room for what is gathered.
                            state.pipeline.settle_oldest().await;
                        } else if !commands.is_empty() {
                            handle_batch(state, commands).await;
                        }
                        state.pipeline.store_gathered(&state.args);
                        myself.cast(CommandHandlerMsg::Fetch)?;
                    }
                    Err(e) => {
                        let delay = state.failed_pulls.failed();
                        tracing::warn!(actor = "command_handler", error = %e,
                            retry_in_ms = delay.as_millis() as u64, "cannot pull commands");
                        myself.send_after(delay, || CommandHandlerMsg::Fetch);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Handles what the broker sent on the open pull request before the stop, and lets the
/// pipeline's stores and the intake's rejections finish.
async fn finish(state: &mut CommandHandlerState) {
    match state.source.drain().await {
        Ok(commands) if !commands.is_empty() => {
            tracing::info!(
                actor = "command_handler",
                count = commands.len(),
                "handling commands delivered before the stop"
            );
            handle_batch(state, commands).await;
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(actor = "command_handler", error = %e,
            "could not drain the open pull request; the broker will redeliver"),
    }
    state.pipeline.finish(&state.args).await;
    state.rejections.close();
    state.rejections.wait().await;
}
