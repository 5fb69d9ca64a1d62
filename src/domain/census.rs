//! What the console's overview shows of each tenant and of each daemon sharing the database
//! (docs/CONTRACT.md §7). No I/O: Persistence reads these, the console sends them as JSON.

use serde::Serialize;

/// Most tenants one overview lists, those in trouble first: a page for a person, not an export.
pub const CENSUS_TENANTS: usize = 500;

/// One tenant's pending timers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantCensus {
    pub tenant_id: String,
    /// Pending (`Scheduled`) timers.
    pub scheduled: u64,
    /// Pending timers whose `dueAt` passed more than a second ago.
    pub overdue: u64,
    /// The earliest pending `dueAt`, as stored (`YYYY-MM-DDTHH:MM:SS.sssZ`).
    pub next_due_at: Option<String>,
}

/// Orders tenants for the overview: the most overdue first, then the most pending, then by id.
pub fn trouble_first(tenants: &mut [TenantCensus]) {
    tenants.sort_by(|a, b| {
        b.overdue
            .cmp(&a.overdue)
            .then(b.scheduled.cmp(&a.scheduled))
            .then(a.tenant_id.cmp(&b.tenant_id))
    });
}

/// A daemon that shares the database, as its health probe last recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSeen {
    pub name: String,
    /// When its probe last wrote (every 2 s while it runs).
    pub seen_at: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str, scheduled: u64, overdue: u64) -> TenantCensus {
        TenantCensus {
            tenant_id: id.into(),
            scheduled,
            overdue,
            next_due_at: None,
        }
    }

    #[test]
    fn the_overdue_come_first_then_the_busiest() {
        let mut tenants = vec![
            tenant("b", 10, 0),
            tenant("a", 10, 0),
            tenant("late", 1, 1),
            tenant("big", 1000, 0),
        ];
        trouble_first(&mut tenants);
        let order: Vec<&str> = tenants.iter().map(|t| t.tenant_id.as_str()).collect();
        assert_eq!(order, ["late", "big", "a", "b"]);
    }
}
