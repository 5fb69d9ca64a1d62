//! Storage faults are outages the daemon waits out, never losses (docs/CONTRACT.md §1 "Durable"):
//! a full disk, a database file made read-only, a write lock held past the busy timeout, the
//! database's directory removed or replaced. In each, on a real SQLite file: no command is
//! acknowledged before its own commit, every timer fires once the fault clears, the daemon
//! stays up (no actor restarted, none of the restart budget used) and says so in its health.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chrono::Utc;
use common::{NatsServer, Scratch, SmallDisk, TestClient, config, eventually, rows_by_state};
use timer_service::actors::{CommandHandler, NamedActor, Persistence};
use timer_service::config::SupervisorSettings;
use timer_service::storage::db::DatabaseTarget;
use timer_service::{Config, Daemon};

/// A daemon whose database is at `db_path`, with a restart budget of one: a fault that made any
/// actor fail twice would stop it.
async fn daemon_on(server: &NatsServer, scratch: &Scratch, db_path: PathBuf) -> Daemon {
    let config = Config {
        db_path,
        database_url: None,
        supervisor: SupervisorSettings {
            max_restarts: 1,
            ..SupervisorSettings::default()
        },
        ..config(server, scratch)
    };
    Daemon::start(config).await.expect("daemon starts")
}

fn actor_ids(daemon: &Daemon) -> Vec<Option<ractor::ActorId>> {
    daemon
        .actor_names()
        .iter()
        .map(|name| daemon.actor_id(name))
        .collect()
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Waits until the daemon reports the storage fault, and returns the cause it gives.
async fn await_storage_fault(daemon: &Daemon) -> String {
    eventually(
        Duration::from_secs(30),
        "the daemon to report the storage fault",
        || async { daemon.health().storage_error },
    )
    .await
}

/// After the fault cleared: every timer fired, the broker holds no command, the database has
/// one row per timer, all `Reached`, the health is clear and no actor was restarted.
async fn assert_recovered(
    daemon: &Daemon,
    client: &TestClient,
    db_path: &Path,
    ids: &[String],
    actors_before: &[Option<ractor::ActorId>],
) {
    let cleared = std::time::Instant::now();
    let events = client
        .await_all_fired("acme", ids, Duration::from_secs(60))
        .await;
    let fired_in = cleared.elapsed();
    eventually(
        Duration::from_secs(20),
        "every command acknowledged",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;
    eventually(Duration::from_secs(10), "a clear health", || async {
        let status = daemon.health();
        status.problems().is_empty().then_some(())
    })
    .await;
    let rows = eventually(Duration::from_secs(10), "every row marked", || async {
        let rows = rows_by_state(&DatabaseTarget::sqlite(db_path)).await;
        (rows.get("Reached").copied() == Some(ids.len() as i64)).then_some(rows)
    })
    .await;
    assert_eq!(rows.len(), 1, "only Reached rows: {rows:?}");
    assert_eq!(
        actor_ids(daemon),
        actors_before,
        "no actor was restarted through the fault"
    );
    // One line per fault for the record: sent (each PubAck'd), stored, fired, time to recover.
    eprintln!(
        "{}: {} commands sent and acknowledged, {} rows stored, {} events ({} timers) fired, \
         every timer fired {} ms after the fault cleared, daemon up throughout",
        std::thread::current().name().unwrap_or("fault"),
        ids.len(),
        rows["Reached"],
        events.len(),
        ids.len(),
        fired_in.as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_waited_out_and_nothing_acknowledged_is_lost() {
    let Some(disk) = SmallDisk::mount(64 << 20) else {
        return;
    };
    let Some((server, scratch)) = sqlite_world() else {
        return;
    };
    let db_path = disk.path().join("timers.db");
    let daemon = daemon_on(&server, &scratch, db_path.clone()).await;
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let actors_before = actor_ids(&daemon);

    disk.fill_leaving(600 * 1024);
    let ids = ids("full", 20_000);
    // Due at once: storing and marking `Reached` both meet the full disk.
    client.schedule_many("acme", &ids, Utc::now()).await;
    let cause = await_storage_fault(&daemon).await;
    assert!(cause.contains("full"), "the cause is named: {cause}");
    assert!(
        client.commands_outstanding().await > 0,
        "commands that could not be stored wait in the broker"
    );
    assert!(daemon.actor_id(CommandHandler::NAME).is_some());

    disk.free();
    assert_recovered(&daemon, &client, &db_path, &ids, &actors_before).await;
    daemon.shutdown().await.unwrap();
}

/// Sets or clears the immutable attribute, which even root cannot write through, on files that
/// are already open too. Cleared again on drop, so the scratch directory can be removed.
struct Immutable(Vec<PathBuf>);

impl Immutable {
    fn set(paths: Vec<PathBuf>) -> Option<Immutable> {
        let mut set = Immutable(Vec::new());
        for path in paths {
            let out = Command::new("chattr").arg("+i").arg(&path).output().ok()?;
            if !out.status.success() {
                eprintln!(
                    "chattr +i is not available here ({}); skipping",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                return None;
            }
            set.0.push(path);
        }
        Some(set)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = Command::new("chattr").arg("-i").arg(path).status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_file_made_read_only_is_waited_out() {
    let Some((server, scratch)) = sqlite_world() else {
        return;
    };
    let db_path = scratch.db_path();
    let daemon = daemon_on(&server, &scratch, db_path.clone()).await;
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    client.barrier("acme").await; // the WAL exists and is open
    let actors_before = actor_ids(&daemon);

    let wal = PathBuf::from(format!("{}-wal", db_path.display()));
    let Some(read_only) = Immutable::set(vec![db_path.clone(), wal]) else {
        return;
    };
    let ids = ids("ro", 2_000);
    client.schedule_many("acme", &ids, Utc::now()).await;
    let cause = await_storage_fault(&daemon).await;
    eprintln!("storage fault reported: {cause}");
    assert_eq!(
        client.commands_outstanding().await,
        ids.len() as u64,
        "no command acknowledged while the file is read-only"
    );

    drop(read_only);
    let mut all = ids;
    all.extend(client_sentinels(&client).await);
    assert_recovered(&daemon, &client, &db_path, &all, &actors_before).await;
    daemon.shutdown().await.unwrap();
}

/// A read-only directory is no fault while the files in it exist: SQLite creates nothing there
/// while running, and a fresh connection (here: Persistence restarted) opens them as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_directory_made_read_only_does_not_stop_firing() {
    let Some((server, scratch)) = sqlite_world() else {
        return;
    };
    let dir = scratch.dir.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let db_path = dir.join("timers.db");
    let daemon = daemon_on(&server, &scratch, db_path.clone()).await;
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    client.barrier("acme").await;

    let Some(_read_only) = Immutable::set(vec![dir.clone()]) else {
        return;
    };
    let before = daemon.actor_id(Persistence::NAME);
    daemon.inject_fault(Persistence::NAME);
    eventually(Duration::from_secs(10), "Persistence restarted", || async {
        daemon
            .actor_id(Persistence::NAME)
            .filter(|id| Some(*id) != before)
    })
    .await;
    let ids = ids("ro-dir", 500);
    client.schedule_many("acme", &ids, Utc::now()).await;
    client
        .await_all_fired("acme", &ids, Duration::from_secs(30))
        .await;
    assert_eq!(daemon.health().storage_error, None);
    daemon.shutdown().await.unwrap();
}

/// The ids of the sentinel timers `barrier` scheduled (they count among the rows).
async fn client_sentinels(client: &TestClient) -> Vec<String> {
    client
        .fired_ids("acme")
        .await
        .into_iter()
        .filter(|id| id.starts_with("sentinel-"))
        .collect()
}

/// A broker and a scratch directory for one test; `None` (the test is skipped) when the suite
/// runs on PostgreSQL, where these SQLite file faults do not exist.
fn sqlite_world() -> Option<(NatsServer, Scratch)> {
    let scratch = Scratch::new();
    scratch
        .sqlite_only("storage faults")
        .then(|| (NatsServer::start(), scratch))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_held_past_the_busy_timeout_is_waited_out() {
    let Some((server, scratch)) = sqlite_world() else {
        return;
    };
    let db_path = scratch.db_path();
    let mut config = config(&server, &scratch);
    config.sqlite.busy_timeout = Duration::from_millis(200);
    config.supervisor.max_restarts = 1;
    let daemon = Daemon::start(config).await.unwrap();
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let actors_before = actor_ids(&daemon);

    let other = common::write_lock::hold(&db_path).await;
    let ids = ids("locked", 2_000);
    client.schedule_many("acme", &ids, Utc::now()).await;
    let cause = await_storage_fault(&daemon).await;
    assert!(cause.contains("locked"), "the cause is named: {cause}");
    assert_eq!(
        client.commands_outstanding().await,
        ids.len() as u64,
        "no command acknowledged while the lock is held"
    );

    common::write_lock::release(other).await;
    assert_recovered(&daemon, &client, &db_path, &ids, &actors_before).await;
    daemon.shutdown().await.unwrap();
}

/// A cancel through the API while the database is locked: it is in the command stream, but
/// not applied, so the API answers 500 (never "cancelled" before the commit); once the lock
/// goes, the CommandHandler applies it from the stream and the timer never fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_cancel_during_a_storage_fault_answers_500_and_is_applied_afterwards() {
    let Some((server, scratch)) = sqlite_world() else {
        return;
    };
    let db_path = scratch.db_path();
    let mut config = config(&server, &scratch);
    config.sqlite.busy_timeout = Duration::from_millis(200);
    let daemon = Daemon::start(config).await.unwrap();
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let due = Utc::now() + chrono::Duration::seconds(6);
    client.schedule("acme", "victim", due, None).await;
    eventually(Duration::from_secs(10), "the timer stored", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;

    let other = common::write_lock::hold(&db_path).await;
    let (code, body) = client
        .api_request(
            "timer.api.cancel.acme",
            serde_json::json!({"serviceCallId": "victim"}),
        )
        .await;
    assert_eq!(code, Some(500), "{body}");
    assert!(
        body.to_string().contains("not applied yet"),
        "the reason is given: {body}"
    );
    assert!(
        client.commands_outstanding().await >= 1,
        "the CancelTimer waits in the broker, not acknowledged"
    );

    common::write_lock::release(other).await;
    eventually(Duration::from_secs(10), "the cancel applied", || async {
        let rows = rows_by_state(&DatabaseTarget::sqlite(&db_path)).await;
        (rows.get("Cancelled").copied() == Some(1)).then_some(())
    })
    .await;
    while Utc::now() < due + chrono::Duration::milliseconds(200) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.barrier("acme").await;
    assert!(!client.fired_ids("acme").await.contains("victim"));
    daemon.shutdown().await.unwrap();
}

/// The directory holding the database removed while the daemon runs: what is committed into
/// the unlinked file would vanish with it, so nothing is acknowledged until the file is back
/// at its path (here an operator restores it from a backup taken before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_directory_removed_then_restored_loses_nothing_acknowledged() {
    let Some((server, scratch)) = sqlite_world() else {
        return;
    };
    let (dir, db_path, daemon, client, before) = daemon_in_directory(&server, &scratch).await;
    let backup = scratch.dir.path().join("backup.db");
    backup_to(&db_path, &backup).await;
    let actors_before = actor_ids(&daemon);

    std::fs::remove_dir_all(&dir).unwrap();
    let during = ids("during", 500);
    client.schedule_many("acme", &during, Utc::now()).await;
    let cause = await_storage_fault(&daemon).await;
    eprintln!("storage fault reported: {cause}");
    assert_eq!(
        client.commands_outstanding().await,
        during.len() as u64,
        "nothing acknowledged into the removed file"
    );

    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(&backup, &db_path).unwrap();
    let all: Vec<String> = before.iter().chain(&during).cloned().collect();
    assert_recovered(&daemon, &client, &db_path, &all, &actors_before).await;
    daemon.shutdown().await.unwrap();
}

/// The directory replaced by another holding a copy of the file (a restore, a volume swap):
/// the daemon notices the path names another file and carries on with that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_directory_replaced_is_followed_to_the_new_file() {
    let Some((server, scratch)) = sqlite_world() else {
        return;
    };
    let (dir, db_path, daemon, client, before) = daemon_in_directory(&server, &scratch).await;
    let copy = scratch.dir.path().join("copy.db");
    backup_to(&db_path, &copy).await;
    let actors_before = actor_ids(&daemon);

    std::fs::rename(&dir, scratch.dir.path().join("data.old")).unwrap();
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(&copy, &db_path).unwrap();
    let after = ids("after", 500);
    client.schedule_many("acme", &after, Utc::now()).await;

    let all: Vec<String> = before.iter().chain(&after).cloned().collect();
    assert_recovered(&daemon, &client, &db_path, &all, &actors_before).await;
    daemon.shutdown().await.unwrap();
}

/// A daemon whose database is in a directory of its own (`data/timers.db`), with 200 timers
/// due in 3 s already stored: the directory, the file, the daemon, a client and the timers.
async fn daemon_in_directory(
    server: &NatsServer,
    scratch: &Scratch,
) -> (PathBuf, PathBuf, Daemon, TestClient, Vec<String>) {
    let dir = scratch.dir.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let db_path = dir.join("timers.db");
    let daemon = daemon_on(server, scratch, db_path.clone()).await;
    let client = TestClient::connect(server).await;
    client.wait_for_command_stream().await;
    let before = ids("before", 200);
    client
        .schedule_many("acme", &before, Utc::now() + chrono::Duration::seconds(3))
        .await;
    eventually(
        Duration::from_secs(10),
        "the first timers stored",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;
    (dir, db_path, daemon, client, before)
}

/// A consistent copy of a live database, as `sqlite3 db ".backup copy"` makes one.
async fn backup_to(db_path: &Path, copy: &Path) {
    use sea_orm::ConnectionTrait;
    let db = timer_service::storage::db::connect(&DatabaseTarget::sqlite(db_path), 1)
        .await
        .unwrap();
    db.execute_unprepared(&format!("VACUUM INTO '{}'", copy.display()))
        .await
        .unwrap();
    db.close().await.unwrap();
}
