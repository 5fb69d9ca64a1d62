//! The console's overview reads (docs/CONTRACT.md §7): every tenant's pending and overdue
//! timers in one walk of the tenant-and-state index, and the daemons that share the database.
//! Both run on a reader connection, never on the writer's.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, Func};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select};

use super::entity::{Column, Entity};
use super::{Store, StoreError, daemons};
use crate::domain::TimerState;
use crate::domain::census::{CENSUS_TENANTS, DaemonSeen, TenantCensus, trouble_first};
use crate::domain::timestamp::format_utc;

/// How long a timer counts as overdue (as in `stats`).
const OVERDUE_AFTER: chrono::Duration = chrono::Duration::seconds(1);

/// Every tenant's pending timers, counted by tenant: one pass over the `Scheduled` entries.
pub fn census_query(now: DateTime<Utc>) -> Select<Entity> {
    let overdue = Expr::case(
        Column::DueAt.lte(format_utc(now - OVERDUE_AFTER)),
        Expr::val(1),
    );
    Entity::find()
        .select_only()
        .column(Column::TenantId)
        .column_as(Expr::cust("COUNT(*)"), "scheduled")
        .column_as(Expr::from(Func::count(overdue)), "overdue")
        .column_as(Column::DueAt.min(), "next_due_at")
        .filter(Column::State.eq(TimerState::Scheduled.as_str()))
        .group_by(Column::TenantId)
}

/// See [`Store::census`]: at most [`CENSUS_TENANTS`], those in trouble first.
pub(super) async fn census(
    store: &Store,
    now: DateTime<Utc>,
) -> Result<Vec<TenantCensus>, StoreError> {
    let rows: Vec<(String, i64, i64, Option<String>)> =
        census_query(now).into_tuple().all(&store.db).await?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let mut tenants: Vec<TenantCensus> = rows
        .into_iter()
        .map(
            |(tenant_id, scheduled, overdue, next_due_at)| TenantCensus {
                tenant_id,
                scheduled: count(scheduled),
                overdue: count(overdue),
                next_due_at,
            },
        )
        .collect();
    trouble_first(&mut tenants);
    tenants.truncate(CENSUS_TENANTS);
    Ok(tenants)
}

/// See [`Store::daemons_seen`].
pub(super) async fn daemons_seen(store: &Store) -> Result<Vec<DaemonSeen>, StoreError> {
    let rows: Vec<(String, String)> = daemons::Entity::find()
        .select_only()
        .column(daemons::Column::Name)
        .column(daemons::Column::SeenAt)
        .order_by_asc(daemons::Column::Name)
        .into_tuple()
        .all(&store.db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(name, seen_at)| DaemonSeen { name, seen_at })
        .collect())
}
