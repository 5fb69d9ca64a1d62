//! The quota step (docs/CONTRACT.md §9), between validation and storage: each valid command of
//! a tenant with limits is decided by [`decide`], at the instant its batch is handled, by the
//! daemon's monotonic clock.
//!
//! The pending limit counts from the database, through Persistence, once per batch and only
//! for the tenants that have a pending limit and a ScheduleTimer in it. Persistence runs its
//! requests in order, so every transaction handed over before the count is in it; the commands
//! accepted since and still gathered for the next transaction are added on top, and so is each
//! command accepted earlier in the same batch. With several daemons on PostgreSQL, what the
//! others accept at the same moment is not seen, so a tenant can go over its limit by that
//! much.
//!
//! When the count cannot be had (the database fails), the commands of those tenants are handed
//! back to the broker for redelivery, as a batch that could not be stored would be.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::CommandHandlerArgs;
use crate::domain::quota::{Quotas, RateWindow, TenantPending, decide};
use crate::domain::{Action, Command, Rejection, RejectionKind};
use crate::ports::InboundCommand;

/// The quotas in force, swapped in by a reload (SIGHUP) while the handler runs.
pub type QuotaHandle = tokio::sync::watch::Receiver<Arc<Quotas>>;

/// What the quota step made of a batch's valid commands.
#[derive(Default)]
pub(super) struct Admitted {
    /// Accepted, in their order, with the deliveries to settle once stored.
    pub accepted: Vec<Command>,
    pub inbound: Vec<InboundCommand>,
    /// Past a limit, to be rejected like any refused command.
    pub rejected: Vec<(InboundCommand, Rejection, u64)>,
    /// Undecided because the pending count could not be had: to hand back, with the cause.
    pub undecided: Vec<InboundCommand>,
    pub failure: Option<String>,
}

/// Decides the valid `commands` (with their deliveries) of one batch. `gathered` are the
/// commands accepted before and not yet handed to Persistence.
pub(super) async fn admit(
    rate: &mut RateWindow,
    args: &CommandHandlerArgs,
    gathered: &[Command],
    commands: Vec<Command>,
    inbound: Vec<InboundCommand>,
) -> Admitted {
    let quotas = args.quotas.borrow().clone();
    let now = Instant::now();
    rate.forget_idle(now);
    if quotas.is_unlimited() {
        return Admitted {
            accepted: commands,
            inbound,
            ..Admitted::default()
        };
    }
    let (mut pending, failure) = match pending_of(args, &quotas, gathered, &commands).await {
        Ok(pending) => (pending, None),
        Err((tenants, cause)) => {
            let undecided = tenants.into_iter().map(|t| (t, None)).collect();
            (undecided, Some(cause))
        }
    };
    let mut admitted = Admitted {
        accepted: Vec::with_capacity(commands.len()),
        inbound: Vec::with_capacity(commands.len()),
        failure,
        ..Admitted::default()
    };
    for (command, delivery) in commands.into_iter().zip(inbound) {
        let tenant_pending = match pending.get_mut(&command.tenant_id) {
            Some(None) => {
                admitted.undecided.push(delivery);
                continue;
            }
            Some(Some(tenant_pending)) => Some(tenant_pending),
            None => None,
        };
        let limits = quotas.limits(&command.tenant_id);
        let window = (!delivery.redelivered).then_some(&mut *rate);
        match decide(limits, window, tenant_pending, &command, now) {
            Ok(()) => {
                admitted.accepted.push(command);
                admitted.inbound.push(delivery);
            }
            Err(exceeded) => {
                metrics::counter!(
                    crate::telemetry::QUOTA_REJECTIONS,
                    "tenant" => quotas.metric_tenant(&command.tenant_id).to_owned(),
                    "quota" => exceeded.quota.as_str()
                )
                .increment(1);
                let rejection = Rejection {
                    kind: RejectionKind::Quota,
                    reason: exceeded.reason(&command.tenant_id),
                    tenant_id: command.tenant_id,
                };
                admitted.rejected.push((delivery, rejection, command.seq));
            }
        }
    }
    admitted
}

/// Each tenant's pending count, for the tenants with a pending limit and a ScheduleTimer among
/// `commands`, brought up to date with the `gathered` commands. On failure, those tenants and
/// the cause.
#[allow(clippy::type_complexity)]
async fn pending_of(
    args: &CommandHandlerArgs,
    quotas: &Quotas,
    gathered: &[Command],
    commands: &[Command],
) -> Result<HashMap<String, Option<TenantPending>>, (Vec<String>, String)> {
    let mut asked: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for command in commands {
        let limited = quotas.limits(&command.tenant_id).max_pending.is_some();
        if limited && matches!(command.action, Action::Schedule { .. }) {
            asked.entry(&command.tenant_id).or_default();
        }
    }
    if asked.is_empty() {
        return Ok(HashMap::new());
    }
    for command in gathered.iter().chain(commands) {
        if let Some(keys) = asked.get_mut(command.tenant_id.as_str()) {
            keys.insert(&command.service_call_id);
        }
    }
    let asked: Vec<(String, Vec<String>)> = asked
        .into_iter()
        .map(|(tenant, keys)| {
            let keys = keys.into_iter().map(str::to_owned).collect();
            (tenant.to_owned(), keys)
        })
        .collect();
    let tenants: Vec<String> = asked.iter().map(|(tenant, _)| tenant.clone()).collect();
    match args.registry.persistence().pending_of(asked).await {
        Ok(mut pending) => {
            for command in gathered {
                if let Some(tenant_pending) = pending.get_mut(&command.tenant_id) {
                    tenant_pending.apply(command);
                }
            }
            Ok(pending.into_iter().map(|(t, p)| (t, Some(p))).collect())
        }
        Err(e) => {
            tracing::warn!(actor = "command_handler", tenants = ?tenants, error = %e,
                "cannot count pending timers for the pending limit; the broker will redeliver these tenants' commands");
            Err((tenants, format!("cannot count pending timers: {e}")))
        }
    }
}
