//! Taking a daemon's name on PostgreSQL, where daemons share the `daemons` table: a row
//! another instance wrote within the watch (by the server's clock) is watched for up to the
//! watch. Written again, its holder lives and the name stays its; not written, its holder is
//! dead and the name is taken. Every step is conditional on the row as it was read, so two
//! daemons taking one name at once cannot both win.

use std::time::Duration;

use chrono::Utc;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};

use super::{SERVER_NOW, SERVER_TIME_BEFORE};
use crate::storage::probe::{holder, insert_if_absent};
use crate::storage::{NameHold, Store, StoreError, daemons};

/// How often a daemon taking a name held by another instance reads its row again.
const WATCH_STEP: Duration = Duration::from_millis(250);

/// See `Backend::take_name`.
pub(super) async fn take_name(
    store: &Store,
    name: &str,
    watch: Duration,
) -> Result<NameHold, StoreError> {
    let taken = NameHold::Taken {
        waited: Duration::ZERO,
    };
    // A few rounds: each ends when the row changed under this one's feet.
    for _ in 0..3 {
        let Some(row) = read(store, name, watch).await? else {
            if insert_if_absent(store, name, Utc::now()).await? {
                return Ok(taken);
            }
            continue;
        };
        if row.instance.as_deref() == Some(daemons::instance()) || !row.recent {
            if replace(store, name, &row).await? {
                return Ok(taken);
            }
            continue;
        }
        // Held by another instance that wrote recently: alive if its probe writes again.
        let started = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(WATCH_STEP).await;
            match read(store, name, watch).await? {
                None => break,
                Some(now) if now.instance != row.instance || now.seen_at != row.seen_at => {
                    return Ok(NameHold::Held {
                        holder: now.instance.unwrap_or_else(|| "unrecorded".into()),
                    });
                }
                Some(_) if started.elapsed() >= watch => {
                    if replace(store, name, &row).await? {
                        return Ok(NameHold::Taken {
                            waited: started.elapsed(),
                        });
                    }
                    break;
                }
                Some(_) => {}
            }
        }
    }
    Ok(NameHold::Held {
        holder: holder(store, name).await?,
    })
}

/// A name's row as a daemon taking it sees it.
struct Row {
    instance: Option<String>,
    seen_at: String,
    /// Written within the watch by the server's clock: its holder may be alive.
    recent: bool,
}

/// The row of `name`, if any.
async fn read(store: &Store, name: &str, watch: Duration) -> Result<Option<Row>, StoreError> {
    let watch_ms = i64::try_from(watch.as_millis()).unwrap_or(i64::MAX);
    let recent = Expr::col(daemons::Column::SeenAt)
        .gte(Expr::cust_with_values(SERVER_TIME_BEFORE, [watch_ms]));
    let row: Option<(Option<String>, String, bool)> = daemons::Entity::find()
        .select_only()
        .column(daemons::Column::Instance)
        .column(daemons::Column::SeenAt)
        .column_as(recent, "recent")
        .filter(daemons::Column::Name.eq(name))
        .into_tuple()
        .one(&store.db)
        .await?;
    Ok(row.map(|(instance, seen_at, recent)| Row {
        instance,
        seen_at,
        recent,
    }))
}

/// Takes the name from the holder `row` names, unless the row changed since it was read.
async fn replace(store: &Store, name: &str, row: &Row) -> Result<bool, StoreError> {
    let holder = match &row.instance {
        Some(instance) => daemons::Column::Instance.eq(instance.as_str()),
        None => daemons::Column::Instance.is_null(),
    };
    let replaced = daemons::Entity::update_many()
        .col_expr(
            daemons::Column::Instance,
            Expr::value(daemons::instance().to_owned()),
        )
        .col_expr(daemons::Column::SeenAt, Expr::cust(SERVER_NOW))
        .filter(daemons::Column::Name.eq(name))
        .filter(daemons::Column::SeenAt.eq(row.seen_at.as_str()))
        .filter(holder)
        .exec(&store.db)
        .await?
        .rows_affected;
    Ok(replaced == 1)
}
