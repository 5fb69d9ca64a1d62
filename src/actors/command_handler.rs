//! CommandHandler actor: pulls commands in batches, validates each, hands the valid ones to
//! Persistence in one transaction and acknowledges them to the broker only after the commit.
//!
//! A crash before the ack means the broker delivers the commands again, and the upsert is
//! idempotent. Up to [`STORE_PIPELINE_DEPTH`] batches are being stored at once: the next batch
//! is pulled and validated while Persistence commits the previous one, and Persistence applies
//! them in the order they were handed over. A bad command is reported (`TimerCommandRejected`), logged and terminated on the
//! broker; it never holds up the good commands around it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::poller::PollerMsg;
use super::registry::Registry;
use crate::backoff;
use crate::domain::command::generated_correlation_id;
use crate::domain::events::{rejection_message_id, timer_command_rejected};
use crate::domain::timer::newest_per_key;
use crate::domain::{Rejection, Subjects, TimerEntry, parse_schedule_timer};
use crate::ports::{
    Clock, CommandSource, CommandSourceFactory, Delivery, EventBus, InboundCommand, OutgoingEvent,
};

/// How long one pull waits for commands before the actor looks at its mailbox again; also the
/// longest a graceful stop waits for a pull request in flight.
const FETCH_WAIT: Duration = Duration::from_millis(500);
/// Delay before the broker redelivers commands that could not be stored.
const REDELIVERY_DELAY: Duration = Duration::from_secs(1);
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_SOURCE_BACKOFF: Duration = Duration::from_secs(5);
/// Batches handed to Persistence and not yet acknowledged, at most.
pub const STORE_PIPELINE_DEPTH: usize = 2;
/// How long a batch may wait for its commit before it is handed back to the broker.
const STORE_TIMEOUT: Duration = Duration::from_secs(30);

pub struct CommandHandler;

#[derive(Clone)]
pub struct CommandHandlerArgs {
    pub registry: Registry,
    pub source: Arc<dyn CommandSourceFactory>,
    pub bus: Arc<dyn EventBus>,
    pub clock: Arc<dyn Clock>,
    pub subjects: Subjects,
    pub batch_size: usize,
    pub max_command_bytes: usize,
}

pub struct CommandHandlerState {
    args: CommandHandlerArgs,
    source: Box<dyn CommandSource>,
    /// Consecutive failed pulls, for the backoff while the broker is away.
    failed_pulls: u32,
    /// Batches being committed and acknowledged, oldest first.
    storing: VecDeque<JoinHandle<()>>,
}

pub enum CommandHandlerMsg {
    /// Pull the next batch.
    Fetch,
    /// Fault hook: fail as a crash would (drills and tests of supervision).
    Fail(String),
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
        Ok(CommandHandlerState {
            source: args.source.create(),
            args,
            failed_pulls: 0,
            storing: VecDeque::new(),
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
    /// handled too, so none waits out the redelivery timeout.
    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut CommandHandlerState,
    ) -> Result<(), ActorProcessingErr> {
        let batch_size = state.args.batch_size;
        match state.source.drain(batch_size).await {
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
        while let Some(storing) = state.storing.pop_front() {
            let _ = storing.await;
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
            CommandHandlerMsg::Fetch => {
                match state
                    .source
                    .next_batch(state.args.batch_size, FETCH_WAIT)
                    .await
                {
                    Ok(commands) => {
                        if state.failed_pulls > 0 {
                            tracing::info!(actor = "command_handler", "pulling commands again");
                            state.failed_pulls = 0;
                        }
                        if !commands.is_empty() {
                            handle_batch(state, commands).await;
                        }
                        myself.cast(CommandHandlerMsg::Fetch)?;
                    }
                    Err(e) => {
                        state.failed_pulls += 1;
                        let delay = backoff::exponential(
                            state.failed_pulls,
                            FIRST_RETRY,
                            MAX_SOURCE_BACKOFF,
                        );
                        tracing::warn!(actor = "command_handler", error = %e,
                            retry_in_ms = delay.as_millis() as u64, "cannot pull commands");
                        myself.send_after(delay, || CommandHandlerMsg::Fetch);
                    }
                }
            }
            CommandHandlerMsg::Fail(reason) => return Err(reason.into()),
        }
        Ok(())
    }
}

/// Validates, stores, reports and settles one batch.
async fn handle_batch(state: &mut CommandHandlerState, commands: Vec<InboundCommand>) {
    let args = &state.args;
    let now = args.clock.now();
    let mut accepted: Vec<TimerEntry> = Vec::with_capacity(commands.len());
    let mut to_ack: Vec<Box<dyn Delivery>> = Vec::with_capacity(commands.len());
    let mut rejected: Vec<(InboundCommand, Rejection)> = Vec::new();
    for command in commands {
        match parse_schedule_timer(
            &args.subjects,
            &command.subject,
            &command.payload,
            args.max_command_bytes,
            generated_correlation_id,
        ) {
            Ok(timer) => {
                accepted.push(TimerEntry::scheduled(timer, command.sequence, now));
                to_ack.push(command.delivery);
            }
            Err(rejection) => rejected.push((command, rejection)),
        }
    }
    if !rejected.is_empty() {
        reject(args, rejected).await;
    }
    if accepted.is_empty() {
        return;
    }
    while state.storing.len() >= STORE_PIPELINE_DEPTH {
        if let Some(oldest) = state.storing.pop_front() {
            let _ = oldest.await;
        }
    }
    if let Some(storing) = store(&state.args, accepted, to_ack).await {
        state.storing.push_back(storing);
    }
}

/// Hands the accepted commands to Persistence and returns the task that acknowledges them to the
/// broker once committed (or hands them back for redelivery if the commit fails).
async fn store(
    args: &CommandHandlerArgs,
    accepted: Vec<TimerEntry>,
    to_ack: Vec<Box<dyn Delivery>>,
) -> Option<JoinHandle<()>> {
    let earliest = accepted.iter().map(|t| t.due_at).min();
    let received = accepted.len();
    for timer in &accepted {
        tracing::debug!(actor = "command_handler", tenant_id = %timer.tenant_id,
            service_call_id = %timer.service_call_id, due_at = %timer.due_at,
            sequence = timer.command_seq, "ScheduleTimer accepted");
    }
    let committed = match args
        .registry
        .persistence()
        .upsert_queued(newest_per_key(accepted))
    {
        Ok(committed) => committed,
        Err(e) => {
            tracing::error!(actor = "command_handler", error = %e, count = received,
                "commands not stored; asking the broker to redeliver them");
            join_all(to_ack.iter().map(|d| d.nak(REDELIVERY_DELAY))).await;
            return None;
        }
    };
    let registry = args.registry.clone();
    Some(tokio::spawn(async move {
        let failure = match tokio::time::timeout(STORE_TIMEOUT, committed).await {
            Ok(Ok(Ok(written))) => {
                let acks = join_all(to_ack.iter().map(|d| d.ack())).await;
                let failed_acks = acks.iter().filter(|r| r.is_err()).count();
                if failed_acks > 0 {
                    tracing::warn!(
                        actor = "command_handler",
                        failed_acks,
                        "stored commands could not be acknowledged; the broker will redeliver them"
                    );
                }
                tracing::debug!(
                    actor = "command_handler",
                    received,
                    written,
                    "commands stored and acknowledged"
                );
                if let (Some(at), Some(poller)) = (earliest, registry.poller()) {
                    let _ = poller.cast(PollerMsg::WakeAt(at));
                }
                return;
            }
            Ok(Ok(Err(e))) => e.to_string(),
            Ok(Err(_)) => "persistence stopped before answering".to_owned(),
            Err(_) => format!("no commit within {STORE_TIMEOUT:?}"),
        };
        tracing::error!(actor = "command_handler", error = %failure, count = received,
            "commands not stored; asking the broker to redeliver them");
        join_all(to_ack.iter().map(|d| d.nak(REDELIVERY_DELAY))).await;
    }))
}

/// Reports each refused command on the rejection subject, then terminates it on the broker.
async fn reject(args: &CommandHandlerArgs, rejected: Vec<(InboundCommand, Rejection)>) {
    let now = args.clock.now();
    let mut events = Vec::with_capacity(rejected.len());
    for (command, rejection) in &rejected {
        tracing::warn!(actor = "command_handler", tenant_id = %rejection.tenant_id,
            subject = %command.subject, sequence = command.sequence, reason = %rejection.reason,
            "ScheduleTimer rejected");
        let envelope = timer_command_rejected(
            &rejection.tenant_id,
            &rejection.reason,
            &command.subject,
            &command.payload,
            now,
        );
        match serde_json::to_vec(&envelope) {
            Ok(payload) => events.push(OutgoingEvent {
                subject: args.subjects.rejected(&rejection.tenant_id),
                message_id: rejection_message_id(command.sequence),
                payload: payload.into(),
            }),
            Err(e) => tracing::error!(actor = "command_handler", error = %e,
                "cannot encode a rejection event"),
        }
    }
    for result in args.bus.publish_all(events).await {
        if let Err(e) = result {
            tracing::error!(actor = "command_handler", error = %e,
                "rejection event not published; the rejection stays in this log only");
        }
    }
    join_all(rejected.iter().map(|(command, _)| command.delivery.term())).await;
}
