//! Replicated streams on a three-node NATS cluster (`[nats] replicas = 3`): the node leading
//! the command stream is killed while timers are being scheduled and fired; nothing the broker
//! acknowledged is lost and the daemon carries on.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use common::nats_cluster::NatsCluster;
use common::{Scratch, TestClient, eventually};
use timer_service::{Config, Daemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_command_stream_leader_loses_nothing_acknowledged() {
    let mut cluster = NatsCluster::start().await;
    let scratch = Scratch::new();
    let mut config = Config {
        broker_url: cluster.urls(),
        ..common::config(&cluster.nodes[0], &scratch)
    };
    config.nats.replicas = 3;
    let daemon = Daemon::start(config).await.unwrap();
    let client = TestClient::connect_to(&cluster.urls()).await;
    client.wait_for_command_stream().await;
    let command_leader = || async {
        let mut stream = client.js.get_stream("TIMER_COMMANDS").await.ok()?;
        let info = stream.info().await.ok()?.clone();
        (info.config.num_replicas == 3).then_some(())?;
        info.cluster.and_then(|c| c.leader)
    };
    let leader = eventually(
        Duration::from_secs(20),
        "an R3 TIMER_COMMANDS with a leader",
        command_leader,
    )
    .await;
    eventually(Duration::from_secs(20), "an R3 TIMER_EVENTS", || async {
        let mut events = client.js.get_stream("TIMER_EVENTS").await.ok()?;
        (events.info().await.ok()?.config.num_replicas == 3).then_some(())
    })
    .await;

    // Timers due a second after they are sent, sent for four seconds; the leader is killed
    // after two. A publish the broker did not acknowledge is retried, as a client would.
    let publisher = TestClient::connect_to(&cluster.urls()).await;
    let sending = tokio::spawn(async move {
        let mut acked = Vec::new();
        let end = tokio::time::Instant::now() + Duration::from_secs(4);
        let mut i = 0;
        while tokio::time::Instant::now() < end {
            let id = format!("c-{i}");
            let command = common::schedule_command(
                "acme",
                &id,
                &common::rfc3339(Utc::now() + chrono::Duration::seconds(1)),
                None,
            );
            let bytes = serde_json::to_vec(&command).unwrap();
            loop {
                let sent = publisher
                    .js
                    .publish("timer.cmd.schedule.acme", bytes.clone().into())
                    .await;
                if let Ok(ack) = sent
                    && tokio::time::timeout(Duration::from_secs(2), ack)
                        .await
                        .is_ok_and(|a| a.is_ok())
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            acked.push(id);
            i += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        acked
    });
    tokio::time::sleep(Duration::from_secs(2)).await; // into the run: timers are firing now
    cluster.node(&leader).kill();
    let acked = sending.await.unwrap();
    eprintln!(
        "killed {leader}; {} commands acknowledged by the cluster",
        acked.len()
    );

    let events = client
        .await_all_fired("acme", &acked, Duration::from_secs(60))
        .await;
    let fired: HashSet<&str> = events.iter().map(|e| e.service_call_id()).collect();
    assert!(
        acked.iter().all(|id| fired.contains(id.as_str())),
        "every acknowledged timer fired"
    );
    let new_leader = eventually(Duration::from_secs(20), "a new leader", command_leader).await;
    eprintln!("new leader of TIMER_COMMANDS: {new_leader}");
    assert_ne!(new_leader, leader);
    eventually(
        Duration::from_secs(20),
        "the daemon healthy on two nodes",
        || async { daemon.health().problems().is_empty().then_some(()) },
    )
    .await;
    daemon.shutdown().await.unwrap();
}
