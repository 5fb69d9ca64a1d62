//! What the CommandHandler does with one pulled batch before it is stored: each command is
//! placed in its key's order (its stream incarnation's epoch and its sequence there, see
//! `domain::order`), parsed and validated. Rejections are reported and settled beside it;
//! accepted commands join the gathered ones for the next transaction (where they are decided
//! against their tenants' quotas, see `quota`); a `CancelTimers` goes to the Canceller, which
//! waits for those before it on its line. The commands of an incarnation whose epoch cannot be
//! had now (the database fails) are handed back to the broker, as a failed store.

use std::collections::HashMap;

use super::CommandHandlerState;
use super::rejection::{RejectionId, reject};
use super::storing::{Accepted, hand_back};
use crate::actors::canceller::Job;
use crate::domain::command::generated_correlation_id;
use crate::domain::subjects::UNKNOWN_TENANT;
use crate::domain::tenant::check_tenant_id;
use crate::domain::{
    Arrival, CancelMany, Parsed, Rejection, RejectionKind, StreamIncarnation, command_order,
    parse_message,
};
use crate::ports::InboundCommand;

/// The epoch of each incarnation of the command stream met.
pub(super) type Epochs = HashMap<StreamIncarnation, u32>;

/// Validates, orders and decides one pulled batch.
pub(super) async fn handle_batch(state: &mut CommandHandlerState, commands: Vec<InboundCommand>) {
    learn_epochs(state, &commands).await;
    let args = &state.args;
    let now = args.clock.now();
    let mut accepted: Vec<Accepted> = Vec::with_capacity(commands.len());
    let mut rejected: Vec<(InboundCommand, Rejection, RejectionId)> = Vec::new();
    let mut unordered: Vec<InboundCommand> = Vec::new();
    let mut many: Vec<(CancelMany, InboundCommand)> = Vec::new();
    for inbound in commands {
        let Some(epoch) = state.epochs.get(&*inbound.stream).copied() else {
            unordered.push(inbound);
            continue;
        };
        let order = match command_order(epoch, inbound.sequence) {
            Ok(order) => order,
            Err(reason) => {
                let tenant_id = args
                    .subjects
                    .command_tenant(&inbound.subject)
                    .filter(|t| check_tenant_id(t).is_ok())
                    .unwrap_or(UNKNOWN_TENANT)
                    .to_owned();
                let id = inbound.sequence;
                let kind = RejectionKind::Order;
                let rejection = Rejection {
                    tenant_id,
                    reason,
                    kind,
                };
                rejected.push((inbound, rejection, (id, None)));
                continue;
            }
        };
        let arrival = Arrival {
            seq: order,
            at: now,
        };
        match parse_message(
            &args.subjects,
            &inbound.subject,
            &inbound.payload,
            args.limits,
            arrival,
            generated_correlation_id,
        ) {
            Ok(Parsed::One(mut command)) => {
                command.trace = inbound.trace.clone();
                accepted.push(Accepted { command, inbound });
            }
            Ok(Parsed::Timers(commands)) => {
                // Each timer is stored (or refused) on its own; the message is settled with
                // the last of them.
                let parts = inbound.into_parts(commands.len());
                for (mut command, inbound) in commands.into_iter().zip(parts) {
                    command.trace = inbound.trace.clone();
                    accepted.push(Accepted { command, inbound });
                }
            }
            Ok(Parsed::Many(cancel)) => many.push((cancel, inbound)),
            Err(rejection) => rejected.push((inbound, rejection, (order, None))),
        }
    }
    if !rejected.is_empty() {
        // Reported beside the intake: a rejection event waiting out the broker's answer must
        // not hold the commands behind it. Tracked, so that a graceful stop waits for it.
        let args = args.clone();
        state
            .rejections
            .spawn(async move { reject(&args, rejected).await });
    }
    if !unordered.is_empty() {
        let cause = "their stream's epoch is unknown".to_owned();
        if let Err(cause) = hand_back(unordered, cause).await {
            state.pipeline.not_stored(cause);
        }
    }
    state.pipeline.gather(accepted);
    if !many.is_empty() {
        start_cancels(state, many).await;
    }
}

/// Hands each `CancelTimers` to the Canceller at once: the Canceller waits on its own for the
/// commands before it on its line (those gathered here, committed by the pipeline in its own
/// time, and those handed back and delivered again), so that its steps find the timers those
/// schedule (docs/CONTRACT.md §3). Committing them here first stalled every tenant's intake
/// behind another tenant's gathered burst (up to [`super::pipeline::GROUP_MAX`] commands) for
/// each `CancelTimers`. When a transaction failed since the last pull, the cancels go back to
/// the broker with the commands that failed, and come again after them.
async fn start_cancels(state: &mut CommandHandlerState, many: Vec<(CancelMany, InboundCommand)>) {
    if state.pipeline.failed_now() {
        let cause = "the commands before them could not be stored".to_owned();
        let deliveries = many.into_iter().map(|(_, inbound)| inbound).collect();
        if let Err(cause) = hand_back(deliveries, cause).await {
            state.pipeline.not_stored(cause);
        }
        return;
    }
    for (cancel, inbound) in many {
        let job = Job {
            cancel,
            stream_seq: inbound.sequence,
            delivery: Some(inbound),
            reply: None,
        };
        if !state.args.registry.cancel_many(job) {
            state
                .pipeline
                .not_stored("the Canceller is not running (restarting?)".into());
        }
    }
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
