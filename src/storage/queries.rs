//! The query API's reads: one timer, a page of a tenant's timers, a tenant's counts and its
//! forecast. Every query is an index range, never a scan or a sort of the tenant (a test
//! explains each statement [`list_queries`], [`pending_counts_query`] and [`forecast_query`]
//! build).

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Alias, Expr, ExprTrait, Func, Query, SelectStatement, SubQueryStatement};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Select,
};

use super::entity::{self, Column, Entity};
use super::rows::{from_model, parse_optional_time};
use super::{Store, StoreError};
use crate::domain::api::{ListCursor, ListFilter, ListPage, TenantStats};
use crate::domain::forecast::{ForecastMinute, ForecastWindow};
use crate::domain::timestamp::format_utc;
use crate::domain::{Timer, TimerState};

/// How long a timer counts as overdue before `stats` reports it (docs/CONTRACT.md §6).
const OVERDUE_AFTER: chrono::Duration = chrono::Duration::seconds(1);

/// See [`Store::get`].
pub(super) async fn get(
    store: &Store,
    tenant_id: &str,
    service_call_id: &str,
) -> Result<Option<Timer>, StoreError> {
    find_one(&store.db, tenant_id, service_call_id, false)
        .await?
        .map(from_model)
        .transpose()
}

/// One row by its key, locked for the transaction when `for_update` on backends that lock.
pub(super) async fn find_one(
    db: &impl ConnectionTrait,
    tenant_id: &str,
    service_call_id: &str,
    for_update: bool,
) -> Result<Option<entity::Model>, DbErr> {
    let mut query = Entity::find_by_id((tenant_id.to_owned(), service_call_id.to_owned()));
    if for_update {
        query = query.lock_exclusive();
    }
    query.one(db).await
}

/// See [`Store::list`]. Each part of the order that an index holds (one state, or tombstones,
/// or one correlation id) is read with its own keyset query of `limit + 1` rows, and the parts
/// are merged.
pub(super) async fn list(
    store: &Store,
    tenant_id: &str,
    filter: &ListFilter,
    limit: usize,
) -> Result<ListPage, StoreError> {
    let mut rows = Vec::new();
    for query in list_queries(tenant_id, filter, limit) {
        for model in query.all(&store.db).await? {
            rows.push(from_model(model)?);
        }
    }
    rows.sort_by(|a, b| list_order(a).cmp(&list_order(b)));
    let next = (rows.len() > limit).then(|| {
        let last = &rows[limit - 1];
        ListCursor {
            due_at: last.due_at,
            service_call_id: last.service_call_id.clone(),
        }
    });
    rows.truncate(limit);
    Ok(ListPage { timers: rows, next })
}

/// See [`Store::stats`]. Counting walks the tenant's pending index entries: cheap for
/// thousands of timers, slower by the million.
pub(super) async fn stats(
    store: &Store,
    tenant_id: &str,
    now: DateTime<Utc>,
) -> Result<TenantStats, StoreError> {
    let counts = pending_counts(store, tenant_id, now).await?;
    let next: Option<Option<String>> = pending(tenant_id)
        .select_only()
        .column(Column::DueAt)
        .order_by_asc(Column::DueAt)
        .limit(1)
        .into_tuple()
        .one(&store.db)
        .await?;
    Ok(TenantStats {
        scheduled: counts.pending,
        overdue: counts.overdue,
        next_due_at: parse_optional_time("due_at", next.flatten())?,
    })
}

/// A tenant's pending timers, and how many of them are overdue (docs/CONTRACT.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingCounts {
    pub pending: u64,
    pub overdue: u64,
}

/// See [`Store::pending_counts`].
pub(super) async fn pending_counts(
    store: &Store,
    tenant_id: &str,
    now: DateTime<Utc>,
) -> Result<PendingCounts, StoreError> {
    let counts: Option<(i64, i64)> = pending_counts_query(tenant_id, now)
        .into_tuple()
        .one(&store.db)
        .await?;
    let (pending, overdue) = counts.unwrap_or_default();
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(PendingCounts {
        pending: count(pending),
        overdue: count(overdue),
    })
}

/// A tenant's `Scheduled` timers: one range of the tenant-and-state index.
fn pending(tenant_id: &str) -> Select<Entity> {
    Entity::find()
        .filter(Column::TenantId.eq(tenant_id))
        .filter(Column::State.eq(TimerState::Scheduled.as_str()))
}

/// Both counts of [`PendingCounts`] in one walk of the tenant's pending index range.
pub fn pending_counts_query(tenant_id: &str, now: DateTime<Utc>) -> Select<Entity> {
    let overdue = Expr::case(
        Column::DueAt.lte(format_utc(now - OVERDUE_AFTER)),
        Expr::val(1),
    );
    pending(tenant_id)
        .select_only()
        .column_as(Expr::cust("COUNT(*)"), "pending")
        .column_as(Expr::from(Func::count(overdue)), "overdue")
}

/// See [`Store::forecast`].
pub(super) async fn forecast(
    store: &Store,
    tenant_id: &str,
    window: &ForecastWindow,
) -> Result<Vec<ForecastMinute>, StoreError> {
    let statement = store
        .db
        .get_database_backend()
        .build(&forecast_query(tenant_id, window));
    let mut counts = Vec::new();
    for row in store.db.query_all_raw(statement).await? {
        let (minute, due): (i64, i64) = row.try_get_many_by_index()?;
        if let (Ok(minute), Ok(due)) = (usize::try_from(minute), u64::try_from(due)) {
            counts.push((minute, due));
        }
    }
    Ok(window.fill(counts))
}

/// The tenant's pending timers due in each minute of `window`: one row per minute, its position
/// and its count. Each count is a range of the tenant-and-state index, so the work is the
/// timers in the window and a seek per minute; grouping the range by minute instead would sort
/// it (SQLite groups through a temporary b-tree), several times the cost at a million timers.
pub fn forecast_query(tenant_id: &str, window: &ForecastWindow) -> SelectStatement {
    let minutes = Alias::new("minutes");
    // The columns of a `VALUES` list are `column1`, `column2`… on both backends.
    let (position, from, to) = (
        Alias::new("column1"),
        Alias::new("column2"),
        Alias::new("column3"),
    );
    let rows = window
        .ranges()
        .into_iter()
        .enumerate()
        .map(|(i, (start, end))| (i as i64, format_utc(start), format_utc(end)));
    let due = Query::select()
        .expr(Expr::cust("COUNT(*)"))
        .from(Entity)
        .and_where(Expr::col((Entity, Column::TenantId)).eq(tenant_id))
        .and_where(Expr::col((Entity, Column::State)).eq(TimerState::Scheduled.as_str()))
        .and_where(Expr::col((Entity, Column::DueAt)).gte(Expr::col((minutes.clone(), from))))
        .and_where(Expr::col((Entity, Column::DueAt)).lt(Expr::col((minutes.clone(), to))))
        .to_owned();
    Query::select()
        .column((minutes.clone(), position))
        .expr(Expr::SubQuery(
            None,
            Box::new(SubQueryStatement::SelectStatement(due)),
        ))
        .from_values(rows, minutes)
        .to_owned()
}

/// The keyset queries one `list` page merges (see [`Store::list`]).
pub fn list_queries(tenant_id: &str, filter: &ListFilter, limit: usize) -> Vec<Select<Entity>> {
    let has_range = filter.due_from.is_some() || filter.due_to.is_some();
    // Tombstones (no dueAt) come first; a cursor on a dated timer is past all of them.
    let tombstones_wanted = !has_range
        && filter.state.is_none_or(|s| s == TimerState::Cancelled)
        && filter.after.as_ref().is_none_or(|c| c.due_at.is_none());
    let base = || {
        let mut query = Entity::find().filter(Column::TenantId.eq(tenant_id));
        if let Some(correlation_id) = &filter.correlation_id {
            query = query.filter(Column::CorrelationId.eq(correlation_id.as_str()));
        }
        query
    };
    let mut queries = Vec::new();
    // One part per state when listing by state (or all of them), else one by correlation id.
    let parts: Vec<Option<TimerState>> = match (filter.state, &filter.correlation_id) {
        (Some(state), _) => vec![Some(state)],
        (None, Some(_)) => vec![None],
        (None, None) => TimerState::ALL.into_iter().map(Some).collect(),
    };
    for state in parts {
        let with_state = |query: Select<Entity>| match state {
            Some(state) => query.filter(state_condition(state)),
            None => query,
        };
        if tombstones_wanted && state.is_none_or(|s| s == TimerState::Cancelled) {
            let mut query = with_state(base()).filter(Column::DueAt.is_null());
            if let Some(after) = &filter.after {
                query = query.filter(Column::ServiceCallId.gt(after.service_call_id.as_str()));
            }
            // Ordered by `due_at` (NULL in all of them) too, so that PostgreSQL follows the
            // index order instead of sorting: it does not take `IS NULL` for an equality.
            queries.push(
                query
                    .order_by_asc(Column::DueAt)
                    .order_by_asc(Column::ServiceCallId)
                    .limit(limit as u64 + 1),
            );
        }
        let mut query = with_state(base()).filter(Column::DueAt.is_not_null());
        if let Some(from) = filter.due_from {
            query = query.filter(Column::DueAt.gte(format_utc(from)));
        }
        if let Some(to) = filter.due_to {
            query = query.filter(Column::DueAt.lt(format_utc(to)));
        }
        if let Some(ListCursor {
            due_at: Some(due_at),
            service_call_id,
        }) = &filter.after
        {
            query = query.filter(
                Expr::tuple([Expr::col(Column::DueAt), Expr::col(Column::ServiceCallId)]).gt(
                    Expr::tuple([
                        Expr::value(format_utc(*due_at)),
                        Expr::value(service_call_id.clone()),
                    ]),
                ),
            );
        }
        queries.push(
            query
                .order_by_asc(Column::DueAt)
                .order_by_asc(Column::ServiceCallId)
                .limit(limit as u64 + 1),
        );
    }
    queries
}

/// The rows of one state. `Expired` is stored as `Reached` (see `TimerState`): a fired row is
/// one or the other by its `reached_at` against its `expires_at`, compared as text (the
/// fixed-width format orders as time), as `expiry::is_expired` decided when it fired.
fn state_condition(state: TimerState) -> Condition {
    let stored = Condition::all().add(Column::State.eq(state.stored().as_str()));
    let expired = Condition::all()
        .add(Column::ExpiresAt.is_not_null())
        .add(Expr::col(Column::ReachedAt).gt(Expr::col(Column::ExpiresAt)));
    match state {
        TimerState::Expired => stored.add(expired),
        TimerState::Reached => stored.add(expired.not()),
        TimerState::Scheduled | TimerState::Cancelled => stored,
    }
}

/// `list` order: tombstones first (by serviceCallId), then by `(dueAt, serviceCallId)`.
fn list_order(timer: &Timer) -> (bool, Option<DateTime<Utc>>, &str) {
    (
        timer.due_at.is_some(),
        timer.due_at,
        timer.service_call_id.as_str(),
    )
}
