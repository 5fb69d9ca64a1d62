//! Quotas (docs/CONTRACT.md §9) are decided inside the transaction that stores a batch (see
//! `storage::quotas`), against the state every daemon on the database shares: a command counts
//! against its tenant's quotas only once its transaction commits, so a batch handed back to
//! the broker took nothing from them. This is what the handler does with the commands a
//! transaction refused: rejections with the limit's reason, counted by tenant and quota.

use std::sync::Arc;

use crate::domain::quota::{Exceeded, Quota, Quotas};
use crate::domain::{Command, Rejection, RejectionKind};

/// The quotas in force, swapped in by a reload (SIGHUP) while the handler runs.
pub type QuotaHandle = tokio::sync::watch::Receiver<Arc<Quotas>>;

/// The rejection of `command`, refused past a limit.
pub(super) fn rejection(command: &Command, exceeded: Exceeded) -> Rejection {
    Rejection {
        kind: RejectionKind::Quota(exceeded.quota),
        reason: exceeded.reason(&command.tenant_id),
        tenant_id: command.tenant_id.clone(),
    }
}

/// Counts a command rejected past `quota` in the quota metric, once it is settled (a command
/// handed back because its rejection was not published is counted when it comes to an end).
pub(super) fn count(quotas: &QuotaHandle, tenant_id: &str, quota: Quota) {
    metrics::counter!(
        crate::telemetry::QUOTA_REJECTIONS,
        "tenant" => quotas.borrow().metric_tenant(tenant_id).to_owned(),
        "quota" => quota.as_str()
    )
    .increment(1);
}
