//! Tenants take turns (docs/CONTRACT.md §9): one tenant's burst of timers due at one instant
//! makes its own timers late, not another tenant's due a moment after; and another tenant's
//! commands are applied while it fires (a CancelTimer sent during the burst holds against a
//! timer due a second later, which commits held behind the firing would lose). On PostgreSQL,
//! two daemons share the work.

mod common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{
    DaemonProcess, NatsServer, Scratch, TestClient, eventually, prefill_sql, rows_by_state,
};
use sea_orm::ConnectionTrait;
use timer_service::storage::db::{connect, migrate};

/// The burst: enough that firing it takes seconds in a test build.
const BULK: usize = 50_000;
/// The quiet tenant's timers, one every [`SMALL_EVERY_MS`] from 200 ms after the burst's instant.
const SMALL: usize = 50;
const SMALL_EVERY_MS: i64 = 20;
/// How late a quiet tenant's timer may be while the burst is fired (a test build, on a busy
/// machine). Without turns, each waits for the rest of the burst: the last one
/// [`BURST_LASTS_AT_LEAST`] less its 0.2 s, at least.
const SMALL_LATENESS_BOUND: Duration = Duration::from_millis(1000);
/// The quiet tenant's timers cancelled during the burst: sent [`CANCEL_AFTER_MS`] after its
/// instant, due [`CANCELLED_DUE_MS`] after it.
const CANCELLED: usize = 10;
const CANCEL_AFTER_MS: i64 = 300;
const CANCELLED_DUE_MS: i64 = 1_500;
/// How long the burst must take to fire for the bound above to tell turns from none.
const BURST_LASTS_AT_LEAST: chrono::TimeDelta = chrono::TimeDelta::milliseconds(2000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_burst_does_not_hold_up_another_tenants_timers() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    // The burst is in the database before the daemons start: its intake is not what this
    // test is about (command_burst's is), and on PostgreSQL beside other tests the intake of
    // 50,000 commands took more than half a minute. Its instant leaves time for the daemons'
    // start and the quiet tenant's commands.
    let database = scratch.database();
    migrate(&database).await.expect("the schema");
    let instant = common::millis(Utc::now() + chrono::Duration::seconds(10));
    let db = connect(&database, 1).await.expect("open");
    db.execute_unprepared(&prefill_sql(
        common::database::postgres_run(),
        BULK as u64,
        "bulk",
        instant.timestamp_millis(),
        0,
        None,
    ))
    .await
    .expect("the burst stored");
    db.close().await.expect("close");
    let ids: Vec<String> = (0..BULK).map(|i| format!("bulk-{i}")).collect();
    let daemons: Vec<DaemonProcess> = if common::database::postgres_run() {
        ["fair-1", "fair-2"]
            .iter()
            .map(|name| DaemonProcess::start_with(&server, &scratch, &[("TIMER_NAME", name)]))
            .collect()
    } else {
        vec![DaemonProcess::start(&server, &scratch)]
    };
    let bulk = TestClient::connect(&server).await;
    let small = TestClient::connect(&server).await;
    bulk.wait_for_command_stream().await;

    let small_due: Vec<(String, DateTime<Utc>)> = (0..SMALL)
        .map(|i| {
            let due = instant + chrono::Duration::milliseconds(200 + SMALL_EVERY_MS * i as i64);
            (format!("s-{i:03}"), due)
        })
        .collect();
    for (id, due) in &small_due {
        small.schedule("small", id, *due, None).await;
    }
    let cancelled: Vec<String> = (0..CANCELLED).map(|i| format!("c-{i:03}")).collect();
    let cancelled_due = instant + chrono::Duration::milliseconds(CANCELLED_DUE_MS);
    for id in &cancelled {
        small.schedule("small", id, cancelled_due, None).await;
    }
    eventually(Duration::from_secs(30), "every timer stored", || async {
        let scheduled = rows_by_state(&database).await.get("Scheduled").copied();
        (scheduled == Some((BULK + SMALL + CANCELLED) as i64)).then_some(())
    })
    .await;
    assert!(
        Utc::now() < instant,
        "the quiet tenant's timers were stored only after the burst's instant: the test proves \
         nothing"
    );

    // The cancels go out while the burst fires: the instant it was due, and then some.
    let cancel_at = instant + chrono::Duration::milliseconds(CANCEL_AFTER_MS);
    tokio::time::sleep((cancel_at - Utc::now()).to_std().unwrap_or_default()).await;
    for id in &cancelled {
        let command = serde_json::to_vec(&common::cancel_command("small", id)).unwrap();
        small.publish_raw("timer.cmd.cancel.small", command).await;
    }
    let cancels_acked = Utc::now();

    let small_ids: Vec<String> = small_due.iter().map(|(id, _)| id.clone()).collect();
    let small_events = small
        .await_all_fired("small", &small_ids, Duration::from_secs(60))
        .await;
    let bulk_events = bulk
        .await_all_fired("bulk", &ids, Duration::from_secs(120))
        .await;

    let bulk_done = bulk_events
        .iter()
        .map(|e| e.stored_at)
        .max()
        .expect("bulk events");
    assert!(
        bulk_done - instant >= BURST_LASTS_AT_LEAST,
        "the burst was fired within {} ms of its instant: too fast to show turns (raise BULK)",
        (bulk_done - instant).num_milliseconds()
    );
    let mut lateness: Vec<(Duration, String)> = small_events
        .iter()
        .map(|e| {
            let late = (e.stored_at - e.due_at()).to_std().unwrap_or_default();
            (late, e.service_call_id().to_owned())
        })
        .collect();
    lateness.sort();
    let (worst, worst_id) = lateness.last().expect("small events").clone();
    eprintln!(
        "burst of {BULK} fired by {} ms after its instant; quiet tenant's lateness: median {} ms, \
         max {} ms ({worst_id})",
        (bulk_done - instant).num_milliseconds(),
        lateness[lateness.len() / 2].0.as_millis(),
        worst.as_millis()
    );
    assert!(
        worst <= SMALL_LATENESS_BOUND,
        "the quiet tenant's {worst_id} was {} ms late behind the burst (bound {} ms)",
        worst.as_millis(),
        SMALL_LATENESS_BOUND.as_millis()
    );

    // Acknowledged by the broker well before their timers' dueAt, while the burst fired: they
    // hold. (Its firing outlasts their dueAt, by the assertion above.)
    assert!(
        cancels_acked < cancelled_due - chrono::Duration::milliseconds(500),
        "the cancels were acknowledged only at {cancels_acked}, too near their timers' dueAt"
    );
    let fired = small.fired_ids("small").await;
    let lost: Vec<&String> = cancelled.iter().filter(|id| fired.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} of the quiet tenant's cancels, sent {CANCEL_AFTER_MS} ms into the burst, lost to \
         their timers due {CANCELLED_DUE_MS} ms into it: {lost:?}",
        lost.len()
    );
    drop(daemons);
}
