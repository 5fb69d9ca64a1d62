//! The quota step (docs/CONTRACT.md §9), between validation and storage: each valid command of
//! a tenant with limits is decided by [`decide`], at the instant its batch is handled, by the
//! daemon's monotonic clock.
//!
//! - The rate: a command counts once, when first decided. A command the broker delivers again
//!   was counted then, unless this daemon handed it back before deciding it (its stream's epoch
//!   or the pending count could not be had): [`Uncounted`] remembers those.
//! - The pending limit: while a tenant's bound ([`PendingBounds`]) shows its schedules fit, they
//!   are accepted without asking the database. Otherwise its pending timers are counted,
//!   through Persistence, once for the batch. Persistence runs the commands' operations in
//!   order, so every transaction handed over before the count is in it; the commands accepted
//!   since and still gathered for the next transaction are added on top, and so is each
//!   command accepted earlier in the same batch. With several daemons on PostgreSQL, what the
//!   others accept at the same moment is not seen, so a tenant can go over its limit by that
//!   much.
//!
//! When the count cannot be had (the database fails), the commands of those tenants are handed
//! back to the broker for redelivery, as a batch that could not be stored would be.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::CommandHandlerArgs;
use super::storing::Accepted;
use crate::domain::quota::{PendingBounds, Quotas, RateWindow, TenantPending, decide};
use crate::domain::{Action, Command, Rejection, RejectionKind, StreamIncarnation};
use crate::ports::InboundCommand;

/// The quotas in force, swapped in by a reload (SIGHUP) while the handler runs.
pub type QuotaHandle = tokio::sync::watch::Receiver<Arc<Quotas>>;

/// What the quota step keeps between batches.
#[derive(Default)]
pub(super) struct QuotaState {
    /// Commands accepted per tenant in the last second, for `commands_per_second`.
    rate: RateWindow,
    uncounted: Uncounted,
    bounds: PendingBounds,
}

impl QuotaState {
    /// `commands` are handed back before their rate was decided: remembered only while some
    /// tenant has a limit (without one, nothing is counted to get wrong).
    pub fn handed_back_undecided<'a>(
        &mut self,
        args: &CommandHandlerArgs,
        commands: impl Iterator<Item = &'a InboundCommand>,
    ) {
        if args.quotas.borrow().is_unlimited() {
            return;
        }
        let now = Instant::now();
        for command in commands {
            self.uncounted.note(command, now);
        }
    }
}

/// Deliveries this daemon handed back before deciding them against the rate: when the broker
/// delivers them again, they are decided as new ones rather than as "counted when first
/// delivered". Forgotten after [`UNCOUNTED_FOR`] (another daemon took them, or they were
/// decided long ago), so what is remembered stays bounded.
#[derive(Default)]
struct Uncounted {
    since: HashMap<(Arc<StreamIncarnation>, u64), Instant>,
}

const UNCOUNTED_FOR: Duration = Duration::from_secs(60);

impl Uncounted {
    fn note(&mut self, command: &InboundCommand, now: Instant) {
        if self.since.len() >= 100_000 {
            self.since
                .retain(|_, at| now.saturating_duration_since(*at) < UNCOUNTED_FOR);
        }
        self.since
            .insert((command.stream.clone(), command.sequence), now);
    }

    /// Whether `command` was counted against its tenant's rate when first delivered.
    fn counted_before(&mut self, command: &InboundCommand) -> bool {
        let handed_back_undecided = !self.since.is_empty()
            && self
                .since
                .remove(&(command.stream.clone(), command.sequence))
                .is_some();
        command.redelivered && !handed_back_undecided
    }
}

/// What the quota step made of a batch's valid commands.
#[derive(Default)]
pub(super) struct Admitted {
    /// Accepted, in their order.
    pub accepted: Vec<Accepted>,
    /// Past a limit, to be rejected like any refused command.
    pub rejected: Vec<(InboundCommand, Rejection, u64)>,
    /// Undecided because the pending count could not be had: to hand back, with the cause.
    pub undecided: Vec<InboundCommand>,
    pub failure: Option<String>,
}

/// Decides the valid `commands` of one batch. `gathered` are the commands accepted before and
/// not yet handed to Persistence.
pub(super) async fn admit(
    state: &mut QuotaState,
    args: &CommandHandlerArgs,
    gathered: &[Accepted],
    commands: Vec<Accepted>,
) -> Admitted {
    let quotas = args.quotas.borrow().clone();
    let now = Instant::now();
    state.rate.forget_idle(now);
    state.bounds.forget_stale(now);
    if quotas.is_unlimited() {
        return Admitted {
            accepted: commands,
            ..Admitted::default()
        };
    }
    let to_count = to_count(&state.bounds, &quotas, &commands, now);
    let (mut pending, failure) = match pending_of(args, &to_count, gathered, &commands).await {
        Ok(pending) => (pending, None),
        Err(cause) => {
            let undecided = to_count.iter().map(|t| (t.clone(), None)).collect();
            (undecided, Some(cause))
        }
    };
    let mut admitted = Admitted {
        accepted: Vec::with_capacity(commands.len()),
        failure,
        ..Admitted::default()
    };
    let mut fitted: HashMap<String, u64> = HashMap::new();
    for Accepted { command, inbound } in commands {
        let tenant_pending = match pending.get_mut(&command.tenant_id) {
            Some(None) => {
                admitted.undecided.push(inbound);
                continue;
            }
            Some(Some(tenant_pending)) => Some(tenant_pending),
            None => None,
        };
        let counted = tenant_pending.is_some();
        let limits = quotas.limits(&command.tenant_id);
        let window = (!state.uncounted.counted_before(&inbound)).then_some(&mut state.rate);
        match decide(limits, window, tenant_pending, &command, now) {
            Ok(()) => {
                if !counted && limits.max_pending.is_some() && is_schedule(&command) {
                    *fitted.entry(command.tenant_id.clone()).or_default() += 1;
                }
                admitted.accepted.push(Accepted { command, inbound });
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
                admitted.rejected.push((inbound, rejection, command.seq));
            }
        }
    }
    for (tenant, tenant_pending) in pending {
        if let Some(tenant_pending) = tenant_pending {
            state.bounds.counted(&tenant, tenant_pending.pending, now);
        }
    }
    for (tenant, schedules) in fitted {
        state.bounds.accepted(&tenant, schedules);
    }
    admitted
}

fn is_schedule(command: &Command) -> bool {
    matches!(command.action, Action::Schedule { .. })
}

/// The tenants of `commands` with a pending limit, a ScheduleTimer in the batch, and no fresh
/// bound showing that their schedules fit: those are counted.
fn to_count(
    bounds: &PendingBounds,
    quotas: &Quotas,
    commands: &[Accepted],
    now: Instant,
) -> Vec<String> {
    let mut schedules: HashMap<&str, u64> = HashMap::new();
    for Accepted { command, .. } in commands {
        if quotas.limits(&command.tenant_id).max_pending.is_some() && is_schedule(command) {
            *schedules.entry(&command.tenant_id).or_default() += 1;
        }
    }
    schedules
        .into_iter()
        .filter(|(tenant, n)| {
            let limit = quotas.limits(tenant).max_pending.unwrap_or(u64::MAX);
            !bounds.fits(tenant, *n, limit, now)
        })
        .map(|(tenant, _)| tenant.to_owned())
        .collect()
}

/// The pending count of each of `tenants`, with the stored state of the keys the batch names,
/// brought up to date with the `gathered` commands. On failure, the cause.
async fn pending_of(
    args: &CommandHandlerArgs,
    tenants: &[String],
    gathered: &[Accepted],
    commands: &[Accepted],
) -> Result<HashMap<String, Option<TenantPending>>, String> {
    if tenants.is_empty() {
        return Ok(HashMap::new());
    }
    let mut asked: HashMap<&str, BTreeSet<&str>> = tenants
        .iter()
        .map(|t| (t.as_str(), BTreeSet::new()))
        .collect();
    for Accepted { command, .. } in gathered.iter().chain(commands) {
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
    match args.registry.persistence().pending_of(asked).await {
        Ok(mut pending) => {
            for Accepted { command, .. } in gathered {
                if let Some(tenant_pending) = pending.get_mut(&command.tenant_id) {
                    tenant_pending.apply(command);
                }
            }
            Ok(pending.into_iter().map(|(t, p)| (t, Some(p))).collect())
        }
        Err(e) => {
            tracing::warn!(actor = "command_handler", tenants = ?tenants, error = %e,
                "cannot count pending timers for the pending limit; the broker will redeliver these tenants' commands");
            Err(format!("cannot count pending timers: {e}"))
        }
    }
}
