//! Commits of commands side by side (PostgreSQL commits two at once, `DatabaseTarget::
//! command_connections`): a backlog in which every key has several commands, spread over
//! transactions that are in flight at the same time, ends with each key as the last of its
//! commands in the stream left it (the rules table, docs/CONTRACT.md §3), and no commit fails
//! beside another (a deadlock between two would be handed back and logged). Two commits never
//! hold one key (the pipeline holds a group back while a key of it is under way): a cancel
//! committed before the schedule just ahead of it would keep the older `dueAt`, and the
//! schedule would be dropped as older. Which transaction reaches a row first is the server's
//! choice, so this test may pass without that; `tests/timer_data.rs`'s cancel after a
//! schedule failed once in a full PostgreSQL run without it.
//! On SQLite the same backlog is committed one transaction at a time, and must end the same.
//! On PostgreSQL, a lane's transactions following one another as fast as they can keep to the
//! lane's one connection, as docs/operations.md counts them.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{
    DaemonProcess, NatsServer, Scratch, TestClient, cancel_command, eventually, query_rows,
    rfc3339, schedule_at, schedule_timers_command,
};
use serde_json::{Value, json};
use timer_service::config::PostgresSettings;
use timer_service::domain::Command;
use timer_service::storage::Store;
use timer_service::storage::db::migrate;

const KEYS: usize = 6_000;
const PER_MESSAGE: usize = 500;

fn key(i: usize) -> String {
    format!("k-{i:05}")
}

/// ScheduleTimers of `tenant` for `keys`, due at `due`, in messages of [`PER_MESSAGE`].
async fn schedule_all(client: &TestClient, keys: &[usize], due: DateTime<Utc>) {
    for chunk in keys.chunks(PER_MESSAGE) {
        let timers: Vec<Value> = chunk
            .iter()
            .map(|&i| json!({ "serviceCallId": key(i), "dueAt": rfc3339(due) }))
            .collect();
        let message = schedule_timers_command("acme", timers, None);
        client
            .publish_raw(
                "timer.cmd.schedule-many.acme",
                serde_json::to_vec(&message).unwrap(),
            )
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_commands_committed_side_by_side_leave_it_as_the_stream_orders() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    // The stream first, then the backlog, then the daemon: it pulls the backlog in groups of
    // thousands, each key's commands in several of them.
    let first = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;
    drop(first);

    let now = common::millis(Utc::now());
    let (d1, d2, d3) = (
        now + chrono::Duration::hours(1),
        now + chrono::Duration::hours(2),
        now + chrono::Duration::hours(3),
    );
    let all: Vec<usize> = (0..KEYS).collect();
    schedule_all(&client, &all, d1).await;
    schedule_all(&client, &all, d2).await;
    for i in (1..KEYS).step_by(2) {
        let cancel = cancel_command("acme", &key(i));
        client
            .publish_raw(
                "timer.cmd.cancel.acme",
                serde_json::to_vec(&cancel).unwrap(),
            )
            .await;
    }
    let again: Vec<usize> = (1..KEYS).step_by(4).collect();
    schedule_all(&client, &again, d3).await;

    let process = DaemonProcess::start(&server, &scratch);
    eventually(
        Duration::from_secs(60),
        "every command of the backlog handled",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;

    let rows: HashMap<String, (String, String)> = query_rows(
        &scratch.database(),
        "SELECT service_call_id, state, due_at FROM timer_schedules WHERE tenant_id = 'acme'",
        |row| {
            let id: String = row.try_get_by_index(0).expect("id");
            let state: String = row.try_get_by_index(1).expect("state");
            let due: String = row.try_get_by_index(2).expect("due_at");
            (id, (state, due))
        },
    )
    .await
    .into_iter()
    .collect();
    assert_eq!(rows.len(), KEYS, "one row per key");
    let stored_due = |due: DateTime<Utc>| timer_service::domain::timestamp::format_utc(due);
    let mut wrong = Vec::new();
    for i in 0..KEYS {
        let expected = match i % 4 {
            0 | 2 => ("Scheduled", stored_due(d2)),
            1 => ("Scheduled", stored_due(d3)),
            _ => ("Cancelled", stored_due(d2)),
        };
        let (state, due) = &rows[&key(i)];
        if (state.as_str(), due) != (expected.0, &expected.1) {
            wrong.push(format!("{}: {state} {due}, expected {expected:?}", key(i)));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} keys not as the stream left them, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );

    let log = std::fs::read_to_string(&process.log).unwrap_or_default();
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("commands not stored") || l.contains("deadlock"))
        .collect();
    assert!(
        failed.is_empty(),
        "a commit failed beside another: {failed:?}"
    );
}

/// A lane's store is one connection on PostgreSQL (`Store::open_connection`), however fast its
/// transactions follow one another: docs/operations.md counts a daemon's connections by its
/// lanes. With a pool of two, a transaction begun right after a commit opened a second
/// connection while sqlx was still pinging the first back into the pool, and a daemon working
/// off a backlog held seven connections instead of five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lanes_store_is_one_connection_however_fast_its_transactions_follow() {
    let Some(scratch) = Scratch::postgres_only("a lane's connections") else {
        return;
    };
    let database = scratch.database();
    migrate(&database).await.expect("migrate");
    let store = Store::open_connection(&database, &PostgresSettings::default())
        .await
        .expect("open a lane's store");
    let due = Utc::now() + chrono::Duration::hours(1);
    for i in 0..200u64 {
        let commands: Vec<Command> = (0..2)
            .map(|k| schedule_at("acme", &format!("k-{i}-{k}"), 2 * i + k + 1, due))
            .collect();
        store.apply(&commands).await.expect("apply");
    }
    let sessions = query_rows(
        &database,
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
        |row| row.try_get_by_index::<i64>(0).expect("count"),
    )
    .await;
    assert_eq!(
        sessions,
        [1],
        "a lane's store opened more than one connection"
    );
}
