//! The firing path on SQLite: one daemon per file, so the caller's `now` is the clock, and
//! SQLite's one writer needs no lock to keep another daemon off a row.
//!
//! - the claim is one `UPDATE … WHERE (key) IN (due_query) RETURNING`: the subquery is
//!   `storage::firing`'s, a range of the pending index in firing order (its plan is asserted
//!   in a test); one statement is a transaction of its own, so no BEGIN and COMMIT round trips.
//!   When the batch is not full, one more index step finds the next `dueAt`. Both write their
//!   `LIMIT` into the text (`with_literal_limit`), so that neither is prepared again each time.
//! - the mark is one `UPDATE … WHERE (tenant, call, due_at) IN (…)` per claim instant and
//!   [`ROWS_PER_STATEMENT`] keys: a row rescheduled since its claim keeps its new `dueAt`.
//!
//! Both commit without waiting for the disk: a lost claim or mark only means a timer is
//! published again, which the contract allows.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, Query};
use sea_orm::{ConnectionTrait, DbBackend, EntityTrait, Order, QueryFilter, Statement};

use crate::domain::timestamp::format_utc;
use crate::domain::{DueTimer, TimerState};
use crate::storage::backend::ClaimDue;
use crate::storage::entity::{Column, Entity};
use crate::storage::firing::{due_query_fenced, with_literal_limit};
use crate::storage::rows::{CLAIMED, due_timer, parse_optional_time};
use crate::storage::{DueBatch, PENDING, ROWS_PER_STATEMENT, Store, StoreError};

/// See `Backend::claim_due`: by the caller's `now`.
pub(super) async fn claim_due(store: &Store, claim: ClaimDue<'_>) -> Result<DueBatch, StoreError> {
    let ClaimDue {
        now,
        after,
        limit,
        fence,
        claimant,
    } = claim;
    let now = now.at;
    let until = now + chrono::Duration::from_std(claimant.lease).unwrap_or_default();
    let picked = due_query_fenced(DbBackend::Sqlite, now, after, &claimant.name, fence, limit);
    let claim = Statement::from_sql_and_values(
        DbBackend::Sqlite,
        format!(
            "UPDATE timer_schedules SET claimed_by = ?, claim_until = ? \
             WHERE (tenant_id, service_call_id) IN ({}) RETURNING {CLAIMED}",
            picked.sql
        ),
        [claimant.name.clone().into(), format_utc(until).into()]
            .into_iter()
            .chain(picked.values.into_iter().flat_map(|values| values.0)),
    );
    // One statement is a transaction of its own: no BEGIN and COMMIT round trips.
    let claimed = store
        .relaxed(async { store.db.query_all_raw(claim).await })
        .await?;
    let mut timers = claimed
        .iter()
        .map(due_timer)
        .collect::<Result<Vec<_>, _>>()?;
    timers.sort_by_key(|t| t.position());
    let next_due_at = if timers.len() < limit {
        next_due_after(store, now).await?
    } else {
        None
    };
    Ok(DueBatch {
        timers,
        next_due_at,
        server_now: None,
    })
}

/// The earliest `due_at` of any `Scheduled` timer due after `now`.
async fn next_due_after(
    store: &Store,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let mut earliest = Query::select();
    earliest
        .column(Column::DueAt)
        .from(Entity)
        .and_where(Expr::cust(PENDING))
        .and_where(Expr::col(Column::DueAt).gt(format_utc(now)))
        .order_by(Column::DueAt, Order::Asc);
    let earliest = with_literal_limit(DbBackend::Sqlite, &earliest, 1);
    let earliest: Option<Option<String>> = match store.db.query_one_raw(earliest).await? {
        Some(row) => row.try_get("", "due_at")?,
        None => None,
    };
    parse_optional_time("due_at", earliest.flatten())
}

/// See `Backend::mark_reached`: one statement per `reached_at` (the batches of one claim share
/// it), so that many small batches cost no more than one large one. The next command batch,
/// committed at the configured level, makes the marks durable too.
pub(super) async fn mark_reached(
    store: &Store,
    batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
) -> Result<u64, StoreError> {
    let mut by_instant: BTreeMap<DateTime<Utc>, Vec<&DueTimer>> = BTreeMap::new();
    for (fired, reached_at) in batches {
        by_instant
            .entry(*reached_at)
            .or_default()
            .extend(fired.iter());
    }
    let keys_per_statement = ROWS_PER_STATEMENT;
    // No BEGIN and COMMIT round trips where one statement does it all.
    let one_statement = by_instant.len() == 1
        && by_instant
            .values()
            .all(|fired| fired.len() <= keys_per_statement);
    store
        .relaxed(async {
            let txn = if one_statement {
                None
            } else {
                Some(store.begin_relaxed().await?)
            };
            let mut marked = 0;
            for (reached_at, mut fired) in by_instant {
                let reached_text = format_utc(reached_at);
                // Key order, as for commands.
                fired.sort_by(|a, b| {
                    (&a.tenant_id, &a.service_call_id).cmp(&(&b.tenant_id, &b.service_call_id))
                });
                for chunk in fired.chunks(keys_per_statement) {
                    let keys = chunk.iter().map(|t| {
                        (
                            t.tenant_id.clone(),
                            t.service_call_id.clone(),
                            format_utc(t.due_at),
                        )
                    });
                    let mark = Entity::update_many()
                        .col_expr(Column::State, Expr::value(TimerState::Reached.as_str()))
                        .col_expr(Column::ReachedAt, Expr::value(reached_text.as_str()))
                        .col_expr(Column::ClaimedBy, Expr::value(Option::<String>::None))
                        .col_expr(Column::ClaimUntil, Expr::value(Option::<String>::None))
                        .filter(Expr::cust(PENDING))
                        .filter(
                            Expr::tuple([
                                Expr::col(Column::TenantId),
                                Expr::col(Column::ServiceCallId),
                                Expr::col(Column::DueAt),
                            ])
                            .in_tuples(keys),
                        );
                    let result = match &txn {
                        Some(txn) => mark.exec(txn).await?,
                        None => mark.exec(&store.db).await?,
                    };
                    marked += result.rows_affected;
                }
            }
            if let Some(txn) = txn {
                txn.commit().await?;
            }
            Ok(marked)
        })
        .await
}
