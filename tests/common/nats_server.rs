//! A real `nats-server` with JetStream on a free port and its own storage directory, killed on
//! drop and restartable on the same port and storage. Shared by the tests and the benchmark.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
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
    store: TempDir,
    child: Option<Child>,
}

impl NatsServer {
    pub fn start() -> Self {
        let mut server = Self {
            port: free_port(),
            store: tempfile::tempdir().expect("tempdir"),
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let log =
            std::fs::File::create(self.store.path().join("nats-server.log")).expect("log file");
        let child = Command::new(nats_server_bin())
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path().join("js"))
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
