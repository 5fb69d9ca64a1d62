//! A real `nats-server` with JetStream on a free port and its own storage directory, killed on
//! drop and restartable on the same port and storage. Shared by the tests and the benchmark.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

/// A TCP port nobody listens on right now.
/// A port nothing listens on, below Linux's ephemeral range (32768–60999): a port the kernel
/// hands out for `bind(0)` may be taken by some outgoing connection before the server binds
/// it, while ports below that range are only taken by listeners. Each call tries the next of a
/// sequence that starts at a random place, so parallel test processes rarely meet.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        {
            use std::hash::{BuildHasher, Hasher};
            let random = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            (random % SPAN as u64) as u32
        },
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port")
}

/// `NATS_SERVER_BIN` when set, else `nats-server` from `PATH`.
pub fn nats_server_bin() -> PathBuf {
    std::env::var_os("NATS_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("nats-server"))
}

/// A `nats-server` with JetStream on a free port and its own storage directory, killed on drop.
pub struct NatsServer {
    pub port: u16,
    /// The `nats-server` binary run.
    bin: PathBuf,
    store: TempDir,
    /// A configuration file to start from, instead of command-line flags.
    config: Option<PathBuf>,
    child: Option<Child>,
}

impl NatsServer {
    pub fn start() -> Self {
        Self::start_with(None::<fn(u16, &std::path::Path) -> String>)
    }

    /// A server run from the binary at `bin` (another version than `NATS_SERVER_BIN`).
    pub fn start_bin(bin: PathBuf) -> Self {
        let mut server = Self::new(
            nats_server_bin(),
            None::<fn(u16, &std::path::Path) -> String>,
        );
        server.bin = bin;
        server.spawn();
        server
    }

    /// A server started from the configuration `config(port, store_dir)` returns (which must
    /// listen on that port and keep JetStream in that directory).
    pub fn start_with_config(config: impl FnOnce(u16, &std::path::Path) -> String) -> Self {
        Self::start_with(Some(config))
    }

    fn start_with(config: Option<impl FnOnce(u16, &std::path::Path) -> String>) -> Self {
        let mut server = Self::new(nats_server_bin(), config);
        server.spawn();
        server
    }

    fn new(bin: PathBuf, config: Option<impl FnOnce(u16, &std::path::Path) -> String>) -> Self {
        let port = free_port();
        let store = tempfile::tempdir().expect("tempdir");
        let config = config.map(|config| {
            let path = store.path().join("nats-server.conf");
            let text = config(port, &store.path().join("js"));
            std::fs::write(&path, text).expect("write the server configuration");
            path
        });
        Self {
            port,
            bin,
            store,
            config,
            child: None,
        }
    }

    fn spawn(&mut self) {
        let log =
            std::fs::File::create(self.store.path().join("nats-server.log")).expect("log file");
        let mut command = Command::new(&self.bin);
        match &self.config {
            Some(config) => command.arg("-c").arg(config),
            None => command
                .args([
                    "-a",
                    "127.0.0.1",
                    "-p",
                    &self.port.to_string(),
                    "-js",
                    "-sd",
                ])
                .arg(self.store.path().join("js")),
        };
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("cannot start nats-server: install it or set NATS_SERVER_BIN");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nats-server did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Rewrites the configuration of a server started from one, with `config(port, store_dir)`
    /// as at its start, and has the running server reload it (SIGHUP).
    pub fn reconfigure(&self, config: impl FnOnce(u16, &std::path::Path) -> String) {
        let path = self
            .config
            .as_ref()
            .expect("a server started from a configuration");
        let text = config(self.port, &self.store.path().join("js"));
        std::fs::write(path, text).expect("write the server configuration");
        self.send(libc::SIGHUP);
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.store.path().join("nats-server.log")).unwrap_or_default()
    }

    /// The server process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL), keeping its storage.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): its connections stay open and nothing answers on them.
    pub fn pause(&self) {
        self.send(libc::SIGSTOP);
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.send(libc::SIGCONT);
    }

    fn send(&self, signal: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: sending a signal to our own child process, which has not been reaped.
            unsafe {
                libc::kill(pid as i32, signal);
            }
        }
    }

    /// Starts the server again on the same port with the same storage.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
