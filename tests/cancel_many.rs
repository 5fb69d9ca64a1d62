//! Cancelling many timers at once (docs/CONTRACT.md §3, §6): `CancelTimers` by a filter, as a
//! command and through the API (with `dryRun`); it cancels only the tenant's pending timers it
//! selects, never one a newer command scheduled, and a crash or a broker restart half-way
//! neither loses nor strands it. Against real daemons on their own broker and database.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually};
use serde_json::{Value, json};
use timer_service::storage::db::DatabaseTarget;

async fn ok(client: &TestClient, subject: &str, body: Value) -> Value {
    match client.api_request(subject, body).await {
        (None, body) => body,
        (Some(code), body) => panic!("{subject}: error {code}: {body}"),
    }
}

/// `tenant`'s timers by state, from the API; not the barriers' sentinels, which fired but may
/// not be marked yet (they show as Scheduled until then).
async fn states(client: &TestClient, tenant: &str) -> BTreeMap<String, Vec<String>> {
    let mut by_state: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut after: Option<String> = None;
    loop {
        let mut body = json!({ "limit": 1000 });
        if let Some(after) = &after {
            body["after"] = json!(after);
        }
        let page = ok(client, &format!("timer.api.list.{tenant}"), body).await;
        for timer in page["timers"].as_array().unwrap() {
            if timer["serviceCallId"]
                .as_str()
                .unwrap()
                .starts_with("sentinel-")
            {
                continue;
            }
            by_state
                .entry(timer["state"].as_str().unwrap().to_owned())
                .or_default()
                .push(timer["serviceCallId"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return by_state,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_cancels_what_its_filter_selects_and_counts_it_and_a_dry_run_cancels_nothing() {
    let (_server, _scratch, _daemon, client) = common::started().await;
    client.api_ready().await;
    let hour = Utc::now() + chrono::Duration::hours(1);
    for i in 0..5 {
        let id = format!("a-{i}");
        client.schedule("acme", &id, hour, Some("batch-a")).await;
        client
            .schedule("acme", &format!("b-{i}"), hour, Some("batch-b"))
            .await;
    }
    for i in 0..3 {
        let due = hour + chrono::Duration::hours(1 + i);
        client
            .schedule("acme", &format!("late-{i}"), due, None)
            .await;
    }
    client
        .schedule("globex", "a-0", hour, Some("batch-a"))
        .await;
    client.barrier("acme").await;
    client.barrier("globex").await;
    let many = "timer.api.cancel-many.acme";

    let dry = ok(
        &client,
        many,
        json!({ "correlationId": "batch-a", "dryRun": true }),
    )
    .await;
    assert_eq!(dry, json!({ "count": 5, "dryRun": true }));
    assert_eq!(
        states(&client, "acme").await["Scheduled"].len(),
        13,
        "a dry run cancels nothing"
    );

    let by_correlation = ok(&client, many, json!({ "correlationId": "batch-a" })).await;
    assert_eq!(by_correlation, json!({ "count": 5, "dryRun": false }));
    let from = common::rfc3339(hour + chrono::Duration::minutes(30));
    let by_range = ok(&client, many, json!({ "dueFrom": from })).await;
    assert_eq!(by_range["count"], 3);
    let again = ok(&client, many, json!({ "correlationId": "batch-a" })).await;
    assert_eq!(again["count"], 0, "nothing pending is left to it");
    let acme = states(&client, "acme").await;
    assert_eq!(acme["Cancelled"].len(), 8);
    assert_eq!(acme["Scheduled"].len(), 5);
    assert!(
        acme["Scheduled"].iter().all(|id| id.starts_with("b-")),
        "{acme:?}"
    );
    let everything = ok(&client, many, json!({ "all": true })).await;
    assert_eq!(everything["count"], 5);
    assert!(!states(&client, "acme").await.contains_key("Scheduled"));
    assert_eq!(
        states(&client, "globex").await["Scheduled"],
        ["a-0"],
        "another tenant's timer of the same correlation id is not touched"
    );

    for bad in [
        json!({}),
        json!({ "dryRun": true }),
        json!({ "all": true, "correlationId": "batch-b" }),
        json!({ "dueFrom": "tomorrow" }),
        json!({ "serviceCallId": "a-0" }),
    ] {
        let (code, body) = client.api_request(many, bad.clone()).await;
        assert_eq!(code, Some(400), "{bad}: {body}");
    }
    // Every CancelTimers the API published was applied from the stream too, and acknowledged.
    client.await_commands_applied(Duration::from_secs(10)).await;
}

/// A cancel of thousands, published as a command between schedules: the timers whose last
/// command came before it are cancelled, the ones a newer command scheduled (a reschedule, a
/// new key) are not, whatever order the daemon applies them in; a command of the same line
/// behind it is not held up until it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_many_keeps_its_place_in_the_stream_against_racing_schedules() {
    let (_server, _scratch, _daemon, client) = common::started().await;
    client.api_ready().await;
    let due = Utc::now() + chrono::Duration::hours(1);
    let before: Vec<String> = (0..5_000).map(|i| format!("k-{i:05}")).collect();
    client.schedule_many("acme", &before, due).await;
    client
        .publish_raw(
            "timer.cmd.cancel-many.acme",
            serde_json::to_vec(&common::cancel_timers_command(
                "acme",
                json!({ "all": true }),
            ))
            .unwrap(),
        )
        .await;
    // Newer than the cancel: reschedules of some of its timers, and new keys.
    let rescheduled: Vec<String> = before.iter().step_by(500).cloned().collect();
    let later = due + chrono::Duration::minutes(5);
    client.schedule_many("acme", &rescheduled, later).await;
    let fresh: Vec<String> = (0..10).map(|i| format!("fresh-{i}")).collect();
    client.schedule_many("acme", &fresh, due).await;
    // The commands behind it were not held up by it.
    client.barrier("acme").await;
    client.await_commands_applied(Duration::from_secs(60)).await;
    let acme = states(&client, "acme").await;
    let mut scheduled = acme["Scheduled"].clone();
    scheduled.sort();
    let mut expected: Vec<String> = rescheduled.iter().chain(&fresh).cloned().collect();
    expected.sort();
    assert_eq!(scheduled, expected);
    assert_eq!(acme["Cancelled"].len(), before.len() - rescheduled.len());
    let timer = ok(
        &client,
        "timer.api.get.acme",
        json!({ "serviceCallId": rescheduled[0] }),
    )
    .await;
    assert_eq!(
        timer["timer"]["dueAt"],
        common::rfc3339(common::millis(later))
    );
}

/// Timers of a cancel of all that its first steps cannot finish.
const CUT_TOTAL: i64 = 40_000;

/// A daemon process on its own broker and database, and a client once the command stream is
/// there.
async fn one_daemon() -> (
    NatsServer,
    Scratch,
    DatabaseTarget,
    DaemonProcess,
    TestClient,
) {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let database = scratch.database();
    let daemon = DaemonProcess::start(&server, &scratch);
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    (server, scratch, database, daemon, client)
}

/// `CUT_TOTAL` pending timers of acme, then a `CancelTimers` of all of them; returns once its
/// first steps committed, with how many they cancelled.
async fn begin_a_long_cancel(client: &TestClient, database: &DatabaseTarget) -> i64 {
    let ids: Vec<String> = (0..CUT_TOTAL).map(|i| format!("k-{i:06}")).collect();
    let due = Utc::now() + chrono::Duration::hours(1);
    client.schedule_many("acme", &ids, due).await;
    // Every one stored before the cancel is sent: a barrier's 15 s is too short for 40,000 on
    // PostgreSQL beside the rest of the suite on a slow machine.
    client.await_commands_applied(Duration::from_secs(90)).await;
    client
        .publish_raw(
            "timer.cmd.cancel-many.acme",
            serde_json::to_vec(&common::cancel_timers_command(
                "acme",
                json!({ "all": true }),
            ))
            .unwrap(),
        )
        .await;
    eventually(
        Duration::from_secs(30),
        "the first steps to commit",
        || async {
            let n = cancelled(database).await;
            (n > 0).then_some(n)
        },
    )
    .await
}

async fn cancelled(database: &DatabaseTarget) -> i64 {
    common::rows_by_state(database)
        .await
        .get("Cancelled")
        .copied()
        .unwrap_or(0)
}

/// Every timer of the cut cancel ends cancelled, and its command is acknowledged (the stream
/// empties).
async fn assert_finished(client: &TestClient, database: &DatabaseTarget) {
    assert_finished_with(client, database, CUT_TOTAL).await;
}

/// Every timer ends cancelled (`total` of them), and the commands are acknowledged.
async fn assert_finished_with(client: &TestClient, database: &DatabaseTarget, total: i64) {
    // Generous: beside the rest of the suite, a debug build's cancel of 40,000 takes tens of
    // seconds.
    eventually(Duration::from_secs(120), "the cancel to finish", || async {
        (cancelled(database).await == total).then_some(())
    })
    .await;
    client.await_commands_applied(Duration::from_secs(30)).await;
    let by_state = common::rows_by_state(database).await;
    assert_eq!(by_state.get("Scheduled"), None, "{by_state:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_many_cut_by_a_crash_resumes_and_finishes() {
    let (server, scratch, database, daemon, client) = one_daemon().await;
    let at_kill = begin_a_long_cancel(&client, &database).await;
    daemon.kill9();
    let at_kill = at_kill.max(cancelled(&database).await);
    assert!(
        at_kill < CUT_TOTAL,
        "the cancel finished before the kill ({at_kill} of {CUT_TOTAL}): nothing was cut"
    );

    let restarted = DaemonProcess::start(&server, &scratch);
    assert_finished(&client, &database).await;
    eprintln!("cut at {at_kill} of {CUT_TOTAL} cancelled; the restart cancelled the rest");
    restarted.signal(libc::SIGTERM);
    assert!(restarted.wait_exit(Duration::from_secs(25)).await.success());
}

/// The broker restarted while the daemon holds the `CancelTimers`'s delivery (in progress
/// until the last step): the steps go on, the copy the broker delivers again joins the job
/// under way (or finds nothing left), and the command is acknowledged at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_while_a_cancel_many_runs_loses_and_strands_nothing() {
    let (mut server, _scratch, database, daemon, client) = one_daemon().await;
    let at_restart = begin_a_long_cancel(&client, &database).await;
    server.restart();
    assert!(
        at_restart < CUT_TOTAL,
        "the cancel finished before the restart ({at_restart} of {CUT_TOTAL})"
    );
    let client = TestClient::connect(&server).await;
    assert_finished(&client, &database).await;
    eprintln!("broker restarted at {at_restart} of {CUT_TOTAL} cancelled");
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(25)).await.success());
}

/// A `CancelTimers` under way (held unacknowledged until its last step) does not hold a later
/// one of the same tenant: the later one waits only for its tenant's schedules and cancels
/// before it, and takes turns with the earlier one's steps. Before, it waited for the earlier
/// one to be acknowledged, up to its 10 s bound, so a flow of cancels crawled one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_many_is_not_held_behind_an_earlier_one_under_way() {
    let (_server, _scratch, database, daemon, client) = one_daemon().await;
    begin_a_long_cancel(&client, &database).await;
    let later: Vec<String> = (0..4).map(|i| format!("later-{i}")).collect();
    for id in &later {
        let command = common::schedule_command(
            "acme",
            id,
            &common::rfc3339(Utc::now() + chrono::Duration::hours(1)),
            Some("later"),
        );
        client
            .publish_raw(
                "timer.cmd.schedule.acme",
                serde_json::to_vec(&command).unwrap(),
            )
            .await;
    }
    client
        .publish_raw(
            "timer.cmd.cancel-many.acme",
            serde_json::to_vec(&common::cancel_timers_command(
                "acme",
                json!({ "correlationId": "later" }),
            ))
            .unwrap(),
        )
        .await;
    // Within the bound of a wait for earlier commands: one that waited it out is what broke.
    let pending_then = eventually(
        Duration::from_secs(9),
        "the later cancel's timers cancelled",
        || async {
            let later = common::query_rows(
                &database,
                "SELECT COUNT(*) FROM timer_schedules \
                 WHERE correlation_id = 'later' AND state = 'Cancelled'",
                |row| row.try_get_by_index::<i64>(0).expect("count"),
            )
            .await;
            if later[0] < 4 {
                return None;
            }
            common::rows_by_state(&database)
                .await
                .get("Scheduled")
                .copied()
        },
    )
    .await;
    assert!(
        pending_then > 0,
        "the earlier cancel was over before the later one was done"
    );
    assert_finished_with(&client, &database, CUT_TOTAL + 4).await;
    eprintln!("the later cancel was done with {pending_then} of the earlier one's still pending");
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(25)).await.success());
}
