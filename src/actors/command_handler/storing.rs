//! The storing pipeline of the CommandHandler: from a transaction of accepted commands to
//! their acknowledgement once committed, or back to the broker when they cannot be stored.
//!
//! A batch the database refuses because of some of its commands (a value it cannot store,
//! rather than an outage: see [`crate::storage::StoreError::refused_row`]) is split until those
//! stand alone (`split`); they are rejected with the database's reason, the rest stored. A
//! command is acknowledged only after its own commit.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use ractor::concurrency::{JoinHandle, OneshotReceiver};

use super::CommandHandlerArgs;
use super::rejection::reject;
use super::split::{Failure, split};
use crate::actors::persistence::CallError;
use crate::actors::poller::{Poller, PollerMsg};
use crate::actors::supervisor::NamedActor;
use crate::domain::{Action, Command, Rejection, RejectionKind};
use crate::ports::InboundCommand;
use crate::storage::StoreError;

/// How long a batch may wait for its commit before it is handed back to the broker.
const STORE_TIMEOUT: Duration = Duration::from_secs(30);

/// What became of one batch: stored and acknowledged, or handed back to the broker because it
/// could not be stored (the cause).
pub(super) type Stored = Result<(), String>;

/// An accepted command, with its delivery to settle once it is stored (dropped unsettled, the
/// delivery hands it back).
pub(super) struct Accepted {
    pub command: Command,
    pub inbound: InboundCommand,
}

/// Hands the accepted commands to Persistence and returns the task that acknowledges them to the
/// broker once committed, or hands them back for redelivery if the commit fails. A batch the
/// database refuses because of some of its commands is split around them.
pub(super) fn store(args: &Arc<CommandHandlerArgs>, batch: Vec<Accepted>) -> JoinHandle<Stored> {
    let (accepted, inbound): (Vec<Command>, Vec<InboundCommand>) = batch
        .into_iter()
        .map(|Accepted { command, inbound }| (command, inbound))
        .unzip();
    for command in &accepted {
        tracing::debug!(actor = "command_handler", tenant_id = %command.tenant_id,
            service_call_id = %command.service_call_id, action = ?command.action,
            sequence = command.seq, "command accepted");
    }
    let commands: Arc<[Command]> = accepted.into();
    let queued = args
        .registry
        .persistence()
        .apply_part_queued(commands.clone(), 0..commands.len());
    let args = args.clone();
    tokio::spawn(async move {
        match applied(queued).await {
            Ok(written) => {
                acknowledge(inbound.into_iter()).await;
                tracing::debug!(
                    actor = "command_handler",
                    received = commands.len(),
                    written,
                    "commands stored and acknowledged"
                );
                stored(&args, commands.iter());
                Ok(())
            }
            Err(Failure::Refused(reason)) => {
                store_around_refused(&args, commands, inbound, reason).await
            }
            Err(Failure::Outage(cause)) => hand_back(inbound, cause).await,
        }
    })
}

/// The outcome of an apply handed to Persistence: the rows written, or why not, told apart
/// into a refusal of some of its commands and an outage.
async fn applied(
    queued: Result<OneshotReceiver<Result<u64, StoreError>>, CallError>,
) -> Result<u64, Failure> {
    let committed = queued.map_err(|e| Failure::Outage(e.to_string()))?;
    match tokio::time::timeout(STORE_TIMEOUT, committed).await {
        Ok(Ok(Ok(written))) => Ok(written),
        Ok(Ok(Err(e))) => Err(match e.refused_row() {
            Some(reason) => Failure::Refused(reason.to_owned()),
            None => Failure::Outage(e.to_string()),
        }),
        Ok(Err(_)) => Err(Failure::Outage(
            "persistence stopped before answering".into(),
        )),
        Err(_) => Err(Failure::Outage(format!(
            "no commit within {STORE_TIMEOUT:?}"
        ))),
    }
}

/// Stores a batch the database refused because of some of its commands: splits it until those
/// stand alone, rejects them with the database's reason, and acknowledges what was stored. An
/// outage met meanwhile ends the split; the commands not yet stored are handed back, as for
/// any batch that could not be stored.
async fn store_around_refused(
    args: &CommandHandlerArgs,
    commands: Arc<[Command]>,
    inbound: Vec<InboundCommand>,
    reason: String,
) -> Stored {
    let persistence = args.registry.persistence();
    let outcome = split(commands.len(), reason, |part| {
        let queued = persistence.apply_part_queued(commands.clone(), part);
        async move { applied(queued).await.map(|_| ()) }
    })
    .await;
    tracing::warn!(
        actor = "command_handler",
        commands = commands.len(),
        refused = outcome.refused.len(),
        stored = outcome.stored.len(),
        applies = outcome.applies,
        "the database refused commands of a batch; the batch was split to store the rest"
    );
    let mut inbound: Vec<Option<InboundCommand>> = inbound.into_iter().map(Some).collect();
    acknowledge(outcome.stored.iter().filter_map(|&i| inbound[i].take())).await;
    stored(args, outcome.stored.iter().map(|&i| &commands[i]));
    let rejected = outcome
        .refused
        .into_iter()
        .filter_map(|(i, reason)| {
            let command = &commands[i];
            let rejection = Rejection {
                tenant_id: command.tenant_id.clone(),
                reason: format!("refused by the database: {reason}"),
                kind: RejectionKind::Refused,
            };
            inbound[i].take().map(|c| (c, rejection, command.seq))
        })
        .collect::<Vec<_>>();
    if !rejected.is_empty() {
        reject(args, rejected).await;
    }
    match outcome.outage {
        None => Ok(()),
        Some(cause) => {
            let unsettled: Vec<InboundCommand> = outcome
                .unsettled
                .iter()
                .filter_map(|&i| inbound[i].take())
                .collect();
            hand_back(unsettled, cause).await
        }
    }
}

/// Acknowledges stored commands to the broker.
async fn acknowledge(commands: impl Iterator<Item = InboundCommand>) {
    let acks = join_all(commands.map(InboundCommand::ack)).await;
    let failed_acks = acks.iter().filter(|r| r.is_err()).count();
    if failed_acks > 0 {
        tracing::warn!(
            actor = "command_handler",
            failed_acks,
            "stored commands could not be acknowledged; the broker will redeliver them"
        );
    }
}

/// Counts commands as stored, and wakes the Poller for the earliest timer among them.
fn stored<'a>(args: &CommandHandlerArgs, commands: impl Iterator<Item = &'a Command>) {
    let mut count = 0;
    let earliest = commands
        .inspect(|_| count += 1)
        .filter_map(|c| match c.action {
            Action::Schedule { due_at, .. } => Some(due_at),
            Action::Cancel => None,
        })
        .min();
    metrics::counter!(crate::telemetry::COMMANDS_RECEIVED, "outcome" => "stored").increment(count);
    if let (Some(at), Some(poller)) = (earliest, args.registry.get::<PollerMsg>(Poller::NAME)) {
        let _ = poller.cast(PollerMsg::WakeAt(at));
    }
}

/// Hands commands that could not be stored back to the broker for redelivery (at once: the
/// handler itself decides when to pull again), never acknowledging them.
pub(super) async fn hand_back(commands: Vec<InboundCommand>, cause: String) -> Stored {
    let count = commands.len();
    join_all(commands.into_iter().map(InboundCommand::hand_back)).await;
    Err(format!("{cause} ({count} commands)"))
}
