//! The forecasts of the tenants' pages, read at most once per [`Span::fresh_for`] per tenant and
//! served from memory in between: twenty people watching a tenant of ten million cost one
//! read of its week a minute, not twenty a refresh. As with the census (`census_cache`), a
//! page takes the last forecast, saying when it was read; a stale one starts the next read in
//! the background; only a tenant's first waits, within its read's limit, for it.
//!
//! The reads take the tenant's turns on the reader lane (`Class::tenant_read_within`), so one
//! tenant's forecasts wait behind its own reads, never another's. The week's read may run
//! [`WEEK_READ_LIMIT`]: longer than an API read (a week of ten million counted by hour is
//! about a second on PostgreSQL), but one a minute at most, and nobody waits for it but the
//! first page.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::actors::persistence::{PersistenceClient, ReadLimit};
use crate::domain::forecast::{ForecastMinute, ForecastWindow, MAX_FORECAST_HOURS};

/// How long the week's read may run.
pub const WEEK_READ_LIMIT: Duration = Duration::from_secs(10);
/// Most tenants whose forecasts are kept; past it the one read longest ago is forgotten.
const TENANTS: usize = 1_000;

/// Which forecast of a tenant's page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Span {
    /// The next hour by minute.
    Hour,
    /// The next week by hour.
    Week,
}

impl Span {
    /// How long a read is served before the next is started: about the page's refresh for
    /// the hour, a minute (the page's own pace) for the week.
    fn fresh_for(self) -> Duration {
        match self {
            Span::Hour => Duration::from_secs(3),
            Span::Week => Duration::from_secs(60),
        }
    }

    fn window(self, now: DateTime<Utc>) -> ForecastWindow {
        match self {
            Span::Hour => ForecastWindow::new(now, 60),
            Span::Week => ForecastWindow::hours(now, MAX_FORECAST_HOURS),
        }
    }

    fn limit(self) -> ReadLimit {
        match self {
            Span::Hour => ReadLimit::Api,
            Span::Week => ReadLimit::Within(WEEK_READ_LIMIT),
        }
    }

    /// How long a tenant's first page waits for the read: the hour's, about as long as an API
    /// read may take; the week's, hardly (a week of ten million takes 0.6 to 2 s), so that the
    /// page answers at once and shows the week at its next refresh.
    fn first_wait(self) -> Duration {
        match self {
            Span::Hour => Duration::from_millis(1_500),
            Span::Week => Duration::from_millis(300),
        }
    }
}

/// A forecast as read: when, and what it found (or why it could not be read).
#[derive(Clone)]
pub struct Read {
    pub at: DateTime<Utc>,
    taken: Instant,
    pub due: Result<Vec<ForecastMinute>, String>,
}

impl Read {
    /// How long this read is served: a failed one (the database away, a read stopped at its
    /// limit) no longer than the hour's, so that a week's failure is not shown for a minute.
    fn fresh_for(&self, span: Span) -> Duration {
        match self.due {
            Ok(_) => span.fresh_for(),
            Err(_) => Span::Hour.fresh_for(),
        }
    }
}

#[derive(Default)]
struct Entry {
    last: Option<Read>,
    reading: bool,
}

#[derive(Clone, Default)]
pub struct ForecastCache {
    entries: Arc<Mutex<HashMap<(String, Span), Entry>>>,
    /// Wakes the pages waiting for a first read.
    done: Arc<tokio::sync::Notify>,
}

impl ForecastCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Span), Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `tenant`'s last `span` forecast, starting the next read when it is stale; the first
    /// waits for its read. `None`: no read has answered yet.
    pub async fn get(
        &self,
        persistence: &PersistenceClient,
        tenant: &str,
        span: Span,
    ) -> Option<Read> {
        let key = (tenant.to_owned(), span);
        let deadline = tokio::time::Instant::now() + span.first_wait();
        loop {
            // Registered before the read can end: a read ending in between still wakes it.
            let done = self.done.notified();
            {
                let mut entries = self.lock();
                if !entries.contains_key(&key) && entries.len() >= TENANTS {
                    forget_oldest(&mut entries);
                }
                let entry = entries.entry(key.clone()).or_default();
                let stale = entry
                    .last
                    .as_ref()
                    .is_none_or(|last| last.taken.elapsed() >= last.fresh_for(span));
                if stale && !entry.reading {
                    entry.reading = true;
                    self.start(persistence.clone(), key.clone());
                }
                if let Some(last) = &entry.last {
                    return Some(last.clone());
                }
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                return None;
            }
        }
    }

    fn start(&self, persistence: PersistenceClient, key: (String, Span)) {
        let cache = self.clone();
        tokio::spawn(async move {
            let (tenant, span) = &key;
            let at = Utc::now();
            let due = persistence
                .forecast_within(tenant, span.window(at), span.limit())
                .await
                .map_err(|e| e.to_string());
            let mut entries = cache.lock();
            let entry = entries.entry(key.clone()).or_default();
            entry.last = Some(Read {
                at,
                taken: Instant::now(),
                due,
            });
            entry.reading = false;
            drop(entries);
            cache.done.notify_waiters();
        });
    }
}

/// Forgets the forecast read longest ago (not one being read).
fn forget_oldest(entries: &mut HashMap<(String, Span), Entry>) {
    let oldest = entries
        .iter()
        .filter(|(_, entry)| !entry.reading)
        .min_by_key(|(_, entry)| entry.last.as_ref().map(|last| last.taken))
        .map(|(key, _)| key.clone());
    if let Some(key) = oldest {
        entries.remove(&key);
    }
}
