//! `timer-service backup` under faults (docs/operations.md, "Backup and restore"): the target's
//! disk full in the middle of the copy, and the command interrupted (SIGINT) while it copies.
//! Either way it says why, exits non-zero, leaves no file at the target nor a temporary one
//! beside it, and leaves the database as it was. SQLite only: PostgreSQL is backed up with
//! `pg_dump`.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{
    SmallDisk, backup_command, backup_process, exit_within, partials, prefill_sql, query_rows,
};
use sea_orm::ConnectionTrait;

use timer_service::storage::db::{DatabaseTarget, migrate};

/// A timer database of `n` pending timers at `dir/timers.db`, filled by one statement.
async fn timers_db(dir: &Path, n: u64) -> DatabaseTarget {
    let target = DatabaseTarget::sqlite(dir.join("timers.db"));
    migrate(&target).await.expect("the schema");
    let db = timer_service::storage::db::connect(&target, 1)
        .await
        .expect("open");
    db.execute_unprepared(&prefill_sql(false, n, "acme", 1_900_000_000_000, 1, None))
        .await
        .expect("fill");
    db.close().await.expect("close");
    target
}

async fn timers_in(target: &DatabaseTarget) -> i64 {
    query_rows(target, "SELECT COUNT(*) FROM timer_schedules", |row| {
        row.try_get_by_index::<i64>(0).expect("count")
    })
    .await[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_filling_during_the_copy_fails_the_backup_and_leaves_nothing() {
    let Some(disk) = SmallDisk::mount(2 << 20) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let database = timers_db(dir.path(), 50_000).await;
    let size = std::fs::metadata(dir.path().join("timers.db"))
        .expect("the file")
        .len();
    assert!(
        size > 4 << 20,
        "the database ({size} bytes) outgrows the disk"
    );

    let target = disk.path().join("copy.db");
    let out = backup_command(dir.path(), &target, &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        said.contains("full"),
        "the reason names the full disk: {said}"
    );
    assert!(!target.exists(), "no copy where the backup was asked for");
    assert!(
        partials(disk.path()).is_empty(),
        "{:?}",
        partials(disk.path())
    );
    assert!(
        disk.free_bytes() > (2 << 20) - (256 << 10),
        "the disk's space is given back"
    );

    // The database is as it was, and a backup with room succeeds.
    assert_eq!(timers_in(&database).await, 50_000);
    let roomy = dir.path().join("copy.db");
    let out = backup_command(dir.path(), &roomy, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(timers_in(&DatabaseTarget::sqlite(roomy)).await, 50_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_backup_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let database = timers_db(dir.path(), 200_000).await;
    let target = dir.path().join("copy.db");
    let mut backup = backup_process(dir.path(), &target, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the backup");
    let pid = backup.id() as i32;

    // Caught in the middle of the copy (its temporary file growing), stopped there so that the
    // SIGINT lands before the copy could end, then let go.
    let deadline = Instant::now() + Duration::from_secs(30);
    let partial = loop {
        let growing = partials(dir.path())
            .into_iter()
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0));
        if let Some(partial) = growing {
            break partial;
        }
        assert!(
            backup.try_wait().expect("wait").is_none(),
            "the backup ended before it was seen copying"
        );
        assert!(Instant::now() < deadline, "the copy never began");
        std::thread::sleep(Duration::from_millis(2));
    };
    // SAFETY: signals to the child this test started and still holds.
    unsafe {
        libc::kill(pid, libc::SIGSTOP);
        libc::kill(pid, libc::SIGINT);
        libc::kill(pid, libc::SIGCONT);
    }
    let status = exit_within(&mut backup, Duration::from_secs(30));
    let mut said = String::new();
    use std::io::Read;
    backup
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut said)
        .expect("read stderr");
    assert_eq!(status.code(), Some(130), "{said}");
    assert!(said.contains("interrupted"), "{said}");
    assert!(!target.exists(), "no copy where the backup was asked for");
    assert!(
        !partial.exists(),
        "the temporary copy {partial:?} is removed"
    );
    assert!(
        partials(dir.path()).is_empty(),
        "{:?}",
        partials(dir.path())
    );
    assert_eq!(timers_in(&database).await, 200_000);
}
