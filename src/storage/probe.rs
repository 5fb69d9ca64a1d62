//! What the daemon learns of its database's health: the probe (a small write that must
//! commit, on storage that must still be the one opened and have room) and the count of
//! pending timers.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ActiveValue::Set, EntityTrait, QueryFilter, QuerySelect};

use super::entity::Entity;
use super::{PENDING, Store, StoreError, daemons};
use crate::domain::timestamp::format_utc;

/// Below this much free space the database counts as failing: a write may still fit in the
/// WAL's reused pages, but the next batch of timers will not (README, "Storage faults").
pub const MIN_FREE_BYTES: u64 = 16 * 1024 * 1024;

/// See [`Store::probe`].
pub(super) async fn probe(
    store: &Store,
    daemon: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    store.backend.check_written()?;
    store.backend.check_room()?;
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
        .exec_without_returning(&store.db)
        .await?;
    store.backend.check_written()
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
