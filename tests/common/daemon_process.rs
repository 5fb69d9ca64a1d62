//! The daemon as a child process (for SIGKILL, SIGTERM and SIGSTOP), and freezing one of
//! several at the moment a test wants.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use super::{NatsServer, Scratch, eventually};

/// A configuration file that does not exist: the daemon runs on its defaults and the
/// environment a test gives it.
fn absent_config(scratch: &Scratch) -> PathBuf {
    scratch.dir.path().join("absent-config.toml")
}

/// The daemon binary as a child process, for SIGKILL and SIGTERM.
pub struct DaemonProcess {
    child: Child,
    pub log: PathBuf,
}

impl DaemonProcess {
    pub fn start(server: &NatsServer, scratch: &Scratch) -> Self {
        Self::start_with(server, scratch, &[])
    }

    /// The daemon with extra environment settings (`TIMER_HTTP_LISTEN`, `TIMER_LOG_FORMAT`…).
    pub fn start_with(server: &NatsServer, scratch: &Scratch, env: &[(&str, &str)]) -> Self {
        Self::start_without(server, scratch, env, &[])
    }

    /// Like [`Self::start_with`], with the variables `unset` left out (`TIMER_NAME`: a daemon
    /// that picks its own name).
    pub fn start_without(
        server: &NatsServer,
        scratch: &Scratch,
        env: &[(&str, &str)],
        unset: &[&str],
    ) -> Self {
        Self::start_configured(server, scratch, &absent_config(scratch), env, unset)
    }

    /// Like [`Self::start_without`], reading the configuration file `config`.
    pub fn start_configured(
        server: &NatsServer,
        scratch: &Scratch,
        config: &std::path::Path,
        env: &[(&str, &str)],
        unset: &[&str],
    ) -> Self {
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_timer-service"));
        Self::launch(binary, server, scratch, config, env, unset)
    }

    /// Another build of the daemon (an earlier release, `previous_release`), set up as
    /// [`Self::start_with`] sets up this one.
    pub fn start_binary(
        binary: &std::path::Path,
        server: &NatsServer,
        scratch: &Scratch,
        env: &[(&str, &str)],
    ) -> Self {
        Self::launch(binary, server, scratch, &absent_config(scratch), env, &[])
    }

    fn launch(
        binary: &std::path::Path,
        server: &NatsServer,
        scratch: &Scratch,
        config: &std::path::Path,
        env: &[(&str, &str)],
        unset: &[&str],
    ) -> Self {
        let log = scratch
            .dir
            .path()
            .join(format!("daemon-{}.log", uuid::Uuid::now_v7()));
        let out = std::fs::File::create(&log).expect("log");
        let mut command = Command::new(binary);
        command
            .arg("run")
            .arg("--config")
            .arg(config)
            .env("TIMER_BROKER_URL", server.url())
            .env("TIMER_DB_PATH", scratch.db_path())
            .envs(
                scratch
                    .database_url()
                    .map(|url| ("TIMER_DATABASE_URL", url)),
            )
            .env("RUST_LOG", "info,timer_service=debug")
            .env("TIMER_HTTP_LISTEN", "")
            .env("TIMER_NAME", "test");
        // Only the OTEL_* settings the test gives: one from the caller's shell could make the
        // daemon export spans, or refuse to start.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        command
            .envs(env.iter().copied())
            .stdout(out.try_clone().expect("log"))
            .stderr(out);
        for name in unset {
            command.env_remove(name);
        }
        let child = command.spawn().expect("start timer-service");
        Self { child, log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The daemon's log so far (empty before its first line).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the daemon logs `line`, up to `timeout`; returns the log then.
    pub async fn await_log(&self, line: &str, timeout: Duration) -> String {
        eventually(timeout, line, || async {
            let log = self.log_text();
            log.contains(line).then_some(log)
        })
        .await
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// The exit status, if the process has exited.
    pub fn try_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for the process to exit, up to `timeout`; prints its log when it failed.
    pub async fn wait_exit(mut self, timeout: Duration) -> std::process::ExitStatus {
        let child = &mut self.child;
        let status = eventually(timeout, "the daemon process to exit", || {
            let status = child.try_wait().ok().flatten();
            async move { status }
        })
        .await;
        if !status.success() {
            eprintln!(
                "daemon log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        status
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Freezes (SIGSTOP) one of `daemons` the moment `at_work(pid)` sees it inside a transaction (a
/// statement of its under way on the server), within `window`; then polls `landed(pid)` for up
/// to 100 ms (the statement finishes, the session waits for the frozen client). When a freeze
/// caught it where the test wants it, it is left frozen and its index returned; otherwise it
/// is thawed (SIGCONT) and the watch goes on. A freeze at a random instant mostly finds a
/// daemon between transactions.
pub async fn freeze_one_when<W, WF, L, LF>(
    daemons: &[DaemonProcess],
    window: Duration,
    mut at_work: W,
    mut landed: L,
) -> Option<usize>
where
    W: FnMut(i32) -> WF,
    WF: Future<Output = bool>,
    L: FnMut(i32) -> LF,
    LF: Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < until {
        let mut seen = None;
        for (i, daemon) in daemons.iter().enumerate() {
            if at_work(daemon.pid()).await {
                seen = Some(i);
                break;
            }
        }
        let Some(i) = seen else {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        let daemon = &daemons[i];
        daemon.signal(libc::SIGSTOP);
        let look_until = tokio::time::Instant::now() + Duration::from_millis(100);
        while tokio::time::Instant::now() < look_until {
            if landed(daemon.pid()).await {
                return Some(i);
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        daemon.signal(libc::SIGCONT);
    }
    None
}
