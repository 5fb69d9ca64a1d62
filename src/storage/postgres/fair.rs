//! The fair claim on PostgreSQL (see `storage::fair`): the walk, then one statement that takes
//! a share of each tenant's due timers through the tenant's own index range and claims them as
//! the claim in `firing` does (locked with `SKIP LOCKED`, updated by `ctid`), by the server's
//! clock.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use super::firing::run_claim;
use crate::domain::timestamp::format_utc;
use crate::storage::backend::ClaimShares;
use crate::storage::fair::TENANTS_PER_WALK;
use crate::storage::{DueBatch, Store, StoreError};

/// The walk (see `storage::fair`): after `$1`, due by `$2` (NULL: the server's clock), at most
/// `$3` tenants. PostgreSQL reads a recursive query only as far as its reader asks.
///
/// Whether a tenant has a timer due is its first due timer in `dueAt` order, not an `EXISTS`:
/// the planner expects an `EXISTS` to meet a match early in a sequential scan, and with one
/// tenant's ten million timers pending, none due, that scan read every row (2.6 s a walk,
/// every 10 ms while a backlog lasted: the other tenants' timers fired seconds late). In
/// `dueAt` order a sequential scan must sort everything first, so the due range of an index
/// is read instead, as far as the first due timer of the tenant.
const WALK: &str = concat!(
    "WITH RECURSIVE walk(tenant) AS ( \
       SELECT (SELECT tenant_id FROM timer_schedules WHERE tenant_id > $1 \
         ORDER BY tenant_id LIMIT 1) \
       UNION ALL \
       SELECT (SELECT tenant_id FROM timer_schedules WHERE tenant_id > walk.tenant \
         ORDER BY tenant_id LIMIT 1) FROM walk WHERE walk.tenant IS NOT NULL), \
     clock AS MATERIALIZED (SELECT ",
    server_text!("COALESCE($2::timestamptz, statement_timestamp())"),
    " AS now_text) \
     SELECT w.tenant, (SELECT 1 FROM timer_schedules s WHERE s.tenant_id = w.tenant \
       AND s.state = 'Scheduled' AND s.due_at <= (SELECT now_text FROM clock) \
       ORDER BY s.due_at LIMIT 1) IS NOT NULL AS due \
     FROM (SELECT tenant FROM walk WHERE tenant IS NOT NULL LIMIT $3) w"
);

/// The claim: `$1` claimant, `$2` lease in milliseconds, `$3` share per tenant, `$4` the
/// caller's clock (NULL but in tests of the rules), `$5` the fence on the claimant's own
/// claims, `$6` the tenants.
const CLAIM: &str = concat!(
    "WITH instant AS MATERIALIZED (SELECT COALESCE($4::timestamptz, statement_timestamp()) AS t), \
     clock AS MATERIALIZED (SELECT ",
    server_text!("t"),
    " AS now_text, ",
    server_text!("t + $2 * interval '1 millisecond'"),
    " AS until_text, \
       (extract(epoch FROM t) * 1000000)::bigint AS now_us FROM instant), \
     picked AS (SELECT t.ctid FROM timer_schedules t \
       WHERE t.ctid = ANY (ARRAY( \
           SELECT x.ctid FROM clock, unnest($6::text[]) AS d(tenant) CROSS JOIN LATERAL ( \
             SELECT s.ctid FROM timer_schedules s \
             WHERE s.tenant_id = d.tenant AND s.state = 'Scheduled' \
               AND s.due_at <= clock.now_text \
               AND (s.claim_until IS NULL OR s.claim_until < clock.now_text \
                 OR (s.claimed_by = $1 AND s.claim_until < $5)) \
             ORDER BY s.due_at, s.service_call_id LIMIT $3) x)) \
         AND t.state = 'Scheduled' AND t.due_at <= (SELECT now_text FROM clock) \
         AND (t.claim_until IS NULL OR t.claim_until < (SELECT now_text FROM clock) \
           OR (t.claimed_by = $1 AND t.claim_until < $5)) \
       FOR UPDATE OF t SKIP LOCKED), \
     claimed AS (UPDATE timer_schedules t \
       SET claimed_by = $1, claim_until = (SELECT until_text FROM clock) \
       WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM picked)) \
       RETURNING t.tenant_id, t.service_call_id, t.correlation_id, t.due_at, t.data, t.trace_context, \
       t.expires_at) \
     SELECT c.tenant_id, c.service_call_id, c.correlation_id, c.due_at, c.data, c.trace_context, \
       c.expires_at, clock.now_us, \
       NULL::text AS next_due, NULL::text AS next_lapse \
     FROM clock LEFT JOIN claimed c ON true"
);

/// The tenants after `resume_after` holding rows, each with whether a timer of theirs is due.
pub(super) async fn walk(
    store: &Store,
    callers_now: Option<DateTime<Utc>>,
    resume_after: Option<&str>,
) -> Result<Vec<(String, bool)>, StoreError> {
    let statement = Statement::from_sql_and_values(
        DbBackend::Postgres,
        WALK,
        [
            Value::from(resume_after.unwrap_or("").to_owned()),
            callers_now.map(format_utc).into(),
            (TENANTS_PER_WALK as i64).into(),
        ],
    );
    let rows = store.db.query_all_raw(statement).await?;
    rows.iter()
        .map(|row| Ok((row.try_get("", "tenant")?, row.try_get("", "due")?)))
        .collect()
}

/// Claims up to `share` due timers of each of `tenants`.
pub(super) async fn claim(store: &Store, claim: ClaimShares<'_>) -> Result<DueBatch, StoreError> {
    let ClaimShares {
        now,
        tenants,
        share,
        fence,
        claimant,
    } = claim;
    let callers_now = super::callers_now(now);
    let lease_ms = i64::try_from(claimant.lease.as_millis()).unwrap_or(i64::MAX);
    let values: Vec<Value> = vec![
        claimant.name.clone().into(),
        lease_ms.into(),
        i64::try_from(share).unwrap_or(i64::MAX).into(),
        callers_now.map(format_utc).into(),
        format_utc(fence).into(),
        tenants.to_vec().into(),
    ];
    run_claim(
        store,
        Statement::from_sql_and_values(DbBackend::Postgres, CLAIM, values),
    )
    .await
}
