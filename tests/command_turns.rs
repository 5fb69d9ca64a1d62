//! Commands in turns: the command stream in lines by tenant, read in turns, so one tenant's
//! backlog of commands does not hold up another tenant's (docs/CONTRACT.md §9); a stream made
//! by an earlier version keeps being drained; a deleted stream gets its lines again; a server
//! without subject transforms reads one line.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use async_nats::jetstream::{consumer, stream};
use chrono::Utc;
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually};
use futures::TryStreamExt;

/// Debian's nats-server (2.9), which has no subject transforms.
const DEBIAN_NATS_SERVER: &str = "/usr/sbin/nats-server";
/// The other tenant's backlog, queued while the daemon is stopped.
const BACKLOG: usize = 50_000;
/// The small tenant's timers, each due [`LEAD`] after its command is sent.
const SMALL: usize = 20;
const LEAD: Duration = Duration::from_millis(1000);
/// How late a small tenant's timer may fire while the backlog drains.
const BOUND: Duration = Duration::from_millis(300);

/// What one run of the backlog scenario measured.
struct Outcome {
    /// How late each of the small tenant's timers fired, by the broker's clock.
    late: Vec<Duration>,
    /// From the daemon's start to the backlog handled.
    drain: Duration,
}

/// Publishes `count` ScheduleTimers of `tenant` as fast as a client can, then waits until the
/// stream holds them all.
async fn queue(client: &TestClient, tenant: &str, count: usize, due: &str) {
    let before = client.command_stream_info().await.state.last_sequence;
    let subject = format!("timer.cmd.schedule.{tenant}");
    for i in 0..count {
        let command = common::schedule_command(tenant, &format!("{tenant}-{i}"), due, None);
        client
            .client
            .publish(
                subject.clone(),
                serde_json::to_vec(&command).unwrap().into(),
            )
            .await
            .expect("publish");
    }
    client.client.flush().await.expect("flush");
    eventually(Duration::from_secs(60), "the backlog stored", || async {
        (client.command_stream_info().await.state.last_sequence >= before + count as u64)
            .then_some(())
    })
    .await;
}

/// Waits until the daemon has created the lines' consumers too.
async fn await_consumers(client: &TestClient, count: usize) {
    eventually(Duration::from_secs(15), "the command consumers", || async {
        let stream = client.js.get_stream("TIMER_COMMANDS").await.ok()?;
        let names: Vec<String> = stream.consumer_names().try_collect().await.ok()?;
        (names.len() == count).then_some(())
    })
    .await;
}

/// `bulk` queues [`BACKLOG`] commands while the daemon is stopped; once the daemon is back and
/// draining them, `small` sends [`SMALL`] commands, each due [`LEAD`] after it is sent. Of 16
/// lines, the broker's hash puts `bulk` on line 13 and `small` on line 12.
async fn backlog_run(partitions: &str) -> Outcome {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let env = [("TIMER_NATS_COMMAND_PARTITIONS", partitions)];
    let client = TestClient::connect(&server).await;
    let first = DaemonProcess::start_with(&server, &scratch, &env);
    client.wait_for_command_stream().await;
    let lines: usize = partitions.parse().expect("partitions");
    await_consumers(&client, if lines > 1 { lines + 1 } else { 1 }).await;
    first.signal(libc::SIGTERM);
    assert!(first.wait_exit(Duration::from_secs(15)).await.success());

    let far = common::rfc3339(Utc::now() + chrono::Duration::hours(1));
    queue(&client, "bulk", BACKLOG, &far).await;
    let started = Instant::now();
    let _daemon = DaemonProcess::start_with(&server, &scratch, &env);
    eventually(Duration::from_secs(30), "the backlog draining", || async {
        (client.commands_outstanding().await < BACKLOG as u64).then_some(())
    })
    .await;

    let ids: Vec<String> = (0..SMALL).map(|i| format!("small-{i}")).collect();
    for id in &ids {
        let due = Utc::now() + chrono::Duration::from_std(LEAD).unwrap();
        client.schedule("small", id, due, None).await;
    }
    let events = client
        .await_all_fired("small", &ids, Duration::from_secs(120))
        .await;
    eventually(Duration::from_secs(120), "the backlog handled", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;
    let drain = started.elapsed();
    let late = events
        .iter()
        .map(|e| (e.stored_at - e.due_at()).to_std().unwrap_or_default())
        .collect();
    Outcome { late, drain }
}

fn report(what: &str, outcome: &Outcome) -> Duration {
    let mut late = outcome.late.clone();
    late.sort();
    let max = *late.last().expect("events");
    eprintln!(
        "{what}: small's timers fired p50 {:?}, max {max:?} late; {BACKLOG} commands of bulk \
         handled {:?} after the daemon started",
        late[late.len() / 2],
        outcome.drain
    );
    max
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_behind_no_backlog_is_served_in_turn() {
    let outcome = backlog_run("16").await;
    let max = report("16 lines", &outcome);
    assert!(
        max <= BOUND,
        "small's timers fired up to {max:?} late behind bulk's backlog"
    );
    assert!(
        outcome.drain > LEAD + 2 * BOUND,
        "the backlog drained in {:?}: too fast for this test to tell lines from one line",
        outcome.drain
    );
}

/// The same scenario with one line: the small tenant's commands wait behind the backlog, so the
/// test above would fail without the lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_line_keeps_a_tenant_behind_anothers_backlog() {
    let outcome = backlog_run("1").await;
    let max = report("1 line", &outcome);
    assert!(
        max > BOUND,
        "with one line small's timers fired at most {max:?} late: the backlog was too small"
    );
}

/// A stream and consumer made by an earlier version (no transform, one consumer reading
/// everything, commands stored as `timer.cmd.<action>.<tenant>`) keep being drained in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_versions_stream_is_drained_and_put_in_lines() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let stream = client
        .js
        .create_stream(stream::Config {
            name: "TIMER_COMMANDS".into(),
            subjects: vec!["timer.cmd.>".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .expect("stream");
    stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("timer-service".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .expect("consumer");

    let soon = Utc::now() + chrono::Duration::seconds(3);
    let mut ids = Vec::new();
    for t in 0..5 {
        let tenant = format!("t{t}");
        let batch: Vec<String> = (0..40).map(|i| format!("old-{i}")).collect();
        client.schedule_many(&tenant, &batch, soon).await;
        ids.push((tenant, batch));
    }
    // A key cancelled in the old stream (due later than the daemon may take to read it on a
    // loaded machine: a cancel read after its timer fired is refused, as the contract says),
    // and one rescheduled once the lines exist.
    let cancelled_due = Utc::now() + chrono::Duration::seconds(20);
    client
        .schedule("t0", "cancelled", cancelled_due, None)
        .await;
    let cancel = serde_json::json!({
        "id": uuid::Uuid::now_v7(), "type": "CancelTimer", "tenantId": "t0",
        "timestampMs": Utc::now().timestamp_millis(),
        "payload": { "tenantId": "t0", "serviceCallId": "cancelled" },
    });
    client
        .publish_raw("timer.cmd.cancel.t0", serde_json::to_vec(&cancel).unwrap())
        .await;
    client
        .schedule("t1", "moved", Utc::now() + chrono::Duration::hours(1), None)
        .await;
    assert_eq!(client.command_stream_info().await.state.messages, 203);

    let _daemon = DaemonProcess::start(&server, &scratch);
    await_consumers(&client, 17).await;
    client
        .schedule(
            "t1",
            "moved",
            Utc::now() + chrono::Duration::seconds(1),
            None,
        )
        .await;
    for (tenant, batch) in &ids {
        client
            .await_all_fired(tenant, batch, Duration::from_secs(30))
            .await;
    }
    client
        .await_due("t1", "moved", Duration::from_secs(10))
        .await;
    client.barrier("t0").await;
    let state = common::query_rows(
        &scratch.database(),
        "SELECT state FROM timer_schedules WHERE tenant_id = 't0' AND service_call_id = 'cancelled'",
        |row| row.try_get_by_index::<String>(0).expect("state"),
    )
    .await;
    assert_eq!(
        state,
        ["Cancelled"],
        "the old stream's cancel applied after its schedule"
    );
    eventually(
        Duration::from_secs(10),
        "nothing left in the stream",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;

    let mut stream = client
        .js
        .get_stream("TIMER_COMMANDS")
        .await
        .expect("stream");
    let config = stream.info().await.expect("info").config.clone();
    let transform = config.subject_transform.expect("a transform");
    assert_eq!(transform.source, "timer.cmd.*.*");
    let first: consumer::PullConsumer = stream.get_consumer("timer-service").await.unwrap();
    assert_eq!(
        first.cached_info().config.filter_subjects,
        ["timer.cmd.*", "timer.cmd.*.*", "timer.cmd.*.*.*.>"]
    );
    let names = client.command_consumer_names().await;
    assert!(
        names.contains(&"timer-service-p15".to_string()),
        "{names:?}"
    );
}

/// The stream deleted under a running daemon is created again with its transform and every
/// line's consumer, and commands flow again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_stream_gets_its_lines_again() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let _daemon = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;
    await_consumers(&client, 17).await;
    client.barrier("before").await;

    client
        .js
        .delete_stream("TIMER_COMMANDS")
        .await
        .expect("delete");
    eventually(
        Duration::from_secs(20),
        "the stream and its lines again",
        || async {
            let mut stream = client.js.get_stream("TIMER_COMMANDS").await.ok()?;
            let transformed = stream.info().await.ok()?.config.subject_transform.is_some();
            let names: Vec<String> = stream.consumer_names().try_collect().await.ok()?;
            (transformed && names.len() == 17).then_some(())
        },
    )
    .await;
    for tenant in ["acme", "globex", "initech"] {
        client.barrier(tenant).await;
    }
}

/// A server older than 2.10 has no subject transforms: one consumer, as before, a warning, and
/// every tenant's commands handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_transforms_reads_one_line() {
    if !std::path::Path::new(DEBIAN_NATS_SERVER).exists() {
        common::lacking(
            "a_server_without_transforms_reads_one_line",
            "no nats-server 2.9 at /usr/sbin/nats-server",
        );
        return;
    }
    let server = NatsServer::start_bin(PathBuf::from(DEBIAN_NATS_SERVER));
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let daemon = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;
    for tenant in ["acme", "globex"] {
        client.barrier(tenant).await;
    }
    assert_eq!(client.command_consumer_names().await, vec!["timer-service"]);
    let log = std::fs::read_to_string(&daemon.log).unwrap_or_default();
    assert!(
        log.contains("no subject transforms"),
        "no warning in the log:\n{log}"
    );
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());
}
