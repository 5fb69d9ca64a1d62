//! The systems a team would pick instead, on the same machine and the same workloads: BullMQ's
//! delayed jobs on a Redis started here with AOF (`appendfsync everysec` or `always`, `hz 100`), and
//! pg-boss's `startAfter` jobs on the bench's PostgreSQL. Each is driven by
//! `examples/bench/peers/peers.mjs` (its tuning is written down in that folder's README) under
//! the Node 22 that `scripts/bench-peers.sh` installs from npm, and says its figures in one
//! line of JSON.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long one peer workload may take before it counts as failed.
const PEER_TIMEOUT: Duration = Duration::from_secs(900);

/// The peers' driver: Node 22 and the script.
pub struct Driver {
    node: PathBuf,
    script: PathBuf,
}

/// Where a peer keeps its jobs.
pub enum PeerStore<'a> {
    /// BullMQ on this Redis.
    Redis(&'a Redis),
    /// pg-boss in this (empty) PostgreSQL database.
    Postgres(&'a str),
}

impl Driver {
    /// Installs the peers' packages when missing (`scripts/bench-peers.sh`) and finds Node 22;
    /// `None`, said why, when that fails.
    pub fn install() -> Option<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(root.join("scripts/bench-peers.sh"))
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| eprintln!("peers: scripts/bench-peers.sh could not run: {e}"))
            .ok()?;
        let node = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || node.is_empty() {
            eprintln!("peers: scripts/bench-peers.sh failed: the peers are left out");
            return None;
        }
        Some(Self {
            node: PathBuf::from(node),
            script: root.join("examples/bench/peers/peers.mjs"),
        })
    }

    /// Runs `workload` (its name and flags) on `store`; its figures, or `None` (said why).
    pub async fn run(&self, store: &PeerStore<'_>, workload: &[String]) -> Option<Value> {
        let mut command = tokio::process::Command::new(&self.node);
        command.arg(&self.script);
        match store {
            PeerStore::Redis(redis) => command.args(["bullmq", "--redis-url", &redis.url()]),
            // `burstWhenBatchFull`: without it a worker waits out its 0.5 s polling interval
            // even after a full batch, and fires at most 1,000 jobs/s (peers/README.md).
            PeerStore::Postgres(url) => command.args(["pgboss", "--database-url", url, "--burst"]),
        };
        command
            .args(workload)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let what = format!("{workload:?}");
        let output = tokio::time::timeout(PEER_TIMEOUT, command.output())
            .await
            .map_err(|_| eprintln!("peers: {what} took more than {PEER_TIMEOUT:?}"))
            .ok()?
            .map_err(|e| eprintln!("peers: {what} could not run: {e}"))
            .ok()?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            eprintln!("peers: {what} failed: {}", tail.join(" | "));
            return None;
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .map_err(|e| eprintln!("peers: {what} said no figures ({e}): {stdout}"))
            .ok()
    }
}

/// A Redis of the workload's own, with AOF on every write and `appendfsync` as asked; stopped
/// when dropped.
pub struct Redis {
    port: u16,
    child: Child,
}

impl Redis {
    /// `redis-server` (from `PATH`) in `dir`; `None`, said why, when it does not answer.
    pub fn start(dir: &Path, appendfsync: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).ok()?;
        let port = crate::nats_server::free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--appendonly", "yes", "--appendfsync", appendfsync])
            // Blocked clients' timeouts are served on this tick: BullMQ's idle worker waits in
            // BZPOPMIN, so at the default 10 a delayed job may run up to 100 ms late.
            .args(["--hz", "100"])
            .args(["--save", "", "--dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| eprintln!("peers: redis-server could not start: {e}"))
            .ok()?;
        let redis = Self { port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                eprintln!("peers: redis-server did not listen within 10 s");
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A peer's lateness figures (ms) and counts, as the driver reports them.
pub struct PeerLateness {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub sent: f64,
    pub received: f64,
    pub early: f64,
}

impl PeerLateness {
    pub fn of(figures: &Value) -> Option<Self> {
        let get = |k: &str| figures.get(k).and_then(Value::as_f64);
        Some(Self {
            p50: get("p50Ms")?,
            p99: get("p99Ms")?,
            p999: get("p999Ms")?,
            max: get("maxMs")?,
            sent: get("sent")?,
            received: get("received")?,
            early: get("early")?,
        })
    }
}
