//! The processes and files under attack: the broker, the path between it and the daemon (a
//! proxy of the run's own), the daemon (with libfaketime for its clock), the scratch directory,
//! the small disks, the PostgreSQL server of the run's own.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::net_proxy::NetProxy;
use crate::common::{DaemonProcess, NatsServer, PostgresCluster, Scratch, SmallDisk};
use timer_service::storage::db::DatabaseTarget;

/// libfaketime for the daemon: the library and the file whose offset it reads at every call.
pub struct Faketime {
    pub library: PathBuf,
    pub file: PathBuf,
}

impl Faketime {
    /// The library named by `FAKETIME_LIB` (set by `scripts/faketime-lib.sh`), or where Debian
    /// installs it; `Err` says why there is none.
    pub fn find(dir: &std::path::Path) -> Result<Self, String> {
        let library = std::env::var_os("FAKETIME_LIB")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".into());
        if !library.exists() {
            return Err(format!(
                "libfaketime not found at {} (run scripts/faketime-lib.sh, or set FAKETIME_LIB)",
                library.display()
            ));
        }
        let faketime = Self {
            library,
            file: dir.join("faketime.rc"),
        };
        faketime.set("+0");
        Ok(faketime)
    }

    /// Sets the daemon's clock offset ("+30s", "-20s", "+0"), in one rename so the library
    /// never reads a half-written file.
    pub fn set(&self, offset: &str) {
        let next = self.file.with_extension("next");
        std::fs::write(&next, format!("{offset}\n")).expect("write the faketime file");
        std::fs::rename(&next, &self.file).expect("replace the faketime file");
    }

    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", self.library.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1".into()),
            // Only the wall clock moves: timeouts and sleeps keep real time. The variable's
            // name changed across libfaketime versions; both are set.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
            ("DONT_FAKE_MONOTONIC", "1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// The processes and files under attack.
pub struct World {
    pub server: NatsServer,
    /// Between the daemon and the broker from the first fault of the path on (`via_proxy`), so
    /// that its path can go silent with no reset; the run's clients reach the broker directly.
    pub proxy: NetProxy,
    /// Whether the daemon is started on the proxy's address. Not before the path's faults: the
    /// proxy runs in the test's process and copies every byte, which the faults before them
    /// (a burst of 10,000 firings judged to the second among them) should not pay for.
    pub via_proxy: bool,
    /// The tmpfs the broker keeps its streams on, when one could be mounted (held for its life).
    pub _broker_disk: Option<SmallDisk>,
    pub scratch: Scratch,
    /// The small filesystem the SQLite file lives on (SQLite runs where mounting is allowed).
    pub disk: Option<SmallDisk>,
    pub faketime: Option<Faketime>,
    pub daemon: Option<DaemonProcess>,
    pub env: Vec<(String, String)>,
    /// The PostgreSQL server of the run's own (the PostgreSQL run, where its binaries exist).
    pub postgres: Option<PostgresCluster>,
    /// The daemon's `/readyz` address.
    pub http: String,
}

impl World {
    pub fn start_daemon(&mut self) {
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_timer-service"));
        self.start_binary(binary);
    }

    /// Starts another build of the daemon (an earlier release) in its place, set up alike.
    pub fn start_binary(&mut self, binary: &std::path::Path) {
        let proxy_url = self.proxy.url();
        let mut env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if self.via_proxy {
            env.push(("TIMER_BROKER_URL", &proxy_url));
        }
        self.daemon = Some(DaemonProcess::start_binary(
            binary,
            &self.server,
            &self.scratch,
            &env,
        ));
    }

    /// The environment of an operator's command (`lines set`, `migrate --to`) on this world:
    /// the broker reached directly, the daemon's database.
    pub fn operator_env(&self) -> Vec<(String, String)> {
        let mut env = crate::common::operator::env_for(&self.server.url(), &self.scratch);
        env.extend(
            self.env
                .iter()
                .filter(|(k, _)| k == "TIMER_DB_PATH")
                .cloned(),
        );
        env
    }

    pub fn database(&self) -> DatabaseTarget {
        match &self.disk {
            Some(disk) if self.scratch.database_url().is_none() => {
                DatabaseTarget::sqlite(disk.path().join("timers.db"))
            }
            _ => self.scratch.database(),
        }
    }

    pub(super) fn signal_daemon(&self, signal: i32) {
        if let Some(daemon) = &self.daemon {
            daemon.signal(signal);
        }
    }

    /// Stops the daemon with SIGTERM and waits up to `timeout`; the exit status, if it exited.
    pub async fn stop_daemon(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut daemon = self.daemon.take()?;
        daemon.signal(libc::SIGTERM);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = daemon.try_status() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                daemon.kill9();
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
