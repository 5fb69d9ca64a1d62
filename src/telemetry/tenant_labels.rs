//! Series labelled by tenant, for the tenants `[metrics] tenants` lists (docs/CONTRACT.md §7,
//! §9) and no other: a label takes a series per value, and the tenants that write are not
//! ours to bound. A tenant outside the list is counted in the unlabelled totals only.
//!
//! Each listed tenant's series are registered once, when the recorder is installed, and kept
//! as handles: recording is then a map lookup and an atomic add, with no key built per timer,
//! and every series shows from the start (at zero) for dashboards to list.

use std::collections::HashMap;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

use super::{
    TENANT_EXPIRED, TENANT_FIRE_LATENESS, TENANT_FIRED, TENANT_OVERDUE, TENANT_PENDING,
    TENANT_REJECTED,
};
use crate::domain::RejectionKind;

/// The series of the labelled tenants.
#[derive(Default)]
pub struct TenantLabels {
    /// By tenant id, in the order configured.
    tenants: Vec<String>,
    series: HashMap<String, TenantSeries>,
}

/// One tenant's series.
struct TenantSeries {
    pending: Gauge,
    overdue: Gauge,
    fired: Counter,
    expired: Counter,
    lateness: Histogram,
    rejected: HashMap<RejectionKind, Counter>,
}

impl TenantLabels {
    /// Registers the series of each of `tenants` with the installed recorder.
    pub(super) fn register(tenants: &[String]) -> Self {
        let series = tenants
            .iter()
            .map(|tenant| {
                let label = || ("tenant", tenant.clone());
                let rejected = RejectionKind::ALL
                    .into_iter()
                    .map(|kind| {
                        let counter = metrics::counter!(TENANT_REJECTED,
                            "tenant" => tenant.clone(), "reason" => kind.as_str());
                        counter.absolute(0);
                        (kind, counter)
                    })
                    .collect();
                let series = TenantSeries {
                    pending: metrics::gauge!(TENANT_PENDING, &[label()]),
                    overdue: metrics::gauge!(TENANT_OVERDUE, &[label()]),
                    fired: metrics::counter!(TENANT_FIRED, &[label()]),
                    expired: metrics::counter!(TENANT_EXPIRED, &[label()]),
                    lateness: metrics::histogram!(TENANT_FIRE_LATENESS, &[label()]),
                    rejected,
                };
                series.fired.absolute(0);
                series.expired.absolute(0);
                (tenant.clone(), series)
            })
            .collect();
        Self {
            tenants: tenants.to_vec(),
            series,
        }
    }

    /// The labelled tenants, in the order configured.
    pub fn tenants(&self) -> &[String] {
        &self.tenants
    }

    /// Sets a labelled tenant's pending and overdue gauges; nothing for another tenant.
    pub fn set_pending(&self, tenant_id: &str, pending: u64, overdue: u64) {
        if let Some(series) = self.series.get(tenant_id) {
            series.pending.set(pending as f64);
            series.overdue.set(overdue as f64);
        }
    }

    /// Counts one fired timer of a labelled tenant, `lateness` after its `dueAt`.
    pub fn record_fired(&self, tenant_id: &str, lateness: Duration) {
        if let Some(series) = self.series.get(tenant_id) {
            series.fired.increment(1);
            series.lateness.record(lateness.as_secs_f64());
        }
    }

    /// Counts one timer of a labelled tenant fired as TimerExpired.
    pub fn record_expired(&self, tenant_id: &str) {
        if let Some(series) = self.series.get(tenant_id) {
            series.expired.increment(1);
        }
    }

    /// Counts one rejected command of a labelled tenant, by kind.
    pub fn record_rejected(&self, tenant_id: &str, kind: RejectionKind) {
        if let Some(counter) = self
            .series
            .get(tenant_id)
            .and_then(|series| series.rejected.get(&kind))
        {
            counter.increment(1);
        }
    }
}
