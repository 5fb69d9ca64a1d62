//! Retention (docs/CONTRACT.md §7): the Janitor deletes `Reached` and `Cancelled` timers that
//! finished longer ago than `keep_finished` — all of them, in batches — and nothing else.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::Utc;
use common::{
    NatsServer, Scratch, cancel_at, claimant, config, eventually, rows_by_state, schedule_at,
};
use ractor::Actor;
use timer_service::Daemon;
use timer_service::actors::Registry;
use timer_service::actors::janitor::{Janitor, JanitorArgs};
use timer_service::actors::persistence::{Class, PersistenceMsg};
use timer_service::actors::steps::PAUSE;
use timer_service::ports::SystemClock;
use timer_service::storage::Store;
use timer_service::storage::db::migrate;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_finished_timers_are_deleted_and_nothing_else() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let database = scratch.database();
    migrate(&database).await.unwrap();
    // Rows finished days ago are written at those instants, as the caller's clock says.
    let store = Store::open(&database).await.unwrap().with_callers_clock();
    let now = Utc::now();
    let days = |n: i64| now - chrono::Duration::days(n);
    let future = now + chrono::Duration::hours(1);
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        seq
    };

    // Fired ten days ago (2,500: three batches) and one day ago.
    for (prefix, count, fired_at) in [("old-fired", 2500, days(10)), ("new-fired", 20, days(1))] {
        let commands: Vec<_> = (0..count)
            .map(|i| schedule_at("acme", &format!("{prefix}-{i}"), next(), fired_at))
            .collect();
        store.apply(&commands).await.unwrap();
        let due = store
            .claim_due(fired_at, None, 10_000, &claimant())
            .await
            .unwrap()
            .timers;
        assert_eq!(due.len(), count);
        store
            .mark_reached(&[(due.clone().into(), fired_at)])
            .await
            .unwrap();
    }
    // Cancelled ten days ago (timers and tombstones) and one day ago; pending ones.
    let mut commands = Vec::new();
    for i in 0..600 {
        commands.push(schedule_at(
            "acme",
            &format!("old-cancelled-{i}"),
            next(),
            future,
        ));
        commands.push(cancel_at(
            "acme",
            &format!("old-cancelled-{i}"),
            next(),
            days(10),
        ));
    }
    for i in 0..10 {
        commands.push(cancel_at(
            "acme",
            &format!("old-tombstone-{i}"),
            next(),
            days(9),
        ));
    }
    for i in 0..5 {
        commands.push(cancel_at(
            "acme",
            &format!("new-tombstone-{i}"),
            next(),
            days(2),
        ));
    }
    for i in 0..50 {
        commands.push(schedule_at("acme", &format!("pending-{i}"), next(), future));
    }
    store.apply(&commands).await.unwrap();
    store.close().await.unwrap();
    let before = rows_by_state(&database).await;
    assert_eq!(before["Reached"], 2520);
    assert_eq!(before["Cancelled"], 615);

    // keep_finished = 7d: the Janitor's first sweep, at start. Its steps are sized to hold
    // the writer about 2 ms, so in a debug build on PostgreSQL they shrink to a few rows, and
    // these 3,100 take 12–14 s there on a quiet machine: the bound leaves room for a busy one.
    let daemon = Daemon::start(config(&server, &scratch)).await.unwrap();
    let after = eventually(
        Duration::from_secs(60),
        "the old finished timers deleted",
        || async {
            let rows = rows_by_state(&database).await;
            (rows.get("Reached") == Some(&20) && rows.get("Cancelled") == Some(&5)).then_some(rows)
        },
    )
    .await;
    assert_eq!(
        after.get("Scheduled"),
        Some(&50),
        "no pending timer deleted: {after:?}"
    );
    let persistence = daemon.persistence();
    assert!(
        persistence
            .get("acme", "new-fired-0")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        persistence
            .get("acme", "old-fired-0")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        persistence
            .get("acme", "new-tombstone-0")
            .await
            .unwrap()
            .is_some()
    );
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_finished_zero_keeps_everything() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let database = scratch.database();
    migrate(&database).await.unwrap();
    let store = Store::open(&database).await.unwrap();
    let long_ago = Utc::now() - chrono::Duration::days(400);
    store
        .apply(&[cancel_at("acme", "ancient", 1, long_ago)])
        .await
        .unwrap();
    store.close().await.unwrap();
    let mut config = config(&server, &scratch);
    config.retention.keep_finished = Duration::ZERO;
    let daemon = Daemon::start(config).await.unwrap();
    let client = common::TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    client.barrier("acme").await; // the daemon has been up long enough to have swept
    assert!(
        daemon
            .persistence()
            .get("acme", "ancient")
            .await
            .unwrap()
            .is_some()
    );
    daemon.shutdown().await.unwrap();
}

/// Tombstones in the backlog: more than a second of steps can delete at their pace (at most
/// one step of `MAX_STEP` rows per `PAUSE`), so the sweep is still under way when the second
/// watched ends, whether or not it keeps its pace.
const BACKLOG: usize = 60_000;

/// While a sweep works off a backlog, its steps keep their pace (one per pause): no second
/// sweep runs beside it, and no step follows another without its pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_under_way_keeps_its_pace_of_one_step_per_pause() {
    let scratch = Scratch::new();
    let database = scratch.database();
    migrate(&database).await.unwrap();
    let store = Store::open(&database).await.unwrap().with_callers_clock();
    let long_ago = Utc::now() - chrono::Duration::days(400);
    let commands: Vec<_> = (0..BACKLOG)
        .map(|i| cancel_at("acme", &format!("gone-{i}"), i as u64 + 1, long_ago))
        .collect();
    for chunk in commands.chunks(5_000) {
        store.apply(chunk).await.unwrap();
    }
    store.close().await.unwrap();

    let registry = Registry::new("janitor-pace-test");
    let real = common::persistence::start(&scratch, &registry, false).await;
    let steps = Arc::new(AtomicUsize::new(0));
    // Counts the background operations (the sweep's steps) on their way to Persistence.
    let persistence = {
        let steps = steps.clone();
        common::persistence::stand_in(&registry, &real, move |message| {
            if let PersistenceMsg::Run(operation) = &message
                && operation.class == Class::Background
            {
                steps.fetch_add(1, Ordering::SeqCst);
            }
            Some(message)
        })
        .await
    };
    let (janitor, _) = Actor::spawn(
        None,
        Janitor::default(),
        JanitorArgs {
            registry: registry.clone(),
            clock: Arc::new(SystemClock),
            keep_finished: Duration::from_secs(3600),
        },
    )
    .await
    .unwrap();
    // The sweep is under way once its first step was asked for.
    eventually(
        Duration::from_secs(10),
        "the sweep's first step",
        || async { (steps.load(Ordering::SeqCst) > 0).then_some(()) },
    )
    .await;
    // The pace is what is measured: steps asked for over one second.
    let watched = Duration::from_secs(1);
    let before = steps.load(Ordering::SeqCst);
    tokio::time::sleep(watched).await;
    let asked = steps.load(Ordering::SeqCst) - before;
    let one_sweep = (watched.as_millis() / PAUSE.as_millis()) as usize + 2;
    assert!(
        asked <= one_sweep,
        "{asked} steps in {watched:?}: more than one sweep's pace ({one_sweep})"
    );
    let left: i64 = rows_by_state(&database).await.values().sum();
    assert!(left > 0, "the backlog lasted the second watched");
    janitor.stop(None);
    persistence.stop(None);
    real.stop(None);
}
