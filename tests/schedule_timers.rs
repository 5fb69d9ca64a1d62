//! `ScheduleTimers` (docs/CONTRACT.md §3): many timers in one message. Each of its timers fires
//! once and on time, the message is acknowledged once all of them are stored, a bad timer
//! rejects the whole message with its position and stores none of it, a timer the database
//! refuses is rejected alone, a quota refuses the message whole, and a daemon killed while it
//! takes in a backlog of them loses none.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::quota_checks::{later, pending};
use common::{
    DaemonProcess, NatsServer, Scratch, TestClient, eventually, rfc3339, schedule_timers_command,
};
use serde_json::{Value, json};
use timer_service::config::TenantQuotaSettings;

/// One timer of a ScheduleTimers.
fn timer(id: &str, due_at: DateTime<Utc>) -> Value {
    json!({ "serviceCallId": id, "dueAt": rfc3339(due_at) })
}

async fn publish(client: &TestClient, tenant: &str, message: &Value) {
    client
        .publish_raw(
            &format!("timer.cmd.schedule-many.{tenant}"),
            serde_json::to_vec(message).expect("json"),
        )
        .await;
}

/// The reasons published for `tenant`'s rejected commands.
async fn reasons(client: &TestClient, tenant: &str) -> Vec<String> {
    client
        .events(&format!("timer.evt.rejected.{tenant}"))
        .await
        .iter()
        .map(|e| e.envelope["payload"]["reason"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_timer_of_a_schedule_timers_fires_once_on_time() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let process = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;

    // 2,000 timers in three messages, due over a second from 1.5 s on; the first message's
    // timers take the envelope's correlation id but one, which names its own.
    let start = common::millis(Utc::now() + chrono::Duration::milliseconds(1_500));
    let ids: Vec<String> = (0..2_000).map(|i| format!("m-{i:04}")).collect();
    let due = |i: usize| start + chrono::Duration::milliseconds((i / 2) as i64);
    for (m, chunk) in [0..800, 800..1_600, 1_600..2_000].into_iter().enumerate() {
        let mut timers: Vec<Value> = chunk.map(|i| timer(&ids[i], due(i))).collect();
        if m == 0 {
            timers[5]["correlationId"] = json!("its-own");
        }
        publish(
            &client,
            "acme",
            &schedule_timers_command("acme", timers, Some("batch-1")),
        )
        .await;
    }
    // A CancelTimer published after the messages wins over them for its key.
    let cancel = common::cancel_command("acme", &ids[1_999]);
    client
        .publish_raw(
            "timer.cmd.cancel.acme",
            serde_json::to_vec(&cancel).unwrap(),
        )
        .await;

    let expected = &ids[..1_999];
    let events = client
        .await_all_fired("acme", expected, Duration::from_secs(30))
        .await;
    client.await_commands_applied(Duration::from_secs(10)).await;
    client.barrier("acme").await;
    let events = client
        .events("timer.evt.due.acme")
        .await
        .len()
        .max(events.len());
    let mut per_key: HashMap<String, usize> = HashMap::new();
    let mut correlation: HashMap<String, String> = HashMap::new();
    for event in client.events("timer.evt.due.acme").await {
        let id = event.service_call_id().to_owned();
        if id.starts_with("sentinel-") {
            continue;
        }
        let late = event.stored_at - event.due_at();
        assert!(late >= chrono::Duration::zero(), "{id} fired early");
        correlation.insert(
            id.clone(),
            event.envelope["correlationId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        *per_key.entry(id).or_default() += 1;
    }
    assert_eq!(
        per_key.len(),
        1_999,
        "each timer but the cancelled one fired ({events} events)"
    );
    assert!(
        per_key.values().all(|&n| n == 1),
        "a timer fired twice without a fault"
    );
    assert!(
        !per_key.contains_key(&ids[1_999]),
        "the cancelled key fired"
    );
    assert_eq!(correlation[&ids[5]], "its-own");
    assert_eq!(correlation[&ids[6]], "batch-1");
    assert_eq!(correlation[&ids[900]], "batch-1");
    assert!(
        client.events("timer.evt.rejected.acme").await.is_empty(),
        "nothing was rejected"
    );
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_timer_rejects_its_whole_message_and_stores_none_of_it() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let process = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;

    let soon = Utc::now() + chrono::Duration::milliseconds(500);
    let batch = |prefix: &str, n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| timer(&format!("{prefix}-{i}"), soon))
            .collect()
    };
    let mut bad_due = batch("bad-due", 5);
    bad_due[2]["dueAt"] = json!("next tuesday");
    let mut twice = batch("twice", 4);
    twice[3]["serviceCallId"] = json!("twice-1");
    let mut bad_id = batch("bad-id", 3);
    bad_id[1]["serviceCallId"] = json!("");
    let mut bad_data = batch("bad-data", 3);
    bad_data[0]["data"] = json!("x".repeat(17 * 1024));
    let too_many: Vec<Value> = (0..1_001).map(|i| timer(&i.to_string(), soon)).collect();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "bad-due",
            schedule_timers_command("acme", bad_due, None),
            "timers[2]: dueAt",
        ),
        (
            "twice",
            schedule_timers_command("acme", twice, None),
            "timers[3]: serviceCallId \"twice-1\" is named twice",
        ),
        (
            "bad-id",
            schedule_timers_command("acme", bad_id, None),
            "timers[1]: serviceCallId",
        ),
        (
            "bad-data",
            schedule_timers_command("acme", bad_data, None),
            "timers[0]: data is",
        ),
        (
            "empty",
            schedule_timers_command("acme", vec![], None),
            "timers is empty",
        ),
        (
            "too-many",
            schedule_timers_command("acme", too_many, None),
            "more than the 1000",
        ),
    ];
    for (_, message, _) in &cases {
        publish(&client, "acme", message).await;
    }
    // The same timers on ScheduleTimer's subject are refused for their type, and a good
    // message right after them all is stored and fires.
    let good = schedule_timers_command("acme", batch("good", 50), None);
    client
        .publish_raw(
            "timer.cmd.schedule.acme",
            serde_json::to_vec(&good).unwrap(),
        )
        .await;
    publish(&client, "acme", &good).await;
    let good_ids: Vec<String> = (0..50).map(|i| format!("good-{i}")).collect();
    client
        .await_all_fired("acme", &good_ids, Duration::from_secs(20))
        .await;
    client.await_commands_applied(Duration::from_secs(10)).await;

    let reasons = eventually(Duration::from_secs(10), "every rejection", || async {
        let reasons = reasons(&client, "acme").await;
        (reasons.len() > cases.len()).then_some(reasons)
    })
    .await;
    assert_eq!(
        reasons.len(),
        cases.len() + 1,
        "one rejection per bad message: {reasons:?}"
    );
    for (name, _, reason) in &cases {
        assert!(
            reasons.iter().any(|r| r.contains(reason)),
            "{name}: no rejection says {reason:?}: {reasons:?}"
        );
    }
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("unknown message type \"ScheduleTimers\"")),
        "{reasons:?}"
    );
    let fired = client.fired_ids("acme").await;
    assert_eq!(
        fired.len(),
        50,
        "only the good message's timers fired: {:?}",
        fired
            .iter()
            .filter(|id| !id.starts_with("good-"))
            .collect::<Vec<_>>()
    );
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());
}

/// A tenant allowed 1,000 pending timers: a message of 800 fits, one of 300 after it would
/// not and is refused whole, once, with the limit's reason; a single ScheduleTimer after it
/// still fits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_refuses_a_schedule_timers_whole() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let mut config = common::config(&server, &scratch);
    config.quotas.tenants = BTreeMap::from([(
        "acme".to_owned(),
        TenantQuotaSettings {
            max_pending: Some(1_000),
            ..TenantQuotaSettings::default()
        },
    )]);
    let daemon = timer_service::Daemon::start(config).await.unwrap();
    client.wait_for_command_stream().await;

    let fits: Vec<Value> = (0..800)
        .map(|i| timer(&format!("a-{i}"), later()))
        .collect();
    let past: Vec<Value> = (0..300)
        .map(|i| timer(&format!("b-{i}"), later()))
        .collect();
    publish(
        &client,
        "acme",
        &schedule_timers_command("acme", fits, None),
    )
    .await;
    publish(
        &client,
        "acme",
        &schedule_timers_command("acme", past, None),
    )
    .await;
    client.schedule("acme", "single", later(), None).await;
    client.await_commands_applied(Duration::from_secs(20)).await;

    assert_eq!(pending(&scratch, "acme").await, 801);
    let refused = eventually(Duration::from_secs(10), "the rejection", || async {
        let events = client.events("timer.evt.rejected.acme").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(refused.len(), 1, "the message is reported once");
    let reason = refused[0].envelope["payload"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("quota exceeded: max_pending 1000 for tenant acme"),
        "{reason}"
    );
    assert_eq!(
        refused[0]
            .msg_id
            .as_deref()
            .map(|id| id.matches('-').count()),
        Some(1)
    );
    let stored: HashSet<String> = common::query_rows(
        &scratch.database(),
        "SELECT service_call_id FROM timer_schedules WHERE service_call_id LIKE 'b-%'",
        |row| row.try_get_by_index::<String>(0).expect("id"),
    )
    .await
    .into_iter()
    .collect();
    assert!(
        stored.is_empty(),
        "a refused message stored {} timers",
        stored.len()
    );
    daemon.shutdown().await.unwrap();
}

/// 24,000 timers in 30 messages, queued while the daemon is stopped; the daemon is killed with
/// SIGKILL once it has stored some of them, and started again: every timer fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_it_takes_in_schedule_timers_loses_none() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let process = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());

    let due = common::millis(Utc::now() + chrono::Duration::seconds(8));
    let ids: Vec<String> = (0..24_000).map(|i| format!("k-{i:05}")).collect();
    for chunk in ids.chunks(800) {
        let timers = chunk.iter().map(|id| timer(id, due)).collect();
        publish(
            &client,
            "acme",
            &schedule_timers_command("acme", timers, None),
        )
        .await;
    }
    let process = DaemonProcess::start(&server, &scratch);
    eventually(Duration::from_secs(30), "some messages stored", || async {
        let left = client.commands_outstanding().await;
        (left < 30).then_some(())
    })
    .await;
    process.kill9();
    let stored_at_kill = pending(&scratch, "acme").await;
    assert!(
        stored_at_kill < ids.len() as i64,
        "the kill came after every timer was stored"
    );

    let process = DaemonProcess::start(&server, &scratch);
    client
        .await_all_fired("acme", &ids, Duration::from_secs(60))
        .await;
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());
}

/// A timer the database refuses (the test's database refuses one correlation id that
/// validation accepts) is rejected alone, naming its position; the message's other timers are
/// stored and fire, and the message is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_the_database_refuses_is_rejected_alone_and_the_rest_stored() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    common::database::poison(&scratch.database()).await;
    let client = TestClient::connect(&server).await;
    let process = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;

    let due = common::millis(Utc::now() + chrono::Duration::seconds(2));
    let mut timers: Vec<Value> = (0..20).map(|i| timer(&format!("p-{i}"), due)).collect();
    timers[7]["correlationId"] = json!("poison");
    publish(
        &client,
        "acme",
        &schedule_timers_command("acme", timers, None),
    )
    .await;
    let stored: Vec<String> = (0..20)
        .filter(|&i| i != 7)
        .map(|i| format!("p-{i}"))
        .collect();
    client
        .await_all_fired("acme", &stored, Duration::from_secs(20))
        .await;
    client.await_commands_applied(Duration::from_secs(10)).await;
    let refused = client
        .await_events("timer.evt.rejected.acme", 1, Duration::from_secs(10))
        .await;
    assert_eq!(refused.len(), 1, "one timer refused");
    let reason = refused[0].envelope["payload"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("timers[7]: refused by the database:"),
        "{reason}"
    );
    assert!(
        refused[0]
            .msg_id
            .as_deref()
            .is_some_and(|id| id.ends_with("-7")),
        "{:?}",
        refused[0].msg_id
    );
    assert!(!client.fired_ids("acme").await.contains("p-7"));
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());
}
