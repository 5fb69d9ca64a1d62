//! Firing: claiming the due timers for this daemon, marking the published ones `Reached`, and
//! finding when to look again. These writes commit without waiting for the disk: losing one to
//! a power cut only means a timer is claimed or published again, which the contract allows.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, Query, SelectStatement};
use sea_orm::{ColumnTrait, EntityTrait, Order, QueryFilter, QueryOrder, QuerySelect};

use super::entity::{Column, Entity};
use super::rows::{due_from_model, parse_optional_time};
use super::{Claimant, DueBatch, PENDING, ROWS_PER_STATEMENT, Store, StoreError};
use crate::domain::timestamp::format_utc;
use crate::domain::{DuePosition, DueTimer, TimerState};

/// The keys of up to `limit` timers `claimant` may fire at `now`, in firing order, after
/// `after` when given. [`Store::claim_due`] claims them; a test explains it.
pub fn due_query(
    now: DateTime<Utc>,
    after: Option<&DuePosition>,
    claimant: &str,
    limit: usize,
) -> SelectStatement {
    due_query_fenced(now, after, claimant, None, limit)
}

/// [`due_query`], taking again only those of `claimant`'s own claims whose lease ends before
/// `fence` when one is given (see [`Store::claim_due_fenced`]).
fn due_query_fenced(
    now: DateTime<Utc>,
    after: Option<&DuePosition>,
    claimant: &str,
    fence: Option<DateTime<Utc>>,
    limit: usize,
) -> SelectStatement {
    let mut due = Query::select();
    due.columns([Column::TenantId, Column::ServiceCallId])
        .from(Entity)
        .cond_where(due_condition(now, after, claimant, fence))
        .order_by(Column::DueAt, Order::Asc)
        .order_by(Column::TenantId, Order::Asc)
        .order_by(Column::ServiceCallId, Order::Asc)
        .limit(limit as u64);
    due
}

/// See [`Store::claim_due`]. Where daemons share the table, the server's clock decides and
/// the statements are `postgres::firing`'s; here, `now` is the clock, and SQLite's one writer
/// needs no lock.
pub(super) async fn claim_due(
    store: &Store,
    now: DateTime<Utc>,
    after: Option<&DuePosition>,
    limit: usize,
    fence: Option<DateTime<Utc>>,
    claimant: &Claimant,
) -> Result<DueBatch, StoreError> {
    if store.postgres() {
        let now = (!store.server_clock()).then_some(now);
        return super::postgres::firing::claim_due(store, now, after, limit, fence, claimant).await;
    }
    let until = now + chrono::Duration::from_std(claimant.lease).unwrap_or_default();
    let picked = due_query_fenced(now, after, &claimant.name, fence, limit);
    let claim = Entity::update_many()
        .col_expr(Column::ClaimedBy, Expr::value(claimant.name.clone()))
        .col_expr(Column::ClaimUntil, Expr::value(format_utc(until)))
        .filter(
            Expr::tuple([
                Expr::col(Column::TenantId),
                Expr::col(Column::ServiceCallId),
            ])
            .in_subquery(picked),
        );
    let claimed = store
        .relaxed(async {
            if store.backend.statement_is_transaction() {
                // No BEGIN and COMMIT round trips on the firing path.
                return claim.exec_with_returning(&store.db).await;
            }
            let txn = store.begin_relaxed().await?;
            let rows = claim.exec_with_returning(&txn).await?;
            txn.commit().await?;
            Ok(rows)
        })
        .await?;
    let mut timers = claimed
        .into_iter()
        .map(due_from_model)
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
    let earliest: Option<Option<String>> = Entity::find()
        .select_only()
        .column(Column::DueAt)
        .filter(Expr::cust(PENDING))
        .filter(Column::DueAt.gt(format_utc(now)))
        .order_by_asc(Column::DueAt)
        .limit(1)
        .into_tuple()
        .one(&store.db)
        .await?;
    parse_optional_time("due_at", earliest.flatten())
}

/// See [`Store::mark_reached`]: one statement per `reached_at` (the batches of one claim share
/// it), so that many small batches cost no more than one large one.
pub(super) async fn mark_reached(
    store: &Store,
    batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
) -> Result<u64, StoreError> {
    if batches.iter().all(|(fired, _)| fired.is_empty()) {
        return Ok(0);
    }
    if store.postgres() {
        return super::postgres::firing::mark_reached(store, batches).await;
    }
    // Losing a `Reached` mark to a power cut only means the event is published again (the
    // contract allows duplicates, and the broker drops one inside its window), so this
    // commit does not wait for an fsync. The next command batch, committed with the
    // configured level, makes it durable too.
    let mut by_instant: BTreeMap<DateTime<Utc>, Vec<&DueTimer>> = BTreeMap::new();
    for (fired, reached_at) in batches {
        by_instant
            .entry(*reached_at)
            .or_default()
            .extend(fired.iter());
    }
    let keys_per_statement = ROWS_PER_STATEMENT;
    // No BEGIN and COMMIT round trips where one statement is a transaction of its own.
    let one_statement = store.backend.statement_is_transaction()
        && by_instant.len() == 1
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
                // Key order, as for commands: no deadlock with another daemon writing these.
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

/// Due, pending, after the caller's cursor, and not held by a live claim of another daemon
/// (nor, with a `fence`, by one of the caller's own made since the fence).
fn due_condition(
    now: DateTime<Utc>,
    after: Option<&DuePosition>,
    claimant: &str,
    fence: Option<DateTime<Utc>>,
) -> sea_orm::Condition {
    let now_text = format_utc(now);
    let mut own = sea_orm::Condition::all().add(Column::ClaimedBy.eq(claimant));
    if let Some(fence) = fence {
        own = own.add(Column::ClaimUntil.lt(format_utc(fence)));
    }
    let mut condition = sea_orm::Condition::all()
        .add(Expr::cust(PENDING))
        .add(Column::DueAt.lte(now_text.clone()))
        .add(
            sea_orm::Condition::any()
                .add(Column::ClaimUntil.is_null())
                .add(own)
                .add(Column::ClaimUntil.lt(now_text)),
        );
    if let Some(after) = after {
        condition = condition.add(
            Expr::tuple([
                Expr::col(Column::DueAt),
                Expr::col(Column::TenantId),
                Expr::col(Column::ServiceCallId),
            ])
            .gt(Expr::tuple([
                Expr::value(format_utc(after.due_at)),
                Expr::value(after.tenant_id.clone()),
                Expr::value(after.service_call_id.clone()),
            ])),
        );
    }
    condition
}
