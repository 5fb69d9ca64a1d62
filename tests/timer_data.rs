//! Data with a timer (docs/CONTRACT.md §3): a ScheduleTimer's `data` is stored, shown by the
//! API's `get` and `list`, and echoed in DueTimeReached; a reschedule replaces it (one without
//! data clears it), a cancel keeps it; `data` past `max_data_bytes` is rejected with its reason
//! and the commands around it are stored. On SQLite, and on PostgreSQL with
//! `TEST_DATABASE=postgres`.

mod common;

use std::time::Duration;

use chrono::Utc;
use common::{NatsServer, Scratch, TestClient, claimant, config, rfc3339, schedule_command};
use serde_json::{Value, json};
use timer_service::Daemon;
use timer_service::domain::{Action, Command, TimerData};
use timer_service::storage::Store;
use timer_service::storage::db::migrate;

/// A ScheduleTimer of tenant `acme` for `id`, carrying `data` when given.
fn with_data(id: &str, due: chrono::DateTime<Utc>, data: Option<Value>) -> Vec<u8> {
    let mut command = schedule_command("acme", id, &rfc3339(due), None);
    if let Some(data) = data {
        command["payload"]["data"] = data;
    }
    serde_json::to_vec(&command).expect("json")
}

async fn send(client: &TestClient, id: &str, due: chrono::DateTime<Utc>, data: Option<Value>) {
    client
        .publish_raw("timer.cmd.schedule.acme", with_data(id, due, data))
        .await;
}

/// The API's `get` of `id`: the timer as JSON.
async fn get(client: &TestClient, id: &str) -> Value {
    let (code, body) = client
        .api_request("timer.api.get.acme", json!({ "serviceCallId": id }))
        .await;
    assert_eq!(code, None, "{body}");
    body["timer"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_stored_shown_and_echoed_when_the_timer_fires() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let data = json!({ "orderId": 42, "lines": [{ "sku": "a-1", "qty": 2 }], "note": "é\n\"x\"" });
    let later = Utc::now() + chrono::Duration::hours(1);
    send(&client, "order-42", later, Some(data.clone())).await;
    send(&client, "plain", later, None).await;
    client.barrier("acme").await;

    let timer = get(&client, "order-42").await;
    assert_eq!(timer["data"], data, "{timer}");
    assert!(get(&client, "plain").await.get("data").is_none());
    let (_, listed) = client
        .api_request("timer.api.list.acme", json!({ "state": "Scheduled" }))
        .await;
    let listed: Vec<&Value> = listed["timers"]
        .as_array()
        .expect("timers")
        .iter()
        .collect();
    let order = listed
        .iter()
        .find(|t| t["serviceCallId"] == "order-42")
        .expect("listed");
    assert_eq!(order["data"], data);

    // Rescheduled to fire now, with the same data: the event carries it.
    send(&client, "order-42", Utc::now(), Some(data.clone())).await;
    let event = client
        .await_due("acme", "order-42", Duration::from_secs(15))
        .await;
    assert_eq!(
        event.envelope["payload"]["data"], data,
        "{:?}",
        event.envelope
    );
    send(&client, "plain", Utc::now(), None).await;
    let event = client
        .await_due("acme", "plain", Duration::from_secs(15))
        .await;
    assert!(
        event.envelope["payload"].get("data").is_none(),
        "no data, no field: {:?}",
        event.envelope
    );
    daemon.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reschedule_replaces_the_data_and_a_cancel_keeps_it() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let later = Utc::now() + chrono::Duration::hours(1);
    send(&client, "k", later, Some(json!({ "v": 1 }))).await;
    send(&client, "k", later, Some(json!([2, "two"]))).await;
    client.barrier("acme").await;
    assert_eq!(get(&client, "k").await["data"], json!([2, "two"]));

    send(&client, "k", later, None).await;
    client.barrier("acme").await;
    assert!(get(&client, "k").await.get("data").is_none(), "cleared");

    send(&client, "k", later, Some(json!("three"))).await;
    let (_, cancelled) = client
        .api_request("timer.api.cancel.acme", json!({ "serviceCallId": "k" }))
        .await;
    assert_eq!(cancelled["outcome"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["timer"]["data"], json!("three"));
    assert_eq!(get(&client, "k").await["data"], json!("three"));

    // Scheduled again after the cancel, the new data fires.
    send(&client, "k", Utc::now(), Some(json!({ "v": 4 }))).await;
    let event = client.await_due("acme", "k", Duration::from_secs(15)).await;
    assert_eq!(event.envelope["payload"]["data"], json!({ "v": 4 }));
    daemon.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_past_the_limit_is_rejected_and_the_rest_of_its_batch_is_stored() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let settings = || timer_service::Config {
        max_data_bytes: 100,
        ..config(&server, &scratch)
    };
    // The daemon makes the command stream, then stops: the commands below wait in the stream
    // and are pulled together, one batch.
    let daemon = Daemon::start(settings()).await.expect("daemon starts");
    client.wait_for_command_stream().await;
    daemon.shutdown().await.expect("shutdown");

    let due = Utc::now() + chrono::Duration::milliseconds(500);
    let at_limit = json!("x".repeat(98));
    let over = json!("x".repeat(99));
    send(&client, "before", due, Some(json!({ "n": 1 }))).await;
    send(&client, "at-limit", due, Some(at_limit.clone())).await;
    send(&client, "over", due, Some(over)).await;
    send(&client, "after", due, None).await;

    let daemon = Daemon::start(settings()).await.expect("daemon starts");
    let ids: Vec<String> = ["before", "at-limit", "after"].map(String::from).to_vec();
    let events = client
        .await_all_fired("acme", &ids, Duration::from_secs(15))
        .await;
    let fired = |id: &str| {
        events
            .iter()
            .find(|e| e.service_call_id() == id)
            .map(|e| e.envelope["payload"]["data"].clone())
    };
    assert_eq!(fired("before"), Some(json!({ "n": 1 })));
    assert_eq!(fired("at-limit"), Some(at_limit));
    assert_eq!(fired("after"), Some(Value::Null), "no data field");
    assert_eq!(fired("over"), None, "the rejected timer never fires");

    let rejected = client
        .await_events("timer.evt.rejected.acme", 1, Duration::from_secs(10))
        .await;
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let payload = &rejected[0].envelope["payload"];
    assert_eq!(
        payload["reason"],
        "data is 101 bytes, more than the 100-byte limit (max_data_bytes)"
    );
    assert!(
        payload["original"]
            .as_str()
            .unwrap_or_default()
            .contains("\"over\"")
    );
    let (code, _) = client
        .api_request("timer.api.get.acme", json!({ "serviceCallId": "over" }))
        .await;
    assert_eq!(code, Some(404), "nothing stored for the rejected command");
    daemon.shutdown().await.expect("shutdown");
}

/// The daemon stores only data it checked; a row whose data is not JSON (written by hand, a
/// damaged file) fires without it, and the timers after it fire as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_whose_stored_data_is_not_json_fires_without_it_and_holds_no_one_back() {
    let (_server, scratch, daemon, client) = common::started().await;
    let due = Utc::now() + chrono::Duration::seconds(2);
    send(&client, "damaged", due, Some(json!({ "a": 1 }))).await;
    send(
        &client,
        "after",
        due + chrono::Duration::milliseconds(10),
        Some(json!({ "b": 2 })),
    )
    .await;
    client.barrier("acme").await;
    let damaged_rows = common::query_rows(
        &scratch.database(),
        "UPDATE timer_schedules SET data = '{not json' \
         WHERE service_call_id = 'damaged' AND state = 'Scheduled' RETURNING service_call_id",
        |_| (),
    )
    .await;
    assert_eq!(
        damaged_rows.len(),
        1,
        "the pending row damaged before it fired"
    );
    let damaged = client
        .await_due("acme", "damaged", Duration::from_secs(15))
        .await;
    assert!(
        damaged.envelope["payload"].get("data").is_none(),
        "{:?}",
        damaged.envelope
    );
    let after = client
        .await_due("acme", "after", Duration::from_secs(15))
        .await;
    assert_eq!(after.envelope["payload"]["data"], json!({ "b": 2 }));
    daemon.shutdown().await.unwrap();
}

/// The store carries data through every way a row travels: the upsert, `get`, `list`, both
/// claims for firing (in `dueAt` order, and a share per tenant), and the cancel.
#[tokio::test]
async fn the_store_returns_the_data_from_every_read_and_claim() {
    let scratch = Scratch::new();
    migrate(&scratch.database()).await.expect("migrate");
    let store = Store::open(&scratch.database())
        .await
        .expect("store")
        .with_callers_clock();
    let at = |ms: i64| common::millis(Utc::now()) + chrono::Duration::milliseconds(ms);
    let data = |i: u64| {
        TimerData::from_stored(format!(r#"{{"i":{i},"pad":"{}"}}"#, "p".repeat(1000))).unwrap()
    };
    let command = |tenant: &str, id: &str, seq: u64| Command {
        action: Action::Schedule {
            due_at: at(-1_000),
            data: Some(data(seq)),
            expires_at: None,
        },
        ..common::schedule_at(tenant, id, seq, at(-1_000))
    };
    store
        .apply(&[
            command("a", "a-1", 1),
            command("b", "b-1", 2),
            command("a", "a-2", 3),
        ])
        .await
        .expect("apply");
    let timer = store.get("a", "a-1").await.expect("get").expect("a timer");
    assert_eq!(timer.data, Some(data(1)));
    let page = store
        .list("b", &Default::default(), 10)
        .await
        .expect("list");
    assert_eq!(page.timers[0].data, Some(data(2)));

    let me = claimant();
    let fair = store
        .claim_fair(at(0), &Default::default(), None, 2, at(-60_000), &me)
        .await
        .expect("fair claim");
    let by_id = |timers: &[timer_service::domain::DueTimer]| {
        timers
            .iter()
            .map(|t| (t.service_call_id.clone(), t.data.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        by_id(&fair.batch.timers),
        [("a-1".into(), Some(data(1))), ("b-1".into(), Some(data(2)))]
    );
    let claimed = store
        .claim_due(
            at(0),
            None,
            10,
            &timer_service::storage::Claimant {
                name: "another".into(),
                ..me.clone()
            },
        )
        .await
        .expect("claim");
    assert_eq!(by_id(&claimed.timers), [("a-2".into(), Some(data(3)))]);

    let (_, after) = store
        .cancel(&Command {
            action: Action::Cancel,
            ..common::schedule_at("a", "a-2", 4, at(0))
        })
        .await
        .expect("cancel");
    assert_eq!(
        after.expect("the timer").data,
        Some(data(3)),
        "claimed: kept as it was"
    );
}
