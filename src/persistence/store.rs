//! Every query of the service, as batch-shaped methods: one call, one transaction.
//!
//! Multi-row statements (`INSERT … ON CONFLICT` over many rows, one `UPDATE … WHERE (key) IN
//! (…)`) keep the per-statement round trip of the SQLite driver off the per-timer path.

use std::path::Path;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait,
    FromQueryResult, QueryFilter, QueryOrder, QuerySelect, QueryTrait, Select, Statement,
    TransactionTrait,
};

use super::db::{SqliteSettings, Synchronous, connect};
use super::entity::{self, Column, Entity};
use crate::domain::timestamp::{format_utc, parse_stored};
use crate::domain::{DuePosition, TimerEntry, TimerState};

/// Rows per statement: 8 bound values per upserted row stays far below SQLite's limit of
/// 32,766 variables.
const ROWS_PER_STATEMENT: usize = 1_000;

/// The condition the partial index `idx_timer_schedules_pending` is defined with. Written as a
/// literal: SQLite only uses a partial index when the query repeats its condition as-is, and a
/// bound parameter would not.
const PENDING: &str = "state = 'Scheduled'";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] DbErr),
    #[error("stored row ({tenant_id}, {service_call_id}) is unreadable: {reason}")]
    CorruptRow {
        tenant_id: String,
        service_call_id: String,
        reason: String,
    },
}

/// A batch of due timers, and when the next one falls due.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueBatch {
    /// Due timers in firing order, at most the limit asked for.
    pub timers: Vec<TimerEntry>,
    /// The earliest `dueAt` still pending after `now`; only looked up when nothing is due, so
    /// the look-up never delays a publish (the caller asks again once its batch is out).
    pub next_due_at: Option<DateTime<Utc>>,
}

/// The service's SQLite database.
#[derive(Debug, Clone)]
pub struct Store {
    db: DatabaseConnection,
    /// The configured `synchronous` level, restored after marking timers `Reached`.
    synchronous: Synchronous,
}

impl Store {
    /// Opens the file at `path`. The schema must already be migrated.
    pub async fn open(path: &Path, settings: &SqliteSettings) -> Result<Self, StoreError> {
        Ok(Self {
            db: connect(path, settings).await?,
            synchronous: settings.synchronous,
        })
    }

    pub async fn close(self) -> Result<(), StoreError> {
        Ok(self.db.close().await?)
    }

    /// Applies a batch of accepted commands, at most one per key (see
    /// [`crate::domain::timer::newest_per_key`]). A row is inserted when new; a `Scheduled` row
    /// is updated only by a command with a higher sequence; a `Reached` row never changes.
    /// Returns the number of rows written.
    pub async fn upsert(&self, entries: &[TimerEntry]) -> Result<u64, StoreError> {
        if entries.is_empty() {
            return Ok(0);
        }
        let txn = self.db.begin().await?;
        let mut written = 0;
        for chunk in entries.chunks(ROWS_PER_STATEMENT) {
            let rows = chunk.iter().map(to_active_model);
            let on_conflict = OnConflict::columns([Column::TenantId, Column::ServiceCallId])
                .update_columns([Column::DueAt, Column::CorrelationId, Column::CommandSeq])
                .action_and_where(
                    Expr::col((Entity, Column::State))
                        .eq(TimerState::Scheduled.as_str())
                        .and(
                            Expr::col((Entity, Column::CommandSeq))
                                .lt(Expr::cust("excluded.command_seq")),
                        ),
                )
                .to_owned();
            written += Entity::insert_many(rows)
                .on_conflict(on_conflict)
                .exec_without_returning(&txn)
                .await?;
        }
        txn.commit().await?;
        Ok(written)
    }

    /// Up to `limit` `Scheduled` timers with `due_at <= now` in firing order, starting after
    /// `after` when given (the last timer the caller already has in flight), and — when fewer
    /// is due — the next `dueAt` to wake up for.
    pub async fn find_due(
        &self,
        now: DateTime<Utc>,
        after: Option<&DuePosition>,
        limit: usize,
    ) -> Result<DueBatch, StoreError> {
        let timers = due_query(now, after, limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(from_model)
            .collect::<Result<Vec<_>, _>>()?;
        let next_due_at = if timers.is_empty() {
            self.next_due_after(now).await?
        } else {
            None
        };
        Ok(DueBatch {
            timers,
            next_due_at,
        })
    }

    /// Marks fired timers `Reached` at `reached_at`, in one transaction. A row whose `due_at`
    /// changed since it was read (rescheduled while its event was in flight) is left
    /// `Scheduled`, so the new `dueAt` still fires. Returns the number of rows marked.
    pub async fn mark_reached(
        &self,
        fired: &[TimerEntry],
        reached_at: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        if fired.is_empty() {
            return Ok(0);
        }
        let reached_text = format_utc(reached_at);
        // Losing a `Reached` mark to a power cut only means the event is published again (the
        // contract allows duplicates, and the broker drops one inside its window), so this
        // commit does not wait for an fsync. The next command batch, committed with the
        // configured level, makes it durable too.
        self.set_synchronous(Synchronous::Normal).await?;
        let marked = self.mark_reached_in_txn(fired, &reached_text).await;
        self.set_synchronous(self.synchronous).await?;
        marked
    }

    async fn set_synchronous(&self, level: Synchronous) -> Result<(), StoreError> {
        let pragma = format!("PRAGMA synchronous = {}", level.as_str());
        self.db.execute_unprepared(&pragma).await?;
        Ok(())
    }

    async fn mark_reached_in_txn(
        &self,
        fired: &[TimerEntry],
        reached_text: &str,
    ) -> Result<u64, StoreError> {
        let txn = self.db.begin().await?;
        let mut marked = 0;
        for chunk in fired.chunks(ROWS_PER_STATEMENT) {
            let keys = chunk.iter().map(|t| {
                (
                    t.tenant_id.clone(),
                    t.service_call_id.clone(),
                    format_utc(t.due_at),
                )
            });
            let result = Entity::update_many()
                .col_expr(Column::State, Expr::value(TimerState::Reached.as_str()))
                .col_expr(Column::ReachedAt, Expr::value(reached_text))
                .filter(Expr::cust(PENDING))
                .filter(
                    Expr::tuple([
                        Expr::col(Column::TenantId),
                        Expr::col(Column::ServiceCallId),
                        Expr::col(Column::DueAt),
                    ])
                    .in_tuples(keys),
                )
                .exec(&txn)
                .await?;
            marked += result.rows_affected;
        }
        txn.commit().await?;
        Ok(marked)
    }

    /// The earliest `due_at` of any `Scheduled` timer due after `now`.
    async fn next_due_after(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let earliest: Option<String> = Entity::find()
            .select_only()
            .column(Column::DueAt)
            .filter(Expr::cust(PENDING))
            .filter(Column::DueAt.gt(format_utc(now)))
            .order_by_asc(Column::DueAt)
            .limit(1)
            .into_tuple()
            .one(&self.db)
            .await?;
        earliest
            .map(|text| {
                parse_stored(&text).map_err(|e| StoreError::CorruptRow {
                    tenant_id: "?".into(),
                    service_call_id: "?".into(),
                    reason: format!("due_at {text:?}: {e}"),
                })
            })
            .transpose()
    }

    /// One timer of one tenant. Scoped by tenant: another tenant's timer with the same
    /// `serviceCallId` is never returned.
    pub async fn get(
        &self,
        tenant_id: &str,
        service_call_id: &str,
    ) -> Result<Option<TimerEntry>, StoreError> {
        Entity::find_by_id((tenant_id.to_owned(), service_call_id.to_owned()))
            .one(&self.db)
            .await?
            .map(from_model)
            .transpose()
    }

    /// Every timer of one tenant, by `serviceCallId`.
    pub async fn list_tenant(&self, tenant_id: &str) -> Result<Vec<TimerEntry>, StoreError> {
        Entity::find()
            .filter(Column::TenantId.eq(tenant_id))
            .order_by_asc(Column::ServiceCallId)
            .all(&self.db)
            .await?
            .into_iter()
            .map(from_model)
            .collect()
    }

    /// SQLite's plan for the polling query, one line per step: how an operator (and a test)
    /// checks that it is served by the pending index rather than a table scan.
    pub async fn explain_due_query(&self) -> Result<Vec<String>, StoreError> {
        #[derive(FromQueryResult)]
        struct PlanRow {
            detail: String,
        }
        let after = DuePosition {
            due_at: Utc::now(),
            tenant_id: String::new(),
            service_call_id: String::new(),
        };
        let select = due_query(Utc::now(), Some(&after), 100).build(self.db.get_database_backend());
        let explain = Statement::from_sql_and_values(
            select.db_backend,
            format!("EXPLAIN QUERY PLAN {}", select.sql),
            select.values.map(|v| v.0).unwrap_or_default(),
        );
        Ok(PlanRow::find_by_statement(explain)
            .all(&self.db)
            .await?
            .into_iter()
            .map(|row| row.detail)
            .collect())
    }
}

/// The polling query, shared by [`Store::find_due`] and [`Store::explain_due_query`]: a range
/// scan of the pending index in firing order.
fn due_query(now: DateTime<Utc>, after: Option<&DuePosition>, limit: usize) -> Select<Entity> {
    let mut query = Entity::find()
        .filter(Expr::cust(PENDING))
        .filter(Column::DueAt.lte(format_utc(now)));
    if let Some(after) = after {
        query = query.filter(
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
    query
        .order_by_asc(Column::DueAt)
        .order_by_asc(Column::TenantId)
        .order_by_asc(Column::ServiceCallId)
        .limit(limit as u64)
}

fn to_active_model(entry: &TimerEntry) -> entity::ActiveModel {
    entity::ActiveModel {
        tenant_id: Set(entry.tenant_id.clone()),
        service_call_id: Set(entry.service_call_id.clone()),
        correlation_id: Set(entry.correlation_id.clone()),
        due_at: Set(format_utc(entry.due_at)),
        registered_at: Set(format_utc(entry.registered_at)),
        reached_at: Set(entry.reached_at.map(format_utc)),
        state: Set(entry.state.as_str().to_owned()),
        command_seq: Set(entry.command_seq as i64),
    }
}

fn from_model(model: entity::Model) -> Result<TimerEntry, StoreError> {
    let corrupt = |reason: String| StoreError::CorruptRow {
        tenant_id: model.tenant_id.clone(),
        service_call_id: model.service_call_id.clone(),
        reason,
    };
    let time = |field: &str, text: &str| {
        parse_stored(text).map_err(|e| corrupt(format!("{field} {text:?}: {e}")))
    };
    Ok(TimerEntry {
        due_at: time("due_at", &model.due_at)?,
        registered_at: time("registered_at", &model.registered_at)?,
        reached_at: model
            .reached_at
            .as_deref()
            .map(|t| time("reached_at", t))
            .transpose()?,
        state: model.state.parse().map_err(corrupt)?,
        command_seq: u64::try_from(model.command_seq).map_err(|e| corrupt(e.to_string()))?,
        tenant_id: model.tenant_id,
        service_call_id: model.service_call_id,
        correlation_id: model.correlation_id,
    })
}
