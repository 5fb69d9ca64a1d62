//! `timer_actor_restarts_total{actor}` (docs/CONTRACT.md §7) counts the Supervisor's restarts, read
//! over real HTTP. A test binary of its own: the metrics recorder is process-wide, and the
//! restarts of other tests' daemons would count in it too.

mod common;

use std::time::Duration;

use common::{NatsServer, Scratch, config, eventually, free_port, http_get, metric};
use timer_service::Daemon;
use timer_service::actors::{Gauges, NamedActor, Poller};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_restart_is_counted_by_actor() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut config = config(&server, &scratch);
    config.name = Some("restarts".into());
    config.http.listen = addr.clone();
    let daemon = Daemon::start(config).await.unwrap();
    let restarts = |actor: &str| {
        let series = format!("timer_actor_restarts_total{{daemon=\"restarts\",actor=\"{actor}\"}}");
        let addr = addr.clone();
        async move {
            let (_, body) = http_get(&addr, "/metrics").await?;
            Some(metric(&body, &series))
        }
    };
    eventually(Duration::from_secs(10), "/metrics", || {
        restarts(Poller::NAME)
    })
    .await;
    assert_eq!(restarts(Poller::NAME).await, Some(None), "no restart yet");

    for (actor, expected) in [
        (Poller::NAME, 1.0),
        (Gauges::NAME, 1.0),
        (Poller::NAME, 2.0),
    ] {
        let before = daemon.actor_id(actor).expect("running");
        daemon.inject_fault(actor);
        eventually(Duration::from_secs(10), "the restarted actor", || async {
            daemon.actor_id(actor).filter(|id| *id != before)
        })
        .await;
        eventually(Duration::from_secs(10), "the restart counted", || async {
            (restarts(actor).await == Some(Some(expected))).then_some(())
        })
        .await;
    }
    assert_eq!(restarts(Gauges::NAME).await, Some(Some(1.0)));
    daemon.shutdown().await.unwrap();
}
