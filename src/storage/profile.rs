//! What the rest of the daemon needs to know of a database, asked of it here, so that no code
//! outside `storage/` decides by which database it is: whether daemons share it, whether firing
//! gets a connection of its own, how long one operation may take, whether it has a WAL to
//! checkpoint. A third database answers these and nothing outside `storage/` changes.

use std::path::Path;
use std::time::Duration;

use super::db::{DatabaseTarget, PostgresSettings, SqliteSettings};

/// See [`DatabaseTarget::command_connections`].
const POSTGRES_COMMAND_CONNECTIONS: usize = 2;

/// See [`DatabaseTarget::firing_connections`].
const POSTGRES_FIRING_CONNECTIONS: usize = 2;

impl DatabaseTarget {
    /// Several daemons may run on it (PostgreSQL): each registers its name there at start and
    /// gives it up at a graceful stop. A SQLite file has one daemon.
    pub fn shared(&self) -> bool {
        matches!(self, Self::Postgres { .. })
    }

    /// Its name in telemetry (`db.system.name`).
    pub fn system_name(&self) -> &'static str {
        match self {
            Self::Sqlite { .. } => "sqlite",
            Self::Postgres { .. } => "postgresql",
        }
    }

    /// How many connections of their own claims and marks run on, never behind a command
    /// commit's fsync; none: they share the writer's. PostgreSQL: two, so that a mark runs
    /// beside the next claim, each on a backend (a core) of its own: with one, the server
    /// fired on one core while the other idled (BENCHMARKS.md). SQLite writes on one
    /// connection at a time: a second writer would only wait for the first one's lock.
    pub fn firing_connections(&self) -> usize {
        match self {
            Self::Sqlite { .. } => 0,
            Self::Postgres { .. } => POSTGRES_FIRING_CONNECTIONS,
        }
    }

    /// Whether the Poller may have a claim at Persistence while a mark is: the firing lane has
    /// a connection for each (`poller::phase`).
    pub fn claims_beside_marks(&self) -> bool {
        self.firing_connections() > 1
    }

    /// How many connections commit commands side by side. PostgreSQL: two, each transaction
    /// on a backend (a core) of its own, so that one batch's rows are written while another's
    /// are sent and committed (bulk ingest 1.4–1.6× one connection's in the bench; three or
    /// four were no faster on two cores). Two never hold one key: the CommandHandler's
    /// pipeline holds a group back while a key of it is under way, so a key's commands apply
    /// in stream order (docs/CONTRACT.md §3). SQLite: one, its single writer.
    pub fn command_connections(&self) -> usize {
        match self {
            Self::Sqlite { .. } => 1,
            Self::Postgres { .. } => POSTGRES_COMMAND_CONNECTIONS,
        }
    }

    /// Whether the Poller keeps its claims and marks short while tenants share a backlog
    /// (`poller::fairness`): where a write's time grows with its rows (PostgreSQL: a claim of
    /// 2,000 rows holds a firing connection tens of milliseconds), not where it is mostly its
    /// commit (SQLite, where the Poller keeps them short only when it sees a full claim take
    /// long: `poller::fairness::WritePace`). Measured in the bench's noisy neighbour, writes of 500 instead of 2,000
    /// took the quiet tenant's p99 to 0.63× on PostgreSQL with three daemons and to 1.20× on
    /// SQLite (BENCHMARKS.md).
    pub fn short_writes_while_sharing(&self) -> bool {
        matches!(self, Self::Postgres { .. })
    }

    /// The most one operation may take before it is given up: `[postgres] operation_timeout`
    /// (the health probe's shorter `probe_limit`, when that is less) on a server that may stop
    /// answering; none on a SQLite file, whose stalls the Checkpointer and the probe's own
    /// bounded wait watch.
    pub fn operation_deadline(
        &self,
        postgres: &PostgresSettings,
        probe_limit: Option<Duration>,
    ) -> Option<Duration> {
        match self {
            Self::Sqlite { .. } => None,
            Self::Postgres { .. } => Some(match probe_limit {
                Some(limit) => limit.min(postgres.operation_timeout),
                None => postgres.operation_timeout,
            }),
        }
    }

    /// The file whose write-ahead log the Checkpointer copies in the background (SQLite), with
    /// its settings.
    pub fn wal_file(&self) -> Option<(&Path, &SqliteSettings)> {
        match self {
            Self::Sqlite { path, settings } => Some((path, settings)),
            Self::Postgres { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_database_answers_for_itself() {
        let sqlite = DatabaseTarget::sqlite("/tmp/timers.db");
        let postgres = DatabaseTarget::Postgres {
            url: "postgres://localhost/timers".into(),
        };
        let settings = PostgresSettings::default();
        let probe = Some(Duration::from_secs(1));
        assert!(!sqlite.shared() && postgres.shared());
        assert_eq!(
            (sqlite.firing_connections(), postgres.firing_connections()),
            (0, 2)
        );
        assert!(!sqlite.claims_beside_marks() && postgres.claims_beside_marks());
        assert_eq!(
            (sqlite.command_connections(), postgres.command_connections()),
            (1, 2)
        );
        assert_eq!(sqlite.operation_deadline(&settings, probe), None);
        assert_eq!(
            postgres.operation_deadline(&settings, None),
            Some(settings.operation_timeout)
        );
        assert_eq!(
            postgres.operation_deadline(&settings, probe),
            Some(Duration::from_secs(1))
        );
        assert!(sqlite.wal_file().is_some() && postgres.wal_file().is_none());
        assert!(!sqlite.short_writes_while_sharing() && postgres.short_writes_while_sharing());
    }
}
