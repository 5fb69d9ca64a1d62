//! Keeps the broker from delivering again what it delivered to this daemon and the daemon has
//! not settled (docs/CONTRACT.md §1). The consumer's ack wait is short ([`COMMAND_ACK_WAIT`]) so
//! that what a killed or frozen daemon held comes back within seconds; so every delivery is held
//! here from the moment it arrives on an open pull request (waiting in the client's buffer,
//! gathered for a commit, in a slow commit, in the backoff after a storage fault) until it is
//! settled or dropped, and reported in progress once it has been held [`EVERY`] and every
//! [`EVERY`] after that. A delivery settled sooner costs no message.
//!
//! What is held is known by weak references: a settled delivery is dropped, and with it its
//! entry. The task outlives its handles while anything it holds is unsettled, so what a line
//! delivered stays kept alive after the line is forgotten (a pull error starts the lines over).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use tokio::time::Instant;

use crate::ports::{BusError, COMMAND_ACK_WAIT};

/// How long a delivery is held before it is reported in progress, and then between two
/// reports: a third of the ack wait.
pub const EVERY: Duration = Duration::from_millis(COMMAND_ACK_WAIT.as_millis() as u64 / 3);
/// How often what is held is looked at: half of [`EVERY`], so that a report is never later than
/// one and a half [`EVERY`] (2 s of the 4 s ack wait) after the last.
const LOOK_EVERY: Duration = Duration::from_millis(EVERY.as_millis() as u64 / 2);

/// A delivery that can be reported in progress.
#[async_trait]
pub trait InProgress: Send + Sync {
    /// Still being worked on: do not deliver it again for another ack wait.
    async fn progress(&self) -> Result<(), BusError>;
}

type Held = Arc<Mutex<Vec<(Instant, Weak<dyn InProgress>)>>>;

/// A handle on one keep-alive task; clones share it.
#[derive(Clone)]
pub struct KeepAlive {
    held: Held,
}

impl KeepAlive {
    /// Starts the task (within a Tokio runtime).
    pub fn start() -> Self {
        let held: Held = Arc::default();
        tokio::spawn(keep_alive(held.clone()));
        Self { held }
    }

    /// From now on, until it is settled (dropped), keeps `delivery` from being delivered again.
    pub fn hold<D: InProgress + 'static>(&self, delivery: &Arc<D>) {
        let weak: Weak<dyn InProgress> = Arc::downgrade(delivery) as Weak<dyn InProgress>;
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.push((Instant::now(), weak));
    }
}

/// Every [`LOOK_EVERY`]: forgets what was settled, and reports in progress what has been held
/// [`EVERY`] since it arrived or was last reported. Ends once no handle is left and nothing
/// held is unsettled.
async fn keep_alive(held: Held) {
    let mut look = tokio::time::interval(LOOK_EVERY);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        look.tick().await;
        let now = Instant::now();
        let due: Vec<Arc<dyn InProgress>> = {
            let mut list = held.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|(_, delivery)| delivery.strong_count() > 0);
            if list.is_empty() && Arc::strong_count(&held) == 1 {
                return;
            }
            list.iter_mut()
                .filter(|(since, _)| now.duration_since(*since) >= EVERY)
                .filter_map(|(since, delivery)| {
                    *since = now;
                    delivery.upgrade()
                })
                .collect()
        };
        if !due.is_empty() {
            let failed = join_all(due.iter().map(|d| d.progress()))
                .await
                .iter()
                .filter(|r| r.is_err())
                .count();
            tracing::debug!(
                actor = "command_handler",
                held = due.len(),
                failed,
                "commands delivered and not yet settled reported in progress"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Default)]
    struct Counted(AtomicUsize);

    #[async_trait]
    impl InProgress for Counted {
        async fn progress(&self) -> Result<(), BusError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    fn reports(counted: &Counted) -> usize {
        counted.0.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_held_is_reported_until_it_is_settled() {
        let keep = KeepAlive::start();
        let held = Arc::new(Counted::default());
        let settled = Arc::new(Counted::default());
        keep.hold(&held);
        keep.hold(&settled);
        drop(settled);
        tokio::time::sleep(EVERY / 2).await;
        assert_eq!(reports(&held), 0, "not held long yet");
        tokio::time::sleep(EVERY * 2).await;
        assert!(reports(&held) >= 1, "reported in progress");
        assert_eq!(
            keep.held.lock().unwrap().len(),
            1,
            "the settled one forgotten"
        );
        drop(held);
        tokio::time::sleep(EVERY * 2).await;
        assert!(keep.held.lock().unwrap().is_empty());
    }

    /// Reports come at most half the ack wait apart (one [`EVERY`] and one [`LOOK_EVERY`]; the
    /// check looks every 10 ms).
    #[tokio::test(start_paused = true)]
    async fn reports_come_well_inside_the_ack_wait() {
        let keep = KeepAlive::start();
        let held = Arc::new(Counted::default());
        keep.hold(&held);
        let mut last = Instant::now();
        let mut seen = 0;
        while seen < 5 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if reports(&held) > seen {
                seen = reports(&held);
                let apart = last.elapsed();
                assert!(
                    apart <= COMMAND_ACK_WAIT / 2 + Duration::from_millis(10),
                    "{apart:?}"
                );
                last = Instant::now();
            }
        }
    }

    /// A delivery outlives the handle it was held by (its line forgotten after a pull error):
    /// it is kept alive until it is settled, and then the task ends.
    #[tokio::test(start_paused = true)]
    async fn the_task_outlives_its_handles_while_anything_is_unsettled() {
        let keep = KeepAlive::start();
        let held = Arc::new(Counted::default());
        keep.hold(&held);
        let list = Arc::downgrade(&keep.held);
        drop(keep);
        tokio::time::sleep(EVERY * 3).await;
        assert!(reports(&held) >= 2, "still reported");
        drop(held);
        tokio::time::sleep(EVERY * 2).await;
        assert_eq!(list.strong_count(), 0, "the task ended");
    }
}
