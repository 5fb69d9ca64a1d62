//! The broker link's watch (CONTRACT.md §7) against a real broker: a wait that ran out with
//! nothing answered counts the link lost only when the broker's JetStream does not answer a
//! question either. A daemon paused past its bounds (SIGSTOP, a suspended VM) finds them run out on
//! waking, before it has read the answers waiting in its socket: the path is fine and no
//! reconnection is forced. A path gone silent still is noticed.

mod common;

use std::time::Duration;

use common::net_proxy::NetProxy;
use common::{NatsServer, eventually};
use timer_service::health::Health;
use timer_service::nats::link::LinkWatch;
use tokio::time::Instant;

const LINK_TIMEOUT: Duration = Duration::from_secs(6);

/// A client reaching `server` through `proxy`, watched.
async fn watched(proxy: &NetProxy) -> (async_nats::Client, Health, LinkWatch) {
    let client = async_nats::connect(proxy.url()).await.expect("connect");
    let health = Health::new();
    let watch = LinkWatch::new(health.clone(), LINK_TIMEOUT);
    watch.attach(client.clone());
    watch.connected();
    (client, health, watch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_ran_out_on_a_path_that_answers_forces_no_reconnection() {
    let server = NatsServer::start();
    let proxy = NetProxy::start(server.port).await;
    let (client, health, watch) = watched(&proxy).await;

    // What a paused daemon sees on waking: a wait handed over before the pause, run out,
    // nothing answered since (the answers still in its socket).
    let since = Instant::now();
    watch.unanswered("PubAck", since);
    eventually(
        Duration::from_secs(5),
        "the broker answered the question",
        || async { watch.answered_since(since).then_some(()) },
    )
    .await;
    assert!(health.status().broker_connected, "still counted connected");
    assert_eq!(
        client
            .statistics()
            .connects
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "no reconnection forced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_ran_out_on_a_silent_path_forces_a_reconnection() {
    let server = NatsServer::start();
    let proxy = NetProxy::start(server.port).await;
    let (_client, health, watch) = watched(&proxy).await;

    proxy.silent();
    let since = Instant::now();
    watch.unanswered("PubAck", since);
    eventually(
        Duration::from_secs(5),
        "the silent path counted lost",
        || async { (!health.status().broker_connected).then_some(()) },
    )
    .await;
    assert!(!watch.answered_since(since), "nothing came back");
}
