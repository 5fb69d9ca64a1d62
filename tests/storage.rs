//! Storage: the schema, the upsert rules in SQL, tenant scoping, and the polling query's plan —
//! on a real SQLite file with the real migrations.

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use sea_orm::{ConnectionTrait, Statement};
use timer_service::domain::timer::apply_command;
use timer_service::domain::{TimerEntry, TimerState};
use timer_service::persistence::db::{connect, migrate};
use timer_service::persistence::{SqliteSettings, Store};

async fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("timers.db");
    migrate(&path, &SqliteSettings::default()).await.unwrap();
    let store = Store::open(&path, &SqliteSettings::default())
        .await
        .unwrap();
    (dir, store)
}

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(1_800_000_000_000 + ms).unwrap()
}

fn entry(tenant: &str, id: &str, seq: u64, due: i64) -> TimerEntry {
    TimerEntry {
        tenant_id: tenant.into(),
        service_call_id: id.into(),
        correlation_id: format!("corr-{seq}"),
        due_at: at(due),
        registered_at: at(0),
        reached_at: None,
        state: TimerState::Scheduled,
        command_seq: seq,
    }
}

#[tokio::test]
async fn the_polling_query_is_served_by_the_pending_index() {
    let (_dir, store) = store().await;
    let rows: Vec<TimerEntry> = (0..2000)
        .map(|i| entry("acme", &format!("c{i}"), i, i as i64))
        .collect();
    store.upsert(&rows).await.unwrap();
    store.mark_reached(&rows[..1000], at(5000)).await.unwrap();
    let plan = store.explain_due_query().await.unwrap().join("\n");
    eprintln!("PLAN: {plan}");
    assert!(
        plan.contains("USING INDEX idx_timer_schedules_pending"),
        "plan: {plan}"
    );
    assert!(
        !plan.contains("SCAN timer_schedules\n") && plan != "SCAN timer_schedules",
        "plan: {plan}"
    );
    assert!(
        !plan.contains("TEMP B-TREE"),
        "sorted by the index, not afterwards: {plan}"
    );
}

#[tokio::test]
async fn reads_are_scoped_by_tenant() {
    let (_dir, store) = store().await;
    store
        .upsert(&[
            entry("acme", "same-id", 1, 10),
            entry("globex", "same-id", 2, 20),
        ])
        .await
        .unwrap();
    let acme = store.get("acme", "same-id").await.unwrap().unwrap();
    assert_eq!((acme.tenant_id.as_str(), acme.due_at), ("acme", at(10)));
    let globex = store.get("globex", "same-id").await.unwrap().unwrap();
    assert_eq!(
        (globex.tenant_id.as_str(), globex.due_at),
        ("globex", at(20))
    );
    assert!(store.get("initech", "same-id").await.unwrap().is_none());
    let listed = store.list_tenant("acme").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed.iter().all(|t| t.tenant_id == "acme"));
}

#[tokio::test]
async fn find_due_returns_only_scheduled_timers_due_by_now_earliest_first() {
    let (_dir, store) = store().await;
    store
        .upsert(&[
            entry("a", "late", 1, 300),
            entry("a", "early", 2, 100),
            entry("a", "future", 3, 900),
        ])
        .await
        .unwrap();
    let due = store.find_due(at(300), None, 10).await.unwrap();
    let ids: Vec<&str> = due
        .timers
        .iter()
        .map(|t| t.service_call_id.as_str())
        .collect();
    assert_eq!(ids, ["early", "late"]);
    assert_eq!(
        due.next_due_at, None,
        "timers due: the caller asks again once they are out"
    );
    let first = store.find_due(at(300), None, 1).await.unwrap();
    assert_eq!(first.timers.len(), 1);
    // Resuming after the first one in flight yields the second.
    let rest = store
        .find_due(at(300), Some(&first.timers[0].position()), 10)
        .await
        .unwrap();
    assert_eq!(rest.timers.len(), 1);
    assert_eq!(rest.timers[0].service_call_id, "late");
    store.mark_reached(&due.timers, at(301)).await.unwrap();
    let nothing_due = store.find_due(at(300), None, 10).await.unwrap();
    assert!(nothing_due.timers.is_empty());
    assert_eq!(
        nothing_due.next_due_at,
        Some(at(900)),
        "nothing due: the next wake-up comes along"
    );
    assert!(
        store
            .find_due(at(300), None, 10)
            .await
            .unwrap()
            .timers
            .is_empty()
    );
}

#[tokio::test]
async fn a_timer_rescheduled_while_firing_is_not_marked_reached() {
    let (_dir, store) = store().await;
    store.upsert(&[entry("a", "x", 1, 100)]).await.unwrap();
    let fired = store.find_due(at(100), None, 10).await.unwrap().timers;
    store.upsert(&[entry("a", "x", 2, 500)]).await.unwrap(); // arrives while the event is in flight
    assert_eq!(store.mark_reached(&fired, at(101)).await.unwrap(), 0);
    let row = store.get("a", "x").await.unwrap().unwrap();
    assert_eq!((row.state, row.due_at), (TimerState::Scheduled, at(500)));
}

#[tokio::test]
async fn the_schema_refuses_bad_rows_and_migrating_twice_is_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("timers.db");
    migrate(&path, &SqliteSettings::default()).await.unwrap();
    migrate(&path, &SqliteSettings::default()).await.unwrap();
    let db = connect(&path, &SqliteSettings::default()).await.unwrap();
    let insert = |state: &str, seq: &str| {
        Statement::from_string(
            db.get_database_backend(),
            format!(
                "INSERT INTO timer_schedules VALUES ('t', 'c-{state}-{seq}', 'c', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', NULL, '{state}', {seq})"
            ),
        )
    };
    assert!(db.execute_raw(insert("Scheduled", "1")).await.is_ok());
    assert!(
        db.execute_raw(insert("Fired", "1")).await.is_err(),
        "state CHECK"
    );
    assert!(
        db.execute_raw(insert("Scheduled", "'seven'"))
            .await
            .is_err(),
        "STRICT typing"
    );
    let journal = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "PRAGMA journal_mode",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get_by_index::<String>(0)
        .unwrap();
    assert_eq!(journal, "wal");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the order of commands and firings, the SQL upsert keeps the rules of the
    /// contract, as written once in `apply_command`.
    #[test]
    fn sql_upserts_follow_the_contract_rules(
        steps in prop::collection::vec((0usize..3, 1u64..40, 0i64..50, prop::bool::weighted(0.2)), 1..40)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (_dir, store) = store().await;
            let mut model: std::collections::HashMap<String, TimerEntry> = Default::default();
            for (key, seq, due, fire) in steps {
                let id = format!("k{key}");
                if fire {
                    let due_now = store.find_due(at(1000), None, 100).await.unwrap().timers;
                    store.mark_reached(&due_now, at(1000)).await.unwrap();
                    for t in &due_now {
                        let m = model.get_mut(&t.service_call_id).unwrap();
                        m.state = TimerState::Reached;
                        m.reached_at = Some(at(1000));
                    }
                } else {
                    let incoming = entry("acme", &id, seq, due);
                    store.upsert(std::slice::from_ref(&incoming)).await.unwrap();
                    if let Some(next) = apply_command(model.get(&id), &incoming) {
                        model.insert(id.clone(), next);
                    }
                }
            }
            for (id, expected) in &model {
                let stored = store.get("acme", id).await.unwrap().unwrap();
                prop_assert_eq!(&stored, expected);
            }
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn the_wal_is_checkpointed_from_a_second_connection_not_by_commits() {
    let (dir, store) = store().await;
    let path = dir.path().join("timers.db");
    let rows: Vec<TimerEntry> = (0..3000)
        .map(|i| entry("acme", &format!("c{i}"), i, i as i64))
        .collect();
    store.upsert(&rows).await.unwrap();
    let checkpointer = connect(&path, &SqliteSettings::default()).await.unwrap();
    let autocheckpoint = checkpointer
        .query_one_raw(Statement::from_string(
            checkpointer.get_database_backend(),
            "PRAGMA wal_autocheckpoint",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get_by_index::<i64>(0)
        .unwrap();
    assert!(
        autocheckpoint >= 10_000,
        "commits must not checkpoint a small WAL: {autocheckpoint}"
    );
    let done = timer_service::persistence::db::checkpoint(
        &checkpointer,
        timer_service::persistence::db::CheckpointMode::Passive,
    )
    .await
    .unwrap();
    assert!(done.wal_pages > 0);
    assert_eq!(
        done.checkpointed_pages, done.wal_pages,
        "a passive checkpoint with no writer copies it all"
    );
}
