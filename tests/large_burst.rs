//! A burst due at one instant, many times larger than one mark: it fires whole, and no mark
//! covers more than its bound (`poller::marks::MARK_AT_MOST`). Unbounded, a burst claimed and
//! published in one long round came to one mark of nearly all of it; on PostgreSQL a mark of
//! 189,000 outlasted the operation deadline (15 s), failed, and failed again at every retry
//! while nothing new was claimed (CONTRACT §5, step 3).
//!
//! No timer is published twice: on PostgreSQL a mark runs beside the next claim.
//!
//! The daemon's tick is an hour away: the burst must fire whole by the Poller's own wake-ups
//! and answers. A round of claims that could start none while marks were owed once left the
//! mark for the next tick, so a burst on PostgreSQL fired one mark's worth every 5 s.

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
/// Other tenants, and the timers of each, due one every `OTHER_STEP_MS` from the burst's
/// instant on, for as long as it fires.
const OTHER_TENANTS: u64 = 20;
const OTHER_TIMERS: u64 = 100;
const OTHER_STEP_MS: i64 = 60;
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
    // Other tenants' timers due while it fires: fair claims serve them beside the burst, which
    // keeps the Poller's writes short on PostgreSQL (`poller::fairness`) and its marks owed.
    for tenant in 0..OTHER_TENANTS {
        db.execute_unprepared(&prefill_sql(
            scratch.database_url().is_some(),
            OTHER_TIMERS,
            &format!("other-{tenant}"),
            due_ms,
            OTHER_STEP_MS,
            None,
        ))
        .await
        .expect("the other tenants' timers stored");
    }
    db.close().await.expect("close");

    let client = TestClient::connect(&server).await;
    let mut events = client
        .client
        .subscribe("timer.evt.due.burst")
        .await
        .expect("subscribe");
    let process =
        DaemonProcess::start_with(&server, &scratch, &[("TIMER_POLLING_INTERVAL", "3600000")]);
    let mut fired = HashSet::new();
    // Every event, a second one of a key too: on PostgreSQL a mark runs beside the next claim,
    // which must never take the timers under that mark again.
    let mut received = 0u64;
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
        received += 1;
    }
    eventually(Duration::from_secs(60), "every timer marked", || async {
        let states = rows_by_state(&database).await;
        (states.get("Scheduled").copied().unwrap_or(0) == 0).then_some(())
    })
    .await;
    // Each mark follows its batch's PubAck: what was published is at the subscriber by now,
    // or within moments.
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(500), events.next()).await {
        received += 1;
    }
    assert_eq!(
        received, BURST,
        "each timer of the burst published once (a claim beside a mark took its timers again)"
    );

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
