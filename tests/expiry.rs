//! A timer that may expire (docs/CONTRACT.md §3, §5): with `expireAfter`, a timer that can fire
//! only past `dueAt + expireAfter` publishes `TimerExpired` on `timer.evt.expired.<tenantId>`
//! instead of `DueTimeReached`, one of the two, with the same envelope and data; without it, or
//! in time, nothing changes. Attacked with a broker outage longer than the deadline, against
//! the daemon as a process on its own database.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use common::{DaemonProcess, NatsServer, Scratch, StoredEvent, TestClient, eventually, free_port};
use serde_json::{Value, json};

/// A ScheduleTimer of `acme` with `expireAfter` and `data` when given.
fn schedule(id: &str, due_at: chrono::DateTime<Utc>, expire_after: Option<&str>) -> Value {
    let mut command = common::schedule_command("acme", id, &common::rfc3339(due_at), Some(id));
    if let Some(after) = expire_after {
        command["payload"]["expireAfter"] = json!(after);
    }
    command["payload"]["data"] = json!({ "for": id });
    command
}

/// Every event of `acme` on the stream, by service call id.
async fn events_by_timer(client: &TestClient) -> BTreeMap<String, Vec<StoredEvent>> {
    let mut by_timer: BTreeMap<String, Vec<StoredEvent>> = BTreeMap::new();
    for event in client.events("timer.evt.*.acme").await {
        by_timer
            .entry(event.service_call_id().to_owned())
            .or_default()
            .push(event);
    }
    by_timer
}

async fn get(client: &TestClient, id: &str) -> Value {
    let (code, body) = client
        .api_request("timer.api.get.acme", json!({ "serviceCallId": id }))
        .await;
    assert_eq!(code, None, "get {id}: {body}");
    body["timer"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_longer_than_expire_after_turns_the_firing_into_timer_expired() {
    let mut server = NatsServer::start();
    let scratch = Scratch::new();
    let http = format!("127.0.0.1:{}", free_port());
    let daemon =
        DaemonProcess::start_with(&server, &scratch, &[("TIMER_HTTP_LISTEN", http.as_str())]);
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;

    let due_at = common::millis(Utc::now() + chrono::Duration::seconds(2));
    let subject = "timer.cmd.schedule.acme";
    // Due while the broker is away: one may fire 2 s late at most, one an hour, one however late.
    for (id, after) in [
        ("short", Some("PT2S")),
        ("patient", Some("PT1H")),
        ("plain", None),
    ] {
        // Each with a trace context of its own, which its event carries on, whichever it is.
        let parent = format!("00-{:0>32}-00f067aa0ba902b7-01", id.len());
        client
            .publish_traced(subject, &schedule(id, due_at, after), Some(&parent))
            .await;
    }
    client.barrier("acme").await;
    assert!(
        Utc::now() < due_at,
        "scheduling took longer than the lead time"
    );

    // The outage: from before dueAt until 4 s after it, longer than "short"'s 2 s.
    server.kill();
    let back_at = due_at + chrono::Duration::seconds(4);
    tokio::time::sleep((back_at - Utc::now()).to_std().unwrap_or_default()).await;
    server.restart();
    let client = TestClient::connect(&server).await;

    // In time after the outage, a timer with expireAfter fires as DueTimeReached.
    let soon = common::millis(Utc::now() + chrono::Duration::seconds(1));
    client
        .publish_raw(
            subject,
            serde_json::to_vec(&schedule("in-time", soon, Some("PT1M"))).unwrap(),
        )
        .await;

    let ids = ["short", "patient", "plain", "in-time"];
    let events = eventually(
        Duration::from_secs(60),
        "an event for every timer",
        || async {
            let events = events_by_timer(&client).await;
            ids.iter()
                .all(|id| events.contains_key(*id))
                .then_some(events)
        },
    )
    .await;
    // One event per timer on the stream, whatever the broker deduplicated: the daemon's own
    // count below says what it published.
    for id in ids {
        assert_eq!(events[id].len(), 1, "{id}: {:?}", events[id]);
    }
    let expired = &events["short"][0];
    assert_eq!(expired.subject, "timer.evt.expired.acme");
    assert_eq!(expired.envelope["type"], "TimerExpired");
    assert_eq!(expired.envelope["correlationId"], "short");
    assert_eq!(expired.envelope["aggregateId"], "short");
    let traceparent = expired.trace.0.as_deref().unwrap_or_default();
    assert!(
        traceparent.starts_with(&format!("00-{:0>32}-", "short".len())),
        "TimerExpired carries its ScheduleTimer's trace: {traceparent:?}"
    );
    let payload = &expired.envelope["payload"];
    assert_eq!(payload["data"], json!({ "for": "short" }));
    assert_eq!(payload["dueAt"], common::rfc3339(due_at));
    let deadline = due_at + chrono::Duration::seconds(2);
    assert_eq!(payload["expiresAt"], common::rfc3339(deadline));
    let reached: chrono::DateTime<Utc> = payload["reachedAt"].as_str().unwrap().parse().unwrap();
    assert!(
        reached > deadline,
        "reachedAt {reached} is past the deadline"
    );
    assert!(
        expired.stored_at >= reached,
        "published when stamped or later"
    );
    for id in ["patient", "plain", "in-time"] {
        let event = &events[id][0];
        assert_eq!(event.subject, "timer.evt.due.acme", "{id}");
        assert_eq!(event.envelope["type"], "DueTimeReached", "{id}");
        assert_eq!(event.envelope["payload"]["data"], json!({ "for": id }));
    }

    // The API tells the two apart, and lists by the new state. A row is marked after its
    // event's PubAck: the event may be seen first.
    for id in ids {
        eventually(Duration::from_secs(10), "every row marked", || async {
            (get(&client, id).await["state"] != "Scheduled").then_some(())
        })
        .await;
    }
    let short = get(&client, "short").await;
    assert_eq!(short["state"], "Expired");
    assert_eq!(short["expiresAt"], common::rfc3339(deadline));
    assert_eq!(short["reachedAt"], payload["reachedAt"]);
    assert_eq!(get(&client, "patient").await["state"], "Reached");
    let plain = get(&client, "plain").await;
    assert_eq!(plain["state"], "Reached");
    assert!(plain.get("expiresAt").is_none(), "{plain}");
    let (code, listed) = client
        .api_request("timer.api.list.acme", json!({ "state": "Expired" }))
        .await;
    assert_eq!(code, None, "{listed}");
    let listed: Vec<&str> = listed["timers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["serviceCallId"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["short"]);
    // A cancel comes too late for an expired timer, as for a fired one.
    let (_, cancelled) = client
        .api_request("timer.api.cancel.acme", json!({ "serviceCallId": "short" }))
        .await;
    assert_eq!(cancelled["outcome"], "already_reached", "{cancelled}");

    // What the daemon published: one TimerExpired.
    let (status, metrics) = common::http_get(&http, "/metrics")
        .await
        .expect("/metrics answers");
    assert_eq!(status, 200);
    assert_eq!(
        common::metric(&metrics, r#"timer_expired_total{daemon="test"}"#),
        Some(1.0),
        "{metrics}"
    );
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(25)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_scheduled_past_its_deadline_expires_at_once_and_a_bad_expire_after_is_refused() {
    let (_server, _scratch, _daemon, client) = common::started().await;
    let subject = "timer.cmd.schedule.acme";
    let long_ago = common::millis(Utc::now() - chrono::Duration::minutes(10));
    client
        .publish_raw(
            subject,
            serde_json::to_vec(&schedule("stale", long_ago, Some("PT1M"))).unwrap(),
        )
        .await;
    client
        .publish_raw(
            subject,
            serde_json::to_vec(&schedule("bad", long_ago, Some("P1M"))).unwrap(),
        )
        .await;
    let expired = client
        .await_events("timer.evt.expired.acme", 1, Duration::from_secs(15))
        .await;
    assert_eq!(expired[0].service_call_id(), "stale");
    let rejected = client
        .await_events("timer.evt.rejected.acme", 1, Duration::from_secs(15))
        .await;
    let reason = rejected[0].envelope["payload"]["reason"].as_str().unwrap();
    assert!(reason.contains("expireAfter \"P1M\""), "{reason}");
    client.barrier("acme").await;
    assert_eq!(client.count_due("acme", "stale").await, 0, "one of the two");
}
