//! The firing path on PostgreSQL, by the server's clock (see `postgres`): a daemon whose
//! clock runs ahead cannot fire anything early, and one that runs behind holds nothing back.
//!
//! Each step is one set-based statement, written as SQL because its shape matters to the
//! planner (measured in BENCHMARKS.md, "PostgreSQL"):
//! - the claim locks the next due rows with `FOR UPDATE SKIP LOCKED` through the pending index
//!   and updates them by `ctid`; the same statement returns the server's clock and, when the
//!   batch is not full, when to look again.
//! - the mark takes the keys as arrays (`unnest`), one statement text whatever their number
//!   (one statement per claim instant); each key finds its row by a lateral lookup, and the
//!   rows are updated by `ctid` with the key, `due_at` and `state` checked again on the row.
//!
//! Both run in a firing transaction ([`FIRING_SETTINGS`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, QueryResult, Statement,
    TransactionTrait, Value,
};

use crate::domain::DueTimer;
use crate::domain::timestamp::format_utc;
use crate::storage::backend::ClaimDue;
use crate::storage::rows::{due_timer_of, parse_optional_time};
use crate::storage::{DueBatch, Store, StoreError};

/// The claim, with `$after` a further condition on the rows picked. The instant is read as a
/// scalar subquery (`(SELECT now_text FROM clock)`), which the scan of the pending index takes
/// as its bound: with `clock` joined as a table, `due_at <= now` became a filter applied to
/// every pending entry (150 ms a claim with 300,000 timers pending and none due). `$1` claimant, `$2` lease in
/// milliseconds, `$3` limit, `$4` the caller's clock (NULL but in tests of the rules, see
/// `Store::with_callers_clock`), `$5` the fence on the claimant's own claims (NULL: all of
/// them may be taken again; see `Store::claim_due_fenced`). The rows are updated by `ctid` (a
/// TID scan: a join back to the table had a plan that grew with the table), and only
/// unindexed columns are set, so with the table's fill factor the update is HOT.
macro_rules! claim {
    ($after:expr) => {
        concat!(
    "WITH instant AS MATERIALIZED (SELECT COALESCE($4::timestamptz, statement_timestamp()) AS t), \
     clock AS MATERIALIZED (SELECT ",
    server_text!("t"),
    " AS now_text, ",
    server_text!("t + $2 * interval '1 millisecond'"),
    " AS until_text, \
       (extract(epoch FROM t) * 1000000)::bigint AS now_us FROM instant), \
     picked AS (SELECT t.ctid FROM timer_schedules t \
       WHERE t.state = 'Scheduled' AND t.due_at <= (SELECT now_text FROM clock) \
         AND (t.claim_until IS NULL OR t.claim_until < (SELECT now_text FROM clock) \
           OR (t.claimed_by = $1 AND ($5::text IS NULL OR t.claim_until < $5))) \
         ", $after, " \
       ORDER BY t.due_at, t.tenant_id, t.service_call_id \
       LIMIT $3 FOR UPDATE OF t SKIP LOCKED), \
     claimed AS (UPDATE timer_schedules t \
       SET claimed_by = $1, claim_until = (SELECT until_text FROM clock) \
       WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM picked)) \
       RETURNING t.tenant_id, t.service_call_id, t.correlation_id, t.due_at, t.data, t.trace_context, \
       t.expires_at), \
     counted AS (SELECT count(*) AS n FROM claimed) \
     SELECT c.tenant_id, c.service_call_id, c.correlation_id, c.due_at, c.data, c.trace_context, \
       c.expires_at, clock.now_us, \
       CASE WHEN (SELECT n FROM counted) < $3 THEN \
         (SELECT min(due_at) FROM timer_schedules \
           WHERE state = 'Scheduled' AND due_at > (SELECT now_text FROM clock)) END AS next_due, \
       CASE WHEN (SELECT n FROM counted) < $3 THEN \
         (SELECT min(claim_until) FROM timer_schedules \
           WHERE state = 'Scheduled' AND due_at <= (SELECT now_text FROM clock) \
             AND claimed_by <> $1 AND claim_until >= (SELECT now_text FROM clock)) END AS next_lapse \
     FROM clock LEFT JOIN claimed c ON true"
        )
    };
}

/// The claim from the first due timer.
const CLAIM: &str = claim!("");

/// The claim resuming after the caller's cursor `$6`–`$8`: the pending index's own order.
const CLAIM_AFTER: &str = claim!("AND (t.due_at, t.tenant_id, t.service_call_id) > ($6, $7, $8)");

/// The mark of the timers claimed at one instant: `$1`–`$3` the keys and claimed `dueAt`s as
/// arrays, `$4` their `reached_at`. Each key finds its row by the primary key in a lateral
/// lookup (by the key alone: a condition on `state` there let the planner walk the pending
/// index instead), fenced (`OFFSET 0`) so the keys stay the outer side of the loop whatever
/// the statistics say (a join of the keys to the table could put the table outside: seconds
/// for 1,000 keys); the rows are then reached by `ctid` (a TID scan per key). The key,
/// `due_at` and `state` are checked on the updated row itself: a row rescheduled or cancelled
/// since its claim is left as it is, so a new `dueAt` still fires. They must be there, not
/// in a lookup the row is found by: when the mark waits for a row a concurrent command holds,
/// PostgreSQL re-checks the newest version of the row against the outer conditions only, and
/// minor releases from before late 2025 took a row found by `ctid` as matching whatever it
/// had become (EvalPlanQual), which marked a rescheduled timer `Reached`.
const MARK: &str = "UPDATE timer_schedules t SET state = 'Reached', reached_at = $4, \
       claimed_by = NULL, claim_until = NULL \
     FROM (SELECT x.ctid AS row_id, k.tenant_id, k.service_call_id, k.due_at \
         FROM unnest($1::text[], $2::text[], $3::text[]) AS k(tenant_id, service_call_id, due_at) \
         CROSS JOIN LATERAL (SELECT s.ctid FROM timer_schedules s \
           WHERE s.tenant_id = k.tenant_id AND s.service_call_id = k.service_call_id) x \
         OFFSET 0) m \
     WHERE t.ctid = m.row_id AND t.tenant_id = m.tenant_id \
       AND t.service_call_id = m.service_call_id AND t.due_at = m.due_at \
       AND t.state = 'Scheduled'";

/// The mark of the keys in `columns` (tenants, service call ids, `dueAt`s), claimed at one
/// instant, `reached`.
fn mark_of(columns: [Vec<String>; 3], reached: String) -> Statement {
    let mut values: Vec<Value> = columns.into_iter().map(Value::from).collect();
    values.push(reached.into());
    Statement::from_sql_and_values(DbBackend::Postgres, MARK, values)
}

/// The mark of `keys`, all `reached` at one instant: for tests that read its plan.
pub(in crate::storage) fn mark_statement(
    keys: &[(&str, &str, DateTime<Utc>)],
    reached: DateTime<Utc>,
) -> Statement {
    let mut columns: [Vec<String>; 3] = Default::default();
    for (tenant, call, due) in keys {
        columns[0].push((*tenant).to_owned());
        columns[1].push((*call).to_owned());
        columns[2].push(format_utc(*due));
    }
    mark_of(columns, format_utc(reached))
}

/// For every firing transaction: its commit does not wait for the disk (a lost claim or mark
/// only means a timer is published again, which the contract allows); joins are nested loops
/// on an index, never a hash of the whole table or the table outside the loop over the keys,
/// which the planner chose on tables whose statistics lagged their growth; and the claim reads
/// the pending index in its order, never a bitmap of the due rows sorted after (a backlog of
/// 100,000 sorted for 2,000 of them). No parallel workers: starting them cost a claim about
/// 10 ms, for scans of the due range that take a fraction of one.
pub(in crate::storage) const FIRING_SETTINGS: &str = "SET LOCAL synchronous_commit = off; \
     SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; \
     SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; \
     SET LOCAL max_parallel_workers_per_gather = 0";

/// See [`Store::claim_due`]: by the server's clock, which `DueBatch::server_now` reports
/// (with `callers_now`, in tests of the rules, by that instead).
pub(super) async fn claim_due(store: &Store, claim: ClaimDue<'_>) -> Result<DueBatch, StoreError> {
    run_claim(store, claim_statement(claim)).await
}

/// The claim statement with its values (see [`claim_due`]).
pub(in crate::storage) fn claim_statement(claim: ClaimDue<'_>) -> Statement {
    let ClaimDue {
        now,
        after,
        limit,
        fence,
        claimant,
    } = claim;
    let callers_now = super::callers_now(now);
    let lease_ms = i64::try_from(claimant.lease.as_millis()).unwrap_or(i64::MAX);
    let limit_value = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut values: Vec<Value> = vec![
        claimant.name.clone().into(),
        lease_ms.into(),
        limit_value.into(),
        callers_now.map(format_utc).into(),
        fence.map(format_utc).into(),
    ];
    let sql = match after {
        Some(after) => {
            values.extend([
                format_utc(after.due_at).into(),
                after.tenant_id.clone().into(),
                after.service_call_id.clone().into(),
            ]);
            CLAIM_AFTER
        }
        None => CLAIM,
    };
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// Runs a claim statement in a firing transaction; the claimed timers, in firing order, with
/// the clock and wake-up it returned.
pub(super) async fn run_claim(store: &Store, statement: Statement) -> Result<DueBatch, StoreError> {
    let rows = store
        .relaxed(async {
            let txn = begin_firing(store).await?;
            let rows = txn.query_all_raw(statement).await?;
            txn.commit().await?;
            Ok(rows)
        })
        .await?;
    batch_of(rows)
}

/// The claimed timers, in firing order, and the clock and wake-up the statement returned.
fn batch_of(rows: Vec<QueryResult>) -> Result<DueBatch, StoreError> {
    let first = rows
        .first()
        .ok_or_else(|| StoreError::Unavailable("the claim returned no row".into()))?;
    let now_us: i64 = first.try_get("", "now_us")?;
    let now = Utc
        .timestamp_micros(now_us)
        .single()
        .ok_or_else(|| StoreError::Unavailable(format!("server clock {now_us} µs")))?;
    let next_due = parse_optional_time("due_at", first.try_get("", "next_due")?)?;
    let next_lapse = parse_optional_time("claim_until", first.try_get("", "next_lapse")?)?;
    let mut timers = Vec::with_capacity(rows.len());
    for row in &rows {
        let Some(tenant_id) = row.try_get::<Option<String>>("", "tenant_id")? else {
            continue;
        };
        timers.push(due_timer_of(tenant_id, row)?);
    }
    timers.sort_by_key(|t| t.position());
    Ok(DueBatch {
        timers,
        next_due_at: next_due.into_iter().chain(next_lapse).min(),
        server_now: Some(now),
    })
}

/// See [`Store::mark_reached`]: one statement per claim instant, each timer with its batch's
/// `reached_at` (the claim's instant by the server's clock, see `DueBatch::server_now`, which
/// the event carried too).
pub(super) async fn mark_reached(
    store: &Store,
    batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
) -> Result<u64, StoreError> {
    // One entry per key: two batches never hold the same key with the same claim. The rows are
    // updated in the order of their keys, which a command of another daemon need not follow:
    // writing one of them at that moment can meet a deadlock, which the server breaks within a
    // second by failing one of the two; a failed mark is retried, a failed commit handed back.
    let keys: BTreeMap<(&str, &str), (String, String)> = batches
        .iter()
        .flat_map(|(fired, reached_at)| fired.iter().map(move |t| (t, reached_at)))
        .map(|(t, reached_at)| {
            (
                (t.tenant_id.as_str(), t.service_call_id.as_str()),
                (format_utc(t.due_at), format_utc(*reached_at)),
            )
        })
        .collect();
    if keys.is_empty() {
        return Ok(0);
    }
    // One statement per claim instant (the batches of a mark come from a few claims).
    let mut by_instant: BTreeMap<String, [Vec<String>; 3]> = BTreeMap::new();
    for ((tenant, call), (due, reached)) in keys {
        let columns = by_instant.entry(reached).or_default();
        columns[0].push(tenant.to_owned());
        columns[1].push(call.to_owned());
        columns[2].push(due);
    }
    let statements: Vec<(Statement, u64)> = by_instant
        .into_iter()
        .map(|(reached, columns)| {
            let keys = columns[0].len() as u64;
            (mark_of(columns, reached), keys)
        })
        .collect();
    store
        .relaxed(async {
            let txn = begin_firing(store).await?;
            let mut marked = 0;
            for (statement, keys) in &statements {
                marked += mark_all(&txn, statement, *keys).await?;
            }
            txn.commit().await?;
            Ok(marked)
        })
        .await
}

/// Passes of one mark statement at most: see [`mark_all`].
const MARK_PASSES: usize = 3;

/// Runs `statement`, the mark of `keys` timers, and again while it marks some but not all.
///
/// A row that another transaction rewrote after the statement's snapshot was taken (the
/// statement then waits for its lock) is found by its old `ctid`, which its newest version
/// no longer has, so the statement leaves it whatever that version says. A reschedule must be
/// left so, but a cancel refused because the timer was claimed (it writes only its place in
/// the stream) must not: the row would stay `Scheduled` with the claim, and be claimed and
/// published again. The next pass has a snapshot of its own, finds such rows by their new
/// `ctid` and checks them again; the rows already marked are no longer `Scheduled`. A second
/// pass that marks nothing ends it: what is left was rescheduled, or taken over by another
/// daemon (a pass costs a lookup of every key, so only marks that missed some pay it).
async fn mark_all(
    txn: &DatabaseTransaction,
    statement: &Statement,
    keys: u64,
) -> Result<u64, DbErr> {
    let mut marked = 0;
    for n in 0..MARK_PASSES {
        let pass = txn.execute_raw(statement.clone()).await?.rows_affected();
        marked += pass;
        if marked >= keys || (n > 0 && pass == 0) {
            break;
        }
    }
    Ok(marked)
}

/// A transaction of the firing path, with [`FIRING_SETTINGS`] (one round trip).
async fn begin_firing(store: &Store) -> Result<DatabaseTransaction, DbErr> {
    let txn = store.db.begin().await?;
    txn.execute_unprepared(FIRING_SETTINGS).await?;
    Ok(txn)
}
