//! Firing (docs/CONTRACT.md §5): claiming the due timers for this daemon, marking the
//! published ones `Reached`, and finding when to look again. The statements are the backend's
//! (`sqlite/firing.rs`, `postgres/firing.rs`), each by the clock that decides what is due
//! there; what is shared lives here:
//!
//! - [`due_query`]: the keys a claim in firing order picks, as SeaORM builds them: the
//!   pending index's own order (`dueAt`, tenant, service call), skipping live claims of other
//!   daemons. SQLite's claim runs it; a test explains it.
//! - the entry points the store calls, which hand the caller's clock to the backend.
//!
//! These writes commit without waiting for the disk: losing one to a power cut only means a
//! timer is claimed or published again, which the contract allows.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, Query, SelectStatement};
use sea_orm::{ColumnTrait, Order};

use super::entity::{Column, Entity};
use super::{Claimant, DueBatch, PENDING, Store, StoreError};
use crate::domain::timestamp::format_utc;
use crate::domain::{DuePosition, DueTimer};

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
pub(super) fn due_query_fenced(
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

/// See [`Store::claim_due_fenced`]: the backend's claim, by its clock.
pub(super) async fn claim_due(
    store: &Store,
    now: DateTime<Utc>,
    after: Option<&DuePosition>,
    limit: usize,
    fence: Option<DateTime<Utc>>,
    claimant: &Claimant,
) -> Result<DueBatch, StoreError> {
    let now = store.now(now);
    store
        .backend
        .claim_due(store, now, after, limit, fence, claimant)
        .await
}

/// See [`Store::mark_reached`]: the backend's mark, for batches that hold a timer.
pub(super) async fn mark_reached(
    store: &Store,
    batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
) -> Result<u64, StoreError> {
    if batches.iter().all(|(fired, _)| fired.is_empty()) {
        return Ok(0);
    }
    store.backend.mark_reached(store, batches).await
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
