//! What the daemon learns of its database's health: the probe (a small write that must
//! commit, on storage that must still be the one opened and have room) and the count of
//! pending timers. Also the daemon's hold on its name: the probe's row says which process
//! holds it (see [`daemons::instance`]). Taking a name is the backend's (at once on SQLite,
//! after watching a recent holder on PostgreSQL); `seen_at` is written by the store's clock.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, OnConflict, Query};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, TransactionTrait,
};

use super::entity::{Column, Entity};
use super::{PENDING, Store, StoreError, daemons};
use crate::domain::timestamp::format_utc;

/// Below this much free space the database counts as failing: a write may still fit in the
/// WAL's reused pages, but the next batch of timers will not (README, "Storage faults").
pub const MIN_FREE_BYTES: u64 = 16 * 1024 * 1024;

/// How a daemon came to hold its name (see [`Store::take_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameHold {
    /// Taken, after watching the row of a previous holder for `waited` (zero when the name was
    /// free, this process's, or its holder long silent).
    Taken { waited: Duration },
    /// A live daemon holds it: its probe kept writing the row.
    Held { holder: String },
}

/// Names whose row another instance holds, as this process's probe last found, with that
/// instance: this process claims no timer under them meanwhile, since the other daemon takes
/// the timers claimed under its name for its own.
static LOST: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// Fails when this process's probe found `name` held by another instance (see [`LOST`]).
pub(super) fn check_name_held(name: &str) -> Result<(), StoreError> {
    let lost = LOST.lock().unwrap_or_else(|e| e.into_inner());
    match lost.get(name) {
        Some(holder) => Err(StoreError::NameTaken {
            name: name.to_owned(),
            holder: holder.clone(),
        }),
        None => Ok(()),
    }
}

/// See [`Store::probe`]. Writes the row only while this process holds the name: if another
/// has taken it, two daemons run under one name, and the probe fails (readiness goes red) as
/// do this daemon's claims until the name is its own again.
pub(super) async fn probe(
    store: &Store,
    daemon: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    store.backend.check_written()?;
    store.backend.check_room()?;
    let mine = daemons::instance();
    let written = daemons::Entity::update_many()
        .col_expr(daemons::Column::SeenAt, store.backend.clock_now(now))
        .filter(daemons::Column::Name.eq(daemon))
        .filter(daemons::Column::Instance.eq(mine))
        .exec(&store.db)
        .await?
        .rows_affected;
    // No row of this process: the name is new to the database (or its row was deleted by
    // hand), unless another process holds it now.
    if written == 0 && !insert_if_absent(store, daemon, now).await? {
        let holder = holder(store, daemon).await?;
        tracing::error!(name = daemon, holder = %holder, instance = mine,
            "another daemon has taken this daemon's name: both treat the timers claimed under \
             it as their own; stop one of them (this one is not ready)");
        LOST.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(daemon.to_owned(), holder.clone());
        return Err(StoreError::NameTaken {
            name: daemon.to_owned(),
            holder,
        });
    }
    LOST.lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(daemon);
    store.backend.check_written()
}

/// See [`Store::take_name`]: the backend's way.
pub(super) async fn take_name(
    store: &Store,
    name: &str,
    watch: Duration,
) -> Result<NameHold, StoreError> {
    store.backend.take_name(store, name, watch).await
}

/// How far past the daemon's clock a claim it gives up may be due. Claims are made of due
/// timers only, by the server's clock where daemons share the database: the bound keeps the
/// statement on the due end of the pending index, and covers any clock difference worth the
/// name. A claim beyond it is not given up; it lapses with its lease, as after a crash.
const RELEASE_HORIZON: chrono::Duration = chrono::Duration::hours(1);

/// See [`Store::release_name`]. The name's row and the claims in one transaction: a failure
/// leaves both held, and the claims are cleared only when the row was this process's (a name
/// another daemon has taken is its claims too).
pub(super) async fn release_name(
    store: &Store,
    name: &str,
    now: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let txn = store.db.begin().await?;
    let held = daemons::Entity::delete_many()
        .filter(daemons::Column::Name.eq(name))
        .filter(daemons::Column::Instance.eq(daemons::instance()))
        .exec(&txn)
        .await?
        .rows_affected;
    let released = if held == 0 {
        0
    } else {
        Entity::update_many()
            .col_expr(Column::ClaimedBy, Expr::value(Option::<String>::None))
            .col_expr(Column::ClaimUntil, Expr::value(Option::<String>::None))
            .filter(Expr::cust(PENDING))
            .filter(Column::ClaimedBy.eq(name))
            .filter(Column::DueAt.lte(format_utc(now + RELEASE_HORIZON)))
            .exec(&txn)
            .await?
            .rows_affected
    };
    txn.commit().await?;
    Ok(released)
}

/// Records the name as this process's if no row holds it; whether it did.
pub(super) async fn insert_if_absent(
    store: &Store,
    name: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let mut insert = Query::insert();
    insert
        .into_table(daemons::Entity)
        .columns([
            daemons::Column::Name,
            daemons::Column::Instance,
            daemons::Column::SeenAt,
        ])
        .values_panic([
            Expr::value(name.to_owned()),
            Expr::value(daemons::instance().to_owned()),
            store.backend.clock_now(now),
        ])
        .on_conflict(
            OnConflict::column(daemons::Column::Name)
                .do_nothing()
                .to_owned(),
        );
    let inserted = store.db.execute(&insert).await?.rows_affected();
    Ok(inserted == 1)
}

/// The instance holding `name`, for messages.
pub(super) async fn holder(store: &Store, name: &str) -> Result<String, StoreError> {
    let instance: Option<Option<String>> = daemons::Entity::find()
        .select_only()
        .column(daemons::Column::Instance)
        .filter(daemons::Column::Name.eq(name))
        .into_tuple()
        .one(&store.db)
        .await?;
    Ok(instance
        .flatten()
        .unwrap_or_else(|| "unrecorded".to_owned()))
}

/// See [`Store::count_pending`].
pub(super) async fn count_pending(store: &Store) -> Result<u64, StoreError> {
    let n: Option<i64> = Entity::find()
        .select_only()
        .column_as(Expr::cust("COUNT(*)"), "n")
        .filter(Expr::cust(PENDING))
        .into_tuple()
        .one(&store.db)
        .await?;
    Ok(u64::try_from(n.unwrap_or(0)).unwrap_or(0))
}
