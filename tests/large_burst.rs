//! A burst due at one instant, many times larger than one mark: it fires whole, and no mark
//! covers more than its bound (`poller::marks::MARK_AT_MOST`). Unbounded, a burst claimed and
//! published in one long round came to one mark of nearly all of it; on PostgreSQL a mark of
//! 189,000 outlasted the operation deadline (15 s), failed, and failed again at every retry
//! while nothing new was claimed (CONTRACT §5, step 3).

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{
    DaemonProcess, NatsServer, Scratch, TestClient, eventually, prefill_sql, rows_by_state,
};
use futures::StreamExt;
use sea_orm::ConnectionTrait;
use timer_service::storage::db::migrate;

/// Timers of the burst: twelve marks' worth at the bound.
const BURST: u64 = 60_000;
/// The bound of one mark, and one claim more: a mark takes whole batches.
const LARGEST_MARK: u64 = 5_000 + 2_000;

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_larger_than_any_mark_fires_whole_in_bounded_marks() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let database = scratch.database();
    migrate(&database).await.expect("the schema");
    let due_ms = chrono::Utc::now().timestamp_millis() + 3_000;
    let db = timer_service::storage::db::connect(&database, 1)
        .await
        .expect("open");
    db.execute_unprepared(&prefill_sql(
        scratch.database_url().is_some(),
        BURST,
        "burst",
        due_ms,
        0,
        None,
    ))
    .await
    .expect("the burst stored");
    db.close().await.expect("close");

    let client = TestClient::connect(&server).await;
    let mut events = client
        .client
        .subscribe("timer.evt.due.burst")
        .await
        .expect("subscribe");
    let process = DaemonProcess::start(&server, &scratch);
    let mut fired = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while (fired.len() as u64) < BURST {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("{} of {BURST} published within 120 s", fired.len()))
            .expect("the subscription ended");
        let event: serde_json::Value = serde_json::from_slice(&event.payload).expect("JSON");
        let key = event["payload"]["serviceCallId"]
            .as_str()
            .unwrap_or_default();
        fired.insert(key.to_owned());
    }
    eventually(
        Duration::from_secs(60),
        "every timer of the burst marked",
        || async {
            let states = rows_by_state(&database).await;
            (states.get("Scheduled").copied().unwrap_or(0) == 0).then_some(())
        },
    )
    .await;

    let marks: Vec<u64> = process
        .log_text()
        .lines()
        .filter(|line| line.contains("transaction done") && line.contains("mark_reached"))
        .filter_map(|line| line.split(" rows=").nth(1)?.split(' ').next()?.parse().ok())
        .collect();
    let marked: u64 = marks.iter().sum();
    assert!(
        marked >= BURST,
        "the marks logged cover the burst: {marked} of {BURST}"
    );
    let largest = marks.iter().copied().max().unwrap_or(0);
    assert!(
        largest <= LARGEST_MARK,
        "every mark within its bound: the largest covered {largest} timers ({} marks)",
        marks.len()
    );
}
