//! The command stream's lines belong to the stream (docs/CONTRACT.md §9): a process with
//! another `command_partitions` adopts the stream's; a running daemon reads line consumers
//! that appear after its start; an operator-made first consumer the daemon cannot use is
//! refused before anything changes; `timer-service lines set N` changes the lines with
//! commands in flight and loses none; `lines set 1` is the rollback to a release without lines.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::{consumer, stream};
use chrono::Utc;
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually};
use tokio::sync::Mutex;

const TENANTS: usize = 40;

/// One timer for each of [`TENANTS`] tenants, due a second from now; returns their ids.
async fn schedule_every_tenant(client: &TestClient, round: &str) -> Vec<(String, String)> {
    let due = Utc::now() + chrono::Duration::seconds(1);
    let mut keys = Vec::new();
    for t in 0..TENANTS {
        let (tenant, id) = (format!("tenant{t}"), format!("{round}-{t}"));
        client.schedule(&tenant, &id, due, None).await;
        keys.push((tenant, id));
    }
    keys
}

/// Every key fires, each tenant's within `within`.
async fn await_fired(client: &TestClient, keys: &[(String, String)], within: Duration) {
    for (tenant, id) in keys {
        client
            .await_all_fired(tenant, std::slice::from_ref(id), within)
            .await;
    }
}

fn partitions_of(config: &stream::Config) -> Option<String> {
    config
        .subject_transform
        .as_ref()
        .map(|t| t.destination.clone())
}

/// `timer-service lines <args>` against `server`; its exit status and output.
async fn lines(server: &NatsServer, scratch: &Scratch, args: &[&str]) -> (bool, String) {
    let env = common::operator::env_for(&server.url(), scratch);
    let args: Vec<&str> = ["lines"].iter().chain(args).copied().collect();
    common::operator::run(scratch, &args, &env).await
}

/// Finding 1: a second process (a canary with other settings) started and stopped beside a
/// running daemon changes nothing on the stream; every tenant's timer fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_other_lines_adopts_the_streams() {
    let server = NatsServer::start();
    let (scratch_a, scratch_b) = (Scratch::new(), Scratch::new());
    let client = TestClient::connect(&server).await;
    let a = daemon_reading(
        &server,
        &scratch_a,
        &[("TIMER_NATS_COMMAND_PARTITIONS", "4")],
    )
    .await;
    let b = daemon_reading(
        &server,
        &scratch_b,
        &[
            ("TIMER_NATS_COMMAND_PARTITIONS", "8"),
            ("TIMER_NAME", "canary"),
        ],
    )
    .await;
    let b_log = b.log.clone();
    b.signal(libc::SIGTERM);
    assert!(b.wait_exit(Duration::from_secs(15)).await.success());

    let keys = schedule_every_tenant(&client, "after-canary").await;
    await_fired(&client, &keys, Duration::from_secs(15)).await;
    let log = std::fs::read_to_string(&b_log).unwrap_or_default();
    assert!(
        log.contains("the command stream has 4 lines and command_partitions is 8"),
        "the canary names both numbers:\n{log}"
    );
    assert_eq!(
        partitions_of(&client.command_stream_info().await.config).as_deref(),
        Some("timer.cmd.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(4,2)}}")
    );
    drop(a);
}

/// Finding 1, as a release that sets its own count leaves it: the transform rewritten to 8
/// lines and lines 4–7 given consumers after the daemon started. The running daemon reads
/// them within seconds and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_daemon_reads_lines_that_appear_after_its_start() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let a = daemon_reading(&server, &scratch, &[("TIMER_NATS_COMMAND_PARTITIONS", "4")]).await;
    let stream = client
        .js
        .get_stream("TIMER_COMMANDS")
        .await
        .expect("stream");
    for line in 4..8 {
        stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(format!("timer-service-p{line}")),
                filter_subject: format!("timer.cmd.*.*.{line}"),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(4),
                ..Default::default()
            })
            .await
            .expect("a line consumer");
    }
    let mut config = client.command_stream_info().await.config;
    config.subject_transform = Some(stream::SubjectTransform {
        source: "timer.cmd.*.*".into(),
        destination: "timer.cmd.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(8,2)}}".into(),
    });
    client
        .js
        .update_stream(config)
        .await
        .expect("transform to 8 lines");

    let keys = schedule_every_tenant(&client, "eight").await;
    await_fired(&client, &keys, Duration::from_secs(15)).await;
    a.await_log(
        "reading a line consumer found on the command stream since the start",
        Duration::from_secs(5),
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "nothing left in the stream",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;
}

/// Finding 4: a first consumer made by an operator with filters the daemon cannot use with
/// lines is refused with the reason in the log and `/readyz`, and nothing on the broker is
/// changed; one reading every subject but a line's is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_made_first_consumer_is_checked_before_anything_changes() {
    for (filters, usable) in [
        (vec!["timer.cmd.schedule.>", "timer.cmd.cancel.>"], false),
        (
            vec!["timer.cmd.*", "timer.cmd.*.*", "timer.cmd.*.*.*.>"],
            true,
        ),
    ] {
        let server = NatsServer::start();
        let scratch = Scratch::new();
        let client = TestClient::connect(&server).await;
        let stream = client
            .js
            .create_stream(stream::Config {
                name: "TIMER_COMMANDS".into(),
                subjects: vec!["timer.cmd.>".into()],
                retention: stream::RetentionPolicy::WorkQueue,
                ..Default::default()
            })
            .await
            .expect("the operator's stream");
        stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some("timer-service".into()),
                filter_subjects: filters.iter().map(|f| f.to_string()).collect(),
                ack_policy: consumer::AckPolicy::Explicit,
                ..Default::default()
            })
            .await
            .expect("the operator's consumer");
        let addr = format!("127.0.0.1:{}", common::free_port());
        let daemon = DaemonProcess::start_with(
            &server,
            &scratch,
            &[
                ("TIMER_NATS_COMMAND_PARTITIONS", "4"),
                ("TIMER_HTTP_LISTEN", &addr),
            ],
        );
        if usable {
            client.schedule("acme", "usable", Utc::now(), None).await;
            client
                .await_due("acme", "usable", Duration::from_secs(15))
                .await;
            assert!(
                partitions_of(&client.command_stream_info().await.config).is_some(),
                "in lines"
            );
            continue;
        }
        daemon
            .await_log(
                "the command stream cannot be laid out in lines",
                Duration::from_secs(20),
            )
            .await;
        let body = eventually(
            Duration::from_secs(10),
            "/readyz red with the reason",
            || async {
                common::http_get(&addr, "/readyz")
                    .await
                    .filter(|(code, body)| *code == 503 && body.contains("timer.cmd.schedule.>"))
                    .map(|(_, body)| body)
            },
        )
        .await;
        assert!(body.contains("lines set 1"), "{body}");
        let config = client.command_stream_info().await.config;
        assert_eq!(partitions_of(&config), None, "the transform untouched");
        assert!(
            !config.metadata.contains_key("timer-service.lines"),
            "nothing recorded"
        );
        assert_eq!(
            client.command_consumer_names().await,
            ["timer-service"],
            "no line consumer"
        );
    }
}

/// What a daemon logs once it reads the command stream's lines.
const READING_LINES: &str = "reading the command stream's consumers in turns";

/// A daemon on `scratch` with `env`, once it reads the command stream's lines.
async fn daemon_reading(
    server: &NatsServer,
    scratch: &Scratch,
    env: &[(&str, &str)],
) -> DaemonProcess {
    let daemon = DaemonProcess::start_with(server, scratch, env);
    daemon
        .await_log(READING_LINES, Duration::from_secs(20))
        .await;
    daemon
}

/// A daemon with 4 lines taken to one line by `lines set 1` while commands arrive, then
/// stopped (SIGTERM, exit 0); the commands the broker acknowledged meanwhile.
async fn one_line_under_traffic(
    server: &NatsServer,
    scratch: &Scratch,
    client: &TestClient,
) -> Vec<(String, String)> {
    let daemon = daemon_reading(server, scratch, &[("TIMER_NATS_COMMAND_PARTITIONS", "4")]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = publish_until(client, stop.clone());
    let (ok, out) = lines(server, scratch, &["set", "1"]).await;
    assert!(ok, "lines set 1:\n{out}");
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());
    // Commands keep coming while no daemon runs.
    stop.store(true, Ordering::Relaxed);
    publisher.await.expect("publisher")
}

/// Publishes schedules of many tenants, each acknowledged by the broker, until told to stop;
/// returns the keys acknowledged.
fn publish_until(
    client: &TestClient,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(String, String)>> {
    let js = client.js.clone();
    tokio::spawn(async move {
        let due = common::rfc3339(Utc::now() + chrono::Duration::hours(1));
        let mut acked = Vec::new();
        let mut i = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let mut pending = Vec::new();
            for _ in 0..50 {
                let (tenant, id) = (format!("tenant{}", i % TENANTS), format!("k{i}"));
                let command = common::schedule_command(&tenant, &id, &due, None);
                let subject = format!("timer.cmd.schedule.{tenant}");
                let ack = js
                    .publish(subject, serde_json::to_vec(&command).unwrap().into())
                    .await
                    .expect("publish");
                pending.push(((tenant, id), ack));
                i += 1;
            }
            for (key, ack) in pending {
                if ack.await.is_ok() {
                    acked.push(key);
                }
            }
        }
        acked
    })
}

/// Every acknowledged key is stored, and nothing is left in the command stream.
async fn await_all_stored(client: &TestClient, scratch: &Scratch, acked: &[(String, String)]) {
    let wanted: HashSet<(String, String)> = acked.iter().cloned().collect();
    let stored = Mutex::new(HashSet::new());
    eventually(
        Duration::from_secs(30),
        "every acknowledged command stored",
        || async {
            let rows = common::query_rows(
                &scratch.database(),
                "SELECT tenant_id, service_call_id FROM timer_schedules",
                |row| {
                    (
                        row.try_get_by_index::<String>(0).expect("tenant"),
                        row.try_get_by_index::<String>(1).expect("id"),
                    )
                },
            )
            .await;
            let rows: HashSet<(String, String)> = rows.into_iter().collect();
            let done = wanted.is_subset(&rows);
            *stored.lock().await = rows;
            done.then_some(())
        },
    )
    .await;
    eventually(
        Duration::from_secs(15),
        "nothing left in the stream",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;
}

/// `lines set` up and down while commands arrive: every acknowledged command is applied, none
/// is left in the stream, and the lines that go are deleted once drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_set_up_and_down_loses_no_command_in_flight() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let _daemon =
        daemon_reading(&server, &scratch, &[("TIMER_NATS_COMMAND_PARTITIONS", "4")]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = publish_until(&client, stop.clone());
    for (count, consumers) in [("8", 9), ("2", 3), ("16", 17), ("1", 1)] {
        let (ok, out) = lines(&server, &scratch, &["set", count]).await;
        assert!(ok, "lines set {count}:\n{out}");
        assert_eq!(
            client.command_consumer_names().await.len(),
            consumers,
            "after lines set {count}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let acked = publisher.await.expect("publisher");
    assert!(acked.len() > 500, "only {} commands sent", acked.len());
    await_all_stored(&client, &scratch, &acked).await;
    let (ok, shown) = lines(&server, &scratch, &["show"]).await;
    assert!(ok, "{shown}");
    assert!(
        shown.contains("lines: 1") && shown.contains("transform: none"),
        "{shown}"
    );
    assert!(
        shown.contains("timer-service\tfilters timer.cmd.>\t"),
        "{shown}"
    );
}

/// `lines set 1` while commands arrive leaves the shape a release without lines reads (no
/// transform, one consumer reading `timer.cmd.>`), and keeps it: a daemon of this release
/// started afterwards with the default 16 adopts the one line recorded rather than laying the
/// stream out again. Every command sent before and after is applied, and new timers fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_set_1_leaves_one_consumer_reading_everything_and_keeps_it() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let acked = one_line_under_traffic(&server, &scratch, &client).await;

    let config = client.command_stream_info().await.config;
    assert_eq!(partitions_of(&config), None, "no transform");
    assert_eq!(client.command_consumer_names().await, ["timer-service"]);
    let first: consumer::PullConsumer = client
        .js
        .get_consumer_from_stream("timer-service", "TIMER_COMMANDS")
        .await
        .expect("the first consumer");
    let first = first.cached_info().config.clone();
    assert_eq!(
        (first.filter_subject.as_str(), first.filter_subjects.len()),
        ("timer.cmd.>", 0)
    );

    let again = DaemonProcess::start(&server, &scratch);
    await_all_stored(&client, &scratch, &acked).await;
    let keys = schedule_every_tenant(&client, "after-rollback").await;
    await_fired(&client, &keys, Duration::from_secs(15)).await;
    again
        .await_log(
            "the command stream has 1 lines and command_partitions is 16",
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(
        partitions_of(&client.command_stream_info().await.config),
        None
    );
    assert_eq!(client.command_consumer_names().await, ["timer-service"]);
}

/// The rollback procedure with the release before lines itself (built from its git commit,
/// `common::previous_release`): `lines set 1` while commands arrive, stop, undo the later
/// migrations (`timer-service migrate --to`), start the older binary. It reads every command
/// acknowledged before and after, leaves nothing in the stream, and fires new timers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_to_the_release_before_lines_loses_nothing() {
    let Some(previous) = tokio::task::spawn_blocking(common::previous_release::binary)
        .await
        .expect("build")
    else {
        return;
    };
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let acked = one_line_under_traffic(&server, &scratch, &client).await;

    let env = common::operator::env_for(&server.url(), &scratch);
    let (migrated, out) = common::operator::run(
        &scratch,
        &[
            "migrate",
            "--to",
            common::previous_release::NEWEST_MIGRATION,
        ],
        &env,
    )
    .await;
    assert!(migrated, "migrate --to:\n{out}");

    let older = DaemonProcess::start_binary(&previous, &server, &scratch, &[]);
    await_all_stored(&client, &scratch, &acked).await;
    let keys = schedule_every_tenant(&client, "on-the-older-release").await;
    await_fired(&client, &keys, Duration::from_secs(15)).await;
    assert!(
        !older.log_text().contains("ERROR"),
        "the older release ran cleanly:\n{}",
        older.log_text()
    );
}
