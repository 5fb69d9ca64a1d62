//! Retention: deleting finished timers (`Reached` or `Cancelled`) past their time, oldest
//! first, in short transactions that commit without waiting for the disk (a lost delete costs
//! nothing but doing it again); and, in the same steps, the records of refused commands
//! (`refusals`) as old: a refusal is remembered as long as a stored command's outcome is.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, Query};
use sea_orm::{EntityTrait, Order, QueryFilter};

use super::entity::{Column, Entity};
use super::{Store, StoreError, refusals};
use crate::domain::TimerState;

/// See [`Store::delete_finished`]: the cutoff is the backend's, by the clock that stamped
/// `reached_at`.
pub(super) async fn delete_finished(
    store: &Store,
    now: DateTime<Utc>,
    keep: Duration,
    limit: usize,
) -> Result<u64, StoreError> {
    let Some(cutoff) = store.backend.retention_cutoff(store.now(now), keep) else {
        return Ok(0);
    };
    store
        .relaxed(async {
            let txn = store.begin_relaxed().await?;
            let mut deleted = 0;
            for (state, finished_at) in [
                (TimerState::Reached, Column::ReachedAt),
                (TimerState::Cancelled, Column::CancelledAt),
            ] {
                let left = limit as u64 - deleted;
                if left == 0 {
                    break;
                }
                // Literal state, so SQLite uses the partial index on `finished_at`.
                let mut oldest = Query::select();
                oldest
                    .columns([Column::TenantId, Column::ServiceCallId])
                    .from(Entity)
                    .and_where(Expr::cust(format!("state = '{}'", state.as_str())))
                    .and_where(Expr::col(finished_at).lt(cutoff.clone()))
                    .order_by(finished_at, Order::Asc)
                    .limit(left);
                deleted += Entity::delete_many()
                    .filter(
                        Expr::tuple([
                            Expr::col(Column::TenantId),
                            Expr::col(Column::ServiceCallId),
                        ])
                        .in_subquery(oldest),
                    )
                    .exec(&txn)
                    .await?
                    .rows_affected;
            }
            let left = limit as u64 - deleted;
            if left > 0 {
                let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
                let cutoff_ms = store.backend.quota_clock_ms(store.now(now)).sub(keep_ms);
                deleted += refusals::delete_before(&txn, cutoff_ms, left).await?;
            }
            txn.commit().await?;
            Ok(deleted)
        })
        .await
}
