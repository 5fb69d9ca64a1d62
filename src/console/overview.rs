//! The console's overview: one row per tenant, its pending timers (the database's census, as
//! last counted: `census_cache`)
//! beside what it did in the last minutes (this daemon's record, `telemetry::recent`) and its
//! quotas, those in trouble first; and for the operator, the daemon's own state.

use axum::response::Response;
use serde::Serialize;

use super::Console;
use super::api::json;
use super::auth::Principal;
use crate::domain::census::{DaemonSeen, TenantCensus};
use crate::domain::quota::Quotas;
use crate::domain::timestamp::format_utc;
use crate::health::ActorLife;
use crate::telemetry::lanes::LaneView;
use crate::telemetry::recent::{self, TenantActivity};

/// One tenant's row.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantRow {
    #[serde(flatten)]
    pub census: TenantCensus,
    #[serde(flatten)]
    pub activity: TenantActivity,
    /// Its quotas in force; null is unlimited.
    pub max_pending: Option<u64>,
    pub commands_per_second: Option<u32>,
}

/// The rows of the tenants in `census` or in `activity`, each once, in trouble first: overdue
/// timers, then lateness (the p99 bucket), then rejected commands, then the most pending.
/// Two orders on purpose: the store keeps the
/// [`CENSUS_TENANTS`](crate::domain::census::CENSUS_TENANTS) most in trouble by what it knows
/// (`domain::census::trouble_first`: overdue, pending); the lateness and rejections of the last
/// minutes are this daemon's memory, so only here can they take their place between the two.
pub fn rows(
    census: Vec<TenantCensus>,
    activity: Vec<TenantActivity>,
    quotas: &Quotas,
) -> Vec<TenantRow> {
    let mut activity: std::collections::HashMap<String, TenantActivity> = activity
        .into_iter()
        .map(|a| (a.tenant_id.clone(), a))
        .collect();
    let mut rows: Vec<TenantRow> = census
        .into_iter()
        .map(|census| {
            let active = activity
                .remove(&census.tenant_id)
                .unwrap_or_else(|| TenantActivity::idle(&census.tenant_id));
            row(census, active, quotas)
        })
        .collect();
    rows.extend(activity.into_values().map(|active| {
        let census = TenantCensus {
            tenant_id: active.tenant_id.clone(),
            scheduled: 0,
            overdue: 0,
            next_due_at: None,
        };
        row(census, active, quotas)
    }));
    rows.sort_by(|a, b| {
        b.census
            .overdue
            .cmp(&a.census.overdue)
            .then(b.activity.p99_bucket.cmp(&a.activity.p99_bucket))
            .then(b.activity.rejected.cmp(&a.activity.rejected))
            .then(b.census.scheduled.cmp(&a.census.scheduled))
            .then(a.census.tenant_id.cmp(&b.census.tenant_id))
    });
    rows
}

fn row(census: TenantCensus, activity: TenantActivity, quotas: &Quotas) -> TenantRow {
    let limits = quotas.limits(&census.tenant_id);
    TenantRow {
        census,
        activity,
        max_pending: limits.max_pending,
        commands_per_second: limits.commands_per_second,
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Overview {
    /// When it was read.
    at: String,
    /// When the pending timers were counted (at most a few seconds before, see
    /// `census_cache`).
    #[serde(skip_serializing_if = "Option::is_none")]
    counted_at: Option<String>,
    tenants: Vec<TenantRow>,
    /// Why the pending timers could not be counted, when they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    read_error: Option<String>,
    /// The labels of the lateness histogram's buckets.
    lateness_buckets: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    daemon: Option<DaemonView>,
    daemons: Vec<DaemonSeen>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DaemonView {
    name: String,
    ready: bool,
    problems: Vec<String>,
    broker_connected: bool,
    actors: Vec<ActorLife>,
    /// Persistence's lanes: what waits in each, and the longest recent wait.
    lanes: Vec<LaneView>,
}

impl Console {
    /// The overview: the tenants `principal` may see (all for the operator), and for the
    /// operator the daemon's own state and every daemon sharing the database.
    pub(super) async fn overview(&self, principal: &Principal) -> Response {
        let persistence = self.registry.persistence();
        let now = chrono::Utc::now();
        let counted = self.census.get(&persistence).await;
        let counted_at = counted.as_ref().map(|c| format_utc(c.at));
        let (census, read_error) = match counted.map(|c| c.tenants) {
            Some(Ok(tenants)) => (tenants, None),
            Some(Err(e)) => (
                Vec::new(),
                Some(format!("the pending timers could not be counted: {e}")),
            ),
            None => (
                Vec::new(),
                Some("the pending timers are being counted; they show in a moment".into()),
            ),
        };
        let activity = recent::recent().all(now.timestamp_millis());
        let quotas = self.quotas.borrow().clone();
        let mut tenants = rows(census, activity, &quotas);
        tenants.retain(|t| principal.may_see(&t.census.tenant_id));
        if let Principal::Tenant(own) = principal
            && tenants.is_empty()
        {
            tenants = rows(Vec::new(), vec![TenantActivity::idle(own)], &quotas);
        }
        let operator = *principal == Principal::Operator;
        let daemons = if operator {
            persistence.daemons_seen().await.unwrap_or_default()
        } else {
            Vec::new()
        };
        let daemon = operator.then(|| {
            let status = self.health.status();
            DaemonView {
                name: self.daemon.clone(),
                ready: status.problems().is_empty(),
                problems: status.problems(),
                broker_connected: status.broker_connected,
                actors: self.health.actors(),
                lanes: crate::telemetry::lanes::lanes().view(now.timestamp_millis()),
            }
        });
        let overview = Overview {
            at: format_utc(now),
            counted_at,
            tenants,
            read_error,
            lateness_buckets: recent::lateness_labels(),
            daemon,
            daemons,
        };
        json(&overview)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::quota::Limits;

    fn census(tenant: &str, scheduled: u64, overdue: u64) -> TenantCensus {
        TenantCensus {
            tenant_id: tenant.into(),
            scheduled,
            overdue,
            next_due_at: None,
        }
    }

    #[test]
    fn tenants_in_trouble_come_first_and_each_comes_once() {
        let record = recent::Recent::default();
        let now = 1_800_000_000_000;
        record.fired("late", Duration::from_secs(3), false, now);
        record.fired("busy", Duration::from_millis(2), false, now);
        record.rejected("refused", now);
        record.accepted("writes-only", 5, now);
        let quotas = Quotas::new(
            Limits {
                max_pending: Some(10),
                commands_per_second: None,
            },
            Default::default(),
        );
        let rows = rows(
            vec![
                census("busy", 500, 0),
                census("stuck", 3, 2),
                census("quiet", 1, 0),
            ],
            record.all(now),
            &quotas,
        );
        let order: Vec<&str> = rows.iter().map(|r| r.census.tenant_id.as_str()).collect();
        assert_eq!(
            order,
            ["stuck", "late", "busy", "refused", "quiet", "writes-only"]
        );
        assert!(rows.iter().all(|r| r.max_pending == Some(10)));
        let busy = &rows[2];
        assert_eq!((busy.census.scheduled, busy.activity.fired), (500, 1));
    }
}
