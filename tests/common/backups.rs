//! `timer-service backup` as the tests run it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// `timer-service backup --to to` with the settings a test daemon gets (`DaemonProcess`): the
/// SQLite file `timers.db` in `dir`, no configuration file; `env` added.
pub fn backup_command(dir: &Path, to: &Path, env: &[(&str, &str)]) -> Output {
    backup_process(dir, to, env)
        .output()
        .expect("run timer-service backup")
}

/// The command [`backup_command`] runs, to be spawned.
pub fn backup_process(dir: &Path, to: &Path, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_timer-service"));
    command
        .arg("--config")
        .arg(dir.join("absent-config.toml"))
        .arg("backup")
        .arg("--to")
        .arg(to)
        .env("TIMER_DB_PATH", dir.join("timers.db"))
        .env_remove("TIMER_DATABASE_URL")
        .envs(env.iter().copied());
    command
}

/// Files in `dir` whose name holds `partial`: a backup's temporary copies.
pub fn partials(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains("partial"))
        })
        .collect()
}

/// Runs `command` as [`Command::output`] does, for at most `timeout`: past it the process is
/// killed and the test fails. `Err` when it cannot be started. Its output must fit the pipes
/// (64 KiB each): it is read once the process has exited.
pub fn output_within(command: &mut Command, timeout: Duration) -> std::io::Result<Output> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let status = exit_within(&mut child, timeout);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut stdout)?;
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_end(&mut stderr)?;
    }
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// The child's exit status, waiting at most `timeout` (then it is killed and the test fails).
pub fn exit_within(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the process did not end within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
