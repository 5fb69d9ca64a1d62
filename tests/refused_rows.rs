//! A command the database refuses is rejected alone (docs/CONTRACT.md §3): the test's database
//! is made to refuse one correlation id that validation accepts; sent in one batch with fifty
//! valid commands, that one is rejected to its tenant with the database's reason, and every
//! valid timer fires. The real binary on a real `nats-server`, on SQLite and on PostgreSQL.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually, schedule_command};
use futures::StreamExt;
use serde_json::Value;

/// What a core subscription on `subject` receives, as envelopes, in a channel.
async fn collect(
    client: &TestClient,
    subject: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    let mut subscriber = client.client.subscribe(subject.to_owned()).await.unwrap();
    client.client.flush().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(message) = subscriber.next().await {
            let envelope: Value = serde_json::from_slice(&message.payload).unwrap();
            if tx.send(envelope).is_err() {
                break;
            }
        }
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_database_refuses_is_rejected_alone_and_its_batch_stored() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let database = scratch.database();
    common::database::poison(&database).await;
    let client = TestClient::connect(&server).await;

    // The daemon creates the streams, then stops, so that the burst waits for it in the
    // stream and its first pull takes all of it as one batch.
    let daemon = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());

    let mut due = collect(&client, "timer.evt.due.acme").await;
    let mut rejected = collect(&client, "timer.evt.rejected.>").await;
    let due_at = common::rfc3339(Utc::now() + chrono::Duration::seconds(3));
    let valid: Vec<String> = (0..50).map(|i| format!("ok-{i}")).collect();
    let mut burst: Vec<(String, Option<&str>)> =
        valid.iter().map(|id| (id.clone(), None)).collect();
    burst.insert(25, ("refused".into(), Some("poison")));
    let mut acks = Vec::new();
    for (id, correlation) in &burst {
        let command = schedule_command("acme", id, &due_at, *correlation);
        acks.push(
            client
                .js
                .publish(
                    "timer.cmd.schedule.acme",
                    serde_json::to_vec(&command).unwrap().into(),
                )
                .await
                .unwrap(),
        );
    }
    for ack in acks {
        ack.await.expect("PubAck");
    }

    let daemon = DaemonProcess::start(&server, &scratch);
    let rejection = tokio::time::timeout(Duration::from_secs(20), rejected.recv())
        .await
        .expect("a rejection within 20 s")
        .unwrap();
    assert_eq!(rejection["type"], "TimerCommandRejected");
    assert_eq!(rejection["tenantId"], "acme");
    assert_eq!(rejection["payload"]["subject"], "timer.cmd.schedule.acme");
    let reason = rejection["payload"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("refused by the database: ") && reason.contains("poison"),
        "the database's reason: {reason}"
    );
    let original = rejection["payload"]["original"].as_str().unwrap();
    assert!(original.contains("\"refused\""), "{original}");

    let mut fired = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while fired.len() < valid.len() {
        let event = tokio::time::timeout_at(deadline, due.recv())
            .await
            .unwrap_or_else(|_| panic!("{} of {} valid timers fired", fired.len(), valid.len()))
            .unwrap();
        fired.insert(
            event["payload"]["serviceCallId"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(fired, valid.iter().cloned().collect::<HashSet<_>>());

    // Everything settled on the broker: nothing handed back to be redelivered, and no valid
    // command rejected.
    eventually(Duration::from_secs(10), "every command settled", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        rejected.try_recv().is_err(),
        "only the refused command is rejected"
    );
    assert_eq!(client.count_due("acme", "refused").await, 0);

    let log = std::fs::read_to_string(&daemon.log).unwrap();
    let split = log
        .lines()
        .find(|line| line.contains("the batch was split to store the rest"))
        .unwrap_or_else(|| panic!("no split in the log:\n{log}"));
    eprintln!("{split}");
    assert!(split.contains("refused=1"), "{split}");
    assert!(
        !log.contains("commands not stored"),
        "the refusal was taken for an outage:\n{log}"
    );
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());
}
