//! A tenant's page, beside the query API's `list` and `get`: its pending timers (the overview's
//! count, `census_cache`, so that a tenant of ten million costs the page no walk of its range),
//! the next hour by minute and (when asked) the week by hour (reads of the tenant's ranges in
//! its turns on the reader lane, each made at most every few seconds or once a minute for every
//! page at once: `forecast_cache`), what its timers and commands did in the last minutes (this
//! daemon's record, `telemetry::recent`), and its quotas.

use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Console;
use super::api::json;
use super::forecast_cache::Span;
use crate::domain::census::CENSUS_TENANTS;
use crate::domain::forecast::ForecastMinute;
use crate::domain::timestamp::format_utc;
use crate::telemetry::recent::{self, TenantActivity};

/// A tenant's pending timers, as last counted.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Pending {
    scheduled: u64,
    overdue: u64,
    next_due_at: Option<String>,
    /// When they were counted.
    counted_at: Option<String>,
    /// Why they could not be counted, when they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// A count of the tenant's ranges (a forecast), or why it could not be read.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Forecast {
    #[serde(skip_serializing_if = "Option::is_none")]
    due: Option<Vec<ForecastMinute>>,
    /// When it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    read_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Activity {
    pending: Pending,
    /// The next hour by minute.
    next_hour: Forecast,
    /// The next week by hour (each entry's `minute` is its hour's start), when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_week: Option<Forecast>,
    activity: TenantActivity,
    lateness_buckets: Vec<String>,
    /// Its quotas in force; null is unlimited.
    max_pending: Option<u64>,
    commands_per_second: Option<u32>,
}

impl Console {
    /// `tenant`'s page figures; the week ahead only when `week`.
    pub(super) async fn activity(&self, tenant: &str, week: bool) -> Response {
        let now = Utc::now();
        let limits = self.quotas.borrow().limits(tenant);
        let (pending, next_hour, next_week) = tokio::join!(
            self.pending(tenant, now),
            self.forecast(tenant, Span::Hour),
            async {
                match week {
                    true => Some(self.forecast(tenant, Span::Week).await),
                    false => None,
                }
            },
        );
        let activity = Activity {
            pending,
            next_hour,
            next_week,
            activity: recent::recent().of(tenant, now.timestamp_millis()),
            lateness_buckets: recent::lateness_labels(),
            max_pending: limits.max_pending,
            commands_per_second: limits.commands_per_second,
        };
        json(&activity)
    }

    /// The tenant's row of the last count of every tenant; a tenant the count leaves out
    /// (past the [`CENSUS_TENANTS`] it keeps) or a count that failed is counted alone, as
    /// `stats` does.
    async fn pending(&self, tenant: &str, now: DateTime<Utc>) -> Pending {
        let persistence = self.registry.persistence();
        if let Some(counted) = self.census.get(&persistence).await
            && let Ok(tenants) = &counted.tenants
        {
            let at = Some(format_utc(counted.at));
            if let Some(row) = tenants.iter().find(|t| t.tenant_id == tenant) {
                return Pending {
                    scheduled: row.scheduled,
                    overdue: row.overdue,
                    next_due_at: row.next_due_at.clone(),
                    counted_at: at,
                    error: None,
                };
            }
            if tenants.len() < CENSUS_TENANTS {
                return Pending {
                    counted_at: at,
                    ..Pending::default()
                };
            }
        }
        match persistence.stats(tenant, now).await {
            Ok(stats) => Pending {
                scheduled: stats.scheduled,
                overdue: stats.overdue,
                next_due_at: stats.next_due_at.map(format_utc),
                counted_at: Some(format_utc(now)),
                error: None,
            },
            Err(e) => Pending {
                error: Some(format!("its pending timers could not be counted: {e}")),
                ..Pending::default()
            },
        }
    }

    async fn forecast(&self, tenant: &str, span: Span) -> Forecast {
        let persistence = self.registry.persistence();
        match self.forecasts.get(&persistence, tenant, span).await {
            Some(read) => match read.due {
                Ok(due) => Forecast {
                    due: Some(due),
                    read_at: Some(format_utc(read.at)),
                    error: None,
                },
                Err(e) => Forecast {
                    due: None,
                    read_at: Some(format_utc(read.at)),
                    error: Some(format!("could not be read: {e}")),
                },
            },
            None => Forecast {
                due: None,
                read_at: None,
                error: Some("being read; shown at the next refresh".into()),
            },
        }
    }
}
