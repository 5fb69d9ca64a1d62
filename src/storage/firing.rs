//! Firing (docs/CONTRACT.md §5): claiming the due timers for this daemon, marking the
//! published ones `Reached`, and finding when to look again. The statements are the backend's
//! (`sqlite/firing.rs`, `postgres/firing.rs`), each by the clock that decides what is due
//! there; what is shared lives here:
//!
//! - the store's firing methods: the claims (in `dueAt` order, and fair ones, `fair`) and
//!   the mark, handed to the backend with the store's clock;
//! - [`due_query`]: the keys a claim in firing order picks, as SeaORM builds them: the
//!   pending index's own order (`dueAt`, tenant, service call), skipping live claims of other
//!   daemons. SQLite's claim runs it; a test explains it.
//! - [`with_literal_limit`]: a query's `LIMIT` written into its text, not bound.
//!
//! These writes commit without waiting for the disk: losing one to a power cut only means a
//! timer is claimed or published again, which the contract allows.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, Query, SelectStatement};
use sea_orm::{ColumnTrait, DbBackend, Order, Statement};

use super::backend::ClaimDue;
use super::entity::{Column, Entity};
use super::{Claimant, DueBatch, PENDING, Store, StoreError, fair, probe};
use crate::domain::timestamp::format_utc;
use crate::domain::{DuePosition, DueTimer};

impl Store {
    /// Claims up to `limit` `Scheduled` timers with `due_at <= now` in firing order (`now` is
    /// the caller's clock on SQLite; on PostgreSQL, shared by daemons whose clocks may
    /// disagree, it is the database server's, see `storage/postgres/`) — starting
    /// after `after` when given (the last timer the caller has in flight) and skipping those
    /// another daemon holds a live claim on — and, when no more are due, finds the next `dueAt` to
    /// wake up for. The claim is what "picked for firing" means: committed, so a cancel arriving
    /// after it comes too late, and with several daemons no two publish the same timer. Refused
    /// while another daemon holds the claimant's name (see [`Self::probe`]).
    pub async fn claim_due(
        &self,
        now: DateTime<Utc>,
        after: Option<&DuePosition>,
        limit: usize,
        claimant: &Claimant,
    ) -> Result<DueBatch, StoreError> {
        self.claim_due_fenced(now, after, limit, None, claimant)
            .await
    }

    /// [`Self::claim_due`] in the middle of a run of claims: the claimant's own claims are
    /// taken again only if their lease ends before `fence` (made before the run began: its
    /// publish failed, or an earlier incarnation of the daemon made them); those made since
    /// are in flight and stay with it. `None`: all of them may be taken again (nothing of this
    /// claimant's is in flight).
    pub async fn claim_due_fenced(
        &self,
        now: DateTime<Utc>,
        after: Option<&DuePosition>,
        limit: usize,
        fence: Option<DateTime<Utc>>,
        claimant: &Claimant,
    ) -> Result<DueBatch, StoreError> {
        probe::check_name_held(&claimant.name)?;
        let claim = ClaimDue {
            now: self.now(now),
            after,
            limit,
            fence,
            claimant,
        };
        self.backend.claim_due(self, claim).await
    }

    /// Claims, for firing, up to an equal share of `limit` of the due timers of each tenant
    /// that has some due at `now`, but for those in `skip` (whose timers this daemon already
    /// holds), each tenant's in `dueAt` order; going on after `resume_after` (see
    /// [`fair::FairBatch`]). `fence` as for [`Self::claim_due_fenced`]: fair claims are made in
    /// the middle of a run. See `storage::fair`.
    pub async fn claim_fair(
        &self,
        now: DateTime<Utc>,
        skip: &std::collections::BTreeSet<String>,
        resume_after: Option<&str>,
        limit: usize,
        fence: DateTime<Utc>,
        claimant: &Claimant,
    ) -> Result<fair::FairBatch, StoreError> {
        probe::check_name_held(&claimant.name)?;
        fair::claim_fair(self, now, skip, resume_after, limit, fence, claimant).await
    }

    /// Marks published batches `Reached`, each at its own `reached_at` (the instant its claim
    /// was decided, by the store's clock: see [`DueBatch::server_now`]), in one transaction. A
    /// row whose `due_at` changed since it was claimed (rescheduled while its event was in
    /// flight) is left `Scheduled`, so the new `dueAt` still fires. Returns the number of rows
    /// marked.
    pub async fn mark_reached(
        &self,
        batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
    ) -> Result<u64, StoreError> {
        if batches.iter().all(|(fired, _)| fired.is_empty()) {
            return Ok(0);
        }
        self.backend.mark_reached(self, batches).await
    }
}

/// The keys of up to `limit` timers `claimant` may fire at `now`, in firing order, after
/// `after` when given, for `backend`. [`Store::claim_due`] claims them; a test explains it.
pub fn due_query(
    backend: DbBackend,
    now: DateTime<Utc>,
    after: Option<&DuePosition>,
    claimant: &str,
    limit: usize,
) -> Statement {
    due_query_fenced(backend, now, after, claimant, None, limit)
}

/// [`due_query`], taking again only those of `claimant`'s own claims whose lease ends before
/// `fence` when one is given (see [`Store::claim_due_fenced`]).
pub(super) fn due_query_fenced(
    backend: DbBackend,
    now: DateTime<Utc>,
    after: Option<&DuePosition>,
    claimant: &str,
    fence: Option<DateTime<Utc>>,
    limit: usize,
) -> Statement {
    let mut due = Query::select();
    due.columns([Column::TenantId, Column::ServiceCallId])
        .from(Entity)
        .cond_where(due_condition(now, after, claimant, fence))
        .order_by(Column::DueAt, Order::Asc)
        .order_by(Column::TenantId, Order::Asc)
        .order_by(Column::ServiceCallId, Order::Asc);
    with_literal_limit(backend, &due, limit)
}

/// `query` built for `backend`, with `LIMIT limit` written into its text instead of bound.
/// SQLite reads a bound `LIMIT` while it prepares the statement, and so prepares it again
/// whenever that parameter is bound anew, which sqlx does at every execution: each claim was
/// parsed and planned twice, about 6% of the daemon's CPU at a steady 4,000 timers/s
/// (BENCHMARKS.md). The text stays the same for the same limit, so the prepared statement is
/// kept.
pub(crate) fn with_literal_limit(
    backend: DbBackend,
    query: &SelectStatement,
    limit: usize,
) -> Statement {
    let built = backend.build(query);
    Statement {
        sql: format!("{} LIMIT {limit}", built.sql),
        ..built
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claims_limit_is_in_its_text_not_among_its_values() {
        for backend in [DbBackend::Sqlite, DbBackend::Postgres] {
            let due = due_query(backend, Utc::now(), None, "me", 2_000);
            assert!(due.sql.ends_with(" LIMIT 2000"), "{}", due.sql);
            let values = due.values.map(|v| v.0).unwrap_or_default();
            assert!(
                !values.contains(&sea_orm::Value::BigUnsigned(Some(2_000))),
                "a bound limit makes SQLite prepare the claim again at each run: {values:?}"
            );
        }
    }
}
