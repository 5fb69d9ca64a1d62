//! A PostgreSQL server of one test's own, for database faults the shared server cannot take:
//! `initdb` into a temporary directory, the server on a free port with its own socket
//! directory, and ways to stop it, start it again on the same port and data, freeze every one
//! of its processes (SIGSTOP) and thaw them. Always stopped and removed on drop, a panic
//! included.
//!
//! The binaries are those of `PG_BIN_DIR`, else the newest `/usr/lib/postgresql/*/bin`, else
//! `pg_config --bindir`. PostgreSQL refuses to run as root: run by root, the cluster belongs to
//! the `postgres` user.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::free_port;

/// The PostgreSQL server binaries, if this machine has them; `Err` says why not.
pub fn binaries() -> Result<PathBuf, String> {
    let has_all = |dir: &Path| {
        ["initdb", "postgres", "pg_isready"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    if let Some(dir) = std::env::var_os("PG_BIN_DIR").map(PathBuf::from) {
        return has_all(&dir)
            .then_some(dir.clone())
            .ok_or_else(|| format!("PG_BIN_DIR={} lacks initdb or postgres", dir.display()));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            has_all(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    from_pg_config.filter(|dir| has_all(dir)).ok_or_else(|| {
        "no PostgreSQL server binaries (initdb, postgres) here: install the postgresql package \
         or set PG_BIN_DIR"
            .into()
    })
}

/// The user and group the cluster runs as: ours, unless we are root.
fn owner() -> Result<Option<(u32, u32)>, String> {
    // SAFETY: plain libc queries; getpwnam's result is read at once, before any other call.
    unsafe {
        if libc::geteuid() != 0 {
            return Ok(None);
        }
        let entry = libc::getpwnam(c"postgres".as_ptr());
        if entry.is_null() {
            return Err("running as root and no `postgres` user to run PostgreSQL as".into());
        }
        Ok(Some(((*entry).pw_uid, (*entry).pw_gid)))
    }
}

/// A PostgreSQL server of the test's own.
pub struct PostgresCluster {
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    dir: TempDir,
    pub port: u16,
    postmaster: Option<Child>,
    frozen: Vec<i32>,
}

impl PostgresCluster {
    /// Creates and starts a cluster, or says why it cannot (no binaries here).
    pub fn start() -> Result<Self, String> {
        let bin = binaries()?;
        let owner = owner()?;
        let dir = tempfile::Builder::new()
            .prefix("pg-cluster-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let mut cluster = Self {
            bin,
            owner,
            dir,
            port: free_port(),
            postmaster: None,
            frozen: Vec::new(),
        };
        std::fs::create_dir(cluster.socket_dir()).map_err(|e| e.to_string())?;
        cluster.chown(cluster.dir.path())?;
        cluster.chown(&cluster.socket_dir())?;
        let out = cluster
            .command("initdb")
            .arg("-D")
            .arg(cluster.data_dir())
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        cluster.restart();
        Ok(cluster)
    }

    /// A PostgreSQL cluster of the test's own, or `None` with a printed notice when this machine
    /// has no PostgreSQL binaries (the test is then skipped; under `CI=true` it fails, see
    /// [`super::lacking`]).
    pub fn start_or_skip(what: &str) -> Option<Self> {
        match Self::start() {
            Ok(cluster) => Some(cluster),
            Err(why) => {
                super::lacking(
                    what,
                    &format!("it needs a PostgreSQL server of its own: {why}"),
                );
                None
            }
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("sockets")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    fn chown(&self, path: &Path) -> Result<(), String> {
        if let Some((uid, gid)) = self.owner {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", path.display()))?;
        }
        Ok(())
    }

    fn command(&self, binary: &str) -> Command {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new(self.bin.join(binary));
        if let Some((uid, gid)) = self.owner {
            command.uid(uid).gid(gid);
        }
        // The shared server's settings must not leak in.
        command
            .env_remove("PGDATA")
            .env_remove("PGHOST")
            .env_remove("PGPORT");
        command
    }

    /// The URL of its `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The postmaster's process id, while it runs.
    pub fn pid(&self) -> Option<i32> {
        self.postmaster.as_ref().map(|child| child.id() as i32)
    }

    /// Starts the server (again) on the same port and data, and waits until it accepts
    /// connections.
    pub fn restart(&mut self) {
        assert!(self.postmaster.is_none(), "the server is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("the server's log");
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.socket_dir())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                // A test server: what it holds dies with the test.
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=40",
                "-c",
                "shared_buffers=32MB",
                // Statistics that follow a table filled within seconds, as those of a server
                // that has run for a while follow its tables: a minute's nap (the default)
                // leaves the planner with an empty table's statistics for a whole burst.
                "-c",
                "autovacuum_naptime=1",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start postgres");
        self.postmaster = Some(child);
        self.wait_ready(Duration::from_secs(30));
    }

    fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let ready = self
                .command("pg_isready")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-t", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            if let Some(status) = self
                .postmaster
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("postgres exited ({status}) at start:\n{}", self.log());
            }
            if Instant::now() >= deadline {
                panic!("postgres not ready after {timeout:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Stops the server as an operator would ("fast": clients are disconnected, the data is
    /// written out) and waits until it has exited.
    pub fn stop(&mut self) {
        self.thaw();
        let Some(mut child) = self.postmaster.take() else {
            return;
        };
        signal(child.id() as i32, libc::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Freezes the server: SIGSTOP to the postmaster first (so it starts no new process), then
    /// to each of its children (backends, checkpointer, WAL writer…). Connections stay open and
    /// new ones are accepted by the kernel, but nothing answers.
    pub fn freeze(&mut self) {
        let Some(postmaster) = self.pid() else {
            return;
        };
        signal(postmaster, libc::SIGSTOP);
        self.frozen.push(postmaster);
        // A child forked just before the postmaster stopped shows up on a later pass.
        for _ in 0..3 {
            for child in children(postmaster) {
                if !self.frozen.contains(&child) {
                    signal(child, libc::SIGSTOP);
                    self.frozen.push(child);
                }
            }
        }
    }

    /// Undoes [`Self::freeze`]: SIGCONT to the children, then to the postmaster.
    pub fn thaw(&mut self) {
        for pid in self.frozen.drain(..).rev() {
            signal(pid, libc::SIGCONT);
        }
    }
}

impl Drop for PostgresCluster {
    fn drop(&mut self) {
        self.thaw();
        if let Some(mut child) = self.postmaster.take() {
            let postmaster = child.id() as i32;
            let orphans = children(postmaster);
            // "Immediate" shutdown: nothing of a test server needs keeping.
            signal(postmaster, libc::SIGQUIT);
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            for pid in orphans {
                signal(pid, libc::SIGKILL);
            }
        }
    }
}

fn signal(pid: i32, signal: i32) {
    // SAFETY: a signal to a process of this test's own cluster.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// The processes whose parent is `parent`, from /proc.
fn children(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`: the command may hold spaces and parentheses.
            let after = &stat[stat.rfind(')')? + 2..];
            let ppid: i32 = after.split(' ').nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}
