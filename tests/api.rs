//! The query and cancel API (docs/CONTRACT.md §6) and CancelTimer (§3), against a real nats-server
//! and a real SQLite file: tenant scoping, every cancel outcome, the rules table over the wire,
//! a cancel racing the firing, bad requests, and discovery as a NATS micro service.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DurationRound, TimeDelta, Utc};
use common::{TestClient, eventually};
use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};
use timer_service::actors::{ApiResponder, NamedActor};
use timer_service::domain::TimerState;

async fn ok(client: &TestClient, subject: &str, body: Value) -> Value {
    match client.api_request(subject, body).await {
        (None, body) => body,
        (Some(code), body) => panic!("{subject}: error {code}: {body}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_scoped_by_the_tenant_of_its_subject() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let later = Utc::now() + chrono::Duration::hours(1);
    client
        .schedule("acme", "same", later, Some("trace-a"))
        .await;
    client
        .schedule(
            "globex",
            "same",
            later + chrono::Duration::minutes(1),
            Some("trace-g"),
        )
        .await;
    client
        .schedule("acme", "only-acme", later, Some("trace-a"))
        .await;
    eventually(Duration::from_secs(10), "the commands stored", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;

    let acme = ok(
        &client,
        "timer.api.get.acme",
        json!({"serviceCallId": "same"}),
    )
    .await;
    assert_eq!(acme["timer"]["tenantId"], "acme");
    assert_eq!(acme["timer"]["correlationId"], "trace-a");
    assert_eq!(acme["timer"]["state"], "Scheduled");
    assert!(acme["timer"]["reachedAt"].is_null() && acme["timer"]["cancelledAt"].is_null());
    let globex = ok(
        &client,
        "timer.api.get.globex",
        json!({"serviceCallId": "same"}),
    )
    .await;
    assert_eq!(globex["timer"]["correlationId"], "trace-g");

    // Another tenant's key is simply not there.
    let (code, body) = client
        .api_request(
            "timer.api.get.globex",
            json!({"serviceCallId": "only-acme"}),
        )
        .await;
    assert_eq!(code, Some(404));
    assert!(
        body["error"].as_str().unwrap().contains("only-acme"),
        "{body}"
    );
    let listed = ok(&client, "timer.api.list.globex", json!({})).await;
    assert_eq!(listed["timers"].as_array().unwrap().len(), 1);
    let (code, _) = client
        .api_request(
            "timer.api.cancel.globex",
            json!({"serviceCallId": "only-acme"}),
        )
        .await;
    assert_eq!(
        code, None,
        "a cancel for globex's key only ever touches globex"
    );
    let still = ok(
        &client,
        "timer.api.get.acme",
        json!({"serviceCallId": "only-acme"}),
    )
    .await;
    assert_eq!(still["timer"]["state"], "Scheduled");
    let stats = ok(&client, "timer.api.stats.acme", json!({})).await;
    assert_eq!(
        (stats["scheduled"].as_u64(), stats["overdue"].as_u64()),
        (Some(2), Some(0))
    );
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_with_a_cursor_and_filters_by_correlation_id() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let base = Utc::now() + chrono::Duration::hours(1);
    for i in 0..25 {
        let trace = if i % 5 == 0 { "five" } else { "other" };
        client
            .schedule(
                "acme",
                &format!("t{i:02}"),
                base + chrono::Duration::seconds(i),
                Some(trace),
            )
            .await;
    }
    eventually(Duration::from_secs(10), "the commands stored", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut body = json!({"limit": 100});
        if let Some(cursor) = &after {
            body["after"] = json!(cursor);
        }
        let page = ok(&client, "timer.api.list.acme", body).await;
        for timer in page["timers"].as_array().unwrap() {
            seen.push(timer["serviceCallId"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).map(|i| format!("t{i:02}")).collect();
    assert_eq!(seen, expected, "every timer once, in dueAt order");
    let traced = ok(
        &client,
        "timer.api.list.acme",
        json!({"correlationId": "five"}),
    )
    .await;
    assert_eq!(traced["timers"].as_array().unwrap().len(), 5);
    let ranged = ok(
        &client,
        "timer.api.list.acme",
        json!({"dueFrom": common::rfc3339(base + chrono::Duration::seconds(10)), "dueTo": common::rfc3339(base + chrono::Duration::seconds(12))}),
    )
    .await;
    assert_eq!(ranged["timers"].as_array().unwrap().len(), 2);
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_answer_400_with_a_reason_and_never_stop_the_responder() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let before = daemon.actor_id(ApiResponder::NAME);
    let raw = |subject: &str, bytes: &'static [u8]| {
        let subject = subject.to_owned();
        let client = client.client.clone();
        async move { client.request(subject, bytes.into()).await.unwrap() }
    };
    let cases: Vec<(&str, &'static [u8], &str)> = vec![
        ("timer.api.get.acme", b"{not json", "invalid get request"),
        ("timer.api.get.acme", b"{}", "missing field `serviceCallId`"),
        (
            "timer.api.get.acme",
            br#"{"serviceCallId":""}"#,
            "serviceCallId",
        ),
        (
            "timer.api.cancel.acme",
            br#"{"serviceCallId":7}"#,
            "invalid cancel request",
        ),
        ("timer.api.list.acme", br#"{"limit":0}"#, "outside 1"),
        ("timer.api.list.acme", br#"{"limit":10001}"#, "outside 1"),
        (
            "timer.api.list.acme",
            br#"{"limit":"ten"}"#,
            "invalid list request",
        ),
        (
            "timer.api.list.acme",
            br#"{"state":"Fired"}"#,
            "unknown timer state",
        ),
        (
            "timer.api.list.acme",
            br#"{"after":"garbage"}"#,
            "not a cursor",
        ),
        (
            "timer.api.list.acme",
            br#"{"dueFrom":"yesterday"}"#,
            "dueFrom",
        ),
        (
            "timer.api.stats.acme",
            br#"{"verbose":true}"#,
            "unknown field",
        ),
        ("timer.api.get.a+b", br#"{"serviceCallId":"x"}"#, "tenantId"),
        (
            "timer.api.get._",
            br#"{"serviceCallId":"x"}"#,
            "tenantId \"_\" is reserved",
        ),
        (
            "timer.api.stats.acme",
            &[0xff, 0xfe],
            "invalid stats request",
        ),
    ];
    for (subject, bytes, reason) in cases {
        let reply = raw(subject, bytes).await;
        let headers = reply.headers.expect("error headers");
        assert_eq!(
            headers.get("Nats-Service-Error-Code").unwrap().as_str(),
            "400",
            "{subject}"
        );
        let header_reason = headers
            .get("Nats-Service-Error")
            .unwrap()
            .as_str()
            .to_owned();
        let body: Value = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(body["error"].as_str().unwrap(), header_reason);
        assert!(
            header_reason.contains(reason),
            "{subject}: {reason:?} not in {header_reason:?}"
        );
    }
    let stats = ok(&client, "timer.api.stats.acme", json!({})).await;
    assert_eq!(stats["scheduled"], 0);
    assert_eq!(
        daemon.actor_id(ApiResponder::NAME),
        before,
        "the responder never failed"
    );
    daemon.shutdown().await.unwrap();
}

/// `stats` with `forecastMinutes`: the tenant's pending timers due in each of the next minutes,
/// the first minute from now on, a minute with none at zero; another tenant's timers, cancelled
/// ones and those past the window are not counted. Without it the reply is as before; a bad
/// value is refused with a reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_forecasts_pending_timers_by_minute() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    // The timer of the current minute (due at its very end) must still be ahead when the
    // request is answered: with less than 15 s of the minute left, wait for the next to begin.
    let minute_of = |t: chrono::DateTime<Utc>| t.duration_trunc(TimeDelta::minutes(1)).unwrap();
    let next_minute = minute_of(Utc::now()) + TimeDelta::minutes(1);
    if next_minute - Utc::now() < TimeDelta::seconds(15) {
        let wait = (next_minute - Utc::now()).to_std().unwrap_or_default();
        tokio::time::sleep(wait + Duration::from_millis(10)).await;
    }
    let minute = minute_of(Utc::now());
    let at = |ms: i64| minute + TimeDelta::milliseconds(ms);
    for (tenant, id, due) in [
        ("acme", "this-minute", at(59_999)),
        ("acme", "next-first", at(60_000)),
        ("acme", "next-last", at(119_999)),
        ("acme", "third", at(150_000)),
        ("acme", "past-the-window", at(180_000)),
        ("acme", "cancelled", at(90_000)),
        ("globex", "other-tenant", at(90_000)),
    ] {
        client.schedule(tenant, id, due, None).await;
    }
    client
        .api_request(
            "timer.api.cancel.acme",
            json!({"serviceCallId": "cancelled"}),
        )
        .await;
    eventually(Duration::from_secs(10), "the commands stored", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;

    let stats = ok(
        &client,
        "timer.api.stats.acme",
        json!({"forecastMinutes": 3}),
    )
    .await;
    let minutes = |offset: i64| common::rfc3339(minute + TimeDelta::minutes(offset));
    assert_eq!(
        stats["forecast"],
        json!([
            { "minute": minutes(0), "due": 1 },
            { "minute": minutes(1), "due": 2 },
            { "minute": minutes(2), "due": 1 },
        ]),
        "{stats}"
    );
    assert_eq!(stats["scheduled"], 5);
    let plain = ok(&client, "timer.api.stats.acme", json!({})).await;
    assert!(plain.get("forecast").is_none(), "{plain}");
    assert_eq!(plain["scheduled"], 5);
    let day = ok(
        &client,
        "timer.api.stats.globex",
        json!({"forecastMinutes": 1440}),
    )
    .await;
    let day = day["forecast"].as_array().unwrap();
    assert_eq!(day.len(), 1440);
    assert_eq!(day[1]["due"], 1);
    assert_eq!(
        day.iter().map(|m| m["due"].as_u64().unwrap()).sum::<u64>(),
        1
    );

    for bad in [json!(0), json!(-1), json!(1441), json!(2.5), json!("3")] {
        let (code, body) = client
            .api_request("timer.api.stats.acme", json!({"forecastMinutes": bad}))
            .await;
        assert_eq!(code, Some(400), "{bad}: {body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("forecastMinutes must be a whole number from 1 to 1440"),
            "{bad}: {body}"
        );
    }
    daemon.shutdown().await.unwrap();
}

/// Every outcome of a cancel through the API, each answered only once applied (a `get` right
/// after shows it), and none of the cancelled timers fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_through_the_api_answers_each_outcome_once_applied() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let cancel = |id: &'static str| {
        let client = &client;
        async move {
            ok(
                client,
                "timer.api.cancel.acme",
                json!({"serviceCallId": id}),
            )
            .await
        }
    };
    client.schedule("acme", "fired", Utc::now(), None).await;
    client
        .await_due("acme", "fired", Duration::from_secs(10))
        .await;
    let due = Utc::now() + chrono::Duration::milliseconds(1500);
    client.schedule("acme", "pending", due, Some("req-9")).await;
    eventually(Duration::from_secs(10), "the timer stored", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;

    let reply = cancel("pending").await;
    assert_eq!(reply["outcome"], "cancelled");
    assert_eq!(reply["timer"]["state"], "Cancelled");
    assert_eq!(
        reply["timer"]["correlationId"], "req-9",
        "the timer keeps its correlation id"
    );
    assert!(reply["timer"]["cancelledAt"].is_string());
    let got = ok(
        &client,
        "timer.api.get.acme",
        json!({"serviceCallId": "pending"}),
    )
    .await;
    assert_eq!(
        got["timer"]["state"], "Cancelled",
        "a get right after shows the cancel"
    );
    assert_eq!(cancel("pending").await["outcome"], "already_cancelled");
    assert_eq!(cancel("fired").await["outcome"], "already_reached");
    let unknown = cancel("never-scheduled").await;
    assert_eq!(unknown["outcome"], "not_found");
    assert!(unknown.get("timer").is_none());
    let tombstone = ok(
        &client,
        "timer.api.get.acme",
        json!({"serviceCallId": "never-scheduled"}),
    )
    .await;
    assert_eq!(tombstone["timer"]["state"], "Cancelled");
    assert!(tombstone["timer"]["dueAt"].is_null());
    assert_eq!(
        cancel("never-scheduled").await["outcome"],
        "already_cancelled"
    );

    // Past its dueAt, with every command handled: the cancelled timer never fired.
    while Utc::now() < due + chrono::Duration::milliseconds(200) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.barrier("acme").await;
    assert_eq!(client.count_due("acme", "pending").await, 0);
    assert_eq!(client.count_due("acme", "never-scheduled").await, 0);
    let listed = ok(
        &client,
        "timer.api.list.acme",
        json!({"state": "Cancelled"}),
    )
    .await;
    let ids: HashSet<&str> = listed["timers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["serviceCallId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, HashSet::from(["never-scheduled", "pending"]));
    daemon.shutdown().await.unwrap();
}

/// A cancel right behind the ScheduleTimer it cancels (not yet applied when the cancel is
/// published) takes its place after it in the stream: it cancels the timer, not a tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_right_after_its_schedule_cancels_the_timer() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let due = Utc::now() + chrono::Duration::milliseconds(2500);
    for i in 0..5 {
        // A backlog in front, so the ScheduleTimer is still waiting when the cancel comes.
        let backlog: Vec<String> = (0..300).map(|j| format!("backlog-{i}-{j}")).collect();
        client
            .schedule_many("other", &backlog, due + chrono::Duration::hours(1))
            .await;
        let id = format!("quick-{i}");
        client.schedule("acme", &id, due, None).await;
        let reply = ok(
            &client,
            "timer.api.cancel.acme",
            json!({"serviceCallId": id}),
        )
        .await;
        assert_eq!(reply["outcome"], "cancelled", "{id}: {reply}");
        assert_eq!(
            reply["timer"]["dueAt"],
            common::rfc3339(common::millis(due))
        );
    }
    while Utc::now() < due + chrono::Duration::milliseconds(100) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.barrier("acme").await;
    assert!(
        client
            .fired_ids("acme")
            .await
            .iter()
            .all(|id| id.starts_with("sentinel-"))
    );
    daemon.shutdown().await.unwrap();
}

/// The rows of the rules table that need the command path, over the wire: a CancelTimer stops
/// the firing, a newer ScheduleTimer after it fires at its new time, and a tombstone keeps an
/// older ScheduleTimer (a redelivery) from firing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_timer_commands_follow_the_rules_table() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let timers = timer_service::client::TimerClient::new(client.client.clone(), Default::default());
    let soon = Utc::now() + chrono::Duration::milliseconds(1200);
    client.schedule("acme", "stopped", soon, None).await;
    timers.cancel_command("acme", "stopped").await.unwrap();
    client.schedule("acme", "revived", soon, None).await;
    timers.cancel_command("acme", "revived").await.unwrap();
    let new_due = soon + chrono::Duration::milliseconds(600);
    client
        .schedule("acme", "revived", new_due, Some("again"))
        .await;

    // A tombstone first, then an older ScheduleTimer redelivered (applied directly, as a crash
    // and redelivery would deliver it): nothing fires.
    let persistence = daemon.persistence();
    persistence
        .apply(vec![common::cancel_at(
            "acme",
            "tomb",
            1_000_000,
            Utc::now(),
        )])
        .await
        .unwrap();
    persistence
        .apply(vec![common::schedule_at(
            "acme",
            "tomb",
            999_999,
            Utc::now(),
        )])
        .await
        .unwrap();

    let revived = client
        .await_due("acme", "revived", Duration::from_secs(10))
        .await;
    assert_eq!(revived.due_at(), common::millis(new_due));
    assert!(
        revived.stored_at >= common::millis(new_due),
        "fired before the new dueAt"
    );
    assert_eq!(revived.envelope["correlationId"], "again");
    client.barrier("acme").await;
    assert_eq!(client.count_due("acme", "stopped").await, 0);
    assert_eq!(client.count_due("acme", "tomb").await, 0);
    assert_eq!(client.count_due("acme", "revived").await, 1);
    let stopped = persistence.get("acme", "stopped").await.unwrap().unwrap();
    assert_eq!(stopped.state, TimerState::Cancelled);
    daemon.shutdown().await.unwrap();
}

/// Cancels sent while their timers are firing: for each timer exactly one side wins, decided by
/// the row. A `cancelled` answer means the daemon never published it; an `already_reached`
/// answer means it did (counted on a plain subscription, so the broker's duplicate filter
/// cannot hide anything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_the_firing_is_decided_by_the_row() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let mut published = client.client.subscribe("timer.evt.due.race").await.unwrap();
    client.client.flush().await.unwrap();
    const TIMERS: usize = 300;
    // Room to store them first: beside a burst, 300 took more than 1.4 s to store.
    let due = Utc::now() + chrono::Duration::milliseconds(3000);
    let ids: Vec<String> = (0..TIMERS).map(|i| format!("r{i:03}")).collect();
    client.schedule_many("race", &ids, due).await;
    eventually(Duration::from_secs(10), "the timers stored", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;
    // Cancels spread from 100 ms before the firing to 110 ms after it: the first ones come
    // before it, the last ones after, and those in between race it. (Each waits for its
    // line's earlier commands, the cancels before it, to be handled: on PostgreSQL a window
    // of 20 ms before the firing was sometimes too short for any to win.)
    let first = tokio::time::Instant::now()
        + (due - Utc::now() - chrono::Duration::milliseconds(100))
            .to_std()
            .expect("the timers stored before the cancels were to begin");
    let outcomes: Vec<(String, String)> =
        futures::future::join_all(ids.iter().enumerate().map(|(i, id)| {
            let client = &client;
            async move {
                tokio::time::sleep_until(first + Duration::from_micros(700 * i as u64)).await;
                let reply = ok(
                    client,
                    "timer.api.cancel.race",
                    json!({"serviceCallId": id}),
                )
                .await;
                (id.clone(), reply["outcome"].as_str().unwrap().to_owned())
            }
        }))
        .await;
    client.barrier("race").await;

    let mut published_count: HashMap<String, usize> = HashMap::new();
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(300), published.next()).await
    {
        let event: Value = serde_json::from_slice(&message.payload).unwrap();
        *published_count
            .entry(
                event["payload"]["serviceCallId"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
            .or_default() += 1;
    }
    let persistence = daemon.persistence();
    let mut tally: HashMap<String, usize> = HashMap::new();
    for (id, outcome) in &outcomes {
        *tally.entry(outcome.clone()).or_default() += 1;
        let times = published_count.get(id).copied().unwrap_or(0);
        match outcome.as_str() {
            "cancelled" => {
                assert_eq!(times, 0, "{id} was cancelled yet published");
                let row = persistence.get("race", id).await.unwrap().unwrap();
                assert_eq!(row.state, TimerState::Cancelled, "{id}");
            }
            "already_reached" => {
                assert_eq!(times, 1, "{id} lost to its firing: published once");
                common::await_state(&persistence, "race", id, TimerState::Reached).await;
            }
            other => panic!("{id}: unexpected outcome {other}"),
        }
    }
    eprintln!("race outcomes: {tally:?}");
    assert_eq!(tally.values().sum::<usize>(), TIMERS);
    assert!(
        tally.contains_key("cancelled") && tally.contains_key("already_reached"),
        "the race was not driven: {tally:?}"
    );
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_is_discoverable_as_a_micro_service() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let ping = ok(&client, "$SRV.PING.timer-service", json!({})).await;
    assert_eq!(ping["name"], "timer-service");
    assert_eq!(ping["version"], env!("CARGO_PKG_VERSION"));
    let info = ok(&client, "$SRV.INFO.timer-service", json!({})).await;
    let subjects: HashSet<&str> = info["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["subject"].as_str().unwrap())
        .collect();
    assert_eq!(
        subjects,
        HashSet::from([
            "timer.api.get.*",
            "timer.api.list.*",
            "timer.api.cancel.*",
            "timer.api.cancel-many.*",
            "timer.api.stats.*"
        ])
    );
    ok(&client, "timer.api.stats.acme", json!({})).await;
    // The service counts a request once its reply has gone out, which can be a moment after
    // the client has it.
    eventually(
        Duration::from_secs(5),
        "two stats requests counted",
        || async {
            let stats = ok(&client, "$SRV.STATS.timer-service", json!({})).await;
            let counted = stats["endpoints"]
                .as_array()?
                .iter()
                .find(|e| e["name"] == "stats")?["num_requests"]
                .as_u64()?;
            (counted >= 2).then_some(())
        },
    )
    .await;
    daemon.shutdown().await.unwrap();
}

/// The `reason` series of the drop counter of a daemon process's `/metrics`.
async fn dropped(addr: &str, reason: &str) -> f64 {
    let series = format!("timer_api_requests_dropped_total{{daemon=\"test\",reason=\"{reason}\"}}");
    match common::http_get(addr, "/metrics").await {
        Some((200, body)) => common::metric(&body, &series).unwrap_or(0.0),
        _ => 0.0,
    }
}

/// Whether a message is waiting on `subscriber` (never waits for one).
fn received(subscriber: &mut async_nats::Subscriber) -> Option<async_nats::Message> {
    subscriber.next().now_or_never().flatten()
}

/// A tenant naming another tenant's subject (or any non-inbox subject) as its reply subject
/// gets nothing published there: the request is dropped and counted, and a proper request is
/// still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_go_only_to_inboxes() {
    let server = common::NatsServer::start();
    let scratch = common::Scratch::new();
    let addr = format!("127.0.0.1:{}", common::free_port());
    let _daemon =
        common::DaemonProcess::start_with(&server, &scratch, &[("TIMER_HTTP_LISTEN", &addr)]);
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    client.api_ready().await;

    let foreign = ["timer.evt.due.globex", "timer.cmd.cancel.globex", "foo.bar"];
    let mut watching = Vec::new();
    for subject in foreign.iter().chain(&["timer.evt.>", "timer.cmd.>"]) {
        watching.push(client.client.subscribe(subject.to_string()).await.unwrap());
    }
    client.client.flush().await.unwrap();
    for reply in foreign {
        for verb in ["stats", "list", "get"] {
            client
                .client
                .publish_with_reply(
                    format!("timer.api.{verb}.acme"),
                    reply.to_owned(),
                    r#"{"serviceCallId":"x"}"#.into(),
                )
                .await
                .unwrap();
        }
    }
    client
        .client
        .publish("timer.api.stats.acme".to_owned(), "{}".into())
        .await
        .unwrap();
    client.client.flush().await.unwrap();

    // A dropped request is counted before it could be answered: once all are counted, any
    // reply to them would have been sent. A reply seen earlier ends the wait too.
    eventually(Duration::from_secs(10), "the drops counted", || {
        for subscriber in &mut watching {
            if let Some(m) = received(subscriber) {
                panic!(
                    "the service published on {} for a request of acme: {:?}",
                    m.subject,
                    String::from_utf8_lossy(&m.payload)
                );
            }
        }
        let addr = addr.clone();
        async move {
            let counted = dropped(&addr, "reply_not_inbox").await == 9.0
                && dropped(&addr, "no_reply").await == 1.0;
            counted.then_some(())
        }
    })
    .await;

    // A request from a client's own inbox is answered as ever.
    let stats = ok(&client, "timer.api.stats.acme", json!({})).await;
    assert_eq!(stats["scheduled"], 0);
    for subscriber in &mut watching {
        if let Some(m) = received(subscriber) {
            panic!("the service published on {}", m.subject);
        }
    }
    // Nothing reached a stream either: no event on globex's subjects, and no reply stored as a
    // globex command (it would have come back as a rejection).
    client.barrier("acme").await;
    let events = client.events("timer.evt.>").await;
    assert!(
        events.iter().all(|e| !e.subject.ends_with(".globex")),
        "{:?}",
        events.iter().map(|e| &e.subject).collect::<Vec<_>>()
    );
    assert_eq!(dropped(&addr, "reply_not_inbox").await, 9.0);
}

/// With `[nats] inbox_prefix` set to the prefix the clients use, their requests are answered
/// and a reply to the default inbox prefix is a foreign subject like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_inbox_prefix_is_where_replies_go() {
    let server = common::NatsServer::start();
    let scratch = common::Scratch::new();
    let addr = format!("127.0.0.1:{}", common::free_port());
    let _daemon = common::DaemonProcess::start_with(
        &server,
        &scratch,
        &[
            ("TIMER_HTTP_LISTEN", &addr),
            ("TIMER_NATS_INBOX_PREFIX", "replies"),
        ],
    );
    let plain = TestClient::connect(&server).await;
    plain.wait_for_command_stream().await;
    let custom = async_nats::ConnectOptions::new()
        .custom_inbox_prefix("replies.acme")
        .connect(server.url())
        .await
        .unwrap();
    eventually(Duration::from_secs(15), "the API to answer", || async {
        custom
            .request("timer.api.stats.acme", "{}".into())
            .await
            .ok()
    })
    .await;
    let reply = custom
        .request("timer.api.list.acme", "{}".into())
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(body["timers"], json!([]));

    // The reply subject under the default prefix the request below names (the daemon's own
    // pull requests are answered under the default prefix too, on other subjects).
    let mut default_inbox = plain.client.subscribe("_INBOX.acme.>").await.unwrap();
    plain.client.flush().await.unwrap();
    plain
        .client
        .publish_with_reply(
            "timer.api.stats.acme".to_owned(),
            "_INBOX.acme.1".to_owned(),
            "{}".into(),
        )
        .await
        .unwrap();
    plain.client.flush().await.unwrap();
    eventually(Duration::from_secs(10), "the drop counted", || {
        if let Some(m) = received(&mut default_inbox) {
            panic!("the service replied on {}", m.subject);
        }
        let addr = addr.clone();
        async move { (dropped(&addr, "reply_not_inbox").await == 1.0).then_some(()) }
    })
    .await;
    custom
        .request("timer.api.stats.acme", "{}".into())
        .await
        .unwrap();
    if let Some(m) = received(&mut default_inbox) {
        panic!("the service replied on {}", m.subject);
    }
}

/// A request on `subject` with raw `body`: the error code, the error header and the body.
async fn raw_request(
    client: &TestClient,
    subject: &str,
    body: Vec<u8>,
) -> (Option<String>, Option<String>, Vec<u8>) {
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        client.client.request(subject.to_owned(), body.into()),
    )
    .await
    .unwrap_or_else(|_| panic!("{subject}: no reply in time"))
    .unwrap_or_else(|e| panic!("{subject}: no reply: {e}"));
    let header = |name: &str| {
        reply
            .headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str().to_owned())
    };
    (
        header("Nats-Service-Error-Code"),
        header("Nats-Service-Error"),
        reply.payload.to_vec(),
    )
}

/// A small seeded generator, so a failing body can be reproduced.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// A short text of control characters, quotes, non-ASCII and plain letters.
    fn text(&mut self) -> String {
        const CHARS: &[char] = &[
            'a', 'Z', '7', '\n', '\r', '\0', '\t', '\u{1b}', '"', '\\', 'é', '→', '\u{7f}', ' ',
        ];
        (0..self.below(12))
            .map(|_| CHARS[self.below(CHARS.len())])
            .collect()
    }

    /// A request body: raw bytes, or a JSON object whose keys and values are such texts.
    fn body(&mut self) -> Vec<u8> {
        match self.below(3) {
            0 => {
                let len = self.below(200);
                self.bytes(len)
            }
            _ => {
                let mut object = serde_json::Map::new();
                for _ in 0..self.below(4) {
                    let key = if self.below(3) == 0 {
                        "serviceCallId".to_owned()
                    } else {
                        self.text()
                    };
                    object.insert(key, Value::String(self.text()));
                }
                serde_json::to_vec(&object).unwrap()
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_answered_whatever_its_body() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let before = daemon.actor_id(ApiResponder::NAME);
    let mut garbage = Bytes(0x5eed);
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("a key with a newline", br#"{"a\nb":1}"#.to_vec()),
        (
            "a service call id with CR LF",
            br#"{"serviceCallId":"x\r\ny"}"#.to_vec(),
        ),
        ("invalid UTF-8", vec![b'{', 0xff, 0xfe, b'}']),
        ("a NUL byte", vec![0]),
        ("1 MiB of garbage", garbage.bytes(1024 * 1024)),
    ];
    for verb in ["get", "list", "cancel", "stats"] {
        let subject = format!("timer.api.{verb}.acme");
        for (what, body) in &bodies {
            let (code, header, body) = raw_request(&client, &subject, body.clone()).await;
            let code: u16 = code
                .unwrap_or_else(|| panic!("{verb}, {what}: no error code"))
                .parse()
                .unwrap();
            assert!((400..500).contains(&code), "{verb}, {what}: {code}");
            let header = header.unwrap_or_default();
            assert!(!header.trim().is_empty(), "{verb}, {what}: no reason");
            assert!(!header.chars().any(char::is_control), "{header:?}");
            let body: Value = serde_json::from_slice(&body).unwrap();
            let reason = body["error"].as_str().unwrap_or_default();
            assert!(!reason.is_empty(), "{verb}, {what}: {body}");
        }
    }
    let key = raw_request(&client, "timer.api.stats.acme", br#"{"a\nb":1}"#.to_vec()).await;
    let body: Value = serde_json::from_slice(&key.2).unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("a\nb"),
        "the body keeps the reason as it is: {body}"
    );
    assert_eq!(daemon.actor_id(ApiResponder::NAME), before);
    daemon.shutdown().await.unwrap();
}

/// A few hundred random bodies, each on its own reply subject: each gets exactly one reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_random_body_gets_exactly_one_reply() {
    let (_server, _scratch, daemon, client) = common::started().await;
    client.api_ready().await;
    let mut replies = client.client.subscribe("_INBOX.random.>").await.unwrap();
    client.client.flush().await.unwrap();
    let mut random = Bytes(0xdec0_de5e_ed01);
    let verbs = ["get", "list", "cancel", "stats"];
    let total = 300;
    for i in 0..=total {
        // The last one is a plain request: once it is answered, a second reply to any earlier
        // one would be waiting already.
        let (subject, body) = if i == total {
            ("timer.api.stats.acme".to_owned(), b"{}".to_vec())
        } else {
            let verb = verbs[random.below(verbs.len())];
            (format!("timer.api.{verb}.acme"), random.body())
        };
        let inbox = format!("_INBOX.random.{i}");
        client
            .client
            .publish_with_reply(subject.clone(), inbox.clone(), body.clone().into())
            .await
            .unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(10), replies.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no reply to {subject} with body {:?}",
                    String::from_utf8_lossy(&body)
                )
            })
            .unwrap();
        assert_eq!(
            reply.subject.as_str(),
            inbox,
            "one reply per request, in turn"
        );
        if let Some(code) = reply
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Service-Error-Code"))
        {
            assert!(
                ["400", "404"].contains(&code.as_str()),
                "{subject} {:?}: {code}",
                String::from_utf8_lossy(&body)
            );
        }
    }
    if let Some(extra) = received(&mut replies) {
        panic!("a second reply on {}", extra.subject);
    }
    daemon.shutdown().await.unwrap();
}
