//! Stored timers read and written straight in the database, beside the daemon.

use std::time::Duration;

use chrono::{DateTime, Utc};
use timer_service::storage::db::DatabaseTarget;

use super::eventually;

/// Waits until the stored timer `tenant`/`id` is in `state` (its event can reach a subscriber
/// a moment before the row is marked), and returns it.
pub async fn await_state(
    persistence: &timer_service::actors::PersistenceClient,
    tenant: &str,
    id: &str,
    state: timer_service::domain::TimerState,
) -> timer_service::domain::Timer {
    eventually(
        Duration::from_secs(10),
        &format!("{tenant}/{id} {state}"),
        || async {
            persistence
                .get(tenant, id)
                .await
                .ok()
                .flatten()
                .filter(|t| t.state == state)
        },
    )
    .await
}

/// The claimant a test's own Persistence or Store uses (the name a test daemon gets too).
pub fn claimant() -> timer_service::storage::Claimant {
    timer_service::storage::Claimant {
        name: "test".into(),
        lease: Duration::from_secs(30),
    }
}

/// An accepted ScheduleTimer for `tenant`/`id` due at `due_at`, with stream sequence `seq`.
pub fn schedule_at(
    tenant: &str,
    id: &str,
    seq: u64,
    due_at: DateTime<Utc>,
) -> timer_service::domain::Command {
    timer_service::domain::Command {
        tenant_id: tenant.into(),
        service_call_id: id.into(),
        correlation_id: format!("corr-{seq}"),
        action: timer_service::domain::Action::Schedule {
            due_at,
            data: None,
            expires_at: None,
        },
        seq,
        received_at: due_at,
        trace: None,
        item: None,
    }
}

/// An accepted CancelTimer for `tenant`/`id`, with stream sequence `seq`, received at `at`.
pub fn cancel_at(
    tenant: &str,
    id: &str,
    seq: u64,
    at: DateTime<Utc>,
) -> timer_service::domain::Command {
    timer_service::domain::Command {
        action: timer_service::domain::Action::Cancel,
        received_at: at,
        ..schedule_at(tenant, id, seq, at)
    }
}

/// The rows `sql` selects, each turned into a `T` by `map`, read on a connection of the test's
/// own.
pub async fn query_rows<T>(
    database: &DatabaseTarget,
    sql: &str,
    map: impl Fn(&sea_orm::QueryResult) -> T,
) -> Vec<T> {
    use sea_orm::{ConnectionTrait, Statement};
    let db = timer_service::storage::db::connect(database, 1)
        .await
        .expect("open the database");
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            sql.to_owned(),
        ))
        .await
        .expect("read the rows");
    let out = rows.iter().map(map).collect();
    db.close().await.expect("close");
    out
}

/// Rows of the database by state, read on a connection of the test's own.
pub async fn rows_by_state(database: &DatabaseTarget) -> std::collections::BTreeMap<String, i64> {
    query_rows(
        database,
        "SELECT state, COUNT(*) FROM timer_schedules GROUP BY state",
        |row| {
            (
                row.try_get_by_index::<String>(0).expect("state"),
                row.try_get_by_index::<i64>(1).expect("count"),
            )
        },
    )
    .await
    .into_iter()
    .collect()
}
