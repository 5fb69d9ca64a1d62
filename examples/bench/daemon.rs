//! The daemon under test, as a child process (so its memory is its own and it can be stopped
//! like in production), and a read-only view of its SQLite file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use timer_service::persistence::SqliteSettings;
use timer_service::persistence::db::connect;

/// The release binary next to this example, built on demand.
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_owned();
    let bin = dir.join("timer-service");
    if !bin.exists() {
        let profile = if dir.ends_with("release") {
            "--release"
        } else {
            "--profile=dev"
        };
        let status = Command::new("cargo")
            .args(["build", profile, "--bin", "timer-service"])
            .status()
            .expect("cargo build");
        assert!(status.success(), "cannot build timer-service");
    }
    bin
}

pub struct Daemon {
    child: Child,
    pub started: Instant,
}

impl Daemon {
    /// Starts the daemon on `db_path` with the given batch size and SQLite `synchronous` level.
    pub fn start(
        broker_url: &str,
        db_path: &Path,
        batch_size: usize,
        synchronous: &str,
        log: &Path,
    ) -> Self {
        let out = std::fs::File::create(log).expect("log file");
        let config = db_path.with_extension("toml");
        std::fs::write(
            &config,
            format!("[sqlite]\nsynchronous = \"{synchronous}\"\n"),
        )
        .expect("config file");
        let started = Instant::now();
        let child = Command::new(binary())
            .args(["run", "--config"])
            .arg(config)
            .env("TIMER_BROKER_URL", broker_url)
            .env("TIMER_DB_PATH", db_path)
            .env("TIMER_BATCH_SIZE", batch_size.to_string())
            .env(
                "RUST_LOG",
                std::env::var("BENCH_DAEMON_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start timer-service");
        Self { child, started }
    }

    /// Peak resident set size so far (VmHWM), in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kib| kib / 1024.0)
            .unwrap_or(f64::NAN)
    }

    /// SIGTERM, then wait for the exit (SIGKILL after 20 s).
    pub fn stop(mut self) {
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A second connection to the daemon's file (WAL allows readers beside the writer).
pub struct Observer {
    db: DatabaseConnection,
}

impl Observer {
    pub async fn open(db_path: &Path) -> Self {
        let settings = SqliteSettings {
            cache_kib: 8_192,
            ..SqliteSettings::default()
        };
        Self {
            db: connect(db_path, &settings)
                .await
                .expect("observer connection"),
        }
    }

    pub async fn count(&self, sql: &str) -> u64 {
        self.db
            .query_one_raw(Statement::from_string(self.db.get_database_backend(), sql))
            .await
            .ok()
            .flatten()
            .and_then(|row| row.try_get_by_index::<i64>(0).ok())
            .unwrap_or(0) as u64
    }

    pub async fn execute(&self, sql: &str) {
        self.db
            .execute_raw(Statement::from_string(self.db.get_database_backend(), sql))
            .await
            .expect("statement");
    }

    pub async fn close(self) {
        let _ = self.db.close().await;
    }
}

/// Fills the (migrated) file with `n` `Scheduled` timers of `tenant`, the first due at
/// `first_due` and each next one `step_ms` later, in one statement.
pub async fn prefill(db_path: &Path, n: u64, tenant: &str, first_due: DateTime<Utc>, step_ms: i64) {
    let observer = Observer::open(db_path).await;
    let first_ms = first_due.timestamp_millis();
    observer
        .execute(&format!(
            "WITH RECURSIVE seq(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM seq WHERE x < {last})
             INSERT INTO timer_schedules
             SELECT '{tenant}', '{tenant}-' || x, 'corr-' || x,
                    strftime('%Y-%m-%dT%H:%M:%fZ', ({first_ms} + x * {step_ms}) / 1000.0, 'unixepoch'),
                    '2026-01-01T00:00:00.000Z', NULL, 'Scheduled', 0
             FROM seq",
            last = n.saturating_sub(1)
        ))
        .await;
    observer.execute("PRAGMA wal_checkpoint(TRUNCATE)").await;
    observer.close().await;
}
