//! Backups of a live SQLite file (`timer-service backup`, the command as an operator runs it):
//! how long one takes, and what it costs the daemon's writer — the steady load's lateness while
//! backups run back to back, and the commit time of a plain writer beside a backup.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Statement, Value};
use timer_service::storage::db::{DatabaseTarget, connect};

use super::{LatenessRun, Load, lateness};
use crate::daemon::Settings;
use crate::world::World;

/// The steady load with backups taken back to back, and the backups.
pub struct BackupsRun {
    pub lateness: LatenessRun,
    pub backups: Vec<Taken>,
}

/// One backup, as the command reported it.
pub struct Taken {
    /// The copy (`VACUUM INTO`), seconds.
    pub copy_s: f64,
    /// The command from its start to its exit, seconds.
    pub total_s: f64,
    pub mb: f64,
}

/// `timer-service backup --to FILE` of the SQLite file at `path`: what it printed, read back.
async fn take(path: &std::path::Path, to: &std::path::Path) -> Option<Taken> {
    let started = Instant::now();
    let out = tokio::process::Command::new(crate::daemon::binary())
        .args(["--config", "/nonexistent/none.toml", "backup", "--to"])
        .arg(to)
        .env("TIMER_DB_PATH", path)
        .output()
        .await
        .expect("run timer-service backup");
    let total_s = started.elapsed().as_secs_f64();
    let said = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        eprintln!("backup failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    // "…, 30.5 MB, copied in 0.20 s (0.26 s in all)"
    let number_before = |marker: &str| -> Option<f64> {
        let head = &said[..said.find(marker)?];
        head.rsplit(' ').next()?.parse().ok()
    };
    Some(Taken {
        copy_s: number_before(" s (")?,
        total_s,
        mb: number_before(" MB")?,
    })
}

/// A steady load at `rate` for `secs` on the world's database, with one backup after another
/// taken from the moment the daemon starts to the end of the load (each copy deleted once made).
pub async fn backups_under_load(
    world: &World,
    rate: u32,
    secs: u32,
    lead: Duration,
    settings: &Settings,
) -> BackupsRun {
    let stop = Arc::new(AtomicBool::new(false));
    let taker = tokio::spawn(back_to_back(
        world.database.clone(),
        world.dir.clone(),
        stop.clone(),
    ));
    let lateness = lateness(
        world,
        rate,
        secs,
        lead,
        std::slice::from_ref(settings),
        Load::default(),
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    BackupsRun {
        lateness,
        backups: taker.await.expect("backups"),
    }
}

async fn back_to_back(
    database: DatabaseTarget,
    dir: std::path::PathBuf,
    stop: Arc<AtomicBool>,
) -> Vec<Taken> {
    let DatabaseTarget::Sqlite { path, .. } = database else {
        panic!("backups of a SQLite file only");
    };
    let mut taken = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let to = dir.join(format!("backup-{n}.db"));
        taken.extend(take(&path, &to).await);
        let _ = std::fs::remove_file(&to);
        n += 1;
    }
    taken
}

/// Commit times (ms) of one-row upserts, each its own durable transaction as a command commit
/// is, on a connection of its own to `database`, for `secs`: alone, then with backups taken
/// back to back on another connection. SQLite in WAL mode: the reader never blocks the writer.
pub async fn writer_beside_backups(
    database: &DatabaseTarget,
    dir: &std::path::Path,
    secs: u64,
) -> (Vec<f64>, Vec<f64>) {
    let alone = commits(database, secs).await;
    let stop = Arc::new(AtomicBool::new(false));
    let taker = tokio::spawn(back_to_back(database.clone(), dir.to_owned(), stop.clone()));
    let beside = commits(database, secs).await;
    stop.store(true, Ordering::Relaxed);
    let backups = taker.await.expect("backups");
    eprintln!("  {} backups beside the writer", backups.len());
    (alone, beside)
}

async fn commits(database: &DatabaseTarget, secs: u64) -> Vec<f64> {
    let db = connect(database, 1).await.expect("writer connection");
    let until = Instant::now() + Duration::from_secs(secs);
    let mut times = Vec::new();
    let mut i: i64 = 0;
    while Instant::now() < until {
        let statement = Statement::from_sql_and_values(
            db.get_database_backend(),
            "INSERT INTO timer_schedules (tenant_id, service_call_id, correlation_id, due_at, \
               registered_at, state, command_seq) \
             VALUES ('writer', ?, 'c', '2099-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', \
               'Scheduled', ?) \
             ON CONFLICT (tenant_id, service_call_id) DO UPDATE SET command_seq = excluded.command_seq",
            [Value::from(format!("w-{}", i % 1000)), Value::from(i)],
        );
        let started = Instant::now();
        db.execute_raw(statement).await.expect("commit");
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        i += 1;
    }
    db.close().await.expect("close");
    times
}
