//! What the CommandHandler does with one pulled batch before it is stored: each command is
//! placed in its key's order (its stream incarnation's epoch and its sequence there, see
//! `domain::order`), parsed and validated. Rejections are reported and settled at once;
//! accepted commands join the gathered ones for the next transaction (where they are decided
//! against their tenants' quotas, see `quota`). The commands of an incarnation whose epoch cannot be had now (the
//! database fails) are handed back to the broker, as a failed store.

use std::collections::HashMap;

use super::CommandHandlerState;
use super::rejection::reject;
use super::storing::{Accepted, hand_back};
use crate::domain::command::generated_correlation_id;
use crate::domain::subjects::UNKNOWN_TENANT;
use crate::domain::tenant::check_tenant_id;
use crate::domain::{
    Arrival, Rejection, RejectionKind, StreamIncarnation, command_order, parse_command,
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
    let mut rejected: Vec<(InboundCommand, Rejection, u64)> = Vec::new();
    let mut unordered: Vec<InboundCommand> = Vec::new();
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
                rejected.push((inbound, rejection, id));
                continue;
            }
        };
        let arrival = Arrival {
            seq: order,
            at: now,
        };
        match parse_command(
            &args.subjects,
            &inbound.subject,
            &inbound.payload,
            args.limits,
            arrival,
            generated_correlation_id,
        ) {
            Ok(mut command) => {
                command.trace = inbound.trace.clone();
                accepted.push(Accepted { command, inbound });
            }
            Err(rejection) => rejected.push((inbound, rejection, order)),
        }
    }
    if !rejected.is_empty() {
        reject(args, rejected).await;
    }
    if !unordered.is_empty() {
        let cause = "their stream's epoch is unknown".to_owned();
        if let Err(cause) = hand_back(unordered, cause).await {
            state.pipeline.not_stored(cause);
        }
    }
    state.pipeline.gather(accepted);
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
