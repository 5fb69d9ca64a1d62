//! One tenant's load beside another tenant's timers (docs/CONTRACT.md §9): a burst of timers
//! due at one instant.

use std::time::Duration;

use chrono::Utc;

use super::{LatenessRun, collect_lateness, meter, start_daemons, stop, wait_for};
use crate::daemon::Settings;
use crate::world::World;

/// Result of [`noisy`].
pub struct Noisy {
    /// The quiet tenant's lateness, as received on a connection of its own.
    pub small: LatenessRun,
    /// Seconds from the burst's instant until nothing is pending.
    pub drain_s: f64,
}

/// Timers of the quiet tenant, due one every 5 ms over the second after the burst's instant
/// (from 200 ms after it).
const QUIET_TIMERS: u64 = 200;

/// The noisy neighbour (docs/CONTRACT.md §9): tenant `bulk` has `n` timers due at one instant,
/// tenant `small` 200 due over the next second.
pub async fn noisy(world: &World, n: usize, daemons: &[Settings]) -> Noisy {
    let observer = world.observer().await;
    let instant = Utc::now() + chrono::Duration::seconds(4);
    observer.prefill(n as u64, "bulk", instant, 0, None).await;
    observer
        .prefill(
            QUIET_TIMERS,
            "small",
            instant + chrono::Duration::milliseconds(200),
            5,
            None,
        )
        .await;
    let quiet = async_nats::connect(world.server.url())
        .await
        .expect("connect");
    let received = collect_lateness(&quiet, "timer.evt.due.small".into()).await;
    let running = start_daemons(world, daemons);
    while Utc::now() < instant {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let cpu = meter(world, &running);
    while observer.any_pending().await {
        assert!(
            Utc::now() - instant < chrono::Duration::seconds(900),
            "firing stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain_s = (Utc::now() - instant).num_microseconds().unwrap_or(0) as f64 / 1e6;
    let cpu = cpu.finish();
    let samples = wait_for(received, QUIET_TIMERS as usize, Duration::from_secs(5)).await;
    observer.close().await;
    Noisy {
        small: LatenessRun {
            samples,
            expected: QUIET_TIMERS as usize,
            peak_rss_mib: stop(running),
            cpu,
            api_answered: 0,
            api_failed: 0,
            metrics: None,
        },
        drain_s,
    }
}
