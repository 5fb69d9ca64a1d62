//! `timer-service backup` as the tests run it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
