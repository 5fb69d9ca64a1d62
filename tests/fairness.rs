//! Tenants take turns (docs/CONTRACT.md §9): one tenant's burst of timers due at one instant
//! makes its own timers late, not another tenant's due a moment after. On PostgreSQL, two
//! daemons share the work.

mod common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually, rows_by_state};

/// The burst: enough that firing it takes seconds in a test build.
const BULK: usize = 50_000;
/// The quiet tenant's timers, one every [`SMALL_EVERY_MS`] from 200 ms after the burst's instant.
const SMALL: usize = 50;
const SMALL_EVERY_MS: i64 = 20;
/// How late a quiet tenant's timer may be while the burst is fired (a test build, on a busy
/// machine). Without turns, each waits for the rest of the burst: the last one
/// [`BURST_LASTS_AT_LEAST`] less its 0.2 s, at least.
const SMALL_LATENESS_BOUND: Duration = Duration::from_millis(1000);
/// How long the burst must take to fire for the bound above to tell turns from none.
const BURST_LASTS_AT_LEAST: chrono::TimeDelta = chrono::TimeDelta::milliseconds(2000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_burst_does_not_hold_up_another_tenants_timers() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
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

    // The burst's instant leaves time to store it all first.
    let instant = common::millis(Utc::now() + chrono::Duration::seconds(15));
    let ids: Vec<String> = (0..BULK).map(|i| format!("b-{i:05}")).collect();
    bulk.schedule_many("bulk", &ids, instant).await;
    let small_due: Vec<(String, DateTime<Utc>)> = (0..SMALL)
        .map(|i| {
            let due = instant + chrono::Duration::milliseconds(200 + SMALL_EVERY_MS * i as i64);
            (format!("s-{i:03}"), due)
        })
        .collect();
    for (id, due) in &small_due {
        small.schedule("small", id, *due, None).await;
    }
    let database = scratch.database();
    eventually(Duration::from_secs(30), "every timer stored", || async {
        let scheduled = rows_by_state(&database).await.get("Scheduled").copied();
        (scheduled == Some((BULK + SMALL) as i64)).then_some(())
    })
    .await;
    assert!(
        Utc::now() < instant,
        "the burst was stored only after its instant: the test proves nothing"
    );

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
    drop(daemons);
}
