//! Keeps the broker from delivering again the commands this daemon holds. The consumer's ack
//! wait is short ([`COMMAND_ACK_WAIT`]), so that the commands a daemon held when it was killed
//! or frozen come back within seconds; a command held longer than [`EVERY`] (its commit is
//! slow, a database outage is being waited out) is reported in progress every [`EVERY`] until
//! it is settled. What is held is known by weak references: a settled command is dropped, and
//! with it its entry.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::ports::{COMMAND_ACK_WAIT, Delivery};

/// How often held commands are reported in progress: well inside the ack wait.
pub const EVERY: Duration = Duration::from_millis(COMMAND_ACK_WAIT.as_millis() as u64 / 3);

type Held = Arc<Mutex<Vec<(Instant, Weak<dyn Delivery>)>>>;

pub struct KeepAlive {
    held: Held,
    _task: AbortOnDropHandle<()>,
}

impl KeepAlive {
    pub fn start() -> Self {
        let held: Held = Arc::default();
        let task = tokio::spawn(keep_alive(held.clone()));
        Self {
            held,
            _task: AbortOnDropHandle::new(task),
        }
    }

    /// From now on, until each is settled (dropped), keeps `deliveries` from being delivered
    /// again.
    pub fn hold<'a>(&self, deliveries: impl Iterator<Item = &'a Arc<dyn Delivery>>) {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.extend(deliveries.map(|d| (now, Arc::downgrade(d))));
    }
}

/// Every [`EVERY`]: forgets what was settled, and reports in progress what has been held that
/// long since it was taken or last reported.
async fn keep_alive(held: Held) {
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let now = Instant::now();
        let due: Vec<Arc<dyn Delivery>> = {
            let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
            held.retain(|(_, delivery)| delivery.strong_count() > 0);
            held.iter_mut()
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
                "commands still being stored reported in progress"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::ports::BusError;

    #[derive(Default)]
    struct Counted(AtomicUsize);

    #[async_trait]
    impl Delivery for Counted {
        async fn ack(&self) -> Result<(), BusError> {
            Ok(())
        }
        async fn term(&self) -> Result<(), BusError> {
            Ok(())
        }
        async fn nak(&self, _delay: Duration) -> Result<(), BusError> {
            Ok(())
        }
        async fn progress(&self) -> Result<(), BusError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_held_is_reported_until_it_is_settled() {
        let keep = KeepAlive::start();
        let held = Arc::new(Counted::default());
        let settled = Arc::new(Counted::default());
        let (held_dyn, settled_dyn): (Arc<dyn Delivery>, Arc<dyn Delivery>) =
            (held.clone(), settled.clone());
        keep.hold([&held_dyn, &settled_dyn].into_iter());
        drop(settled_dyn);
        drop(settled);
        tokio::time::sleep(EVERY / 2).await;
        assert_eq!(held.0.load(Ordering::SeqCst), 0, "not held long yet");
        tokio::time::sleep(EVERY * 2).await;
        assert!(held.0.load(Ordering::SeqCst) >= 1, "reported in progress");
        assert_eq!(
            keep.held.lock().unwrap().len(),
            1,
            "the settled one forgotten"
        );
        drop((held_dyn, held));
        tokio::time::sleep(EVERY * 2).await;
        assert!(keep.held.lock().unwrap().is_empty());
    }
}
