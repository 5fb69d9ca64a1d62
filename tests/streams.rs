//! The broker objects the service relies on: created as soon as the broker is reached (before
//! any command or event, docs/CONTRACT.md §7), and used as they are when an operator made them.

mod common;

use std::time::Duration;

use async_nats::jetstream::consumer;
use chrono::Utc;
use common::{NatsServer, Scratch, TestClient, config, eventually};
use timer_service::Daemon;
use timer_service::domain::TimerState;

/// `/readyz` answers 200 only once the streams and the command consumers are there
/// (docs/CONTRACT.md §7): a client that waits for it may create its consumer of the event
/// stream at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_is_ready_only_once_its_streams_are_there() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let addr = format!("127.0.0.1:{}", common::free_port());
    let client = TestClient::connect(&server).await;
    let _daemon =
        common::DaemonProcess::start_with(&server, &scratch, &[("TIMER_HTTP_LISTEN", &addr)]);
    eventually(Duration::from_secs(30), "/readyz 200", || async {
        let (status, _) = common::http_get(&addr, "/readyz").await?;
        (status == 200).then_some(())
    })
    .await;
    for stream in ["TIMER_EVENTS", "TIMER_COMMANDS"] {
        let found = client.js.get_stream(stream).await;
        assert!(found.is_ok(), "{stream} is not there once ready: {found:?}");
    }
}

/// A downstream service starting with the daemon can create its durable consumer on the event
/// stream before any timer has fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streams_and_the_consumer_exist_before_any_command_or_event() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let daemon = Daemon::start(config(&server, &scratch)).await.unwrap();

    let events = eventually(
        Duration::from_secs(15),
        "the TIMER_EVENTS stream",
        || async { client.js.get_stream("TIMER_EVENTS").await.ok() },
    )
    .await;
    events
        .create_consumer(consumer::pull::Config {
            durable_name: Some("downstream".into()),
            filter_subject: "timer.evt.due.>".into(),
            ..Default::default()
        })
        .await
        .expect("a durable consumer on the event stream");
    client
        .js
        .get_consumer_from_stream::<consumer::pull::Config, _, _>("timer-service", "TIMER_COMMANDS")
        .await
        .expect("the command consumer");
    assert_eq!(
        client.events("timer.evt.>").await.len(),
        0,
        "created empty, before any event"
    );
    let mut events = client.js.get_stream("TIMER_EVENTS").await.unwrap();
    let config = events.info().await.unwrap().config.clone();
    assert_eq!(
        config.max_age,
        Duration::from_secs(7 * 24 * 3600),
        "event_max_age"
    );
    assert_eq!(config.num_replicas, 1);
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_max_age_and_replicas_shape_the_streams_the_service_creates() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let mut config = config(&server, &scratch);
    config.nats.event_max_age = Duration::from_secs(90);
    let daemon = Daemon::start(config).await.unwrap();
    let mut events = eventually(
        Duration::from_secs(15),
        "the TIMER_EVENTS stream",
        || async { client.js.get_stream("TIMER_EVENTS").await.ok() },
    )
    .await;
    assert_eq!(
        events.info().await.unwrap().config.max_age,
        Duration::from_secs(90)
    );
    daemon.shutdown().await.unwrap();
}

/// Streams an operator created first, with settings of their own, are used as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_created_by_an_operator_are_used_as_they_are() {
    use async_nats::jetstream::stream;
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    for (name, subject) in [
        ("TIMER_COMMANDS", "timer.cmd.>"),
        ("TIMER_EVENTS", "timer.evt.>"),
    ] {
        client
            .js
            .create_stream(stream::Config {
                name: name.into(),
                subjects: vec![subject.into()],
                max_age: Duration::from_secs(3600),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let daemon = Daemon::start(config(&server, &scratch)).await.unwrap();
    client
        .schedule("acme", "own-streams", Utc::now(), None)
        .await;
    client
        .await_due("acme", "own-streams", Duration::from_secs(10))
        .await;
    let mut commands = client.js.get_stream("TIMER_COMMANDS").await.unwrap();
    let info = commands.info().await.unwrap();
    assert_eq!(
        info.config.retention,
        stream::RetentionPolicy::Limits,
        "left as created"
    );
    assert_eq!(info.config.max_age, Duration::from_secs(3600));
    daemon.shutdown().await.unwrap();
}

/// A command consumer made with a longer ack wait (an earlier version made it with 30 s) is
/// given the service's short one, so that commands a killed daemon held come back within
/// seconds; everything else about it is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_consumer_with_a_long_ack_wait_gets_the_short_one() {
    use async_nats::jetstream::stream;
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let commands = client
        .js
        .create_stream(stream::Config {
            name: "TIMER_COMMANDS".into(),
            subjects: vec!["timer.cmd.>".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .unwrap();
    commands
        .create_consumer(consumer::pull::Config {
            durable_name: Some("timer-service".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: 5_000,
            ..Default::default()
        })
        .await
        .unwrap();
    let daemon = Daemon::start(config(&server, &scratch)).await.unwrap();
    client.barrier("acme").await;
    let mut consumer: consumer::PullConsumer = client
        .js
        .get_consumer_from_stream("timer-service", "TIMER_COMMANDS")
        .await
        .unwrap();
    let info = consumer.info().await.unwrap();
    assert_eq!(info.config.ack_wait, timer_service::ports::COMMAND_ACK_WAIT);
    assert_eq!(info.config.max_ack_pending, 5_000, "the rest kept");
    daemon.shutdown().await.unwrap();
}

/// A command stream deleted and created again numbers its commands from 1 anew; every command
/// of the new stream is still newer than every command of the old one (docs/CONTRACT.md §3): a
/// cancel and a reschedule sent after the re-creation take effect, by command and by the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_of_a_re_created_command_stream_are_newer_than_the_old_ones() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let persistence = daemon.persistence();
    let later = common::millis(Utc::now() + chrono::Duration::hours(1));
    // Enough commands first that the keys' sequences are well above the new stream's.
    let fillers: Vec<String> = (0..200).map(|i| format!("filler-{i}")).collect();
    client.schedule_many("acme", &fillers, later).await;
    for id in ["k1", "k2", "k3"] {
        client.schedule("acme", id, later, None).await;
    }
    let k3 = common::await_state(&persistence, "acme", "k3", TimerState::Scheduled).await;
    assert!(k3.command_seq > 200, "{}", k3.command_seq);

    client
        .js
        .delete_stream("TIMER_COMMANDS")
        .await
        .expect("delete the command stream");
    // The daemon finds it gone and creates it again, numbering from 1.
    client.wait_for_command_stream().await;

    client
        .publish_raw(
            "timer.cmd.cancel.acme",
            serde_json::to_vec(&timer_service::domain::command::cancel_timer_command(
                "acme",
                "k1",
                "c",
                Utc::now(),
            ))
            .unwrap(),
        )
        .await;
    let soon = common::millis(Utc::now() + chrono::Duration::seconds(1));
    client.schedule("acme", "k2", soon, None).await;
    common::await_state(&persistence, "acme", "k1", TimerState::Cancelled).await;
    let fired = client
        .await_due("acme", "k2", Duration::from_secs(15))
        .await;
    assert_eq!(fired.due_at(), soon, "k2 fires at its new dueAt");

    let (code, reply) = client
        .api_request(
            "timer.api.cancel.acme",
            serde_json::json!({ "serviceCallId": "k3" }),
        )
        .await;
    assert_eq!((code, reply["outcome"].as_str()), (None, Some("cancelled")));
    let k3 = persistence.get("acme", "k3").await.unwrap().unwrap();
    assert_eq!(
        k3.state,
        TimerState::Cancelled,
        "the API's cancel took effect"
    );
    daemon.shutdown().await.unwrap();
}
