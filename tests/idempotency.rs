//! One timer per `(tenantId, serviceCallId)`: duplicates, reschedules, commands after firing and
//! stale redeliveries follow the rules of docs/CONTRACT.md §3.

mod common;

use std::time::Duration;

use chrono::Utc;
use timer_service::domain::TimerState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_command_fires_once() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let due_at = Utc::now() + chrono::Duration::milliseconds(800);
    for _ in 0..3 {
        client.schedule("acme", "dup", due_at, Some("same")).await;
    }
    client
        .await_due("acme", "dup", Duration::from_secs(10))
        .await;
    client.barrier("acme").await;
    assert_eq!(client.count_due("acme", "dup").await, 1);
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reschedule_before_due_fires_only_at_the_new_time() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let first = Utc::now() + chrono::Duration::milliseconds(1500);
    let second = common::millis(first + chrono::Duration::milliseconds(1500));
    client.schedule("acme", "moved", first, Some("v1")).await;
    client.schedule("acme", "moved", second, Some("v2")).await;

    let event = client
        .await_due("acme", "moved", Duration::from_secs(10))
        .await;
    assert_eq!(event.due_at(), second);
    assert!(event.stored_at >= second, "fired before the new dueAt");
    assert_eq!(event.envelope["correlationId"], "v2");
    client.barrier("acme").await;
    assert_eq!(client.count_due("acme", "moved").await, 1);
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_after_the_timer_fired_is_ignored() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.schedule("acme", "done", Utc::now(), None).await;
    client
        .await_due("acme", "done", Duration::from_secs(10))
        .await;
    // Fired: published and marked `Reached` (between the two, a ScheduleTimer would still
    // reschedule it, as for any timer whose event is in flight).
    common::await_state(&daemon.persistence(), "acme", "done", TimerState::Reached).await;

    let later = Utc::now() + chrono::Duration::milliseconds(300);
    client.schedule("acme", "done", later, None).await;
    // A sentinel due after `later` has fired: the ignored command had its chance to fire.
    let id = "after-later";
    client
        .schedule(
            "acme",
            id,
            later + chrono::Duration::milliseconds(300),
            None,
        )
        .await;
    client.await_due("acme", id, Duration::from_secs(10)).await;

    assert_eq!(client.count_due("acme", "done").await, 1);
    common::await_state(&daemon.persistence(), "acme", "done", TimerState::Reached).await;
    daemon.shutdown().await.unwrap();
}

/// The broker only redelivers an older command after a newer one after a crash; here the two
/// writes reach the running daemon's Persistence actor directly, in that order, and the timer
/// must fire at the newer command's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_command_applied_after_a_newer_one_has_no_effect() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let newer_due = common::millis(Utc::now() + chrono::Duration::milliseconds(1500));
    let older_due = common::millis(Utc::now() + chrono::Duration::milliseconds(200));
    let entry = |seq: u64, due_at, correlation: &str| timer_service::domain::Command {
        correlation_id: correlation.into(),
        ..common::schedule_at("acme", "ordered", seq, due_at)
    };
    let persistence = daemon.persistence();
    assert_eq!(
        persistence
            .apply(vec![entry(10, newer_due, "newer")])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        persistence
            .apply(vec![entry(3, older_due, "older")])
            .await
            .unwrap(),
        0
    );

    let event = client
        .await_due("acme", "ordered", Duration::from_secs(10))
        .await;
    assert_eq!(event.due_at(), newer_due);
    assert_eq!(event.envelope["correlationId"], "newer");
    assert!(event.stored_at >= newer_due);
    daemon.shutdown().await.unwrap();
}

/// Two daemons on one PostgreSQL database (docs/CONTRACT.md §3): a schedule and the cancel just
/// after it in the stream, delivered to two daemons and committed in the other order. The
/// cancel holds: the older schedule changes nothing, the timer keeps what the schedule before
/// them carried, and it never fires, on either daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_one_daemon_commits_before_the_schedule_it_follows_holds_on_the_other() {
    let Some(scratch) = common::Scratch::postgres_only("two daemons share a PostgreSQL database")
    else {
        return;
    };
    let server = common::NatsServer::start();
    let start = |name: &str| {
        let config = timer_service::Config {
            name: Some(name.into()),
            ..common::config(&server, &scratch)
        };
        timer_service::Daemon::start(config)
    };
    let (first, second) = (
        start("first").await.unwrap(),
        start("second").await.unwrap(),
    );
    let client = common::TestClient::connect(&server).await;
    client.wait_for_command_stream().await;

    let now = Utc::now();
    let before = common::millis(now + chrono::Duration::milliseconds(600));
    let raced = common::millis(now + chrono::Duration::milliseconds(300));
    let (one, other) = (first.persistence(), second.persistence());
    let schedule = |seq, due| common::schedule_at("acme", "raced", seq, due);
    assert_eq!(one.apply(vec![schedule(5, before)]).await.unwrap(), 1);
    let cancel = common::cancel_at("acme", "raced", 11, now);
    assert_eq!(other.apply(vec![cancel]).await.unwrap(), 1);
    assert_eq!(
        one.apply(vec![schedule(10, raced)]).await.unwrap(),
        0,
        "the schedule is older than the cancel committed before it"
    );

    // A timer due after both `dueAt`s: once it has fired, the raced one would have too.
    let control = now + chrono::Duration::milliseconds(1200);
    client.schedule("acme", "control", control, None).await;
    client
        .await_due("acme", "control", Duration::from_secs(10))
        .await;
    assert_eq!(client.count_due("acme", "raced").await, 0);
    for persistence in [&one, &other] {
        let timer = persistence.get("acme", "raced").await.unwrap().unwrap();
        assert_eq!(timer.state, TimerState::Cancelled);
        assert_eq!(
            (
                timer.due_at,
                timer.correlation_id.as_str(),
                timer.cancelled_seq
            ),
            (Some(before), "corr-5", Some(11)),
            "the cancelled timer keeps the schedule before the two"
        );
    }
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}
