//! Every command delivered to the daemon and not yet settled is kept alive, those still waiting
//! on an open pull request included (docs/CONTRACT.md §1): while the database is slow for longer
//! than the consumer's ack wait (4 s) and thousands of commands wait (in the transaction, gathered
//! for the next, delivered into the daemon's open pull requests), the broker delivers none of
//! them a second time. Counted on the broker (its consumers' deliveries, redeliveries included,
//! against the commands sent) and by the daemon (each command stored once, one row per key).
//!
//! The slow database: another connection holds a lock the daemon's commits wait for, SQLite's
//! write lock (within a busy timeout longer than the fault) or, on the test's own PostgreSQL
//! server, the table of timers (within a lock timeout longer than it), so the commit waits
//! rather than fails. A failed commit hands its commands back, which is a redelivery by design
//! (a frozen PostgreSQL server is such an outage: `database_faults.rs`); neither lock makes one.

mod common;

use std::time::{Duration, Instant};

use chrono::Utc;
use common::{
    DaemonProcess, NatsServer, PostgresCluster, Scratch, TestClient, eventually, free_port,
    http_get, metric, rows_by_state,
};
use sea_orm::ConnectionTrait;
use timer_service::ports::COMMAND_ACK_WAIT;

/// The backlog the daemon meets: more than it takes from the broker at once, spread over a few
/// lines.
const TENANTS: [&str; 4] = ["acme", "globex", "initech", "umbrella"];
const PER_TENANT: usize = 3_000;
/// Commands the daemon holds once the database is slow, at least: a transaction, commands
/// gathered for the next (up to 4,000) and those waiting on its pull requests.
const HELD_AT_LEAST: u64 = 2_000;
/// How long the database stays slow once the daemon holds what it was sent: twice the ack
/// wait, so that every command held without a keep-alive would have been delivered again.
const SLOW_FOR: Duration = Duration::from_secs(2 * COMMAND_ACK_WAIT.as_secs());

/// What makes the database slow: another connection holding a lock the daemon's commits wait
/// for (SQLite's write lock; on PostgreSQL the table of timers, which the daemon's commits
/// write), opened beforehand so the lock is taken at once.
struct Slowness {
    take_lock: &'static str,
    other: Option<sea_orm::DatabaseConnection>,
}

impl Slowness {
    const SQLITE: &'static str = "BEGIN EXCLUSIVE";
    const POSTGRES: &'static str = "BEGIN; LOCK TABLE timer_schedules IN EXCLUSIVE MODE";

    /// Opens the connection, once the database exists.
    async fn prepare(&mut self, database: &timer_service::storage::db::DatabaseTarget) {
        let connection = timer_service::storage::db::connect(database, 1)
            .await
            .expect("a connection of the test's own");
        self.other = Some(connection);
    }

    fn other(&self) -> &sea_orm::DatabaseConnection {
        self.other.as_ref().expect("prepared first")
    }

    async fn begin(&self) {
        self.other()
            .execute_unprepared(self.take_lock)
            .await
            .expect("the lock");
    }

    async fn end(&self) {
        self.other()
            .execute_unprepared("COMMIT")
            .await
            .expect("release");
    }
}

/// The daemon's `timer_commands_received_total{outcome="stored"}`.
async fn stored_count(addr: &str) -> Option<f64> {
    let (_, body) = http_get(addr, "/metrics").await?;
    metric(
        &body,
        "timer_commands_received_total{daemon=\"test\",outcome=\"stored\"}",
    )
}

/// Lets the daemon meet a backlog of commands, makes the database slow for [`SLOW_FOR`] once the
/// first of them is stored, then checks that the broker delivered each exactly once and the
/// daemon stored each once.
async fn no_command_is_delivered_twice(
    server: NatsServer,
    scratch: Scratch,
    mut slowness: Slowness,
    env: &[(&str, &str)],
) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut env = env.to_vec();
    env.push(("TIMER_HTTP_LISTEN", addr.as_str()));
    let daemon = DaemonProcess::start_with(&server, &scratch, &env);
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    // Every line's consumer made: the backlog waits on them while the daemon is stopped.
    client.barrier("acme").await;
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(20)).await.success());

    let due = Utc::now() + chrono::Duration::hours(1);
    for tenant in TENANTS {
        let ids: Vec<String> = (0..PER_TENANT).map(|i| format!("{tenant}-{i}")).collect();
        client.schedule_many(tenant, &ids, due).await;
    }
    let sent = TENANTS.len() * PER_TENANT;
    let delivered_before = client.commands_delivered().await.expect("deliveries");
    slowness.prepare(&scratch.database()).await;

    let daemon = DaemonProcess::start_with(&server, &scratch, &env);
    eventually(
        Duration::from_secs(20),
        "the first commands of the backlog stored",
        || async { (client.commands_outstanding().await < sent as u64).then_some(()) },
    )
    .await;
    slowness.begin().await;
    // Held by the daemon: a transaction waiting for the database, commands gathered for the
    // next, and those delivered into its open pull requests.
    let held = eventually(
        Duration::from_secs(20),
        "the daemon to hold thousands of commands",
        || async {
            let held = client.commands_held().await;
            (held >= HELD_AT_LEAST).then_some(held)
        },
    )
    .await;
    let slow_since = Instant::now();
    tokio::time::sleep(SLOW_FOR).await;
    let held_at_end = client.commands_held().await;
    slowness.end().await;

    eventually(
        Duration::from_secs(45),
        "every command stored and acknowledged",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;
    let delivered = client.commands_delivered().await.expect("deliveries") - delivered_before;
    let stored = eventually(
        Duration::from_secs(10),
        "the stored commands counted",
        || async { stored_count(&addr).await.filter(|n| *n >= sent as f64) },
    )
    .await;
    let rows = rows_by_state(&scratch.database()).await;
    eprintln!(
        "{sent} commands sent; {held} held once the database was slow, {held_at_end} after \
         {} ms; {delivered} deliveries; {stored} stored; rows {rows:?}",
        slow_since.elapsed().as_millis()
    );
    assert_eq!(
        delivered,
        sent as u64,
        "each command delivered once: the broker delivered {} again",
        delivered.saturating_sub(sent as u64)
    );
    assert_eq!(stored, sent as f64, "each command stored once");
    assert_eq!(
        rows.get("Scheduled").copied(),
        Some(sent as i64),
        "{rows:?}"
    );
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_held_past_the_ack_wait_delivers_nothing_twice() {
    let scratch = Scratch::new();
    if !scratch.sqlite_only("a SQLite write lock") {
        return;
    }
    let server = NatsServer::start();
    // The commit waits for the lock rather than failing: a slow database, not an outage.
    let env = [("TIMER_SQLITE_BUSY_TIMEOUT", "60s")];
    let slowness = Slowness {
        take_lock: Slowness::SQLITE,
        other: None,
    };
    no_command_is_delivered_twice(server, scratch, slowness, &env).await;
}

/// A frozen PostgreSQL server is an outage rather than a slow commit: the daemon's probe and
/// pool give up after 3 s and the batch is handed back (a redelivery by design), so the slow
/// database here is a lock held on the table of timers, within a lock timeout longer than it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_lock_held_past_the_ack_wait_delivers_nothing_twice() {
    let Some(cluster) =
        tokio::task::block_in_place(|| PostgresCluster::start_or_skip("a PostgreSQL table lock"))
    else {
        return;
    };
    let server = NatsServer::start();
    let scratch = Scratch::on_postgres(cluster.url());
    let slowness = Slowness {
        take_lock: Slowness::POSTGRES,
        other: None,
    };
    let env = [
        ("TIMER_POSTGRES_LOCK_TIMEOUT", "60s"),
        ("TIMER_POSTGRES_STATEMENT_TIMEOUT", "60s"),
        ("TIMER_POSTGRES_OPERATION_TIMEOUT", "90s"),
    ];
    no_command_is_delivered_twice(server, scratch, slowness, &env).await;
    drop(cluster);
}
