//! Fair claims (docs/CONTRACT.md §9): when more timers are due than one claim takes, tenants
//! take turns. A fair claim walks the tenants that hold rows (one index step each), keeps those
//! with a timer due, and takes from each of them an equal share of the claim, each tenant's
//! own timers in `dueAt` order. A tenant's burst of a million timers due at one instant then
//! holds up its own timers only: another tenant's timer due a moment later is in the next fair
//! claim, not behind the million.
//!
//! The walk costs one step per tenant holding rows, so a claim serves at most
//! [`TENANTS_PER_CLAIM`] tenants and walks at most [`TENANTS_PER_WALK`]; the next claim goes on
//! after the last tenant reached, so with more tenants than that they are served in rotation.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Statement, Value};

use super::rows::parse_time;
use super::{Claimant, DueBatch, Store, StoreError};
use crate::domain::DueTimer;
use crate::domain::timestamp::format_utc;

/// Most tenants one fair claim takes timers from (SQLite joins at most 500 selects in one
/// statement).
pub const TENANTS_PER_CLAIM: usize = 256;
/// Most tenants one fair claim looks at.
pub const TENANTS_PER_WALK: usize = 1024;

/// What a fair claim took, and where the next one goes on.
#[derive(Debug)]
pub struct FairBatch {
    pub batch: DueBatch,
    /// The last tenant this claim reached when it could not reach them all: the next fair
    /// claim starts after it. `None`: the next starts from the first tenant.
    pub resume_after: Option<String>,
}

/// The walk over the tenants holding rows, after `?1` (`''` for all), at most `?3` of them (a
/// limit in the recursion is where SQLite stops it), each with whether a timer of theirs is due
/// at `?2`. One index step per tenant.
const SQLITE_WALK: &str = "WITH RECURSIVE walk(tenant) AS ( \
       SELECT (SELECT tenant_id FROM timer_schedules WHERE tenant_id > ?1 \
         ORDER BY tenant_id LIMIT 1) \
       UNION ALL \
       SELECT (SELECT tenant_id FROM timer_schedules WHERE tenant_id > walk.tenant \
         ORDER BY tenant_id LIMIT 1) FROM walk WHERE walk.tenant IS NOT NULL \
       LIMIT ?3) \
     SELECT tenant, EXISTS (SELECT 1 FROM timer_schedules s WHERE s.tenant_id = walk.tenant \
       AND s.state = 'Scheduled' AND s.due_at <= ?2) AS due \
     FROM walk WHERE tenant IS NOT NULL";

/// One tenant's share on SQLite: `tenant`, now, now, claimant, fence, share.
const SQLITE_SHARE: &str = "SELECT rowid FROM (SELECT rowid FROM timer_schedules \
     WHERE tenant_id = ? AND state = 'Scheduled' AND due_at <= ? \
       AND (claim_until IS NULL OR claim_until < ? OR (claimed_by = ? AND claim_until < ?)) \
     ORDER BY due_at, service_call_id LIMIT ?)";

/// See [`Store::claim_fair`].
pub(super) async fn claim_fair(
    store: &Store,
    now: DateTime<Utc>,
    skip: &BTreeSet<String>,
    resume_after: Option<&str>,
    limit: usize,
    fence: DateTime<Utc>,
    claimant: &Claimant,
) -> Result<FairBatch, StoreError> {
    let walked = if store.postgres() {
        let now = (!store.server_clock()).then_some(now);
        super::postgres::fair::walk(store, now, resume_after).await?
    } else {
        let statement = Statement::from_sql_and_values(
            DbBackend::Sqlite,
            SQLITE_WALK,
            [
                Value::from(resume_after.unwrap_or("").to_owned()),
                format_utc(now).into(),
                (TENANTS_PER_WALK as i64).into(),
            ],
        );
        walked(store.db.query_all_raw(statement).await?)?
    };
    let (serve, resume_after) = choose(&walked, skip);
    if serve.is_empty() {
        return Ok(FairBatch {
            batch: DueBatch {
                timers: Vec::new(),
                next_due_at: None,
                server_now: None,
            },
            resume_after,
        });
    }
    let share = (limit / serve.len()).max(1);
    let batch = if store.postgres() {
        let now = (!store.server_clock()).then_some(now);
        super::postgres::fair::claim(store, now, &serve, share, fence, claimant).await?
    } else {
        claim_on_sqlite(store, now, &serve, share, fence, claimant).await?
    };
    Ok(FairBatch {
        batch,
        resume_after,
    })
}

/// The tenants a walk found and whether each has a timer due.
fn walked(rows: Vec<QueryResult>) -> Result<Vec<(String, bool)>, StoreError> {
    rows.iter()
        .map(|row| {
            let tenant: String = row.try_get("", "tenant")?;
            // SQLite answers EXISTS with an integer, PostgreSQL with a boolean.
            let due = row
                .try_get::<bool>("", "due")
                .or_else(|_| row.try_get::<i64>("", "due").map(|n| n != 0))?;
            Ok((tenant, due))
        })
        .collect()
}

/// The tenants to serve (due, not in `skip`, at most [`TENANTS_PER_CLAIM`]) and where the next
/// walk goes on: after the last tenant served when the claim could take no more, after the last
/// walked when the walk stopped at its limit, else from the start.
fn choose(walked: &[(String, bool)], skip: &BTreeSet<String>) -> (Vec<String>, Option<String>) {
    let mut serve = Vec::new();
    for (tenant, due) in walked {
        if *due && !skip.contains(tenant) {
            serve.push(tenant.clone());
            if serve.len() == TENANTS_PER_CLAIM {
                return (serve, Some(tenant.clone()));
            }
        }
    }
    let resume_after = (walked.len() >= TENANTS_PER_WALK)
        .then(|| walked.last().map(|(tenant, _)| tenant.clone()))
        .flatten();
    (serve, resume_after)
}

/// The claim on SQLite: one statement, a share per tenant (SQLite's one writer needs no lock).
async fn claim_on_sqlite(
    store: &Store,
    now: DateTime<Utc>,
    serve: &[String],
    share: usize,
    fence: DateTime<Utc>,
    claimant: &Claimant,
) -> Result<DueBatch, StoreError> {
    let now_text = format_utc(now);
    let until = now + chrono::Duration::from_std(claimant.lease).unwrap_or_default();
    let shares = vec![SQLITE_SHARE; serve.len()].join(" UNION ALL ");
    let sql = format!(
        "UPDATE timer_schedules SET claimed_by = ?, claim_until = ? WHERE rowid IN ({shares}) \
         RETURNING tenant_id, service_call_id, correlation_id, due_at"
    );
    let mut values: Vec<Value> = vec![claimant.name.clone().into(), format_utc(until).into()];
    for tenant in serve {
        values.extend([
            Value::from(tenant.clone()),
            now_text.clone().into(),
            now_text.clone().into(),
            claimant.name.clone().into(),
            format_utc(fence).into(),
            (share as i64).into(),
        ]);
    }
    let statement = Statement::from_sql_and_values(DbBackend::Sqlite, sql, values);
    let rows = store
        .relaxed(async { store.db.query_all_raw(statement).await })
        .await?;
    let mut timers = rows.iter().map(due_timer).collect::<Result<Vec<_>, _>>()?;
    timers.sort_by_key(|t| t.position());
    Ok(DueBatch {
        timers,
        next_due_at: None,
        server_now: None,
    })
}

/// A claimed row as returned by a claim statement.
pub(super) fn due_timer(row: &QueryResult) -> Result<DueTimer, StoreError> {
    let due_at: String = row.try_get("", "due_at")?;
    Ok(DueTimer {
        tenant_id: row.try_get("", "tenant_id")?,
        service_call_id: row.try_get("", "service_call_id")?,
        correlation_id: row.try_get("", "correlation_id")?,
        due_at: parse_time("due_at", &due_at)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(tenants: &[(&str, bool)]) -> Vec<(String, bool)> {
        tenants.iter().map(|(t, d)| (t.to_string(), *d)).collect()
    }

    #[test]
    fn due_tenants_outside_the_skip_list_are_served_and_the_walk_starts_over() {
        let skip = BTreeSet::from(["bulk".to_owned()]);
        let (serve, resume) = choose(
            &walk(&[("a", true), ("bulk", true), ("c", false), ("d", true)]),
            &skip,
        );
        assert_eq!(serve, ["a", "d"]);
        assert_eq!(resume, None);
    }

    #[test]
    fn past_the_limits_the_next_claim_goes_on_after_the_last_tenant_reached() {
        let many: Vec<(String, bool)> = (0..TENANTS_PER_CLAIM + 5)
            .map(|i| (format!("t{i:04}"), true))
            .collect();
        let (serve, resume) = choose(&many, &BTreeSet::new());
        assert_eq!(serve.len(), TENANTS_PER_CLAIM);
        assert_eq!(
            resume.as_deref(),
            Some(serve[TENANTS_PER_CLAIM - 1].as_str())
        );

        let idle: Vec<(String, bool)> = (0..TENANTS_PER_WALK)
            .map(|i| (format!("t{i:04}"), i == 3))
            .collect();
        let (serve, resume) = choose(&idle, &BTreeSet::new());
        assert_eq!(serve, ["t0003"]);
        assert_eq!(resume.as_deref(), Some("t1023"));
    }
}
