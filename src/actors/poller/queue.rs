//! The claimed timers waiting to be published, by tenant: batches are filled taking one timer
//! from each tenant in turn ([`Turns`]), so a tenant with thousands waiting holds up another's
//! one timer by a single turn, not by its thousands (docs/CONTRACT.md §9). Each tenant's timers
//! leave in the order they were claimed, which is its `dueAt` order.

use chrono::{DateTime, Utc};

use crate::domain::DueTimer;
use crate::turns::Turns;

/// A claimed timer, with the instant its claim found it due (its `reachedAt`) and when that
/// claim's round began.
pub struct Waiting {
    pub timer: DueTimer,
    pub reached_at: DateTime<Utc>,
    pub started: std::time::Instant,
    /// When its claim's answer was taken: `reached_at` plus the time since is an instant of the
    /// claim's clock no later than now.
    pub held_at: std::time::Instant,
}

/// The claimed timers waiting, keyed by tenant.
pub type Queue = Turns<Waiting>;
