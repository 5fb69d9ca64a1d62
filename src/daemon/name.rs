//! The daemon's name on a shared database: taken at start (a live holder's refused), given up
//! at a graceful stop (docs/CONTRACT.md §8).

use std::time::Duration;

use super::DaemonError;
use crate::config::{Config, DaemonName};
use crate::health::PROBE_INTERVAL;
use crate::storage::db::DatabaseTarget;
use crate::storage::{self, NameHold, Store};

/// Longest a starting daemon watches the row of its name when another instance wrote it
/// lately: a live holder's health probe writes it twice meanwhile, so a row left as it was
/// belongs to a dead daemon. So much a daemon restarted right after a crash waits.
pub const NAME_WATCH: Duration = PROBE_INTERVAL
    .saturating_mul(2)
    .saturating_add(Duration::from_secs(1));

/// Takes the daemon's name on the database (see [`Store::take_name`]) and returns it: refuses
/// a name a live daemon holds, and picks another random suffix when that happens to a
/// generated one.
pub(super) async fn take_name(
    config: &Config,
    database: &DatabaseTarget,
    mut name: DaemonName,
) -> Result<String, DaemonError> {
    let failed = |source| DaemonError::Name {
        path: database.describe(),
        source,
    };
    let store = Store::open(database).await.map_err(failed)?;
    let mut attempts = 0;
    let taken = loop {
        attempts += 1;
        match store.take_name(name.as_str(), NAME_WATCH).await {
            Ok(NameHold::Taken { waited }) => {
                tracing::info!(
                    name = name.as_str(),
                    name_from = name.origin(),
                    instance = storage::daemons::instance(),
                    waited_ms = waited.as_millis() as u64,
                    "daemon name taken"
                );
                break Ok(name.as_str().to_owned());
            }
            Ok(NameHold::Held { holder }) => match name {
                DaemonName::Generated(_) if attempts < 3 => {
                    name = config.daemon_name(true);
                }
                _ => {
                    break Err(DaemonError::NameHeld {
                        name: name.as_str().to_owned(),
                        holder,
                    });
                }
            },
            Err(e) => break Err(failed(e)),
        }
    };
    if let Err(e) = store.close().await {
        tracing::debug!(error = %e, "closing the connection that took the name failed");
    }
    taken
}

/// Gives up the daemon's name on a shared database, so that a daemon started next under it
/// (this one restarted, say) takes it at once instead of watching for a live holder, and the
/// claims it still holds, so that the other daemons fire those timers at once instead of when
/// their lease lapses. On SQLite, one daemon per file, the next start takes both up again.
pub(super) async fn release_name(
    database: &DatabaseTarget,
    name: &str,
    until: tokio::time::Instant,
) {
    if !database.shared() {
        return;
    }
    let released = tokio::time::timeout_at(until, async {
        let store = Store::open(database).await?;
        let released = store.release_name(name, chrono::Utc::now()).await;
        let _ = store.close().await;
        released
    })
    .await;
    match released {
        Ok(Ok(claims)) => tracing::info!(name, claims, "daemon name and its claims given up"),
        Ok(Err(e)) => tracing::warn!(name, error = %e,
            "could not give up the daemon name; a daemon started under it waits a few seconds"),
        Err(_) => tracing::warn!(
            name,
            "could not give up the daemon name in time; a daemon started under it waits a few seconds"
        ),
    }
}
