//! The Poller's wake-ups, planned by the store's clock: the clock that decides what is due (the
//! daemon's on SQLite, the database server's on PostgreSQL). A daemon whose own clock is off
//! then neither wakes before its timers are due nor after. The store's lead over this daemon's
//! clock is learned from each claim's answer (`DueBatch::server_now`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::ActorRef;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::PollerMsg;
use crate::ports::Clock;

/// How long a sample of the store's lead stands against smaller ones: a clock that was stepped
/// back is followed within this.
const OFFSET_SAMPLE_LIFE: Duration = Duration::from_secs(30);

/// The timer task that delivers a planned wake-up; aborted when a new plan replaces it (or the
/// actor ends).
type WakeTask = AbortOnDropHandle<Result<(), ractor::MessagingErr<PollerMsg>>>;

pub struct WakeUps {
    clock: Arc<dyn Clock>,
    lead: StoreLead,
    /// The pending wake-up: when, by the store's clock, and the task that will deliver it.
    planned: Option<(DateTime<Utc>, WakeTask)>,
}

impl WakeUps {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            lead: StoreLead::default(),
            planned: None,
        }
    }

    /// The store's clock now.
    pub fn store_now(&self) -> DateTime<Utc> {
        self.clock.now() + self.lead.offset
    }

    /// A claim decided at `server_now` by the store's clock answered at `answered_at` by this
    /// daemon's.
    pub fn learn(&mut self, server_now: Option<DateTime<Utc>>, answered_at: DateTime<Utc>) {
        if let Some(server_now) = server_now {
            self.lead.learn(server_now - answered_at, Instant::now());
        }
    }

    /// Whether `at` comes before the planned wake-up (or none is planned).
    pub fn is_before_plan(&self, at: DateTime<Utc>) -> bool {
        self.planned
            .as_ref()
            .is_none_or(|(planned, _)| at < *planned)
    }

    /// Plans the next wake-up at `at` by the store's clock (now, if `at` has passed), replacing
    /// any other.
    pub fn at(&mut self, myself: &ActorRef<PollerMsg>, at: DateTime<Utc>) {
        let delay = (at - self.store_now()).to_std().unwrap_or(Duration::ZERO);
        let task = myself.send_after(delay, || PollerMsg::Wake);
        // Replacing the plan drops (and so aborts) the previous wake-up.
        self.planned = Some((at, AbortOnDropHandle::new(task)));
    }

    /// Plans the next wake-up `delay` from now.
    pub fn after(&mut self, myself: &ActorRef<PollerMsg>, delay: Duration) {
        let at = self.store_now() + chrono::Duration::from_std(delay).unwrap_or_default();
        self.at(myself, at);
    }

    /// Nothing is pending: no wake-up but the tick.
    pub fn cancel(&mut self) {
        self.planned = None;
    }
}

/// The store's clock minus this daemon's: zero on SQLite, the database server's lead on
/// PostgreSQL.
#[derive(Debug, Default)]
struct StoreLead {
    offset: chrono::Duration,
    /// When the sample `offset` holds was taken.
    learned: Option<Instant>,
}

impl StoreLead {
    /// Learns from `sample`: the server's instant at the claim minus this daemon's clock as the
    /// answer arrived. The statement ran before the answer came, so a sample is never above the
    /// true lead, and is below it by the time the statement took and the way back: the largest
    /// recent sample is the closest. Planned by it, a wake-up comes that much late at most,
    /// never early.
    fn learn(&mut self, sample: chrono::Duration, now: Instant) {
        let stale = self
            .learned
            .is_none_or(|at| now.saturating_duration_since(at) > OFFSET_SAMPLE_LIFE);
        if stale || sample >= self.offset {
            self.offset = sample;
            self.learned = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_recent_sample_of_the_lead_stands_until_it_is_stale() {
        let ms = chrono::Duration::milliseconds;
        let t0 = Instant::now();
        let mut lead = StoreLead::default();
        lead.learn(ms(-5), t0);
        assert_eq!(lead.offset, ms(-5), "the first sample, whatever it is");
        lead.learn(ms(40), t0);
        lead.learn(ms(35), t0 + Duration::from_secs(1));
        assert_eq!(
            lead.offset,
            ms(40),
            "a smaller sample took longer on the way"
        );
        lead.learn(ms(20), t0 + OFFSET_SAMPLE_LIFE + Duration::from_secs(1));
        assert_eq!(lead.offset, ms(20), "a stepped clock is followed");
    }
}
