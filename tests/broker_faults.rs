//! Broker faults in the middle of a firing (docs/CONTRACT.md §1, §5): a broker killed and restarted
//! while thousands of timers are being published delays them and loses, wedges or reorders
//! none; every wait for a PubAck is bounded, so the daemon still stops in time afterwards.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually};
use futures::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_in_the_middle_of_a_firing_loses_and_wedges_nothing() {
    let mut server = NatsServer::start();
    let scratch = Scratch::new();
    let process = DaemonProcess::start(&server, &scratch);
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;

    let due_at = common::millis(Utc::now() + chrono::Duration::seconds(6));
    let ids: Vec<String> = (0..10_000).map(|i| format!("burst-{i}")).collect();
    client.schedule_many("acme", &ids, due_at).await;
    assert!(
        Utc::now() < due_at,
        "scheduling took longer than the lead time"
    );

    // The restart lands while the burst is being published: right after its first event.
    let mut live = client
        .client
        .subscribe("timer.evt.due.acme")
        .await
        .expect("subscribe");
    tokio::time::timeout(Duration::from_secs(30), live.next())
        .await
        .expect("the burst starts firing")
        .expect("an event");
    server.restart();

    // A timer scheduled after the restart fires too: the firing is not wedged.
    let client = TestClient::connect(&server).await;
    let after = "after-restart".to_owned();
    client
        .schedule(
            "acme",
            &after,
            Utc::now() + chrono::Duration::seconds(1),
            None,
        )
        .await;
    let mut all = ids.clone();
    all.push(after);
    let expected: HashSet<&str> = all.iter().map(String::as_str).collect();
    let fired = eventually(
        Duration::from_secs(90),
        "every timer of the burst and the one scheduled after the restart to fire",
        || async {
            // Reading the whole stream is costly: only once it holds enough events.
            let mut stream = client.js.get_stream("TIMER_EVENTS").await.ok()?;
            if (stream.info().await.ok()?.state.messages as usize) < expected.len() {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return None;
            }
            let fired = client.fired_ids("acme").await;
            expected
                .iter()
                .all(|id| fired.contains(*id))
                .then_some(fired)
        },
    )
    .await;
    assert_eq!(fired.len(), expected.len(), "no event for an unknown timer");

    process.signal(libc::SIGTERM);
    let log = process.log.clone();
    assert!(
        process.wait_exit(Duration::from_secs(15)).await.success(),
        "the daemon stops cleanly after the restart"
    );
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        !log.contains("did not stop in time"),
        "an actor had to be killed at the stop:\n{log}"
    );
}
