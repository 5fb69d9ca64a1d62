//! The storing pipeline of the CommandHandler: from a transaction of accepted commands to
//! their acknowledgement once committed, or back to the broker when they cannot be stored.
//!
//! Each transaction decides its commands against their tenants' quotas (`quota`); those it
//! refused are rejected with the limit's reason once it commits. A batch the database refuses
//! because of some of its commands (a value it cannot store, rather than an outage: see
//! [`crate::storage::StoreError::refused_row`]) is split until those stand alone (`split`);
//! they are rejected with the database's reason, the rest stored. A command is acknowledged
//! only after its own commit.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use ractor::concurrency::{JoinHandle, OneshotReceiver};

use super::CommandHandlerArgs;
use super::quota;
use super::rejection::{RejectionId, reject};
use super::split::{Failure, split};
use crate::actors::persistence::CallError;
use crate::actors::poller::{Poller, PollerMsg};
use crate::actors::supervisor::NamedActor;
use crate::domain::quota::Quotas;
use crate::domain::{Action, Command, Rejection, RejectionKind};
use crate::ports::InboundCommand;
use crate::storage::{Applied, StoreError};
use crate::telemetry::spans;

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
    let quotas = args.quotas.borrow().clone();
    let handed_over = SystemTime::now();
    let queued = args.registry.persistence().apply_part_queued(
        commands.clone(),
        0..commands.len(),
        quotas.clone(),
    );
    let args = args.clone();
    tokio::spawn(async move {
        match applied(queued).await {
            Ok(applied) => {
                let commit = Commit {
                    started: handed_over,
                    ended: SystemTime::now(),
                    part: 0..commands.len(),
                };
                let written = applied.written;
                let mut inbound: Vec<Option<InboundCommand>> =
                    inbound.into_iter().map(Some).collect();
                let (over_quota, quiet) = refused_by_quota(&commands, &mut inbound, 0, applied);
                let all = 0..commands.len();
                acknowledge_stored(&args, &commands, &mut inbound, all, &[commit]).await;
                if !over_quota.is_empty() {
                    reject(&args, over_quota).await;
                }
                join_all(quiet.into_iter().map(InboundCommand::term)).await;
                tracing::debug!(
                    actor = "command_handler",
                    received = commands.len(),
                    written,
                    "commands stored and acknowledged"
                );
                Ok(())
            }
            Err(Failure::Refused(reason)) => {
                store_around_refused(&args, commands, inbound, reason, quotas).await
            }
            Err(Failure::Outage(cause)) => hand_back(inbound, cause).await,
        }
    })
}

/// The deliveries of the commands an apply of the part starting at `offset` refused past their
/// quotas, taken out of `inbound`, with their rejections. A `ScheduleTimers` is refused whole
/// (`domain::quota::decide_batch`) and reported once, as a message: the deliveries of its
/// other timers are terminated without a report of their own.
fn refused_by_quota(
    commands: &[Command],
    inbound: &mut [Option<InboundCommand>],
    offset: usize,
    applied: Applied,
) -> (
    Vec<(InboundCommand, Rejection, RejectionId)>,
    Vec<InboundCommand>,
) {
    let mut reported = Vec::new();
    let mut quiet = Vec::new();
    let mut messages = HashSet::new();
    for (i, exceeded) in applied.refused {
        let command = &commands[offset + i];
        let Some(delivery) = inbound[offset + i].take() else {
            continue;
        };
        if command.item.is_some() && !messages.insert(command.seq) {
            quiet.push(delivery);
            continue;
        }
        let rejection = quota::rejection(command, exceeded);
        reported.push((delivery, rejection, (command.seq, None)));
    }
    (reported, quiet)
}

/// A commit that stored a part of a batch (the whole batch, or one part of a split), for its
/// commands' `store timers` spans: from its hand-over to Persistence (its wait in the writer's
/// lane included) to its answer.
struct Commit {
    started: SystemTime,
    ended: SystemTime,
    /// The positions in the batch of the commands it stored.
    part: Range<usize>,
}

/// Acknowledges the commands at `positions` whose deliveries are still in `inbound` (stored),
/// counts them, and records their spans, each with the one of `commits` that stored it.
async fn acknowledge_stored(
    args: &CommandHandlerArgs,
    commands: &[Command],
    inbound: &mut [Option<InboundCommand>],
    positions: impl Iterator<Item = usize>,
    commits: &[Commit],
) {
    let mut stored_at = Vec::new();
    let mut deliveries = Vec::new();
    for i in positions {
        if let Some(delivery) = inbound[i].take() {
            stored_at.push(i);
            deliveries.push(delivery);
        }
    }
    let spans: Vec<(spans::Span, Option<&Commit>)> = match spans::enabled() {
        true => deliveries
            .iter()
            .zip(&stored_at)
            .map(|(delivery, i)| {
                let commit = commits.iter().find(|c| c.part.contains(i));
                (delivery.process_span(), commit)
            })
            .collect(),
        false => Vec::new(),
    };
    acknowledge(deliveries.into_iter()).await;
    let acknowledged = SystemTime::now();
    for (span, commit) in spans {
        if let Some(commit) = commit {
            span.stored(commit.started, commit.ended, commit.part.len());
        }
        span.end(acknowledged, None);
    }
    stored(args, stored_at.iter().map(|&i| &commands[i]));
}

/// The outcome of an apply handed to Persistence: the rows written, or why not, told apart
/// into a refusal of some of its commands and an outage.
async fn applied(
    queued: Result<OneshotReceiver<Result<Applied, StoreError>>, CallError>,
) -> Result<Applied, Failure> {
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
    quotas: Arc<Quotas>,
) -> Stored {
    let persistence = args.registry.persistence();
    // Each committed part: its commit, for its commands' spans, and what it refused past quotas.
    let parts: Arc<Mutex<Vec<(Commit, Applied)>>> = Arc::default();
    let outcome = split(commands.len(), reason, |part| {
        let started = SystemTime::now();
        let queued = persistence.apply_part_queued(commands.clone(), part.clone(), quotas.clone());
        let parts = parts.clone();
        async move {
            let applied = applied(queued).await?;
            let commit = Commit {
                started,
                ended: SystemTime::now(),
                part,
            };
            let mut parts = parts.lock().unwrap_or_else(|e| e.into_inner());
            parts.push((commit, applied));
            Ok(())
        }
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
    let parts = std::mem::take(&mut *parts.lock().unwrap_or_else(|e| e.into_inner()));
    let mut rejected = Vec::new();
    let mut quiet = Vec::new();
    let mut commits = Vec::with_capacity(parts.len());
    for (commit, applied) in parts {
        let offset = commit.part.start;
        let (reported, unreported) = refused_by_quota(&commands, &mut inbound, offset, applied);
        rejected.extend(reported);
        quiet.extend(unreported);
        commits.push(commit);
    }
    acknowledge_stored(
        args,
        &commands,
        &mut inbound,
        outcome.stored.iter().copied(),
        &commits,
    )
    .await;
    rejected.extend(outcome.refused.into_iter().filter_map(|(i, reason)| {
        let command = &commands[i];
        // A timer of a ScheduleTimers is refused alone, and its reason says which.
        let at = command
            .item
            .map(|i| format!("timers[{i}]: "))
            .unwrap_or_default();
        let rejection = Rejection {
            tenant_id: command.tenant_id.clone(),
            reason: format!("{at}refused by the database: {reason}"),
            kind: RejectionKind::Refused,
        };
        inbound[i]
            .take()
            .map(|c| (c, rejection, (command.seq, command.item)))
    }));
    if !rejected.is_empty() {
        reject(args, rejected).await;
    }
    join_all(quiet.into_iter().map(InboundCommand::term)).await;
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

/// Counts commands as stored (in all, and by tenant for the console), and wakes the Poller for
/// the earliest timer among them.
fn stored<'a>(args: &CommandHandlerArgs, commands: impl Iterator<Item = &'a Command>) {
    let mut count = 0;
    let mut by_tenant: HashMap<&str, u32> = HashMap::new();
    let earliest = commands
        .inspect(|c| {
            count += 1;
            *by_tenant.entry(c.tenant_id.as_str()).or_default() += 1;
        })
        .filter_map(|c| match c.action {
            Action::Schedule { due_at, .. } => Some(due_at),
            Action::Cancel => None,
        })
        .min();
    metrics::counter!(crate::telemetry::COMMANDS_RECEIVED, "outcome" => "stored").increment(count);
    for (tenant, n) in by_tenant {
        crate::telemetry::record_accepted(tenant, n);
    }
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
