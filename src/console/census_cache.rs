//! The overview's census (every tenant's pending timers), read at most every
//! [`FRESH_FOR`] and served from memory in between. One count walks every pending row: a
//! fraction of a second at a million, seconds at ten million, longer than a page should wait.
//! So a page takes the last count (saying when it was read), a stale one starts the next in
//! the background, and only the very first waits, briefly, for its count.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::actors::persistence::PersistenceClient;
use crate::domain::census::TenantCensus;

/// How long a count is served before the next is started.
pub const FRESH_FOR: Duration = Duration::from_secs(5);
/// How long a page waits for a count when none was made yet.
pub const FIRST_WAIT: Duration = Duration::from_millis(400);

/// A count: when it was read, and what it found (or why it could not be made).
#[derive(Clone)]
pub struct Counted {
    pub at: DateTime<Utc>,
    taken: Instant,
    pub tenants: Result<Vec<TenantCensus>, String>,
}

#[derive(Default)]
struct Inner {
    last: Option<Counted>,
    /// A count under way.
    counting: bool,
}

#[derive(Clone, Default)]
pub struct CensusCache {
    inner: Arc<Mutex<Inner>>,
    /// Wakes the pages waiting for the first count.
    done: Arc<tokio::sync::Notify>,
}

impl CensusCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The last count, starting the next when it is older than [`FRESH_FOR`]; the first call
    /// waits up to [`FIRST_WAIT`] for it. `None`: no count yet (it is under way).
    pub async fn get(&self, persistence: &PersistenceClient) -> Option<Counted> {
        // Registered before the count can end: a count ending in between still wakes it.
        let done = self.done.notified();
        let waiting = {
            let mut inner = self.lock();
            let stale = inner
                .last
                .as_ref()
                .is_none_or(|last| last.taken.elapsed() >= FRESH_FOR);
            if stale && !inner.counting {
                inner.counting = true;
                self.start(persistence.clone());
            }
            inner.last.is_none()
        };
        if waiting {
            let _ = tokio::time::timeout(FIRST_WAIT, done).await;
        }
        self.lock().last.clone()
    }

    fn start(&self, persistence: PersistenceClient) {
        let cache = self.clone();
        tokio::spawn(async move {
            let at = Utc::now();
            let tenants = persistence.census(at).await.map_err(|e| e.to_string());
            let mut inner = cache.lock();
            inner.last = Some(Counted {
                at,
                taken: Instant::now(),
                tenants,
            });
            inner.counting = false;
            drop(inner);
            cache.done.notify_waiters();
        });
    }
}
