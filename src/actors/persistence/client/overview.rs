//! The console overview's reads (docs/CONTRACT.md §7): every tenant's counts and the daemons
//! sharing the database, reads of the daemon's own on a reader connection. No time limit: the
//! console counts in the background, one count at a time (`console::census_cache`), and a
//! count of ten million takes seconds.

use chrono::{DateTime, Utc};

use super::{CallError, Class, Op, PersistenceClient};
use crate::domain::census::{DaemonSeen, TenantCensus};

impl PersistenceClient {
    /// Every tenant's pending and overdue timers: the console's overview, on a reader
    /// connection.
    pub async fn census(&self, now: DateTime<Utc>) -> Result<Vec<TenantCensus>, CallError> {
        self.run(
            "census",
            Class::own_read_as("#census"),
            Op::Read,
            0,
            move |store, _| Box::pin(async move { store.census(now).await }),
        )
        .await
    }

    /// The daemons sharing the database: the console's overview, on a reader connection.
    pub async fn daemons_seen(&self) -> Result<Vec<DaemonSeen>, CallError> {
        self.run(
            "daemons_seen",
            Class::own_read_as("#daemons"),
            Op::Read,
            0,
            |store, _| Box::pin(store.daemons_seen()),
        )
        .await
    }
}
