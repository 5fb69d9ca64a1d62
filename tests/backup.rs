//! Backup and restore (docs/operations.md, "Backup and restore"): a backup taken while the
//! daemon stores and fires timers is restored under a fresh daemon, on a broker of its own, and
//! every timer pending in the backup fires. SQLite with `timer-service backup`; PostgreSQL
//! (`TEST_DATABASE=postgres`) with `pg_dump` and `pg_restore`. Also the command's refusals.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::database::PostgresDatabase;
use common::{
    DaemonProcess, NatsServer, Scratch, TestClient, backup_command, eventually, lacking,
    output_within, partials, query_rows,
};
use timer_service::storage::db::DatabaseTarget;

const TENANT: &str = "acme";
/// Timers of the load, one every millisecond or so, each due 0.5–3.5 s after it is sent: while
/// the backup is taken some have fired, some are stored and pending, some not sent yet.
const LOAD: usize = 3_000;

/// Publishes [`LOAD`] ScheduleTimers, about one a millisecond, each due 0.5–3.5 s after it is
/// sent; returns once the broker has stored all.
async fn load(client: TestClient) {
    let subject = format!("timer.cmd.schedule.{TENANT}");
    let started = tokio::time::Instant::now();
    for chunk in (0..LOAD).collect::<Vec<_>>().chunks(50) {
        let mut acks = Vec::new();
        for i in chunk {
            let due = Utc::now() + chrono::Duration::milliseconds(500 + (i * 997 % 3_000) as i64);
            let command =
                common::schedule_command(TENANT, &format!("load-{i}"), &common::rfc3339(due), None);
            let bytes = serde_json::to_vec(&command).expect("json");
            acks.push(
                client
                    .js
                    .publish(subject.clone(), bytes.into())
                    .await
                    .expect("publish"),
            );
        }
        for ack in acks {
            ack.await.expect("PubAck");
        }
        tokio::time::sleep_until(started + Duration::from_millis(chunk[0] as u64 + 50)).await;
    }
}

/// The timers pending in a backup, by key, with their `dueAt`; and how many had fired.
async fn pending_in(backup: &DatabaseTarget) -> (BTreeMap<String, String>, i64) {
    let rows = query_rows(
        backup,
        "SELECT service_call_id, state, due_at FROM timer_schedules",
        |row| {
            (
                row.try_get_by_index::<String>(0).expect("key"),
                row.try_get_by_index::<String>(1).expect("state"),
                row.try_get_by_index::<Option<String>>(2).expect("due_at"),
            )
        },
    )
    .await;
    let reached = rows.iter().filter(|(_, s, _)| s == "Reached").count() as i64;
    let pending = rows
        .into_iter()
        .filter(|(_, state, _)| state == "Scheduled")
        .map(|(key, _, due)| (key, due.expect("a pending timer has a dueAt")))
        .collect();
    (pending, reached)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_restored_fires_every_timer_pending_in_it() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let daemon = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;

    let load = tokio::spawn(load(TestClient::connect(&server).await));
    // The daemon is storing and firing when the backup is taken: timers fired and marked so in
    // the database (a mark follows its event's PubAck, later under load).
    eventually(
        Duration::from_secs(20),
        "the first timers fired and marked",
        || async {
            let (pending, reached) = pending_in(&scratch.database()).await;
            (pending.len() >= 100 && reached >= 300).then_some(())
        },
    )
    .await;
    let on_postgres = scratch.database_url().is_some();
    let backup_file = scratch.dir.path().join("backup");
    let started = Instant::now();
    if on_postgres {
        if !pg_dump(&scratch, &backup_file) {
            return;
        }
    } else {
        let out = backup_command(scratch.dir.path(), &backup_file, &[]);
        assert!(out.status.success(), "backup failed: {out:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&backup_file)
            .expect("the copy")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the copy is its owner's only");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("pending"), "{said}");
        eprintln!("{}", said.trim());
    }
    eprintln!("backup took {:?} under load", started.elapsed());
    load.await.expect("the load");
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());

    // Restored as docs/operations.md says, under a fresh daemon on a broker of its own, whose
    // event stream then holds every event that daemon published.
    let restored = if on_postgres {
        let Some(restored) = pg_restore(&backup_file) else {
            return;
        };
        restored
    } else {
        let db = scratch.db_path();
        std::fs::copy(&backup_file, &db).expect("restore the file");
        for suffix in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        Restored::Sqlite
    };
    let scratch = match &restored {
        Restored::Postgres(db) => Scratch::on_postgres(db.url.clone()),
        Restored::Sqlite => scratch,
    };
    let (pending, reached) = pending_in(&scratch.database()).await;
    eprintln!(
        "the backup holds {} pending timers and {reached} fired",
        pending.len()
    );
    assert!(
        pending.len() >= 100 && reached >= 100,
        "the backup was not taken in the middle of the load: {} pending, {reached} fired",
        pending.len()
    );

    let fresh = NatsServer::start();
    let fresh_client = TestClient::connect(&fresh).await;
    let daemon = DaemonProcess::start(&fresh, &scratch);
    let keys: Vec<String> = pending.keys().cloned().collect();
    let events = fresh_client
        .await_all_fired(TENANT, &keys, Duration::from_secs(30))
        .await;
    for event in &events {
        let due = pending
            .get(event.service_call_id())
            .expect("only timers pending in the backup fire");
        assert_eq!(
            event.due_at(),
            due.parse::<DateTime<Utc>>().expect("dueAt"),
            "{} fired with another dueAt",
            event.service_call_id()
        );
    }
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(15)).await.success());
}

enum Restored {
    Sqlite,
    Postgres(PostgresDatabase),
}

/// How long `pg_dump` or `pg_restore` of the load's few thousand rows may take (both take well
/// under a second here).
const PG_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// A PostgreSQL client program: `PG_BIN_DIR`'s, else the newest `/usr/lib/postgresql/*/bin`'s,
/// else the one on `PATH`.
fn pg_program(name: &str) -> PathBuf {
    match common::postgres_cluster::binaries() {
        Ok(dir) if dir.join(name).is_file() => dir.join(name),
        _ => PathBuf::from(name),
    }
}

/// `pg_dump` of the scratch's database into `to`, in the custom format; false when this machine
/// has no pg_dump (skipped, or failed under CI).
fn pg_dump(scratch: &Scratch, to: &Path) -> bool {
    let url = scratch.database_url().expect("a PostgreSQL run");
    let mut dump = Command::new(pg_program("pg_dump"));
    dump.args(["--format=custom", "--file"]).arg(to).arg(&url);
    match output_within(&mut dump, PG_TOOL_TIMEOUT) {
        Ok(out) => {
            assert!(out.status.success(), "pg_dump failed: {out:?}");
            true
        }
        Err(e) => {
            lacking("backup with pg_dump", &format!("pg_dump: {e}"));
            false
        }
    }
}

/// `pg_restore` of `dump` into a new database.
fn pg_restore(dump: &Path) -> Option<Restored> {
    let db = PostgresDatabase::create().expect("a database to restore into");
    let mut restore = Command::new(pg_program("pg_restore"));
    restore
        .args(["--no-owner", "--exit-on-error", "--dbname"])
        .arg(&db.url)
        .arg(dump);
    match output_within(&mut restore, PG_TOOL_TIMEOUT) {
        Ok(out) => {
            assert!(out.status.success(), "pg_restore failed: {out:?}");
            Some(Restored::Postgres(db))
        }
        Err(e) => {
            lacking("restore with pg_restore", &format!("pg_restore: {e}"));
            None
        }
    }
}

#[test]
fn the_backup_refuses_to_overwrite_a_file_and_to_copy_postgresql() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let target = dir.join("taken");
    std::fs::write(&target, "keep me").expect("write");
    let out = backup_command(dir, &target, &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(said.contains("already exists"), "{said}");
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep me");

    let fresh = dir.join("fresh");
    let out = backup_command(
        dir,
        &fresh,
        &[("TIMER_DATABASE_URL", "postgres://timers@db.invalid/timers")],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(said.contains("pg_dump"), "{said}");
    assert!(!fresh.exists());

    // No database where the configuration points: nothing is created there, nor at the target.
    let out = backup_command(dir, &fresh, &[("TIMER_DB_PATH", "/nonexistent/timers.db")]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(said.contains("no database file"), "{said}");
    assert!(!fresh.exists() && !Path::new("/nonexistent/timers.db").exists());
    assert!(partials(dir).is_empty(), "{:?}", partials(dir));
}

/// A file that is not a timer database is refused and left as it was: its journal mode (kept in
/// the file) unchanged, no copy begun beside the target.
#[tokio::test]
async fn a_file_that_is_not_a_timer_database_is_refused_and_left_as_it_was() {
    use sea_orm::{ConnectionTrait, Database, Statement};
    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("timers.db");
    let url = format!("sqlite://{}?mode=rwc", other.display());
    let journal_mode = || async {
        let db = Database::connect(&url).await.expect("open");
        let mode = db
            .query_one_raw(Statement::from_string(
                db.get_database_backend(),
                "PRAGMA journal_mode",
            ))
            .await
            .expect("journal mode")
            .map(|row| row.try_get_by_index::<String>(0).expect("mode"))
            .unwrap_or_default();
        db.close().await.expect("close");
        mode
    };
    let db = Database::connect(&url).await.expect("create");
    db.execute_unprepared("PRAGMA journal_mode = DELETE; CREATE TABLE other (x INTEGER)")
        .await
        .expect("make");
    db.close().await.expect("close");
    assert_eq!(journal_mode().await, "delete");

    let target = dir.path().join("copy.db");
    let out = backup_command(dir.path(), &target, &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(said.contains("not a timer-service database"), "{said}");
    assert!(!target.exists());
    assert_eq!(
        journal_mode().await,
        "delete",
        "the refused file was changed"
    );
    assert!(
        partials(dir.path()).is_empty(),
        "{:?}",
        partials(dir.path())
    );
}
