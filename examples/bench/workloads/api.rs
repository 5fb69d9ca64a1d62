//! The query API's request rate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::wait_for_api;
use crate::daemon::Settings;
use crate::world::World;

/// API requests answered per second with `in_flight` requests outstanding at all times: `get`
/// of random timers among `n` stored, then `list` of 100.
pub struct ApiRun {
    pub get_per_second: f64,
    pub list_per_second: f64,
}

pub async fn api_throughput(
    world: &World,
    settings: &Settings,
    n: u64,
    in_flight: usize,
    secs: f64,
) -> ApiRun {
    let observer = world.observer().await;
    let far = Utc::now() + chrono::Duration::days(365);
    observer.prefill(n, "api", far, 1, None).await;
    observer.close().await;
    let daemon = world.daemon(settings);
    wait_for_api(world, "api").await;
    let run = |verb: &'static str| {
        let client = world.client.clone();
        async move {
            let done = Arc::new(AtomicU64::new(0));
            let stop_at = Instant::now() + Duration::from_secs_f64(secs);
            let workers: Vec<_> = (0..in_flight)
                .map(|w| {
                    let (client, done) = (client.clone(), done.clone());
                    tokio::spawn(async move {
                        let mut x = w as u64 * 7919;
                        while Instant::now() < stop_at {
                            x = (x * 6364136223846793005 + 1442695040888963407) % n.max(1);
                            let body = match verb {
                                "get" => serde_json::json!({ "serviceCallId": format!("api-{x}") }),
                                _ => serde_json::json!({ "limit": 100 }),
                            };
                            let subject = format!("timer.api.{verb}.api");
                            if client
                                .request(subject, serde_json::to_vec(&body).expect("json").into())
                                .await
                                .is_ok()
                            {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            let started = Instant::now();
            for worker in workers {
                let _ = worker.await;
            }
            done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
        }
    };
    let get_per_second = run("get").await;
    let list_per_second = run("list").await;
    daemon.stop();
    ApiRun {
        get_per_second,
        list_per_second,
    }
}
