//! The fair claim on SQLite (see `storage::fair`), by the caller's `now`: the walk over the
//! tenants holding rows, then one statement that takes a share of each served tenant's due
//! timers through the tenant's own index range and claims them. SQLite's one writer needs no
//! lock, and one statement is a transaction of its own.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Statement, Value};

use crate::domain::timestamp::format_utc;
use crate::storage::backend::ClaimShares;
use crate::storage::fair::TENANTS_PER_WALK;
use crate::storage::rows::{CLAIMED, due_timer};
use crate::storage::{DueBatch, Store, StoreError};

/// The walk over the tenants holding rows, after `?1` (`''` for all), at most
/// `TENANTS_PER_WALK` of them (a limit in the recursion is where SQLite stops it), each with
/// whether a timer of theirs is due at `?2`. One index step per tenant. Its limits are written
/// into the text, as every limit of the firing path (`storage::firing::with_literal_limit`).
static WALK: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE walk(tenant) AS ( \
       SELECT (SELECT tenant_id FROM timer_schedules WHERE tenant_id > ?1 \
         ORDER BY tenant_id LIMIT 1) \
       UNION ALL \
       SELECT (SELECT tenant_id FROM timer_schedules WHERE tenant_id > walk.tenant \
         ORDER BY tenant_id LIMIT 1) FROM walk WHERE walk.tenant IS NOT NULL \
       LIMIT {TENANTS_PER_WALK}) \
     SELECT tenant, EXISTS (SELECT 1 FROM timer_schedules s WHERE s.tenant_id = walk.tenant \
       AND s.state = 'Scheduled' AND s.due_at <= ?2) AS due \
     FROM walk WHERE tenant IS NOT NULL"
    )
});

/// One tenant's share of at most `share` timers: `tenant`, now, now, claimant, fence. The
/// claim joins one per served tenant with `UNION ALL` (at most 500 selects in one statement,
/// hence `TENANTS_PER_CLAIM`).
fn share_of(share: usize) -> String {
    format!(
        "SELECT rowid FROM (SELECT rowid FROM timer_schedules \
         WHERE tenant_id = ? AND state = 'Scheduled' AND due_at <= ? \
           AND (claim_until IS NULL OR claim_until < ? OR (claimed_by = ? AND claim_until < ?)) \
         ORDER BY due_at, service_call_id LIMIT {share})"
    )
}

/// See `Backend::walk_tenants`.
pub(super) async fn walk(
    store: &Store,
    now: DateTime<Utc>,
    resume_after: Option<&str>,
) -> Result<Vec<(String, bool)>, StoreError> {
    let statement = Statement::from_sql_and_values(
        DbBackend::Sqlite,
        WALK.as_str(),
        [
            Value::from(resume_after.unwrap_or("").to_owned()),
            format_utc(now).into(),
        ],
    );
    walked(store.db.query_all_raw(statement).await?)
}

/// The tenants a walk found and whether each has a timer due.
fn walked(rows: Vec<QueryResult>) -> Result<Vec<(String, bool)>, StoreError> {
    rows.iter()
        .map(|row| {
            let tenant: String = row.try_get("", "tenant")?;
            // SQLite answers EXISTS with an integer.
            let due = row
                .try_get::<bool>("", "due")
                .or_else(|_| row.try_get::<i64>("", "due").map(|n| n != 0))?;
            Ok((tenant, due))
        })
        .collect()
}

/// See `Backend::claim_shares`: one statement, a share per tenant.
pub(super) async fn claim(store: &Store, claim: ClaimShares<'_>) -> Result<DueBatch, StoreError> {
    let ClaimShares {
        now,
        tenants: serve,
        share,
        fence,
        claimant,
    } = claim;
    let now = now.at;
    let now_text = format_utc(now);
    let until = now + chrono::Duration::from_std(claimant.lease).unwrap_or_default();
    let shares = vec![share_of(share); serve.len()].join(" UNION ALL ");
    let sql = format!(
        "UPDATE timer_schedules SET claimed_by = ?, claim_until = ? WHERE rowid IN ({shares}) \
         RETURNING {CLAIMED}"
    );
    let mut values: Vec<Value> = vec![claimant.name.clone().into(), format_utc(until).into()];
    for tenant in serve {
        values.extend([
            Value::from(tenant.clone()),
            now_text.clone().into(),
            now_text.clone().into(),
            claimant.name.clone().into(),
            format_utc(fence).into(),
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
