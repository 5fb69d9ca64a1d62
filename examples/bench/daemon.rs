//! The daemon under test as child processes (its memory and CPU its own, stopped as in
//! production), a database connection of the benchmark's own, and process CPU accounting.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use timer_service::storage::db::{DatabaseTarget, connect};

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

/// How a daemon of a workload runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub name: String,
    pub batch: usize,
    pub synchronous: String,
    /// `/metrics` served (and the Prometheus recorder installed) on this port; `None`: no
    /// HTTP and no recorder, the bare daemon.
    pub http_port: Option<u16>,
    pub keep_finished: String,
    /// Another build of the daemon (`--baseline`); `None`: this one's.
    pub binary: Option<PathBuf>,
    /// The lines of the command stream the workload makes for it (`--baseline-lines`); `None`:
    /// this build's default.
    pub lines: Option<u16>,
    /// More environment variables (`OTEL_EXPORTER_OTLP_ENDPOINT`…).
    pub env: Vec<(String, String)>,
}

impl Settings {
    /// The broker objects as the daemon's build reads them: a version before lines reads a
    /// command stream without them (a stream made with them would hand it subjects it cannot
    /// read), so a baseline's stream has the lines `--baseline-lines` says.
    pub fn broker_names(&self) -> timer_service::nats::streams::BrokerNames {
        let names = timer_service::nats::streams::BrokerNames::default();
        match self.lines {
            Some(lines) => timer_service::nats::streams::BrokerNames {
                command_partitions: lines,
                ..names
            },
            None => names,
        }
    }
}

pub struct Daemon {
    child: Child,
    pub started: Instant,
    pub http_port: Option<u16>,
}

impl Daemon {
    pub fn start(
        broker_url: &str,
        database: &DatabaseTarget,
        settings: &Settings,
        log: &Path,
    ) -> Self {
        let out = std::fs::File::create(log).expect("log file");
        let mut command = Command::new(settings.binary.clone().unwrap_or_else(binary));
        command
            .args(["run", "--config"])
            .arg(log.with_extension("none.toml"))
            .env("TIMER_BROKER_URL", broker_url)
            .env("TIMER_NAME", &settings.name)
            .env("TIMER_BATCH_SIZE", settings.batch.to_string())
            .env("TIMER_SQLITE_SYNCHRONOUS", &settings.synchronous)
            .env("TIMER_RETENTION_KEEP_FINISHED", &settings.keep_finished)
            .env(
                "TIMER_HTTP_LISTEN",
                settings
                    .http_port
                    .map(|p| format!("127.0.0.1:{p}"))
                    .unwrap_or_default(),
            )
            .env(
                "RUST_LOG",
                std::env::var("BENCH_DAEMON_LOG").unwrap_or_else(|_| "warn".into()),
            );
        // Spans only where a section asks for them (`env`), whatever the shell has set.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        command.envs(settings.env.iter().map(|(k, v)| (k, v)));
        match database {
            DatabaseTarget::Sqlite { path, .. } => command.env("TIMER_DB_PATH", path),
            DatabaseTarget::Postgres { url } => command.env("TIMER_DATABASE_URL", url),
        };
        let started = Instant::now();
        let child = command
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start timer-service");
        Self {
            child,
            started,
            http_port: settings.http_port,
        }
    }

    /// Sends `signal` (SIGKILL, SIGSTOP, SIGCONT) to the daemon.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
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

/// CPU time (user + system) of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / per_second.max(1.0)
}

/// The processes of every PostgreSQL server on this machine (its backends come and go, so
/// they are found at each reading).
fn postgres_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .collect()
}

/// Which process used how much CPU during a workload: where the time goes on these two cores.
pub struct CpuMeter {
    started: Instant,
    groups: Vec<(&'static str, Vec<u32>, f64)>,
    postgres: Option<f64>,
}

impl CpuMeter {
    /// Starts measuring the daemons, the broker, this benchmark process, and PostgreSQL when
    /// `postgres` is set.
    pub fn start(daemons: &[u32], broker: Option<u32>, postgres: bool) -> Self {
        let groups = vec![
            ("daemon", daemons.to_vec()),
            ("nats-server", broker.into_iter().collect()),
            ("load generator", vec![std::process::id()]),
        ]
        .into_iter()
        .map(|(name, pids)| {
            let used = pids.iter().map(|p| cpu_seconds(*p)).sum();
            (name, pids, used)
        })
        .collect::<Vec<_>>();
        Self {
            started: Instant::now(),
            groups,
            postgres: postgres.then(|| postgres_pids().into_iter().map(cpu_seconds).sum()),
        }
    }

    /// Cores used by each group since the start (1.0 = one core busy the whole time).
    pub fn finish(&self) -> Vec<(String, f64)> {
        let wall = self.started.elapsed().as_secs_f64().max(1e-9);
        let mut out: Vec<(String, f64)> = self
            .groups
            .iter()
            .map(|(name, pids, before)| {
                let now: f64 = pids.iter().map(|p| cpu_seconds(*p)).sum();
                (name.to_string(), (now - before) / wall)
            })
            .collect();
        if let Some(before) = self.postgres {
            let now: f64 = postgres_pids().into_iter().map(cpu_seconds).sum();
            out.push(("postgres".into(), (now - before).max(0.0) / wall));
        }
        out
    }
}

/// A connection of the benchmark's own to a workload's database.
pub struct Observer {
    db: DatabaseConnection,
    postgres: bool,
}

impl Observer {
    pub async fn open(database: &DatabaseTarget) -> Self {
        let observer = Self {
            db: connect(database, 1).await.expect("observer connection"),
            postgres: matches!(database, DatabaseTarget::Postgres { .. }),
        };
        if observer.postgres {
            // A prefill of a million rows, and its VACUUM, outlast the daemon's 10 s default.
            observer.execute("SET statement_timeout = 0").await;
        }
        observer
    }

    /// The one number `sql` answers. A statement the database refuses stops the bench: read
    /// as 0, it passed for "nothing left" (a subquery without an alias on PostgreSQL made a
    /// cancel of a million look done at once).
    pub async fn count(&self, sql: &str) -> u64 {
        let row = self
            .db
            .query_one_raw(Statement::from_string(self.db.get_database_backend(), sql))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        row.and_then(|row| row.try_get_by_index::<i64>(0).ok())
            .unwrap_or(0) as u64
    }

    pub async fn execute(&self, sql: &str) {
        self.db
            .execute_raw(Statement::from_string(self.db.get_database_backend(), sql))
            .await
            .expect("statement");
    }

    /// Whether any timer is still `Scheduled`: one index probe. The completion check of a
    /// drain, polled every few milliseconds; counting them instead walks the pending index
    /// each time (30–60 ms of the database's CPU with 100,000 pending on PostgreSQL), which
    /// the figure would then charge to the daemon.
    pub async fn any_pending(&self) -> bool {
        self.count("SELECT count(*) FROM (SELECT 1 FROM timer_schedules WHERE state = 'Scheduled' LIMIT 1) AS one")
            .await
            > 0
    }

    /// Adds `n` timers of `tenant` in one statement, the first due at `first_due` and each
    /// next one `step_ms` later: `Scheduled`, or `Reached` at `reached_at` when given.
    pub async fn prefill(
        &self,
        n: u64,
        tenant: &str,
        first_due: DateTime<Utc>,
        step_ms: i64,
        reached_at: Option<&str>,
    ) {
        let sql = crate::support::prefill_sql(
            self.postgres,
            n,
            tenant,
            first_due.timestamp_millis(),
            step_ms,
            reached_at,
        );
        self.execute(&sql).await;
        self.settle().await;
    }

    /// After writing rows: dead row versions cleared and statistics brought up to date
    /// (PostgreSQL) or the write-ahead log copied into the file (SQLite), so that the daemon
    /// measured next does not pay for them.
    pub async fn settle(&self) {
        if self.postgres {
            self.execute("VACUUM ANALYZE timer_schedules").await;
        } else {
            self.execute("PRAGMA wal_checkpoint(TRUNCATE)").await;
        }
    }

    pub async fn close(self) {
        let _ = self.db.close().await;
    }
}
