//! When a SQLite reader's current read must stop (see `storage::reader`): an instant shared by
//! the store, which sets it around a limited read, and the connection's progress handler,
//! which interrupts the statement once it has passed.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When a SQLite reader's current read must stop: set by `Store::read_within`, read by the
/// connection's progress handler, which interrupts the statement once it has passed.
#[derive(Debug, Default)]
pub(crate) struct ReadDeadline {
    /// Microseconds after [`epoch`]; 0 for none.
    at: AtomicU64,
}

impl ReadDeadline {
    pub(crate) fn set(&self, limit: Option<Duration>) {
        let at = limit.map_or(0, |limit| {
            let at = (Instant::now() + limit).duration_since(epoch());
            u64::try_from(at.as_micros()).unwrap_or(u64::MAX).max(1)
        });
        self.at.store(at, Ordering::Release);
    }

    pub(crate) fn passed(&self) -> bool {
        let at = self.at.load(Ordering::Acquire);
        at != 0 && epoch().elapsed().as_micros() >= u128::from(at)
    }
}

/// The instant deadlines are counted from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}
