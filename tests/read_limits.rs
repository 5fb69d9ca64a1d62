//! What the query API's reads may cost (docs/CONTRACT.md §6, §9): a read that runs past
//! `[api] read_timeout` is stopped and answered 503 with a retry hint while the daemon keeps
//! serving, and one tenant's flood of reads waits behind itself, not in front of another
//! tenant's request. On a real broker and database, both backends.

mod common;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use common::{NatsServer, Scratch, TestClient};
use futures::future::join_all;
use serde_json::json;
use timer_service::storage::Store;
use timer_service::storage::db::migrate;

/// Stores `n` pending timers of `tenant`, due over the next day, before the daemon starts.
async fn prefill(scratch: &Scratch, tenant: &str, n: usize) {
    migrate(&scratch.database()).await.unwrap();
    let store = Store::open(&scratch.database()).await.unwrap();
    let first = Utc::now() + chrono::Duration::minutes(5);
    let commands: Vec<_> = (0..n)
        .map(|i| {
            let due = first + chrono::Duration::milliseconds(i as i64 * 1_000);
            common::schedule_at(tenant, &format!("w{i:06}"), i as u64 + 1, due)
        })
        .collect();
    for chunk in commands.chunks(1_000) {
        store.apply(chunk).await.unwrap();
    }
    store.close().await.unwrap();
}

async fn start(
    server: &NatsServer,
    scratch: &Scratch,
    api: timer_service::config::ApiSettings,
) -> (timer_service::Daemon, TestClient) {
    let mut config = common::config(server, scratch);
    config.api = api;
    let daemon = timer_service::Daemon::start(config).await.unwrap();
    let client = TestClient::connect(server).await;
    client.wait_for_command_stream().await;
    (daemon, client)
}

/// A forecast of a day over 60,000 timers runs far past a limit of one millisecond: it is
/// stopped and answered 503 with `retryAfterMs`, the reader connection answers the next requests
/// (a point read, retried while it too passes the limit), and the daemon stays ready (a stopped read is no storage fault).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_past_the_time_limit_is_answered_503_and_the_daemon_keeps_serving() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    prefill(&scratch, "whale", 60_000).await;
    let api = timer_service::config::ApiSettings {
        read_timeout: Duration::from_millis(1),
        read_connections: 1,
        ..Default::default()
    };
    let (daemon, client) = start(&server, &scratch, api).await;
    let (code, body) = client
        .api_request("timer.api.stats.whale", json!({ "forecastMinutes": 1440 }))
        .await;
    assert_eq!(code, Some(503), "{body}");
    let reason = body["error"].as_str().unwrap();
    assert!(reason.contains("ran longer than 1 ms"), "{reason}");
    assert!(body["retryAfterMs"].as_u64().unwrap() > 0, "{body}");

    // The same connection serves the next read, of another tenant. Even a point read may pass
    // one millisecond on a loaded machine (PostgreSQL counts its round trips), so it is asked
    // again, a bounded number of times: each refusal must be the time limit's, and one answer
    // must come. A connection left stuck would refuse all of them.
    let mut answered = false;
    for _ in 0..50 {
        let (code, body) = client
            .api_request("timer.api.get.small", json!({ "serviceCallId": "none" }))
            .await;
        match code {
            Some(404) => {
                answered = true;
                break;
            }
            Some(503) => assert!(
                body["error"]
                    .as_str()
                    .unwrap()
                    .contains("ran longer than 1 ms"),
                "{body}"
            ),
            _ => panic!("unexpected answer {code:?}: {body}"),
        }
    }
    assert!(
        answered,
        "the reader connection answered no read after the stopped one"
    );
    client.barrier("small").await;
    assert!(
        daemon
            .health()
            .problems()
            .iter()
            .all(|p| !p.starts_with("database")),
        "{:?}",
        daemon.health().problems()
    );
    daemon.shutdown().await.unwrap();
}

/// While one tenant has forty heavy reads under way (32 at the reader connection, the most one
/// tenant has handled at once, the rest waiting their turn), another tenant's request is
/// answered in the next turn: after a few of them, not after the 32 queued before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_flood_of_reads_waits_behind_itself() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    prefill(&scratch, "whale", 30_000).await;
    let api = timer_service::config::ApiSettings {
        read_timeout: Duration::from_secs(10),
        read_connections: 1,
        ..Default::default()
    };
    let (daemon, client) = start(&server, &scratch, api).await;
    let client = Arc::new(client);
    let answered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let flood = (0..40).map(|i| {
        let (client, answered) = (client.clone(), answered.clone());
        async move {
            let (code, body) = client
                .api_request("timer.api.stats.whale", json!({ "forecastMinutes": 1440 }))
                .await;
            assert_eq!(code, None, "{body}");
            answered.lock().unwrap().push(format!("whale-{i}"));
        }
    });
    let flood = tokio::spawn(join_all(flood));
    // The flood is under way: the first whale read is answered.
    common::eventually(Duration::from_secs(20), "the flood under way", || async {
        (!answered.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let (code, body) = client.api_request("timer.api.stats.small", json!({})).await;
    assert_eq!(code, None, "{body}");
    let whale_before = answered.lock().unwrap().len();
    flood.await.unwrap();
    assert!(
        whale_before < 16,
        "small's stats were answered only after {whale_before} of whale's reads"
    );
    eprintln!("small answered after {whale_before} of whale's 40 reads");
    daemon.shutdown().await.unwrap();
}
