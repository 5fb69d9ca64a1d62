//! The Rust client (`timer_service::client::TimerClient`) against a running daemon, for what it
//! sends beside the one-timer commands the other tests drive: a `ScheduleTimers`
//! (docs/CONTRACT.md §3), whose timers fire with their own or the envelope's correlation id and
//! their data, and whose count out of range is refused before anything is published.

mod common;

use std::time::Duration;

use chrono::Utc;
use common::rfc3339;
use timer_service::client::{ClientError, TimerClient};
use timer_service::domain::TimerSpec;
use timer_service::domain::data::TimerData;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_timers_sends_one_message_whose_timers_fire() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let timers = TimerClient::new(client.client.clone(), Default::default());
    let due = rfc3339(Utc::now() + chrono::Duration::milliseconds(1_200));
    let mut specs: Vec<TimerSpec> = (0..3)
        .map(|i| TimerSpec::new(&format!("rc-{i}"), &due))
        .collect();
    specs[1].correlation_id = Some("its-own".into());
    specs[2].data = Some(TimerData::from_stored(r#"{"order":42}"#.into()).unwrap());

    let seq = timers
        .schedule_timers("acme", specs, Some("batch-7"))
        .await
        .expect("the broker stores the message");
    assert!(seq > 0);

    let ids: Vec<String> = (0..3).map(|i| format!("rc-{i}")).collect();
    let events = client
        .await_all_fired("acme", &ids, Duration::from_secs(10))
        .await;
    let of = |id: &str| {
        events
            .iter()
            .find(|e| e.service_call_id() == id)
            .unwrap_or_else(|| panic!("{id} fired"))
    };
    assert_eq!(of("rc-0").envelope["correlationId"], "batch-7");
    assert_eq!(of("rc-1").envelope["correlationId"], "its-own");
    assert_eq!(of("rc-2").envelope["payload"]["data"]["order"], 42);
    for event in &events {
        assert!(event.stored_at >= event.due_at(), "fired early");
    }
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_timers_refuses_a_count_out_of_range_before_publishing() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let timers = TimerClient::new(client.client.clone(), Default::default());
    let due = rfc3339(Utc::now() + chrono::Duration::hours(1));
    let too_many: Vec<TimerSpec> = (0..1_001)
        .map(|i| TimerSpec::new(&format!("many-{i}"), &due))
        .collect();
    for (what, specs) in [("none", Vec::new()), ("1,001", too_many)] {
        let refused = timers.schedule_timers("acme", specs, None).await;
        match refused {
            Err(ClientError::Publish { message, .. }) => {
                assert!(message.contains("1 to 1000"), "{what}: {message}")
            }
            other => panic!("{what}: expected a refusal, got {other:?}"),
        }
    }
    let mut stream = client.js.get_stream("TIMER_COMMANDS").await.unwrap();
    assert_eq!(
        stream.info().await.unwrap().state.last_sequence,
        0,
        "nothing was published"
    );
    daemon.shutdown().await.unwrap();
}
