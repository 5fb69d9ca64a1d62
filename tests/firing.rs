//! Firing: a scheduled timer produces `DueTimeReached` at its `dueAt` — not before, and not a
//! polling interval later — with the envelope, subject and `Nats-Msg-Id` of the contract.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use timer_service::domain::events::due_message_id;
use timer_service::domain::{DueTimer, TimerState};

/// Well below the 5 s polling interval the tests run with: firing this soon after `dueAt`
/// can only come from the exact wake-up.
const ON_TIME: chrono::Duration = chrono::Duration::milliseconds(1000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_at_due_at_with_the_contract_envelope() {
    let (_server, _scratch, daemon, client) = common::started().await;

    let due_at = Utc::now() + chrono::Duration::milliseconds(1500);
    client
        .schedule("acme", "sc-7", due_at, Some("req-42"))
        .await;

    // Nothing before dueAt.
    while Utc::now() < due_at - chrono::Duration::milliseconds(100) {
        assert_eq!(
            client.count_due("acme", "sc-7").await,
            0,
            "fired before dueAt"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let event = client
        .await_due("acme", "sc-7", Duration::from_secs(10))
        .await;
    let expected_due = Utc.timestamp_millis_opt(due_at.timestamp_millis()).unwrap();

    assert_eq!(event.subject, "timer.evt.due.acme");
    assert!(
        event.stored_at >= expected_due,
        "stored {} before dueAt {}",
        event.stored_at,
        expected_due
    );
    assert!(
        event.stored_at - expected_due < ON_TIME,
        "late: stored {} for dueAt {}",
        event.stored_at,
        expected_due
    );

    let e = &event.envelope;
    assert_eq!(e["type"], "DueTimeReached");
    assert_eq!(e["tenantId"], "acme");
    assert_eq!(e["correlationId"], "req-42");
    assert_eq!(e["aggregateId"], "sc-7");
    assert!(e.get("causationId").is_none_or(|c| c.is_null()));
    let id: uuid::Uuid = e["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(id.get_version_num(), 7);
    assert!(e["timestampMs"].as_i64().unwrap() >= expected_due.timestamp_millis());

    let p = &e["payload"];
    assert_eq!(p["tenantId"], "acme");
    assert_eq!(p["serviceCallId"], "sc-7");
    assert_eq!(p["dueAt"], common::rfc3339(expected_due));
    let reached_at: chrono::DateTime<Utc> = p["reachedAt"].as_str().unwrap().parse().unwrap();
    assert!(reached_at >= expected_due);
    assert_eq!(
        p["reachedAt"].as_str().unwrap().len(),
        "2026-11-22T10:00:00.000Z".len()
    );

    let fired = DueTimer {
        tenant_id: "acme".into(),
        service_call_id: "sc-7".into(),
        correlation_id: "req-42".into(),
        due_at: expected_due,
        data: None,
        trace: None,
        expires_at: None,
    };
    assert_eq!(
        event.msg_id.as_deref(),
        Some(due_message_id(&fired).as_str())
    );

    let stored =
        common::await_state(&daemon.persistence(), "acme", "sc-7", TimerState::Reached).await;
    assert_eq!(stored.reached_at, Some(reached_at));
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_at_in_the_past_fires_at_once_and_offsets_are_echoed_in_utc() {
    let (_server, _scratch, daemon, client) = common::started().await;

    let sent = Utc::now();
    let command = common::schedule_command("acme", "past", "2020-01-01T12:00:00.5+02:00", None);
    client
        .publish_raw(
            "timer.cmd.schedule.acme",
            serde_json::to_vec(&command).unwrap(),
        )
        .await;
    let event = client
        .await_due("acme", "past", Duration::from_secs(10))
        .await;
    assert!(
        event.stored_at - sent < ON_TIME,
        "past timer took {}",
        event.stored_at - sent
    );
    assert_eq!(
        event.envelope["payload"]["dueAt"],
        "2020-01-01T10:00:00.500Z"
    );
    // No correlation id anywhere: the service generated one.
    assert!(
        !event.envelope["correlationId"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
    );
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tenants_with_timers_due_at_the_same_instant_all_fire_once() {
    let (_server, _scratch, daemon, client) = common::started().await;

    const TENANTS: usize = 12;
    const PER_TENANT: usize = 25; // 300 timers: three batches of the default 100
    let due_at = Utc::now() + chrono::Duration::milliseconds(2000);
    let due_at = Utc.timestamp_millis_opt(due_at.timestamp_millis()).unwrap();
    for t in 0..TENANTS {
        for i in 0..PER_TENANT {
            // The same serviceCallId in every tenant: tenants must not collide.
            client
                .schedule(&format!("tenant-{t}"), &format!("call-{i}"), due_at, None)
                .await;
        }
    }
    let events = client
        .await_events(
            "timer.evt.due.>",
            TENANTS * PER_TENANT,
            Duration::from_secs(20),
        )
        .await;
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for event in &events {
        let tenant = event.envelope["tenantId"].as_str().unwrap().to_owned();
        assert_eq!(event.subject, format!("timer.evt.due.{tenant}"));
        assert_eq!(event.envelope["payload"]["tenantId"], tenant.as_str());
        assert!(event.stored_at >= due_at, "fired early");
        assert!(
            event.stored_at - due_at < chrono::Duration::milliseconds(3000),
            "fired late: {}",
            event.stored_at - due_at
        );
        *seen
            .entry((tenant, event.service_call_id().to_owned()))
            .or_default() += 1;
    }
    assert_eq!(seen.len(), TENANTS * PER_TENANT, "every timer fired");
    assert!(
        seen.values().all(|n| *n == 1),
        "each timer fired exactly once"
    );
    daemon.shutdown().await.unwrap();
}

/// A steady stream of timers, each due at its own millisecond, keeps the Poller's publishing
/// stage busy (several batches at the broker, wake-ups arriving while others publish): every
/// one fires, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_stream_of_timers_all_fire() {
    let (_server, _scratch, daemon, client) = common::started().await;

    const TIMERS: usize = 1500;
    let mut subscriber = client
        .client
        .subscribe("timer.evt.due.steady")
        .await
        .unwrap();
    let start = Utc::now() + chrono::Duration::milliseconds(1000);
    for i in 0..TIMERS {
        let due_at = start + chrono::Duration::microseconds(1500 * i as i64);
        client
            .schedule("steady", &format!("s-{i}"), due_at, None)
            .await;
    }
    let mut seen = std::collections::HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.len() < TIMERS {
        let message = tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut subscriber))
            .await
            .unwrap_or_else(|_| panic!("only {} of {TIMERS} timers fired", seen.len()))
            .unwrap();
        let received = Utc::now();
        let event: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        let due: chrono::DateTime<Utc> =
            event["payload"]["dueAt"].as_str().unwrap().parse().unwrap();
        assert!(received >= due, "fired early");
        seen.insert(
            event["payload"]["serviceCallId"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    daemon.shutdown().await.unwrap();
}

/// A `dueAt` finer than a millisecond is rounded up (docs/CONTRACT.md §3), so no timer fires before
/// the instant its client named, to the nanosecond.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_millisecond_due_at_is_rounded_up_and_never_fires_early() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let base = Utc::now() + chrono::Duration::milliseconds(800);
    let base = Utc.timestamp_millis_opt(base.timestamp_millis()).unwrap();
    let mut given = HashMap::new();
    for i in 0..50i64 {
        let due = base + chrono::Duration::microseconds(7_000 * i + 999);
        let text = due.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let id = format!("fine-{i}");
        let command = common::schedule_command("acme", &id, &text, None);
        client
            .publish_raw(
                "timer.cmd.schedule.acme",
                serde_json::to_vec(&command).unwrap(),
            )
            .await;
        given.insert(id, due);
    }
    let ids: Vec<String> = given.keys().cloned().collect();
    let events = client
        .await_all_fired("acme", &ids, Duration::from_secs(15))
        .await;
    for event in events {
        let due = given[event.service_call_id()];
        let rounded = Utc
            .timestamp_millis_opt(due.timestamp_millis() + 1)
            .unwrap();
        assert_eq!(
            event.due_at(),
            rounded,
            "dueAt rounded up to the millisecond"
        );
        let reached: chrono::DateTime<Utc> = event.envelope["payload"]["reachedAt"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(reached >= due, "reachedAt {reached} before {due}");
        assert!(
            event.stored_at >= due,
            "stored {} before {due}",
            event.stored_at
        );
    }
    daemon.shutdown().await.unwrap();
}

/// A ScheduleTimer's W3C trace context (`traceparent`, `tracestate`) comes back on its
/// DueTimeReached, after a daemon restart in between (it is stored with the timer); a reschedule
/// brings its own; a refused command's comes back on its TimerCommandRejected; a malformed
/// `traceparent` is dropped and the command is still stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_context_of_a_command_comes_back_on_its_events() {
    let server = common::NatsServer::start();
    let scratch = common::Scratch::new();
    let daemon = timer_service::Daemon::start(common::config(&server, &scratch))
        .await
        .unwrap();
    let client = common::TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let first = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let second = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let send = |subject: &'static str, command: serde_json::Value, parent: &'static str| {
        let client = &client;
        async move { client.publish_traced(subject, &command, Some(parent)).await }
    };
    let due = |ms: i64| common::rfc3339(Utc::now() + chrono::Duration::milliseconds(ms));
    let later = "2030-01-01T00:00:00Z";
    send(
        "timer.cmd.schedule.acme",
        common::schedule_command("acme", "traced", &due(3_000), None),
        first,
    )
    .await;
    send(
        "timer.cmd.schedule.acme",
        common::schedule_command("acme", "moved", later, None),
        first,
    )
    .await;
    send(
        "timer.cmd.schedule.acme",
        common::schedule_command("acme", "cleared", later, None),
        first,
    )
    .await;
    send(
        "timer.cmd.schedule.acme",
        common::schedule_command("acme", "bad-parent", &due(1_500), None),
        "00-xyz",
    )
    .await;
    // An HTTP carrier's capitalised names, and `tracestate` sent twice (W3C: joined).
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Traceparent", second);
    headers.append("TraceState", "rojo=00f067aa0ba902b7");
    headers.append("TraceState", "congo=t61rcWkgMzE");
    let carried = common::schedule_command("acme", "http-carrier", &due(1_500), None);
    client
        .js
        .publish_with_headers(
            "timer.cmd.schedule.acme",
            headers,
            serde_json::to_vec(&carried).unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let mut invalid = common::schedule_command("acme", "refused", later, None);
    invalid["payload"]["dueAt"] = serde_json::json!("tomorrow");
    send("timer.cmd.schedule.acme", invalid, second).await;
    let rejected = client
        .await_events("timer.evt.rejected.acme", 1, Duration::from_secs(10))
        .await;
    assert_eq!(
        rejected[0].trace,
        (
            Some(second.to_owned()),
            Some("congo=t61rcWkgMzE".to_owned())
        )
    );
    // Stored with the timer: a restarted daemon sends it on.
    client.barrier("acme").await;
    daemon.shutdown().await.unwrap();
    let daemon = timer_service::Daemon::start(common::config(&server, &scratch))
        .await
        .unwrap();
    send(
        "timer.cmd.schedule.acme",
        common::schedule_command("acme", "moved", &due(500), None),
        second,
    )
    .await;
    // A reschedule without a context clears the stored one.
    let cleared = common::schedule_command("acme", "cleared", &due(500), None);
    client
        .publish_traced("timer.cmd.schedule.acme", &cleared, None)
        .await;
    let traced = client
        .await_due("acme", "traced", Duration::from_secs(10))
        .await;
    assert_eq!(
        traced.trace,
        (Some(first.to_owned()), Some("congo=t61rcWkgMzE".to_owned()))
    );
    let moved = client
        .await_due("acme", "moved", Duration::from_secs(10))
        .await;
    assert_eq!(
        moved.trace.0.as_deref(),
        Some(second),
        "the reschedule's own"
    );
    let dropped = client
        .await_due("acme", "bad-parent", Duration::from_secs(10))
        .await;
    assert_eq!(dropped.trace, (None, None));
    let carried = client
        .await_due("acme", "http-carrier", Duration::from_secs(10))
        .await;
    assert_eq!(
        carried.trace,
        (
            Some(second.to_owned()),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".to_owned())
        )
    );
    let cleared = client
        .await_due("acme", "cleared", Duration::from_secs(10))
        .await;
    assert_eq!(cleared.trace, (None, None), "the reschedule had none");
    daemon.shutdown().await.unwrap();
}
