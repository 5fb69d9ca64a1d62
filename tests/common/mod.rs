//! Shared test harness: a real `nats-server` per test (own port, own storage directory, killable
//! and restartable), the daemon in-process or as a child process, and a client that speaks the
//! wire contract with plain JSON.
#![allow(dead_code, unused_imports)]

mod backups;
pub mod browser;
mod commands;
pub mod console;
mod daemon_process;
pub mod database;
pub mod doubles;
pub mod nats_cluster;
mod nats_server;
pub mod net_proxy;
pub mod operator;
pub mod persistence;
pub mod pki;
pub mod poller;
pub mod postgres_cluster;
pub mod previous_release;
pub mod quota_checks;
mod rows;
mod small_disk;
mod support;
mod test_client;
pub mod tls_front;
pub mod write_lock;
pub use backups::{backup_command, backup_process, exit_within, output_within, partials};
pub use commands::{
    cancel_command, cancel_timers_command, schedule_command, schedule_timers_command,
};
pub use daemon_process::{DaemonProcess, freeze_one_when};
pub use nats_server::{NatsServer, free_port};
pub use postgres_cluster::PostgresCluster;
pub use rows::{await_state, cancel_at, claimant, query_rows, rows_by_state, schedule_at};
pub use small_disk::SmallDisk;
pub use support::{
    http_get, http_request, metric, millis, prefill_sql, rfc3339, sessions_of, tcp_ports,
};
pub use test_client::{StoredEvent, TestClient};

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use tempfile::TempDir;
use timer_service::Config;
use timer_service::storage::db::DatabaseTarget;

/// Polls `check` until it yields `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A test's scratch directory and its database: the SQLite file in the directory, or, in a
/// PostgreSQL run (see [`database`]), a PostgreSQL database of the test's own.
pub struct Scratch {
    pub dir: TempDir,
    postgres: Option<database::PostgresDatabase>,
    /// A PostgreSQL database the test brought itself (a [`PostgresCluster`] of its own).
    own_url: Option<String>,
}

impl Scratch {
    pub fn new() -> Self {
        let postgres = database::postgres_run().then(|| {
            database::PostgresDatabase::create()
                .unwrap_or_else(|e| panic!("{e} (unset TEST_DATABASE to run on SQLite)"))
        });
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            postgres,
            own_url: None,
        }
    }

    /// A scratch directory whose database is the PostgreSQL database at `url`, whatever the run.
    pub fn on_postgres(url: String) -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            postgres: None,
            own_url: Some(url),
        }
    }

    /// The SQLite file (used unless this is a PostgreSQL run).
    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("timers.db")
    }

    /// The test's database.
    pub fn database(&self) -> DatabaseTarget {
        match self.database_url() {
            Some(url) => DatabaseTarget::Postgres { url },
            None => DatabaseTarget::sqlite(self.db_path()),
        }
    }

    /// The PostgreSQL URL, in a PostgreSQL run or on a database of the test's own.
    pub fn database_url(&self) -> Option<String> {
        self.own_url
            .clone()
            .or_else(|| self.postgres.as_ref().map(|pg| pg.url.clone()))
    }

    /// A scratch for a test of something only PostgreSQL has (several daemons on one
    /// database): in the PostgreSQL run; in the SQLite run `None`, saying so (`what`).
    pub fn postgres_only(what: &str) -> Option<Scratch> {
        if !database::postgres_run() {
            eprintln!(
                "{what}: PostgreSQL only; skipped in the SQLite run (TEST_DATABASE=postgres)"
            );
            return None;
        }
        Some(Scratch::new())
    }

    /// A test of something only a SQLite file has says so and is skipped in a PostgreSQL run.
    pub fn sqlite_only(&self, what: &str) -> bool {
        if self.database_url().is_some() {
            eprintln!("{what}: a SQLite file's concern; skipped in the PostgreSQL run");
            return false;
        }
        true
    }
}

/// Says that a test, or a part of it, is skipped for want of a server or library (`why`) this
/// machine lacks. Under `CI=true` it fails instead: CI must provide what the tests need, and a
/// check that passes because its part is absent cannot fail.
pub fn lacking(what: &str, why: &str) {
    if std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1") {
        panic!("{what}: {why}; under CI=true the machine must provide it");
    }
    eprintln!("{what}: skipped, {why}");
}

/// Daemon configuration for a test: its own database, the test's broker, default intervals
/// (so a timer firing well inside the 5 s polling interval proves the exact wake-up).
pub fn config(server: &NatsServer, scratch: &Scratch) -> Config {
    Config {
        broker_url: server.url(),
        db_path: scratch.db_path(),
        database_url: scratch.database_url(),
        // No HTTP unless a test asks for it: daemons of one test binary would share a port.
        http: timer_service::config::HttpSettings {
            listen: String::new(),
        },
        // Stable across a test's restarts, as a deployment's names should be.
        name: Some("test".into()),
        ..Config::default()
    }
}

/// A broker, a database and the daemon running on them in-process, plus a client; returns once
/// the daemon has created its command stream.
pub async fn started() -> (NatsServer, Scratch, timer_service::Daemon, TestClient) {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let daemon = timer_service::Daemon::start(config(&server, &scratch))
        .await
        .expect("daemon starts");
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    (server, scratch, daemon, client)
}
