//! Daemon names on a shared database (docs/CONTRACT.md §8): two live daemons never share one. A
//! daemon whose configured name a live daemon holds refuses to start; one restarted after a
//! crash takes its name back within a few seconds; daemons without a configured name pick
//! different ones. The real binaries on one PostgreSQL database.
//!
//! These need PostgreSQL (one daemon per SQLite file): they run in the PostgreSQL run
//! (`TEST_DATABASE=postgres`) and say so otherwise.

mod common;

use std::time::{Duration, Instant};

use chrono::Utc;
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually};

fn postgres_scratch() -> Option<Scratch> {
    Scratch::postgres_only("daemon names matter where daemons share a database")
}

/// The rows of the `daemons` table: name and instance.
async fn daemons(scratch: &Scratch) -> Vec<(String, Option<String>)> {
    common::query_rows(
        &scratch.database(),
        "SELECT name, instance FROM daemons ORDER BY name",
        |row| {
            (
                row.try_get_by_index::<String>(0).expect("name"),
                row.try_get_by_index::<Option<String>>(1).expect("instance"),
            )
        },
    )
    .await
}

/// Schedules one timer due in half a second and waits for it to fire.
async fn fires(client: &TestClient, id: &str) {
    let due_at = Utc::now() + chrono::Duration::milliseconds(500);
    client.schedule("acme", id, due_at, None).await;
    client
        .await_all_fired("acme", &[id.to_owned()], Duration::from_secs(20))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_under_a_live_daemons_name_refuses_to_start() {
    let Some(scratch) = postgres_scratch() else {
        return;
    };
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    let first = DaemonProcess::start_with(&server, &scratch, &[("TIMER_NAME", "twin")]);
    client.wait_for_command_stream().await;
    first
        .await_log("timer-service running", Duration::from_secs(15))
        .await;

    let started = Instant::now();
    let second = DaemonProcess::start_with(&server, &scratch, &[("TIMER_NAME", "twin")]);
    let log = second.log.clone();
    let status = second.wait_exit(Duration::from_secs(30)).await;
    let took = started.elapsed();
    let log = std::fs::read_to_string(log).unwrap();
    eprintln!("the second daemon exited with {status} after {took:?}");
    assert_eq!(status.code(), Some(2), "{log}");
    let refusal = log
        .lines()
        .find(|line| line.contains("is held by a live daemon"))
        .unwrap_or_else(|| panic!("no refusal in:\n{log}"));
    assert!(
        refusal.contains("\\\"twin\\\"") || refusal.contains("\"twin\""),
        "{refusal}"
    );
    assert!(!log.contains("timer-service running"), "{log}");

    // The first is untouched: its name, its row, its firing.
    fires(&client, "after-the-refusal").await;
    let rows = daemons(&scratch).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, "twin");
    assert!(
        !first
            .log_text()
            .contains("another daemon has taken this daemon's name")
    );
    first.signal(libc::SIGTERM);
    assert!(first.wait_exit(Duration::from_secs(15)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_and_restarted_under_its_name_takes_it_back() {
    let Some(scratch) = postgres_scratch() else {
        return;
    };
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    let env = [("TIMER_NAME", "phoenix")];
    let daemon = DaemonProcess::start_with(&server, &scratch, &env);
    client.wait_for_command_stream().await;
    fires(&client, "before-the-kill").await;
    // Its probe has written the row lately (every 2 s): the restart must watch it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    daemon.kill9();

    let started = Instant::now();
    let daemon = DaemonProcess::start_with(&server, &scratch, &env);
    let log = daemon
        .await_log("timer-service running", Duration::from_secs(30))
        .await;
    let took = started.elapsed();
    let taken = log
        .lines()
        .find(|line| line.contains("daemon name taken"))
        .unwrap_or_else(|| panic!("no name taken in:\n{log}"));
    eprintln!("restarted under its name in {took:?}: {taken}");
    assert!(
        !taken.contains("waited_ms=0"),
        "the dead daemon's row was recent: {taken}"
    );
    // Two probe intervals and a margin (5 s), and the start-up around it.
    assert!(took < Duration::from_secs(15), "took {took:?}");
    fires(&client, "after-the-restart").await;
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());

    // A graceful stop gives the name up: the next start takes it at once.
    let daemon = DaemonProcess::start_with(&server, &scratch, &env);
    let log = daemon
        .await_log("daemon name taken", Duration::from_secs(30))
        .await;
    assert!(log.contains("waited_ms=0"), "{log}");
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_without_a_configured_name_pick_different_ones() {
    let Some(scratch) = postgres_scratch() else {
        return;
    };
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    let start = || DaemonProcess::start_without(&server, &scratch, &[], &["TIMER_NAME"]);
    let (one, two) = (start(), start());
    client.wait_for_command_stream().await;
    let mut names = Vec::new();
    for daemon in [&one, &two] {
        let log = daemon
            .await_log("timer-service running", Duration::from_secs(30))
            .await;
        let taken = log
            .lines()
            .find(|line| line.contains("daemon name taken"))
            .unwrap_or_else(|| panic!("no name taken in:\n{log}"));
        eprintln!("{taken}");
        assert!(taken.contains("host name and a random suffix"), "{taken}");
        names.push(taken.to_owned());
    }
    let rows = daemons(&scratch).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_ne!(rows[0].0, rows[1].0);
    assert_ne!(rows[0].1, rows[1].1);
    for (name, _) in &rows {
        assert!(
            names.iter().any(|line| line.contains(name.as_str())),
            "{name} logged"
        );
    }
    fires(&client, "with-two-unnamed").await;
    for daemon in [one, two] {
        daemon.signal(libc::SIGTERM);
        assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_frozen_while_another_takes_its_name_says_so_and_stops_claiming() {
    let Some(scratch) = postgres_scratch() else {
        return;
    };
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    let addr = format!("127.0.0.1:{}", common::free_port());
    let frozen = DaemonProcess::start_with(
        &server,
        &scratch,
        &[("TIMER_NAME", "sleeper"), ("TIMER_HTTP_LISTEN", &addr)],
    );
    client.wait_for_command_stream().await;
    let ready = |code: u16| {
        let addr = addr.clone();
        async move {
            common::http_get(&addr, "/readyz")
                .await
                .filter(|(c, _)| *c == code)
                .map(|(_, body)| body)
        }
    };
    eventually(Duration::from_secs(15), "ready", || ready(200)).await;

    // Frozen past the watch (5 s): its row stands still, so a new daemon takes the name.
    frozen.signal(libc::SIGSTOP);
    let taker = DaemonProcess::start_with(&server, &scratch, &[("TIMER_NAME", "sleeper")]);
    let log = taker
        .await_log("timer-service running", Duration::from_secs(30))
        .await;
    assert!(!log.contains("waited_ms=0"), "{log}");
    frozen.signal(libc::SIGCONT);

    // Not ready because its name is taken (right after the thaw it may first report the
    // database operation it was frozen in the middle of).
    eventually(
        Duration::from_secs(10),
        "not ready: name held by another",
        || async {
            ready(503)
                .await
                .filter(|body| body.contains("held by another daemon"))
        },
    )
    .await;
    frozen
        .await_log(
            "another daemon has taken this daemon's name",
            Duration::from_secs(10),
        )
        .await;
    // Timers still fire, claimed by the daemon that holds the name now.
    fires(&client, "after-the-takeover").await;
    // The row is marked after the broker's answer, so the event can arrive first.
    eventually(Duration::from_secs(10), "the fired row marked", || async {
        let reached = common::query_rows(
            &scratch.database(),
            "SELECT COUNT(*) FROM timer_schedules WHERE state = 'Reached'",
            |row| row.try_get_by_index::<i64>(0).expect("count"),
        )
        .await;
        (reached == vec![1]).then_some(())
    })
    .await;
    assert!(
        !frozen.log_text().contains("DueTimeReached published"),
        "the frozen daemon fired after losing its name"
    );
}
