//! Two `CancelTimers` of one tenant whose filters overlap, run at once (docs/CONTRACT.md §3):
//! they take turns step by step, each timer both select is cancelled once and counted by the
//! one that reached it first, so the two answers add up to the timers cancelled, and none is
//! left pending. Against a real daemon on its own broker and database.

mod common;

use std::time::Duration;

use chrono::Utc;
use common::{DaemonProcess, NatsServer, Scratch, TestClient, rfc3339};
use serde_json::{Value, json};

/// Timers due within the range both cancels select, and after it (only `all` selects those).
const IN_RANGE: usize = 3_000;
const AFTER: usize = 1_500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_cancels_count_each_timer_once_and_leave_none_pending() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let daemon = DaemonProcess::start(&server, &scratch);
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    client.api_ready().await;

    let now = Utc::now();
    for (prefix, n, due) in [
        ("in", IN_RANGE, now + chrono::Duration::minutes(90)),
        ("after", AFTER, now + chrono::Duration::hours(5)),
    ] {
        let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:05}")).collect();
        client.schedule_many("acme", &ids, due).await;
    }
    client.barrier("acme").await;

    let range = json!({
        "dueFrom": rfc3339(now + chrono::Duration::hours(1)),
        "dueTo": rfc3339(now + chrono::Duration::hours(2)),
    });
    let subject = "timer.api.cancel-many.acme";
    let (by_range, by_all) = tokio::join!(
        client.api_request(subject, range),
        client.api_request(subject, json!({ "all": true })),
    );
    let count = |(code, body): (Option<u16>, Value)| -> u64 {
        assert_eq!(code, None, "error answer: {body}");
        body["count"].as_u64().expect("a count")
    };
    let (by_range, by_all) = (count(by_range), count(by_all));
    eprintln!("the range cancel counted {by_range}, the cancel of all {by_all}");
    assert_eq!(
        by_range + by_all,
        (IN_RANGE + AFTER) as u64,
        "a timer both selected was counted twice, or one was missed"
    );
    assert!(by_range <= IN_RANGE as u64 && by_all >= AFTER as u64);

    let database = scratch.database();
    let by_state = common::rows_by_state(&database).await;
    assert_eq!(
        by_state.get("Cancelled").copied(),
        Some((IN_RANGE + AFTER) as i64),
        "{by_state:?}"
    );
    // Each cancelled row carries the place of the cancel that reached it: one of the two.
    let stamps = common::query_rows(
        &database,
        "SELECT COUNT(DISTINCT command_seq) FROM timer_schedules WHERE state = 'Cancelled'",
        |row| row.try_get_by_index::<i64>(0).expect("count"),
    )
    .await;
    assert!(stamps[0] <= 2, "{} distinct cancels stamped", stamps[0]);
    client.await_commands_applied(Duration::from_secs(30)).await;
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(25)).await.success());
}
