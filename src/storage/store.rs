//! Every query of the service, as batch-shaped methods: one call, one transaction.
//!
//! Multi-row statements (`INSERT … ON CONFLICT` over many rows, one `UPDATE … WHERE (key) IN
//! (…)`) keep the per-statement round trip of the driver off the per-timer path.
//!
//! The queries are the same SeaORM code on SQLite and PostgreSQL. Backend-specific, because
//! the backends differ there: how a commit skips waiting for the disk ([`Store::durable`] and
//! [`Store::relaxed`]: `PRAGMA synchronous` on SQLite, `SET LOCAL synchronous_commit` on
//! PostgreSQL), a claim's own transaction (one statement is one on SQLite), the checks
//! that only a file has (its identity at its path, the free space of its disk), and the form
//! of `EXPLAIN`. Claims lock with `FOR UPDATE SKIP LOCKED` on PostgreSQL, where several
//! daemons share the table; SQLite has one writer and needs no lock.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, LockBehavior, LockType, OnConflict, Query};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr,
    EntityTrait, Order, QueryFilter, QueryOrder, QuerySelect, QueryTrait, Select, Statement,
    TransactionTrait,
};

use super::db::{DatabaseTarget, FileIdentity, Synchronous, checkpoint, connect, free_bytes};
use super::entity::{self, Column, Entity};
use super::{command_streams, daemons};
use crate::domain::api::{ListCursor, ListFilter, ListPage, TenantStats};
use crate::domain::timer::rounds;
use crate::domain::timestamp::{format_utc, parse_stored};
use crate::domain::{
    Action, CancelOutcome, Command, DuePosition, DueTimer, StreamIncarnation, Timer, TimerState,
};

/// Rows per statement: 11 bound values per upserted row stays far below SQLite's limit of
/// 32,766 variables.
const ROWS_PER_STATEMENT: usize = 1_000;
/// Keys per `Reached` mark statement on PostgreSQL. Its planner expands `(a, b, c) IN (…)` into
/// one OR branch per key and takes time growing with the square of their number: 5 ms for 100
/// keys, 450 ms for 1,000 (fire fell from 7,500 to 1,500 timers/s with 1,000). At 50 a key
/// costs about 60 µs to plan and run. SQLite takes 1,000 without trouble.
const POSTGRES_KEYS_PER_MARK: usize = 50;

/// The condition the partial index `idx_timer_schedules_pending` is defined with. Written as a
/// literal: SQLite only uses a partial index when the query repeats its condition as-is, and a
/// bound parameter would not.
const PENDING: &str = "state = 'Scheduled'";

/// How long a timer counts as overdue before `stats` reports it (CONTRACT.md §6).
const OVERDUE_AFTER: chrono::Duration = chrono::Duration::seconds(1);

/// Below this much free space the database counts as failing: a write may still fit in the
/// WAL's reused pages, but the next batch of timers will not (README, "Storage faults").
pub const MIN_FREE_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] DbErr),
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("database file {path} was removed or replaced while open: {reason}")]
    FileMoved { path: PathBuf, reason: String },
    #[error(
        "commands of {0} cannot be ordered: a newer incarnation of that stream is known (this one was deleted)"
    )]
    StaleStream(StreamIncarnation),
    #[error("stored row ({tenant_id}, {service_call_id}) is unreadable: {reason}")]
    CorruptRow {
        tenant_id: String,
        service_call_id: String,
        reason: String,
    },
}

impl StoreError {
    /// Whether the connection may be left in an unknown state, so it must be reopened before
    /// the next transaction. After a failed `COMMIT` (a full disk, an I/O error, a lock held
    /// past the busy timeout) SQLite may or may not have rolled the transaction back, and the
    /// driver's idea of it can differ from SQLite's: its next `BEGIN` then became a `SAVEPOINT`
    /// inside a transaction that never committed, and every later "commit" wrote nothing to
    /// disk while reporting success. Closing the connection rolls back whatever is open.
    pub fn needs_reopen(&self) -> bool {
        !matches!(
            self,
            StoreError::CorruptRow { .. } | StoreError::StaleStream(_)
        )
    }
}

/// A batch of due timers, and when the next one falls due.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DueBatch {
    /// Due timers in firing order, at most the limit asked for, each now claimed.
    pub timers: Vec<DueTimer>,
    /// When to look again: the earliest `dueAt` still pending after `now`, or the lapse of
    /// another daemon's claim on a due timer if sooner. Looked up when the batch is not full
    /// (nothing more is due now), so that the caller need not ask again to learn it.
    pub next_due_at: Option<DateTime<Utc>>,
}

/// Who claims due timers, and for how long: a claim keeps other daemons (and a racing cancel)
/// off a timer while it is published; a daemon that dies holds its claims until they lapse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    /// The daemon's name. Stable across restarts, so a restarted daemon picks up its own
    /// claims at once instead of waiting for them to lapse.
    pub name: String,
    pub lease: Duration,
}

/// PostgreSQL connections a store holds; its actor runs one transaction at a time.
const POSTGRES_POOL: u32 = 2;

/// The service's database.
#[derive(Debug, Clone)]
pub struct Store {
    db: DatabaseConnection,
    /// SQLite only: the file and what is checked of it.
    file: Option<SqliteFile>,
}

#[derive(Debug, Clone)]
struct SqliteFile {
    path: PathBuf,
    /// The file opened; a commit counts only while the path still names it.
    identity: FileIdentity,
    /// The configured `synchronous` level: what commands and cancels commit at.
    synchronous: Synchronous,
}

impl SqliteFile {
    /// Whether the configured level waits for the disk at each commit, so that the connection
    /// rests at `NORMAL` (no fsync) and is raised to it only for durable work.
    fn raises(&self) -> bool {
        matches!(self.synchronous, Synchronous::Full | Synchronous::Extra)
    }
}

impl Store {
    /// Opens the existing database. The schema must already be migrated.
    pub async fn open(target: &DatabaseTarget) -> Result<Self, StoreError> {
        let db = connect(target, POSTGRES_POOL).await?;
        let file = match target {
            DatabaseTarget::Sqlite { path, settings } => Some(SqliteFile {
                identity: FileIdentity::of(path).map_err(|e| StoreError::FileMoved {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?,
                path: path.to_owned(),
                synchronous: settings.synchronous,
            }),
            DatabaseTarget::Postgres { .. } => None,
        };
        let store = Self { db, file };
        if store.file.as_ref().is_some_and(SqliteFile::raises) {
            store.set_synchronous(Synchronous::Normal).await?;
        }
        Ok(store)
    }

    /// Fails when the path no longer names the file this store writes to (removed, or replaced
    /// by another): what was just committed went into a file that is gone. PostgreSQL has no
    /// such file.
    fn check_file(&self) -> Result<(), StoreError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let moved = |reason: String| StoreError::FileMoved {
            path: file.path.clone(),
            reason,
        };
        match FileIdentity::of(&file.path) {
            Ok(identity) if identity == file.identity => Ok(()),
            Ok(_) => Err(moved("another file is at its path now".into())),
            Err(e) => Err(moved(e.to_string())),
        }
    }

    pub async fn close(self) -> Result<(), StoreError> {
        Ok(self.db.close().await?)
    }

    /// Applies a batch of accepted commands, each by the rules of CONTRACT.md §3 (see
    /// [`crate::domain::timer::apply_command`], which this SQL follows), in stream order per key.
    /// Returns the number of rows written.
    pub async fn apply(&self, commands: &[Command]) -> Result<u64, StoreError> {
        if commands.is_empty() {
            return Ok(0);
        }
        let rounds = rounds(commands.to_vec());
        self.durable(async {
            if self.file.is_some() && rounds.len() == 1 && rounds[0].len() <= ROWS_PER_STATEMENT {
                // One statement is a transaction of its own on SQLite: no BEGIN and COMMIT
                // round trips for the few commands of a commit at a steady rate.
                return Ok(apply_in(&self.db, rounds).await?);
            }
            let txn = self.db.begin().await?;
            let written = apply_in(&txn, rounds).await?;
            txn.commit().await?;
            Ok(written)
        })
        .await
    }

    /// The epoch of an incarnation of the command stream (see [`crate::domain::order`]): the
    /// one recorded for it, or, the first time it is met, the next one. An incarnation older
    /// than one already known for the same stream name was deleted since: its commands cannot
    /// be ordered after the newer one's, and are refused. One durable transaction.
    pub async fn command_epoch(
        &self,
        stream: &StreamIncarnation,
        now: DateTime<Utc>,
    ) -> Result<u32, StoreError> {
        use command_streams::{Column as C, Entity as Streams};
        let known = Streams::find_by_id((stream.name.clone(), stream.created_ns))
            .one(&self.db)
            .await?;
        if let Some(known) = known {
            return u32::try_from(known.epoch)
                .map_err(|e| StoreError::Unavailable(format!("epoch {}: {e}", known.epoch)));
        }
        let epoch: i64 = self
            .durable(async {
                let txn = self.db.begin().await?;
                let known = Streams::find_by_id((stream.name.clone(), stream.created_ns))
                    .one(&txn)
                    .await?;
                if let Some(known) = known {
                    txn.commit().await?;
                    return Ok(known.epoch);
                }
                let newest: Option<Option<i64>> = Streams::find()
                    .select_only()
                    .column_as(C::CreatedNs.max(), "newest")
                    .filter(C::StreamName.eq(stream.name.as_str()))
                    .into_tuple()
                    .one(&txn)
                    .await?;
                if newest.flatten().is_some_and(|newest| newest > stream.created_ns) {
                    txn.rollback().await?;
                    return Err(StoreError::StaleStream(stream.clone()));
                }
                let next: Option<Option<i64>> = Streams::find()
                    .select_only()
                    .column_as(C::Epoch.max(), "latest")
                    .into_tuple()
                    .one(&txn)
                    .await?;
                let epoch = next.flatten().map_or(0, |latest| latest + 1);
                Streams::insert(command_streams::ActiveModel {
                    stream_name: Set(stream.name.clone()),
                    created_ns: Set(stream.created_ns),
                    epoch: Set(epoch),
                    seen_at: Set(format_utc(now)),
                })
                .exec_without_returning(&txn)
                .await?;
                txn.commit().await?;
                tracing::info!(stream = %stream, epoch, "a new incarnation of the command stream: its commands order after every earlier one");
                Ok(epoch)
            })
            .await?;
        u32::try_from(epoch).map_err(|e| StoreError::Unavailable(format!("epoch {epoch}: {e}")))
    }

    /// Applies one `CancelTimer` already ordered in the command stream (`command.seq` is its
    /// sequence there) and says how it went, with the timer as it is afterwards. One
    /// transaction. The CommandHandler meets the same command later and changes nothing.
    pub async fn cancel(
        &self,
        command: &Command,
    ) -> Result<(CancelOutcome, Option<Timer>), StoreError> {
        let after = self
            .durable(async {
                let txn = self.db.begin().await?;
                // Locks the row on backends that can, so the outcome read is the cancel's own.
                find_one(&txn, &command.tenant_id, &command.service_call_id, true).await?;
                apply_in(&txn, rounds(vec![command.clone()])).await?;
                let after = find_one(&txn, &command.tenant_id, &command.service_call_id, false)
                    .await?
                    .map(from_model)
                    .transpose()?;
                txn.commit().await?;
                Ok(after)
            })
            .await?;
        Ok((CancelOutcome::of(after.as_ref(), command.seq), after))
    }

    /// Claims up to `limit` `Scheduled` timers with `due_at <= now` in firing order — starting
    /// after `after` when given (the last timer the caller has in flight) and skipping those
    /// another daemon holds a live claim on — and, when no more are due, finds the next `dueAt` to
    /// wake up for. The claim is what "picked for firing" means: committed, so a cancel arriving
    /// after it comes too late, and with several daemons no two publish the same timer.
    pub async fn claim_due(
        &self,
        now: DateTime<Utc>,
        after: Option<&DuePosition>,
        limit: usize,
        claimant: &Claimant,
    ) -> Result<DueBatch, StoreError> {
        let until = now + chrono::Duration::from_std(claimant.lease).unwrap_or_default();
        let mut picked = Query::select();
        picked
            .columns([Column::TenantId, Column::ServiceCallId])
            .from(Entity)
            .cond_where(due_condition(now, after, &claimant.name))
            .order_by(Column::DueAt, Order::Asc)
            .order_by(Column::TenantId, Order::Asc)
            .order_by(Column::ServiceCallId, Order::Asc)
            .limit(limit as u64)
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
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
        let claimed = self
            .relaxed(async {
                if self.file.is_some() {
                    // One statement is a transaction of its own on SQLite: no BEGIN and
                    // COMMIT round trips on the firing path.
                    return claim.exec_with_returning(&self.db).await;
                }
                let txn = self.begin_relaxed().await?;
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
            let next_due = self.next_due_after(now).await?;
            // One daemon per SQLite file: no other daemon's claim to wait for, and its own
            // claims from before a restart are its to resume (`claimed_by` is its name).
            let next_lapse = if self.file.is_some() {
                None
            } else {
                self.next_claim_lapse(now, &claimant.name).await?
            };
            next_due.into_iter().chain(next_lapse).min()
        } else {
            None
        };
        Ok(DueBatch {
            timers,
            next_due_at,
        })
    }

    /// When the earliest live claim of another daemon on a due timer lapses: if that daemon
    /// died, this one takes the timer over then, not at its next tick.
    async fn next_claim_lapse(
        &self,
        now: DateTime<Utc>,
        claimant: &str,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let now_text = format_utc(now);
        let earliest: Option<Option<String>> = Entity::find()
            .select_only()
            .column(Column::ClaimUntil)
            .filter(Expr::cust(PENDING))
            .filter(Column::DueAt.lte(now_text.clone()))
            .filter(Column::ClaimedBy.ne(claimant))
            .filter(Column::ClaimUntil.gte(now_text))
            .order_by_asc(Column::ClaimUntil)
            .limit(1)
            .into_tuple()
            .one(&self.db)
            .await?;
        parse_optional_time("claim_until", earliest.flatten())
    }

    /// Marks published batches `Reached`, each at its own `reached_at`, in one transaction:
    /// one statement per `reached_at` (the batches of one claim share it), so that many small
    /// batches cost no more than one large one. A row whose `due_at` changed since it was claimed (rescheduled
    /// while its event was in flight) is left `Scheduled`, so the new `dueAt` still fires.
    /// Returns the number of rows marked.
    pub async fn mark_reached(
        &self,
        batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
    ) -> Result<u64, StoreError> {
        if batches.iter().all(|(fired, _)| fired.is_empty()) {
            return Ok(0);
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
        // One statement is a transaction of its own on SQLite: no BEGIN and COMMIT round trips.
        let keys_per_statement = if self.file.is_some() {
            ROWS_PER_STATEMENT
        } else {
            POSTGRES_KEYS_PER_MARK
        };
        let one_statement = self.file.is_some()
            && by_instant.len() == 1
            && by_instant
                .values()
                .all(|fired| fired.len() <= keys_per_statement);
        self.relaxed(async {
            let txn = if one_statement {
                None
            } else {
                Some(self.begin_relaxed().await?)
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
                        None => mark.exec(&self.db).await?,
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

    /// Runs `work`, whose commits must be on disk before it returns (commands, cancels). On
    /// SQLite the connection rests at `synchronous = NORMAL` and is raised to the configured
    /// level for this work only: the writes whose loss to a power cut is harmless (claims,
    /// marks, retention deletes, the probe) then skip the fsync without a round trip of their
    /// own, and they are many more than the durable ones under load. Should lowering it again
    /// fail, the connection stays at the configured level: slower, never less safe.
    async fn durable<T>(
        &self,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let raise = self.file.as_ref().filter(|file| file.raises());
        if let Some(file) = raise {
            self.set_synchronous(file.synchronous).await?;
        }
        let result = work.await;
        if raise.is_some()
            && let Err(e) = self.set_synchronous(Synchronous::Normal).await
        {
            tracing::debug!(error = %e, "synchronous stays at the configured level");
        }
        let value = result?;
        self.check_file()?;
        Ok(value)
    }

    /// Runs `work`, whose transactions (begun with [`Self::begin_relaxed`]) commit without
    /// waiting for the disk: for writes whose loss to a power cut is harmless (claims, marks,
    /// retention deletes), kept off the fsync path. On SQLite that is the connection's resting
    /// level (see [`Self::durable`]); on PostgreSQL each transaction says so itself.
    async fn relaxed<T>(
        &self,
        work: impl Future<Output = Result<T, DbErr>>,
    ) -> Result<T, StoreError> {
        let value = work.await?;
        self.check_file()?;
        Ok(value)
    }

    /// A transaction for [`Self::relaxed`] work.
    async fn begin_relaxed(&self) -> Result<DatabaseTransaction, DbErr> {
        let txn = self.db.begin().await?;
        if self.file.is_none() {
            txn.execute_unprepared("SET LOCAL synchronous_commit = off")
                .await?;
        }
        Ok(txn)
    }

    async fn set_synchronous(&self, level: Synchronous) -> Result<(), StoreError> {
        let pragma = format!("PRAGMA synchronous = {}", level.as_str());
        self.db.execute_unprepared(&pragma).await?;
        Ok(())
    }

    /// The earliest `due_at` of any `Scheduled` timer due after `now`.
    async fn next_due_after(
        &self,
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
            .one(&self.db)
            .await?;
        parse_optional_time("due_at", earliest.flatten())
    }

    /// One timer of one tenant. Scoped by tenant: another tenant's timer with the same
    /// `serviceCallId` is never returned.
    pub async fn get(
        &self,
        tenant_id: &str,
        service_call_id: &str,
    ) -> Result<Option<Timer>, StoreError> {
        find_one(&self.db, tenant_id, service_call_id, false)
            .await?
            .map(from_model)
            .transpose()
    }

    /// One page of a tenant's timers in `(dueAt, serviceCallId)` order, tombstones first.
    ///
    /// Each part of the order that an index holds (one state, or tombstones, or one
    /// correlation id) is read with its own keyset query of `limit + 1` rows, and the parts
    /// are merged: every query is an index range, never a scan or a sort of the tenant.
    pub async fn list(
        &self,
        tenant_id: &str,
        filter: &ListFilter,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let mut rows = Vec::new();
        for query in list_queries(tenant_id, filter, limit) {
            for model in query.all(&self.db).await? {
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

    /// How many timers of a tenant are pending, how many of them are overdue, and the earliest
    /// pending `dueAt`. Counting walks the tenant's pending index entries: cheap for thousands,
    /// tens of milliseconds per million.
    pub async fn stats(
        &self,
        tenant_id: &str,
        now: DateTime<Utc>,
    ) -> Result<TenantStats, StoreError> {
        let pending = || {
            Entity::find()
                .filter(Column::TenantId.eq(tenant_id))
                .filter(Column::State.eq(TimerState::Scheduled.as_str()))
        };
        let count = |query: Select<Entity>| async move {
            let n: Option<i64> = query
                .select_only()
                .column_as(Expr::cust("COUNT(*)"), "n")
                .into_tuple()
                .one(&self.db)
                .await?;
            Ok::<u64, DbErr>(u64::try_from(n.unwrap_or(0)).unwrap_or(0))
        };
        let scheduled = count(pending()).await?;
        let overdue =
            count(pending().filter(Column::DueAt.lte(format_utc(now - OVERDUE_AFTER)))).await?;
        let next: Option<Option<String>> = pending()
            .select_only()
            .column(Column::DueAt)
            .order_by_asc(Column::DueAt)
            .limit(1)
            .into_tuple()
            .one(&self.db)
            .await?;
        Ok(TenantStats {
            scheduled,
            overdue,
            next_due_at: parse_optional_time("due_at", next.flatten())?,
        })
    }

    /// On the writer's connection, a passive checkpoint of what the Checkpointer left: only the
    /// frames committed since its last complete pass, so it is short, and it waits for nobody.
    /// With the WAL then fully copied, SQLite's next commit writes it again from its start;
    /// done from the Checkpointer's connection (a `RESTART`), the same step took the writer's
    /// lock and the writer slept in its busy handler for up to 300 ms. Nothing on PostgreSQL.
    pub async fn catch_up_wal(&self) -> Result<(), StoreError> {
        if self.file.is_some() {
            let done = checkpoint(&self.db).await?;
            tracing::debug!(
                actor = "persistence",
                wal_pages = done.wal_pages,
                checkpointed_pages = done.checkpointed_pages,
                "WAL caught up"
            );
        }
        Ok(())
    }

    /// Proves the database accepts this daemon's writes: the file is still the one opened, its
    /// filesystem has room, and a small write (`daemons.seen_at`) commits. The health probe.
    pub async fn probe(&self, daemon: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
        self.check_file()?;
        if let Some(file) = &self.file {
            let free =
                free_bytes(&file.path).map_err(|e| StoreError::Unavailable(e.to_string()))?;
            if free < MIN_FREE_BYTES {
                return Err(StoreError::Unavailable(format!(
                    "disk almost full: {} KiB free beside {}",
                    free / 1024,
                    file.path.display()
                )));
            }
        }
        let row = daemons::ActiveModel {
            name: Set(daemon.to_owned()),
            seen_at: Set(format_utc(now)),
        };
        daemons::Entity::insert(row)
            .on_conflict(
                OnConflict::column(daemons::Column::Name)
                    .update_column(daemons::Column::SeenAt)
                    .to_owned(),
            )
            .exec_without_returning(&self.db)
            .await?;
        self.check_file()
    }

    /// Deletes up to `limit` finished timers (`Reached` or `Cancelled`) that finished before
    /// `cutoff`, oldest first, in one short transaction; returns how many. Never a pending one.
    pub async fn delete_finished(
        &self,
        cutoff: DateTime<Utc>,
        limit: usize,
    ) -> Result<u64, StoreError> {
        let cutoff = format_utc(cutoff);
        // A lost delete costs nothing but doing it again: no fsync for it.
        self.relaxed(async {
            let txn = self.begin_relaxed().await?;
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
                    .and_where(finished_at.lt(cutoff.clone()))
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
            txn.commit().await?;
            Ok(deleted)
        })
        .await
    }

    /// Pending timers in all. Walks the pending index: 0.3 s for ten million here, so it runs on
    /// a connection of its own, never on the writer's.
    pub async fn count_pending(&self) -> Result<u64, StoreError> {
        let n: Option<i64> = Entity::find()
            .select_only()
            .column_as(Expr::cust("COUNT(*)"), "n")
            .filter(Expr::cust(PENDING))
            .into_tuple()
            .one(&self.db)
            .await?;
        Ok(u64::try_from(n.unwrap_or(0)).unwrap_or(0))
    }

    /// The plan for each query shape the service runs on large tables, one line per step: how
    /// an operator (and a test) checks that each is served by an index rather than a table
    /// scan or a sort.
    pub async fn explain_queries(&self) -> Result<Vec<(String, String)>, StoreError> {
        let backend = self.db.get_database_backend();
        let after = DuePosition {
            due_at: Utc::now(),
            tenant_id: String::new(),
            service_call_id: String::new(),
        };
        let mut due = Query::select();
        due.columns([Column::TenantId, Column::ServiceCallId])
            .from(Entity)
            .cond_where(due_condition(Utc::now(), Some(&after), "me"))
            .order_by(Column::DueAt, Order::Asc)
            .order_by(Column::TenantId, Order::Asc)
            .order_by(Column::ServiceCallId, Order::Asc)
            .limit(100);
        let mut shapes = vec![("claim due".to_owned(), backend.build(&due))];
        let cursor = ListCursor {
            due_at: Some(Utc::now()),
            service_call_id: "x".into(),
        };
        let filters = [
            ("list", ListFilter::default()),
            (
                "list by state",
                ListFilter {
                    state: Some(TimerState::Scheduled),
                    after: Some(cursor.clone()),
                    ..ListFilter::default()
                },
            ),
            (
                "list by due range",
                ListFilter {
                    due_from: Some(Utc::now()),
                    due_to: Some(Utc::now()),
                    ..ListFilter::default()
                },
            ),
            (
                "list by correlation id",
                ListFilter {
                    correlation_id: Some("c".into()),
                    after: Some(cursor),
                    ..ListFilter::default()
                },
            ),
        ];
        for (name, filter) in filters {
            for (i, query) in list_queries("acme", &filter, 100).into_iter().enumerate() {
                shapes.push((format!("{name} #{i}"), query.build(backend)));
            }
        }
        let mut plans = Vec::new();
        for (name, statement) in shapes {
            let values = statement.values.map(|v| v.0).unwrap_or_default();
            let lines: Vec<String> = if self.file.is_some() {
                // SQLite's `EXPLAIN QUERY PLAN` rows: id, parent, notused, detail.
                let explain = Statement::from_sql_and_values(
                    backend,
                    format!("EXPLAIN QUERY PLAN {}", statement.sql),
                    values,
                );
                self.db
                    .query_all_raw(explain)
                    .await?
                    .iter()
                    .map(|row| row.try_get_by_index::<String>(3))
                    .collect::<Result<_, _>>()?
            } else {
                // PostgreSQL prefers a sequential scan on a small table; with scans priced out,
                // the plan shows whether an index can serve the query at any size.
                let txn = self.db.begin().await?;
                txn.execute_unprepared("SET LOCAL enable_seqscan = off")
                    .await?;
                let explain = Statement::from_sql_and_values(
                    backend,
                    format!("EXPLAIN {}", statement.sql),
                    values,
                );
                let lines = txn
                    .query_all_raw(explain)
                    .await?
                    .iter()
                    .map(|row| row.try_get_by_index::<String>(0))
                    .collect::<Result<_, _>>()?;
                txn.rollback().await?;
                lines
            };
            plans.push((name, lines.join("\n")));
        }
        Ok(plans)
    }
}

/// A cancel meeting a timer claimed for firing, in the conflict clause of [`apply_in`].
const REFUSED_CANCEL: &str = "(excluded.state = 'Cancelled' \
     AND timer_schedules.state = 'Scheduled' AND timer_schedules.claimed_by IS NOT NULL)";

/// Applies commands in their rounds (see [`rounds`]: at most one command per key in a round,
/// rounds in stream order), one multi-row statement per round, inside a transaction or, when
/// that is one statement, on its own.
///
/// The conflict clause is the rules table of CONTRACT.md §3 in SQL, for a stored row `t` and an
/// incoming command `excluded`:
/// - nothing changes for a `Reached` row, or a command not newer than the last one applied;
/// - a cancel meeting a timer claimed for firing (lapsed or not: a claimed timer fires) is
///   refused, but its sequence is remembered, so an older command arriving later changes
///   nothing;
/// - otherwise the state is the command's, the sequence is remembered, a schedule brings its
///   `dueAt` and correlation id and releases any claim, a cancel keeps the timer's own `dueAt`
///   and correlation id and the time of the first cancel.
async fn apply_in(db: &impl ConnectionTrait, rounds: Vec<Vec<Command>>) -> Result<u64, DbErr> {
    let mut written = 0;
    for mut round in rounds {
        // In key order: daemons writing the same rows at once then lock them in the same order
        // and cannot deadlock (a round holds one command per key, so its order means nothing).
        round.sort_by(|a, b| {
            (&a.tenant_id, &a.service_call_id).cmp(&(&b.tenant_id, &b.service_call_id))
        });
        for chunk in round.chunks(ROWS_PER_STATEMENT) {
            let on_conflict = OnConflict::columns([Column::TenantId, Column::ServiceCallId])
                .value(
                    Column::State,
                    Expr::cust(format!(
                        "CASE WHEN {REFUSED_CANCEL} THEN timer_schedules.state ELSE excluded.state END"
                    )),
                )
                .value(
                    Column::DueAt,
                    Expr::cust("COALESCE(excluded.due_at, timer_schedules.due_at)"),
                )
                .value(
                    Column::CorrelationId,
                    Expr::cust(
                        "CASE WHEN excluded.state = 'Scheduled' THEN excluded.correlation_id \
                         ELSE timer_schedules.correlation_id END",
                    ),
                )
                .value(
                    Column::CancelledAt,
                    Expr::cust(format!(
                        "CASE WHEN excluded.state = 'Cancelled' AND NOT {REFUSED_CANCEL} \
                         THEN COALESCE(timer_schedules.cancelled_at, excluded.cancelled_at) END"
                    )),
                )
                .value(
                    Column::CancelledSeq,
                    Expr::cust(format!(
                        "CASE WHEN excluded.state = 'Cancelled' AND NOT {REFUSED_CANCEL} \
                         THEN COALESCE(timer_schedules.cancelled_seq, excluded.cancelled_seq) END"
                    )),
                )
                .value(
                    Column::ClaimedBy,
                    Expr::cust(
                        "CASE WHEN excluded.state = 'Cancelled' THEN timer_schedules.claimed_by END",
                    ),
                )
                .value(
                    Column::ClaimUntil,
                    Expr::cust(
                        "CASE WHEN excluded.state = 'Cancelled' THEN timer_schedules.claim_until END",
                    ),
                )
                .value(Column::CommandSeq, Expr::cust("excluded.command_seq"))
                .action_and_where(Expr::cust(
                    "timer_schedules.state <> 'Reached' \
                     AND timer_schedules.command_seq < excluded.command_seq",
                ))
                .to_owned();
            written += Entity::insert_many(chunk.iter().map(to_active_model))
                .on_conflict(on_conflict)
                .exec_without_returning(db)
                .await?;
        }
    }
    Ok(written)
}

async fn find_one(
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

/// Due, pending, after the caller's cursor, and not held by a live claim of another daemon.
fn due_condition(
    now: DateTime<Utc>,
    after: Option<&DuePosition>,
    claimant: &str,
) -> sea_orm::Condition {
    let now_text = format_utc(now);
    let mut condition = sea_orm::Condition::all()
        .add(Expr::cust(PENDING))
        .add(Column::DueAt.lte(now_text.clone()))
        .add(
            sea_orm::Condition::any()
                .add(Column::ClaimUntil.is_null())
                .add(Column::ClaimedBy.eq(claimant))
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

/// The keyset queries one `list` page merges (see [`Store::list`]).
fn list_queries(tenant_id: &str, filter: &ListFilter, limit: usize) -> Vec<Select<Entity>> {
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
            Some(state) => query.filter(Column::State.eq(state.as_str())),
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

/// `list` order: tombstones first (by serviceCallId), then by `(dueAt, serviceCallId)`.
fn list_order(timer: &Timer) -> (bool, Option<DateTime<Utc>>, &str) {
    (
        timer.due_at.is_some(),
        timer.due_at,
        timer.service_call_id.as_str(),
    )
}

fn to_active_model(command: &Command) -> entity::ActiveModel {
    let row = command.new_row();
    entity::ActiveModel {
        tenant_id: Set(row.tenant_id),
        service_call_id: Set(row.service_call_id),
        correlation_id: Set(row.correlation_id),
        due_at: Set(match command.action {
            Action::Schedule { due_at } => Some(format_utc(due_at)),
            Action::Cancel => None,
        }),
        registered_at: Set(format_utc(row.registered_at)),
        reached_at: Set(None),
        cancelled_at: Set(row.cancelled_at.map(format_utc)),
        state: Set(row.state.as_str().to_owned()),
        command_seq: Set(command.seq as i64),
        cancelled_seq: Set(row.cancelled_seq.map(|seq| seq as i64)),
        claimed_by: Set(None),
        claim_until: Set(None),
    }
}

fn parse_time(field: &str, text: &str) -> Result<DateTime<Utc>, StoreError> {
    parse_stored(text).map_err(|e| StoreError::CorruptRow {
        tenant_id: "?".into(),
        service_call_id: "?".into(),
        reason: format!("{field} {text:?}: {e}"),
    })
}

/// A time column of a one-row query that may have found nothing.
fn parse_optional_time(
    field: &str,
    text: Option<String>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    text.map(|text| parse_time(field, &text)).transpose()
}

fn from_model(model: entity::Model) -> Result<Timer, StoreError> {
    let corrupt = |reason: String| StoreError::CorruptRow {
        tenant_id: model.tenant_id.clone(),
        service_call_id: model.service_call_id.clone(),
        reason,
    };
    let time = |field: &str, text: &str| {
        parse_stored(text).map_err(|e| corrupt(format!("{field} {text:?}: {e}")))
    };
    let optional =
        |field: &str, text: &Option<String>| text.as_deref().map(|t| time(field, t)).transpose();
    Ok(Timer {
        due_at: optional("due_at", &model.due_at)?,
        registered_at: time("registered_at", &model.registered_at)?,
        reached_at: optional("reached_at", &model.reached_at)?,
        cancelled_at: optional("cancelled_at", &model.cancelled_at)?,
        state: model.state.parse().map_err(corrupt)?,
        command_seq: u64::try_from(model.command_seq).map_err(|e| corrupt(e.to_string()))?,
        cancelled_seq: model
            .cancelled_seq
            .map(|seq| u64::try_from(seq).map_err(|e| corrupt(e.to_string())))
            .transpose()?,
        tenant_id: model.tenant_id,
        service_call_id: model.service_call_id,
        correlation_id: model.correlation_id,
    })
}

fn due_from_model(model: entity::Model) -> Result<DueTimer, StoreError> {
    let due_at = match model.due_at.as_deref() {
        Some(text) => parse_stored(text).map_err(|e| e.to_string()),
        None => Err("a Scheduled row without due_at".to_owned()),
    }
    .map_err(|reason| StoreError::CorruptRow {
        tenant_id: model.tenant_id.clone(),
        service_call_id: model.service_call_id.clone(),
        reason,
    })?;
    Ok(DueTimer {
        tenant_id: model.tenant_id,
        service_call_id: model.service_call_id,
        correlation_id: model.correlation_id,
        due_at,
    })
}
