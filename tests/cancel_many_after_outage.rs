//! CancelTimers after a storage outage (docs/CONTRACT.md §3): once the database answers again,
//! a steady flow of commands in which every pulled batch holds a CancelTimers is stored and
//! cancelled at once. The commits that failed during the outage must not keep counting: they
//! once made the daemon hand every CancelTimers back as if the database still failed, each
//! hand-back a failure of its own, so that the lines crawled at the longest backoff and the
//! cancelled timers fired. Nor does each cancel wait for the one before it (unacknowledged
//! while it runs): a chain of cancels one behind the other falls behind the flow as soon as
//! each link takes longer than the cancels are sent, which a loaded machine does.
//!
//! The outage is a write lock another process holds on the SQLite file past the busy timeout;
//! on PostgreSQL the database outages are the fault-injection suite's (a server stopped and
//! restarted), and this test is skipped.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use common::{NatsServer, Scratch, TestClient, config, eventually, rfc3339, rows_by_state};
use futures::StreamExt;
use serde_json::json;
use timer_service::Daemon;

/// Groups of timers, each of four keys then one CancelTimers of them, published after the
/// outage: about five seconds of them.
const GROUPS: usize = 60;
/// When a group's timers are due after it is sent: far more than a cancel takes, far less
/// than the backoff loop held the cancels back.
const DUE_AFTER: chrono::Duration = chrono::Duration::seconds(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_in_every_batch_after_an_outage_are_applied_at_once() {
    let scratch = Scratch::new();
    // The daemon's log (whose cancels began and ended when) is shown if the test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "warn,timer_service=info",
        ))
        .with_test_writer()
        .try_init();
    if !scratch.sqlite_only("a write lock on the SQLite file") {
        return;
    }
    let server = NatsServer::start();
    let mut config = config(&server, &scratch);
    config.sqlite.busy_timeout = Duration::from_secs(1);
    let daemon = Daemon::start(config).await.unwrap();
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let mut events = client.client.subscribe("timer.evt.>").await.unwrap();

    // The outage: commits fail for a few attempts while commands arrive.
    let lock = common::write_lock::hold(&scratch.db_path()).await;
    let soon = rfc3339(Utc::now() + chrono::Duration::seconds(1));
    for n in 0..20 {
        let command = common::schedule_command("acme", &format!("during-{n}"), &soon, None);
        publish(&client, "timer.cmd.schedule.acme", command).await;
    }
    eventually(
        Duration::from_secs(30),
        "the daemon to report the storage fault",
        || async { daemon.health().storage_error },
    )
    .await;
    common::write_lock::release(lock).await;

    // After it: groups, each cancelled right after it is scheduled.
    let mut cancelled = HashSet::new();
    for g in 0..GROUPS {
        let group = format!("group-{g}");
        let due = rfc3339(Utc::now() + DUE_AFTER);
        for k in 0..4 {
            let id = format!("g{g}-{k}");
            let command = common::schedule_command("acme", &id, &due, Some(&group));
            publish(&client, "timer.cmd.schedule.acme", command).await;
            cancelled.insert(id);
        }
        let command = common::cancel_timers_command("acme", json!({ "correlationId": group }));
        publish(&client, "timer.cmd.cancel-many.acme", command).await;
        tokio::time::sleep(Duration::from_millis(80)).await;
    }

    // Every timer ends cancelled or fired: the groups' cancelled (none fired meanwhile), the
    // ones sent during the outage fired.
    let wanted = (GROUPS * 4) as i64;
    let rows = eventually(
        Duration::from_secs(60),
        "every timer cancelled or fired",
        || async {
            let rows = rows_by_state(&scratch.database()).await;
            let settled = ["Cancelled", "Reached"]
                .iter()
                .filter_map(|state| rows.get(*state))
                .sum::<i64>();
            (settled == wanted + 20).then_some(rows)
        },
    )
    .await;
    assert_eq!(rows.get("Cancelled").copied(), Some(wanted), "{rows:?}");
    assert_eq!(rows.get("Reached").copied(), Some(20), "{rows:?}");
    // What the daemon published: no event of a cancelled timer.
    let mut fired = Vec::new();
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(200), events.next()).await
    {
        let envelope: serde_json::Value = serde_json::from_slice(&event.payload).unwrap();
        let id = envelope["aggregateId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if cancelled.contains(&id) {
            fired.push(id);
        }
    }
    assert!(
        fired.is_empty(),
        "cancelled timers fired (their cancels were held back): {fired:?}"
    );
    daemon.shutdown().await.unwrap();
}

async fn publish(client: &TestClient, subject: &str, command: serde_json::Value) {
    client
        .publish_raw(subject, serde_json::to_vec(&command).unwrap())
        .await;
}
