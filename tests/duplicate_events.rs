//! A `DueTimeReached` the broker already held is a duplicate (docs/CONTRACT.md §5): the timer is
//! marked `Reached` like any other, but counted as fired, and its lateness recorded, only by
//! the publish that stored it. So `timer_tenant_fired_total` and the lateness histograms count
//! each firing once, as `timer_schedules_processed_total` counts each timer marked, and
//! `timer_events_duplicate_total` counts the duplicates (docs/operations.md, "Metrics").

mod common;

use std::time::Duration;

use async_nats::HeaderMap;
use chrono::{TimeZone, Utc};
use common::{
    DaemonProcess, NatsServer, Scratch, TestClient, eventually, free_port, http_get, metric,
};
use timer_service::domain::DueTimer;
use timer_service::domain::events::due_message_id;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_broker_already_held_is_marked_but_not_counted_as_fired_again() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let process = DaemonProcess::start_with(
        &server,
        &scratch,
        &[
            ("TIMER_HTTP_LISTEN", addr.as_str()),
            ("TIMER_METRICS_TENANTS", "acme"),
        ],
    );
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    eventually(Duration::from_secs(15), "the event stream", || async {
        client.js.get_stream("TIMER_EVENTS").await.ok().map(|_| ())
    })
    .await;

    // Three of the five firings are in the event stream already, under the message id the
    // daemon will publish them with: as after a publish whose mark failed, or another
    // daemon's publish of the same firing.
    let due_at = Utc
        .timestamp_millis_opt(Utc::now().timestamp_millis() + 1_500)
        .unwrap();
    let held: Vec<String> = (0..3).map(|i| format!("held-{i}")).collect();
    let fresh: Vec<String> = (0..2).map(|i| format!("fresh-{i}")).collect();
    for id in &held {
        let timer = DueTimer {
            tenant_id: "acme".into(),
            service_call_id: id.clone(),
            correlation_id: "c".into(),
            due_at,
            data: None,
            trace: None,
            expires_at: None,
        };
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", due_message_id(&timer).as_str());
        client
            .js
            .publish_with_headers("timer.evt.due.acme", headers, "{}".into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
    client.schedule_many("acme", &held, due_at).await;
    client.schedule_many("acme", &fresh, due_at).await;

    let body = eventually(Duration::from_secs(20), "all five marked", || async {
        let (_, body) = http_get(&addr, "/metrics").await?;
        (metric(&body, "timer_schedules_processed_total{daemon=\"test\"}") == Some(5.0))
            .then_some(body)
    })
    .await;
    let value =
        |series: &str| metric(&body, series).unwrap_or_else(|| panic!("no {series} in\n{body}"));
    let acme = |name: &str| format!("{name}{{daemon=\"test\",tenant=\"acme\"}}");
    assert_eq!(value(&acme("timer_tenant_fired_total")), 2.0);
    assert_eq!(
        value(&acme("timer_tenant_fire_lateness_seconds_count")),
        2.0
    );
    assert_eq!(
        value("timer_fire_lateness_seconds_count{daemon=\"test\"}"),
        2.0
    );
    assert_eq!(value("timer_events_duplicate_total{daemon=\"test\"}"), 3.0);
    // Each firing is in the stream once: the three held before, the two the daemon stored.
    assert_eq!(client.events("timer.evt.due.acme").await.len(), 5);
    let fired = client.fired_ids("acme").await;
    assert!(fresh.iter().all(|id| fired.contains(id)), "{fired:?}");
    drop(process);
}
