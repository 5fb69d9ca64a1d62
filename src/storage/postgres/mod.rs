//! The PostgreSQL [`Backend`]: several daemons share the table, and their clocks may disagree.
//!
//! - the clock: every "is it due", "has this claim lapsed" and every instant the store writes
//!   (`claim_until`, `reached_at`, `seen_at`, the retention cutoff) is the server's
//!   `statement_timestamp()`, never the calling daemon's (docs/CONTRACT.md §1 and §8); only
//!   `Store::with_callers_clock` (tests of the rules) hands the caller's `now` to the SQL.
//! - `firing`: the claim in `dueAt` order and the mark, set-based, `FOR UPDATE SKIP LOCKED`.
//! - `fair`: the fair claim's walk and shares, claimed as `firing` claims.
//! - `names`: taking a daemon's name, watching a recent holder's row.
//! - each commit says itself whether it waits for the disk; there is no file of ours to watch.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, SimpleExpr};
use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr};

use super::backend::{Backend, ClaimDue, ClaimShares, Now};
use super::{DueBatch, NameHold, Store, StoreError};
use crate::domain::DueTimer;

/// An instant of the server's clock (SQL) as the service's fixed-width text
/// (`YYYY-MM-DDTHH:MM:SS.sssZ`), so it compares with the stored instants. `MS` truncates to the
/// millisecond, so a timer due at `.124` is due once the clock reads `.124000` or later: never
/// early. The one place the format is written in SQL.
macro_rules! server_text {
    ($instant:expr) => {
        concat!(
            "to_char((",
            $instant,
            ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        )
    };
}

mod fair;
pub(super) mod firing;
mod names;

/// The server's clock now: `seen_at` of the daemons' rows.
const SERVER_NOW: &str = server_text!("statement_timestamp()");

/// The server's clock `$1` milliseconds ago: the retention cutoff (by the clock that stamped
/// `reached_at`), and how recently a daemon's row must have been written for its holder to be
/// possibly alive.
const SERVER_TIME_BEFORE: &str =
    server_text!("statement_timestamp() - $1 * interval '1 millisecond'");

/// PostgreSQL: the server's durability and files are its own business.
#[derive(Debug)]
pub(crate) struct Postgres;

impl Postgres {
    /// Connections a store opened by `Store::open` holds (a command of the CLI, a test); a
    /// daemon's lanes open one each (`Store::open_connection`).
    pub(crate) const POOL: u32 = 2;
}

/// The caller's instant where it decides (tests of the rules), `None` where the server's clock
/// does: bound as `$n::timestamptz` in `COALESCE($n, statement_timestamp())`.
fn callers_now(now: Now) -> Option<DateTime<Utc>> {
    now.callers_clock.then_some(now.at)
}

#[async_trait::async_trait]
impl Backend for Postgres {
    /// Every commit waits for the disk unless its transaction says otherwise.
    async fn raise_durability(&self, _db: &DatabaseConnection) -> Result<(), StoreError> {
        Ok(())
    }

    async fn lower_durability(&self, _db: &DatabaseConnection) {}

    async fn relax(&self, txn: &DatabaseTransaction) -> Result<(), DbErr> {
        txn.execute_unprepared("SET LOCAL synchronous_commit = off")
            .await?;
        Ok(())
    }

    /// After five executions a prepared statement may switch to a plan for any values. For a
    /// cancel's update by 500 keys on a table not yet analyzed, that plan walked the tenant's
    /// whole range of pending timers and compared each with the 500 keys: a step took 470 ms
    /// instead of 15 on 40,000 timers, longer the more the tenant has.
    async fn plan_for_values(&self, txn: &DatabaseTransaction) -> Result<(), DbErr> {
        txn.execute_unprepared("SET LOCAL plan_cache_mode = force_custom_plan")
            .await?;
        Ok(())
    }

    fn statement_is_transaction(&self) -> bool {
        false
    }

    fn check_written(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn check_room(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn catch_up_wal(&self, _db: &DatabaseConnection) -> Result<(), StoreError> {
        Ok(())
    }

    async fn claim_due(&self, store: &Store, claim: ClaimDue<'_>) -> Result<DueBatch, StoreError> {
        firing::claim_due(store, claim).await
    }

    async fn mark_reached(
        &self,
        store: &Store,
        batches: &[(Arc<[DueTimer]>, DateTime<Utc>)],
    ) -> Result<u64, StoreError> {
        firing::mark_reached(store, batches).await
    }

    async fn walk_tenants(
        &self,
        store: &Store,
        now: Now,
        resume_after: Option<&str>,
    ) -> Result<Vec<(String, bool)>, StoreError> {
        fair::walk(store, callers_now(now), resume_after).await
    }

    async fn claim_shares(
        &self,
        store: &Store,
        claim: ClaimShares<'_>,
    ) -> Result<DueBatch, StoreError> {
        fair::claim(store, claim).await
    }

    /// The server's clock: daemons sharing the table may disagree on the time.
    fn clock_now(&self, _now: DateTime<Utc>) -> SimpleExpr {
        Expr::cust(SERVER_NOW)
    }

    fn quota_clock_ms(&self, now: Now) -> SimpleExpr {
        if now.callers_clock {
            return Expr::cust(now.at.timestamp_millis().to_string());
        }
        Expr::cust("(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint")
    }

    /// By the server's clock, which stamped `reached_at`.
    fn retention_cutoff(&self, now: Now, keep: Duration) -> Option<SimpleExpr> {
        if now.callers_clock {
            return now.before(keep);
        }
        let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        Some(Expr::cust_with_values(SERVER_TIME_BEFORE, [keep_ms]))
    }

    async fn take_name(
        &self,
        store: &Store,
        name: &str,
        watch: Duration,
    ) -> Result<NameHold, StoreError> {
        names::take_name(store, name, watch).await
    }

    /// The server's `statement_timeout` of the reader's session: each statement of the reads
    /// that follow is cancelled past `limit`; `RESET` gives back the session's own.
    async fn limit_reads(
        &self,
        db: &DatabaseConnection,
        limit: Option<Duration>,
    ) -> Result<(), StoreError> {
        let statement = match limit {
            Some(limit) => format!("SET statement_timeout = {}", limit.as_millis().max(1)),
            None => "RESET statement_timeout".to_owned(),
        };
        db.execute_unprepared(&statement).await?;
        Ok(())
    }

    /// SQLSTATE 57014, `query_canceled`: the statement ran past the limit.
    fn stopped_for_time(&self, error: &StoreError) -> bool {
        error.database_code().as_deref() == Some("57014")
    }
}
