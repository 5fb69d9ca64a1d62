//! `CancelTimers` in SQL (docs/CONTRACT.md §3): a cancel of many timers runs in steps of at
//! most a few thousand rows, each its own short transaction, so that no step holds a due
//! timer's claim or another tenant's commands for long, and a crash between steps loses
//! nothing: each row a step cancels carries the command's place in the stream
//! (`command_seq`), so the steps after a restart skip it, and a row a newer command wrote
//! is never touched.
//!
//! A step reads its keys through the tenant's range of an index in `dueAt` order (the tenant's
//! pending timers, or those of one correlation id; locking the rows on PostgreSQL), then
//! updates them by key, checking again that each is pending, unclaimed and
//! older than the cancel: a row claimed or rescheduled between the two is left as it is. (The
//! filter's own terms are not checked again: between the two, the rows are locked on
//! PostgreSQL, and on SQLite the write lock is this transaction's, so only the state, the
//! claim and the command's place are checked, as a guard.)

use sea_orm::sea_query::{Expr, ExprTrait, Func};
use sea_orm::{
    ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select,
    TransactionTrait, UpdateMany,
};

use super::entity::{Column, Entity};
use super::{ROWS_PER_STATEMENT, Store, StoreError};
use crate::domain::timestamp::format_utc;
use crate::domain::{CancelFilter, CancelMany, TimerState};

/// What one step of a `CancelTimers` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CancelStep {
    /// Rows it picked.
    pub picked: usize,
    /// Rows it cancelled.
    pub cancelled: u64,
    /// It picked fewer than it might: the command has nothing left to cancel.
    pub last: bool,
}

impl Store {
    /// One step of each of `cancels`, in their order, in one transaction, cancelling at most
    /// `limit` pending timers in all, each command's in `dueAt` order: the steps of the
    /// commands after the one that used up `limit` are not taken (the answer is shorter than
    /// `cancels`). Several small cancels then take one turn of the writer and one commit,
    /// not one each. A step that picks fewer than it might was its command's last (a row it
    /// picked may have been rescheduled or claimed before its update, and is then not
    /// cancelled).
    pub async fn cancel_steps(
        &self,
        cancels: &[CancelMany],
        limit: usize,
    ) -> Result<Vec<CancelStep>, StoreError> {
        let places = cancels
            .iter()
            .map(|cancel| {
                let seq = i64::try_from(cancel.seq)
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                Ok((seq, format_utc(cancel.received_at)))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.durable(async {
            let txn = self.db.begin().await?;
            self.backend.plan_for_values(&txn).await?;
            let mut steps = Vec::with_capacity(cancels.len());
            let mut budget = limit;
            for (cancel, (seq, at)) in cancels.iter().zip(&places) {
                if budget == 0 {
                    break;
                }
                // The keys first, locked where the database locks rows, then the rows by key:
                // an update through a subquery of the keys was planned as a scan of the whole
                // table for each key on PostgreSQL (seconds for one step of 40,000 timers).
                // The update names nothing but the keys that an index could serve
                // (`still_pending`).
                let keys: Vec<String> = step_keys_query(cancel, *seq, budget)
                    .into_tuple()
                    .all(&txn)
                    .await?;
                let mut cancelled = 0;
                for chunk in keys.chunks(ROWS_PER_STATEMENT) {
                    cancelled += step_update(&cancel.tenant_id, chunk, *seq, at)
                        .exec(&txn)
                        .await?
                        .rows_affected;
                }
                steps.push(CancelStep {
                    picked: keys.len(),
                    cancelled,
                    last: keys.len() < budget,
                });
                budget -= keys.len();
            }
            txn.commit().await?;
            Ok(steps)
        })
        .await
    }

    /// How many of a tenant's timers `filter` would cancel now: its pending timers not picked
    /// for firing (the API's `dryRun`).
    pub async fn count_cancellable(
        &self,
        tenant_id: &str,
        filter: &CancelFilter,
    ) -> Result<u64, StoreError> {
        let count: Option<i64> = Entity::find()
            .select_only()
            .column_as(Expr::cust("COUNT(*)"), "n")
            .filter(cancellable(tenant_id, filter, None))
            .into_tuple()
            .one(&self.db)
            .await?;
        Ok(count.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
    }

    /// How many of a tenant's timers the `CancelTimers` at `seq` cancelled and no newer command
    /// has scheduled again.
    pub async fn count_cancelled_by(&self, tenant_id: &str, seq: u64) -> Result<u64, StoreError> {
        let seq = i64::try_from(seq).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let count: Option<i64> = Entity::find()
            .select_only()
            .column_as(Expr::cust("COUNT(*)"), "n")
            .filter(Column::TenantId.eq(tenant_id))
            .filter(Column::State.eq(TimerState::Cancelled.as_str()))
            .filter(Column::CancelledSeq.eq(seq))
            .into_tuple()
            .one(&self.db)
            .await?;
        Ok(count.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
    }
}

/// The keys of up to `limit` timers a step of `cancel` (at `seq`) picks, in `dueAt` order,
/// locked where the database locks rows. A test explains it.
pub fn step_keys_query(cancel: &CancelMany, seq: i64, limit: usize) -> Select<Entity> {
    Entity::find()
        .select_only()
        .column(Column::ServiceCallId)
        .filter(cancellable(&cancel.tenant_id, &cancel.filter, Some(seq)))
        .order_by_asc(Column::DueAt)
        .limit(limit as u64)
        .lock_exclusive()
}

/// A step's update of the rows of `keys` of `tenant_id` it picked, cancelled by the command at
/// `seq`, accepted at `at`. A test explains it.
pub fn step_update(tenant_id: &str, keys: &[String], seq: i64, at: &str) -> UpdateMany<Entity> {
    Entity::update_many()
        .col_expr(Column::State, Expr::value(TimerState::Cancelled.as_str()))
        .col_expr(Column::CancelledAt, Expr::value(at))
        .col_expr(Column::CancelledSeq, Expr::value(seq))
        .col_expr(Column::CommandSeq, Expr::value(seq))
        .filter(Column::TenantId.eq(tenant_id))
        .filter(Column::ServiceCallId.is_in(keys.iter().map(String::as_str)))
        .filter(still_pending(seq))
}

/// What the update of a step checks again on each row it picked: still pending, unclaimed,
/// and its last command before the cancel. Only the primary key may lead the update to its
/// rows: given the filter's columns or `state` as an indexable term, SQLite and PostgreSQL
/// walked the tenant's range of another index (`tenant_state` or `correlation`) and compared
/// each row with the step's keys, a scan of every pending timer of the tenant per step
/// (about 90 ms a step beside a million, whatever the step's size). `COALESCE` keeps `state`
/// out of the index's reach.
fn still_pending(before: i64) -> Condition {
    Condition::all()
        .add(
            Expr::expr(Func::coalesce([
                Expr::col((Entity, Column::State)),
                Expr::val(""),
            ]))
            .eq(TimerState::Scheduled.as_str()),
        )
        .add(Column::ClaimedBy.is_null())
        .add(Column::CommandSeq.lt(before))
}

/// A tenant's pending timers that `filter` selects and that no claim holds (a claimed timer
/// fires: a cancel comes too late for it), and with `before`, whose last command came before
/// that place in the stream.
fn cancellable(tenant_id: &str, filter: &CancelFilter, before: Option<i64>) -> Condition {
    let mut condition = Condition::all()
        .add(Column::TenantId.eq(tenant_id))
        .add(Column::State.eq(TimerState::Scheduled.as_str()))
        .add(Column::ClaimedBy.is_null());
    if let Some(seq) = before {
        condition = condition.add(Column::CommandSeq.lt(seq));
    }
    if let Some(correlation_id) = &filter.correlation_id {
        condition = condition.add(Column::CorrelationId.eq(correlation_id.as_str()));
    }
    if let Some(from) = filter.due_from {
        condition = condition.add(Column::DueAt.gte(format_utc(from)));
    }
    if let Some(to) = filter.due_to {
        condition = condition.add(Column::DueAt.lt(format_utc(to)));
    }
    condition
}
