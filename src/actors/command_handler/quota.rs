//! Quotas (docs/CONTRACT.md §9) are decided inside the transaction that stores a batch (see
//! `storage::quotas`), against the state every daemon on the database shares: a command counts
//! against its tenant's quotas only once its transaction commits, so a batch handed back to
//! the broker took nothing from them. This is what the handler does with the commands a
//! transaction refused: rejections with the limit's reason, counted by tenant and quota.

use std::sync::Arc;

use crate::domain::quota::{Exceeded, Quotas};
use crate::domain::{Command, Rejection, RejectionKind};

/// The quotas in force, swapped in by a reload (SIGHUP) while the handler runs.
pub type QuotaHandle = tokio::sync::watch::Receiver<Arc<Quotas>>;

/// The rejection of `command`, refused past a limit, counted in the quota metric.
pub(super) fn rejection(quotas: &Quotas, command: &Command, exceeded: Exceeded) -> Rejection {
    metrics::counter!(
        crate::telemetry::QUOTA_REJECTIONS,
        "tenant" => quotas.metric_tenant(&command.tenant_id).to_owned(),
        "quota" => exceeded.quota.as_str()
    )
    .increment(1);
    Rejection {
        kind: RejectionKind::Quota,
        reason: exceeded.reason(&command.tenant_id),
        tenant_id: command.tenant_id.clone(),
    }
}
