//! Every subject the command stream takes is applied or rejected (docs/CONTRACT.md §3): with
//! the stream in lines, a five-token subject that no line's filter takes (`….extra`, `.03`,
//! `.999`, `.16` with 16 lines) is stored by the broker and read by no consumer. The Sweeper
//! finds such commands and hands them to the CommandHandler: one on a line's shape (its last
//! token a number) is that tenant's command, any other is rejected with the reason; none stays
//! in the stream. On SQLite, and on PostgreSQL with `TEST_DATABASE=postgres`.

mod common;

use std::time::Duration;

use chrono::Utc;
use common::{NatsServer, TestClient, eventually, rfc3339, schedule_command};
use serde_json::json;
use timer_service::nats::streams::ensure_broker_objects;
use timer_service::nats::{BrokerNames, JetStreamStrays};
use timer_service::ports::UnreadCommands;

async fn send(client: &TestClient, subject: &str, id: &str, due: chrono::DateTime<Utc>) {
    let command = schedule_command("acme", id, &rfc3339(due), None);
    client
        .publish_raw(subject, serde_json::to_vec(&command).expect("json"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_on_subjects_no_consumer_reads_are_applied_or_rejected() {
    // The default: 16 lines, `timer.cmd.*.*.0` … `.15`.
    let (_server, _scratch, daemon, client) = common::started().await;
    let due = Utc::now() + chrono::Duration::seconds(1);
    // A line's shape, but no line's filter takes it: that tenant's commands.
    let line_shaped = [
        ("timer.cmd.schedule.acme.16", "sixteen"),
        ("timer.cmd.schedule.acme.03", "zero-three"),
        ("timer.cmd.schedule.acme.999", "nine-nine-nine"),
    ];
    for (subject, id) in line_shaped {
        send(&client, subject, id, due).await;
    }
    // Not a command subject: rejected.
    let unknown = [
        "timer.cmd.schedule.acme.extra",
        "timer.cmd.cancel.acme.x1",
        "timer.cmd.schedule.acme.70000",
    ];
    for subject in unknown {
        send(&client, subject, "unknown", due).await;
    }
    // A command on its own subject, beside them, fires as ever.
    client.schedule("acme", "plain", due, None).await;

    let mut ids: Vec<String> = line_shaped.iter().map(|(_, id)| id.to_string()).collect();
    ids.push("plain".into());
    client
        .await_all_fired("acme", &ids, Duration::from_secs(20))
        .await;

    let rejected = client
        .await_events(
            "timer.evt.rejected.>",
            unknown.len(),
            Duration::from_secs(20),
        )
        .await;
    let mut subjects: Vec<String> = rejected
        .iter()
        .map(|r| {
            let payload = &r.envelope["payload"];
            assert!(
                payload["reason"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("unknown command subject"),
                "{payload}"
            );
            payload["subject"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    subjects.sort();
    let mut expected: Vec<String> = unknown.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(
        subjects, expected,
        "one rejection for each, with its subject"
    );
    assert_eq!(
        client.count_due("acme", "unknown").await,
        0,
        "a rejected command is never stored"
    );
    let (code, _) = client
        .api_request("timer.api.get.acme", json!({ "serviceCallId": "unknown" }))
        .await;
    assert_eq!(code, Some(404), "nothing stored for the rejected commands");

    eventually(
        Duration::from_secs(10),
        "nothing left in the command stream",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;
    daemon.shutdown().await.expect("shutdown");
}

/// A command found unread is removed by its sequence once settled. Should the stream be deleted
/// and created anew meanwhile, that sequence names another client's command in the new stream:
/// it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_a_command_of_a_deleted_stream_removes_nothing_of_the_new_one() {
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    let names = BrokerNames::default();
    ensure_broker_objects(&client.js, &names)
        .await
        .expect("broker objects");
    let due = Utc::now() + chrono::Duration::hours(1);
    send(&client, "timer.cmd.schedule.acme.extra", "stray", due).await;
    let strays = JetStreamStrays::new(client.js.clone(), names.clone());
    let mut found = eventually(Duration::from_secs(10), "the unread command", || async {
        let found = strays.unread(10).await.expect("look");
        (!found.is_empty()).then_some(found)
    })
    .await;
    let stray = found.remove(0);

    client
        .js
        .delete_stream(&names.command_stream)
        .await
        .expect("delete the command stream");
    ensure_broker_objects(&client.js, &names)
        .await
        .expect("broker objects again");
    client.schedule("acme", "newer", due, None).await;
    assert_eq!(client.commands_outstanding().await, 1);

    stray.term().await.expect("settled");
    assert_eq!(
        client.commands_outstanding().await,
        1,
        "the new stream's command at the old one's sequence is still there"
    );
}
