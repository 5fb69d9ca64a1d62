//! Supervision: a failed child is restarted and the service keeps firing; past the restart
//! limit the daemon stops with an error (the binary then exits non-zero).

mod common;

use std::time::Duration;

use chrono::Utc;
use common::{NatsServer, Scratch, config, eventually};
use timer_service::actors::{NamedActor, Poller};
use timer_service::config::SupervisorSettings;
use timer_service::{Daemon, DaemonError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failed_child_is_restarted_and_timers_keep_firing() {
    let (_server, _scratch, daemon, client) = common::started().await;

    for kind in daemon.actor_names().to_vec() {
        // A timer pending across the failure must still fire.
        let pending = format!("pending-{kind}");
        client
            .schedule(
                "acme",
                &pending,
                Utc::now() + chrono::Duration::milliseconds(1200),
                None,
            )
            .await;
        client.barrier("acme").await;

        let before = daemon.actor_id(kind).expect("running");
        daemon.inject_fault(kind);
        eventually(Duration::from_secs(10), "the restarted actor", || async {
            daemon.actor_id(kind).filter(|id| *id != before)
        })
        .await;

        client
            .await_due("acme", &pending, Duration::from_secs(10))
            .await;
        let fresh = format!("after-{kind}");
        client.schedule("acme", &fresh, Utc::now(), None).await;
        client
            .await_due("acme", &fresh, Duration::from_secs(10))
            .await;
    }
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_restart_limit_the_daemon_stops_with_an_error() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let mut config = config(&server, &scratch);
    config.supervisor = SupervisorSettings {
        max_restarts: 2,
        restart_window: Duration::from_secs(60),
        min_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        ..Default::default()
    };
    let mut daemon = Daemon::start(config).await.unwrap();

    for _ in 0..2 {
        let before = daemon.actor_id(Poller::NAME).expect("running");
        daemon.inject_fault(Poller::NAME);
        eventually(Duration::from_secs(5), "the restarted poller", || async {
            daemon.actor_id(Poller::NAME).filter(|id| *id != before)
        })
        .await;
    }
    daemon.inject_fault(Poller::NAME);
    let error = tokio::time::timeout(Duration::from_secs(10), daemon.stopped())
        .await
        .expect("the daemon stops");
    match error {
        DaemonError::RestartLimit(reason) => assert!(reason.contains("poller"), "{reason}"),
        other => panic!("unexpected {other}"),
    }
    for name in daemon.actor_names() {
        assert!(daemon.actor_id(name).is_none(), "{name} still running");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_non_zero_when_it_cannot_run() {
    // An invalid setting stops start-up with a message naming it, and a non-zero status.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_timer-service"))
        .args(["run", "--config", "/nonexistent/config.toml"])
        .env("TIMER_BATCH_SIZE", "many")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let log = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("TIMER_BATCH_SIZE"), "{log}");
}
