//! One budget for a graceful stop (docs/operations.md, "Shutdown"). The stop begins with a
//! deadline, `[supervisor] shutdown_timeout` from then (20 s by default: with the 5 s the
//! exporter of spans may take after it, under Kubernetes' 30 s before SIGKILL), and every wait
//! of the stop runs until a point derived from it: a step keeps what the steps after it need
//! ([`Reserve`]) and takes the rest. So no inner wait outlasts an outer one, and a stop with a
//! frozen database or a silent broker ends within the budget: what it could not finish is what
//! a crash would leave (commands not acknowledged are delivered again, timers published and not
//! marked are published again), never a loss.
//!
//! The steps, in order: the children of the Supervisor that bring work in or fire it stop
//! together (the CommandHandler commits what was delivered, the Poller lets its batches finish
//! and marks them); Persistence runs what they queued and closes; the broker connection is
//! drained; the daemon's name is given up (PostgreSQL).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

/// The default of `[supervisor] shutdown_timeout`.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(20);

/// What the steps after one keep of the budget. Each is the most that step needs when all is
/// well; when the budget is smaller than their sum, the earlier steps get nothing and end at
/// once, and the later ones share what there is. A step's own waits end at
/// [`StopDeadline::until`] its reserve; whoever waits for that step (the Supervisor for a
/// child, the daemon for the Supervisor) gives it [`SETTLE`] more, out of the next step's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    /// Kept by the Poller's wait for its batches at the broker, for its last mark.
    ForMark,
    /// Kept by the children that stop first (their own waits: the Poller's mark, the
    /// CommandHandler's last commits), for Persistence and everything after it.
    ForStorage,
    /// Kept by Persistence's lanes running what was queued, for the broker's drain and the name.
    ForBroker,
    /// Kept by the broker's drain, for giving up the name.
    ForName,
    /// The last step: nothing is kept.
    Nothing,
}

/// Giving up the daemon's name: one short transaction on a connection of its own.
const NAME: Duration = Duration::from_millis(1_500);
/// Draining the broker connection: the last acknowledgements and events are flushed.
const BROKER: Duration = Duration::from_secs(1);
/// Persistence running the marks and commits queued by the children stopped before it.
const STORAGE: Duration = Duration::from_secs(3);
/// The Poller's last mark of what its batches fired.
const MARK: Duration = Duration::from_secs(1);
/// A step's end reaching whoever waits for it, once its own waits are over.
pub const SETTLE: Duration = Duration::from_millis(250);

impl Reserve {
    pub fn duration(self) -> Duration {
        match self {
            Reserve::Nothing => Duration::ZERO,
            Reserve::ForName => NAME,
            Reserve::ForBroker => Reserve::ForName.duration() + BROKER,
            Reserve::ForStorage => Reserve::ForBroker.duration() + STORAGE,
            Reserve::ForMark => Reserve::ForStorage.duration() + MARK,
        }
    }
}

/// When the stop under way must be over. Shared by the daemon and each of its actors (through
/// the `Registry`), set once, when the stop begins; an actor stopped while it is unset (a test
/// that stops one alone) waits as long as its step would with the default budget.
#[derive(Debug, Clone, Default)]
pub struct StopDeadline(Arc<OnceLock<Instant>>);

impl StopDeadline {
    /// Begins the stop: the deadline is `budget` from now, unless a stop already began (the
    /// Supervisor stopping the daemon on its own, then a SIGTERM): the first one holds.
    pub fn begin(&self, budget: Duration) -> Instant {
        *self.0.get_or_init(|| Instant::now() + budget)
    }

    /// Until when a step may wait, keeping `reserve` for the steps after it (never before now).
    pub fn until(&self, reserve: Reserve) -> Instant {
        let deadline = self
            .0
            .get()
            .copied()
            .unwrap_or_else(|| Instant::now() + DEFAULT_BUDGET);
        let now = Instant::now();
        deadline
            .checked_sub(reserve.duration())
            .map_or(now, |until| until.max(now))
    }

    /// Until when to wait for a step whose own waits end at `until(reserve)`: [`SETTLE`] more,
    /// never past the deadline.
    pub fn until_settled(&self, reserve: Reserve) -> Instant {
        let deadline = self.until(Reserve::Nothing);
        (self.until(reserve) + SETTLE).min(deadline)
    }

    /// How long a step may still wait, keeping `reserve`.
    pub fn left(&self, reserve: Reserve) -> Duration {
        self.until(reserve)
            .saturating_duration_since(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn each_step_keeps_what_the_later_ones_need() {
        let stop = StopDeadline::default();
        let deadline = stop.begin(Duration::from_secs(20));
        assert_eq!(stop.until(Reserve::Nothing), deadline);
        assert_eq!(stop.until(Reserve::ForName), deadline - NAME);
        assert_eq!(
            stop.left(Reserve::ForStorage),
            Duration::from_secs(20) - Reserve::ForStorage.duration()
        );
        assert_eq!(
            stop.until_settled(Reserve::ForStorage),
            stop.until(Reserve::ForStorage) + SETTLE
        );
        assert_eq!(stop.until_settled(Reserve::Nothing), deadline);
        // A second beginning does not move it.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(stop.begin(Duration::from_secs(60)), deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_smaller_than_the_reserves_leaves_the_first_steps_nothing() {
        let stop = StopDeadline::default();
        stop.begin(Duration::from_secs(2));
        assert_eq!(stop.left(Reserve::ForStorage), Duration::ZERO);
        assert_eq!(stop.left(Reserve::ForBroker), Duration::ZERO);
        assert_eq!(stop.left(Reserve::ForName), Duration::from_millis(500));
        assert_eq!(stop.left(Reserve::Nothing), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn before_a_stop_begins_a_step_waits_as_with_the_default_budget() {
        let stop = StopDeadline::default();
        assert_eq!(
            stop.left(Reserve::ForStorage),
            DEFAULT_BUDGET - Reserve::ForStorage.duration()
        );
    }
}
