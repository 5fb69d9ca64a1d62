//! CommandHandler actor: pulls commands in batches, validates each, hands the valid ones to
//! Persistence in one transaction and acknowledges them to the broker only after the commit
//! (`storing`, which also splits a batch around the commands the database refuses).
//!
//! A crash before the ack means the broker delivers the commands again (within its short ack
//! wait; `keepalive` reports what is held longer in progress), and the upsert is idempotent.
//! While a transaction is under way ([`STORE_PIPELINE_DEPTH`]), what is pulled meanwhile is
//! gathered (up to [`GROUP_MAX`] commands) into the next, so under load a commit carries
//! thousands whatever `batch_size` is. A bad command, or one past its tenant's quota
//! (`quota`), is rejected and terminated; it never holds up the good ones around it. When a
//! batch cannot be stored its commands are handed back unacknowledged, and the handler backs
//! off, letting one batch at a time probe the database until one is stored.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::backoff;
use crate::domain::command::generated_correlation_id;
use crate::domain::quota::RateWindow;
use crate::domain::subjects::UNKNOWN_TENANT;
use crate::domain::tenant::check_tenant_id;
use crate::domain::{
    Arrival, Command, Rejection, RejectionKind, StreamIncarnation, Subjects, command_order,
    parse_command,
};
use crate::ports::{Clock, CommandSource, CommandSourceFactory, EventBus, InboundCommand};

mod keepalive;
mod quota;
mod rejection;
mod split;
mod storing;
use keepalive::KeepAlive;
pub use quota::QuotaHandle;
use rejection::reject;
use storing::{Stored, hand_back, store};

/// How long one pull waits for commands before the actor looks at its mailbox again; also the
/// longest a graceful stop waits for a pull request in flight.
const FETCH_WAIT: Duration = Duration::from_millis(500);
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_SOURCE_BACKOFF: Duration = Duration::from_secs(5);
/// Longest wait between two attempts to store while the database fails.
const MAX_STORE_BACKOFF: Duration = Duration::from_secs(5);
/// Transactions handed to Persistence and not yet acknowledged, at most. One: Persistence
/// runs them one after another anyway, and everything that arrives while one commits joins the
/// next, so a commit carries several commands and leaves the Poller's claims less to queue
/// behind.
pub const STORE_PIPELINE_DEPTH: usize = 1;
/// Most commands gathered into one transaction while others are under way (with the
/// transactions in flight, well under the consumer's 10,000 unacknowledged commands).
pub const GROUP_MAX: usize = 4_000;
/// How long a pull waits for more while commands are already gathered: only what is there.
const GATHER_WAIT: Duration = Duration::from_millis(1);
/// Least time between the starts of two commits while commands keep arriving: commits of two
/// or three commands each kept Persistence busy and delayed the Poller's claims; gathered for
/// this long, they share one fsync. A command arriving after a quiet spell is committed at once.
const COMMIT_SPACING: Duration = Duration::from_millis(5);

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
    pub max_command_bytes: usize,
    /// The per-tenant quotas in force.
    pub quotas: QuotaHandle,
}

pub struct CommandHandlerState {
    /// Shared with the tasks that store batches, which reject what the database refuses.
    args: Arc<CommandHandlerArgs>,
    source: Box<dyn CommandSource>,
    /// Consecutive failed pulls, for the backoff while the broker is away.
    failed_pulls: u32,
    /// Transactions being committed and acknowledged, oldest first.
    storing: VecDeque<JoinHandle<Stored>>,
    /// When the last transaction was handed to Persistence (see [`COMMIT_SPACING`]).
    last_commit: Option<tokio::time::Instant>,
    /// Accepted commands (and as delivered, to settle them) waiting for room in the pipeline,
    /// to be stored together as the next transaction.
    gathered: Vec<Command>,
    gathered_inbound: Vec<InboundCommand>,
    /// Consecutive attempts that could not store their batch; while non-zero, one batch at a
    /// time is handed to Persistence.
    failed_stores: u32,
    /// Outcomes collected since the last check: whether a batch was stored, and the last cause
    /// of a batch that was not.
    stored_any: bool,
    store_failure: Option<String>,
    /// The epoch of each incarnation of the command stream met (see `domain::order`).
    epochs: HashMap<StreamIncarnation, u32>,
    /// Commands accepted per tenant in the last second, for `commands_per_second`.
    rate: RateWindow,
    /// Reports the commands held (gathered, being stored) in progress to the broker.
    keep_alive: KeepAlive,
}

pub enum CommandHandlerMsg {
    /// Pull the next batch.
    Fetch,
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
            args: Arc::new(args),
            failed_pulls: 0,
            storing: VecDeque::new(),
            last_commit: None,
            gathered: Vec::new(),
            gathered_inbound: Vec::new(),
            failed_stores: 0,
            stored_any: false,
            store_failure: None,
            epochs: HashMap::new(),
            rate: RateWindow::default(),
            keep_alive: KeepAlive::start(),
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
        while !state.gathered.is_empty() {
            settle_oldest(state).await;
            state.last_commit = None;
            store_gathered(state);
        }
        while !state.storing.is_empty() {
            settle_oldest(state).await;
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
                if let Some(delay) = storage_backoff(state).await {
                    myself.send_after(delay, || CommandHandlerMsg::Fetch);
                    return Ok(());
                }
                store_gathered(state);
                if state.gathered.len() >= GROUP_MAX {
                    // A full group waits for room: the oldest transaction to finish.
                    settle_oldest(state).await;
                    store_gathered(state);
                    myself.cast(CommandHandlerMsg::Fetch)?;
                    return Ok(());
                }
                let gathering = !state.gathered.is_empty();
                let wait = if gathering { GATHER_WAIT } else { FETCH_WAIT };
                match state.source.next_batch(state.args.batch_size, wait).await {
                    Ok(commands) => {
                        if state.failed_pulls > 0 {
                            tracing::info!(actor = "command_handler", "pulling commands again");
                            state.failed_pulls = 0;
                        }
                        if commands.is_empty() && gathering {
                            // Nothing more to gather now: wait for room for what is gathered.
                            settle_oldest(state).await;
                        } else if !commands.is_empty() {
                            handle_batch(state, commands).await;
                        }
                        store_gathered(state);
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
        }
        Ok(())
    }
}

/// Validates one pulled batch: rejections are reported and settled at once, accepted commands
/// join the gathered ones for the next transaction. Each command is ordered by its stream
/// incarnation's epoch and its sequence there; the commands of an incarnation whose epoch
/// cannot be had now (the database fails) are handed back to the broker, as a failed store.
async fn handle_batch(state: &mut CommandHandlerState, commands: Vec<InboundCommand>) {
    // Held from now on: the epoch or the quotas may wait for the database.
    state.keep_alive.hold(commands.iter().map(|c| &c.delivery));
    learn_epochs(state, &commands).await;
    let args = &state.args;
    let now = args.clock.now();
    let mut accepted: Vec<Command> = Vec::with_capacity(commands.len());
    let mut to_ack: Vec<InboundCommand> = Vec::with_capacity(commands.len());
    let mut rejected: Vec<(InboundCommand, Rejection, u64)> = Vec::new();
    let mut unordered: Vec<InboundCommand> = Vec::new();
    for command in commands {
        let Some(epoch) = state.epochs.get(&*command.stream).copied() else {
            unordered.push(command);
            continue;
        };
        let order = match command_order(epoch, command.sequence) {
            Ok(order) => order,
            Err(reason) => {
                let tenant_id = args
                    .subjects
                    .command_tenant(&command.subject)
                    .filter(|t| check_tenant_id(t).is_ok())
                    .unwrap_or(UNKNOWN_TENANT)
                    .to_owned();
                let id = command.sequence;
                let kind = RejectionKind::Order;
                rejected.push((
                    command,
                    Rejection {
                        tenant_id,
                        reason,
                        kind,
                    },
                    id,
                ));
                continue;
            }
        };
        let arrival = Arrival {
            seq: order,
            at: now,
        };
        match parse_command(
            &args.subjects,
            &command.subject,
            &command.payload,
            args.max_command_bytes,
            arrival,
            generated_correlation_id,
        ) {
            Ok(accepted_command) => {
                accepted.push(accepted_command);
                to_ack.push(command);
            }
            Err(rejection) => rejected.push((command, rejection, order)),
        }
    }
    let admitted = quota::admit(&mut state.rate, args, &state.gathered, accepted, to_ack).await;
    rejected.extend(admitted.rejected);
    if !rejected.is_empty() {
        reject(args, rejected).await;
    }
    for (commands, cause) in [
        (
            unordered,
            Some("their stream's epoch is unknown".to_owned()),
        ),
        (admitted.undecided, admitted.failure),
    ] {
        if let (false, Some(cause)) = (commands.is_empty(), cause)
            && let Err(cause) = hand_back(&commands, cause).await
        {
            state.store_failure = Some(cause);
        }
    }
    state.gathered.extend(admitted.accepted);
    state.gathered_inbound.extend(admitted.inbound);
}

/// Learns the epoch of each stream incarnation in `commands` not met before (one
/// Persistence call per new incarnation: once per stream creation, not per command).
async fn learn_epochs(state: &mut CommandHandlerState, commands: &[InboundCommand]) {
    for command in commands {
        if state.epochs.contains_key(&*command.stream) {
            continue;
        }
        let stream = (*command.stream).clone();
        match state
            .args
            .registry
            .persistence()
            .command_epoch(stream.clone())
            .await
        {
            Ok(epoch) => {
                tracing::debug!(actor = "command_handler", stream = %stream, epoch, "command stream epoch");
                state.epochs.insert(stream, epoch);
            }
            Err(e) => {
                tracing::warn!(actor = "command_handler", stream = %stream, error = %e,
                    "cannot order the commands of this stream now; the broker will redeliver them");
                return;
            }
        }
    }
}

/// Hands what is gathered to Persistence as one transaction, when the pipeline has room; also
/// notes the outcome of transactions that have finished.
fn store_gathered(state: &mut CommandHandlerState) {
    while let Some(oldest) = state.storing.front_mut() {
        // Collects a finished transaction's outcome without waiting for an unfinished one.
        match (&mut *oldest).now_or_never() {
            Some(outcome) => {
                state.storing.pop_front();
                match outcome {
                    Ok(Ok(())) => state.stored_any = true,
                    Ok(Err(cause)) => state.store_failure = Some(cause),
                    Err(e) => state.store_failure = Some(format!("storing task failed: {e}")),
                }
            }
            None => break,
        }
    }
    if state.gathered.is_empty() || state.storing.len() >= STORE_PIPELINE_DEPTH {
        return;
    }
    let now = tokio::time::Instant::now();
    let spaced = state
        .last_commit
        .is_none_or(|last| now >= last + COMMIT_SPACING);
    if !spaced && state.gathered.len() < GROUP_MAX {
        return;
    }
    state.last_commit = Some(now);
    let commands = std::mem::take(&mut state.gathered);
    let inbound = std::mem::take(&mut state.gathered_inbound);
    let storing = store(&state.args, commands, inbound);
    state.storing.push_back(storing);
}

/// Waits for the oldest batch being stored and notes its outcome.
async fn settle_oldest(state: &mut CommandHandlerState) {
    let Some(oldest) = state.storing.pop_front() else {
        return;
    };
    match oldest.await {
        Ok(Ok(())) => state.stored_any = true,
        Ok(Err(cause)) => state.store_failure = Some(cause),
        Err(e) => state.store_failure = Some(format!("storing task failed: {e}")),
    }
}

/// Before each pull: collects the outcomes of batches being stored (all of them while the
/// database is failing, so that one batch at a time probes it) and, when one could not be
/// stored, returns how long to wait before pulling again. Logs one error per failed attempt.
async fn storage_backoff(state: &mut CommandHandlerState) -> Option<Duration> {
    while state
        .storing
        .front()
        .is_some_and(|oldest| oldest.is_finished() || state.failed_stores > 0)
    {
        settle_oldest(state).await;
    }
    if let Some(cause) = state.store_failure.take() {
        state.stored_any = false;
        state.failed_stores += 1;
        let delay = backoff::exponential(state.failed_stores, FIRST_RETRY, MAX_STORE_BACKOFF);
        tracing::error!(actor = "command_handler", error = %cause, attempt = state.failed_stores,
            retry_in_ms = delay.as_millis() as u64,
            "commands not stored; they stay in the broker and are retried");
        return Some(delay);
    }
    if std::mem::take(&mut state.stored_any) && state.failed_stores > 0 {
        tracing::info!(
            actor = "command_handler",
            attempts = state.failed_stores,
            "storing commands again"
        );
        state.failed_stores = 0;
    }
    None
}
