//! The daemon's binary run as an operator runs its commands (`lines set`, `migrate --to`): no
//! configuration file, the broker and database a test gives it in `env`, and bounded.

use std::time::Duration;

use super::Scratch;

/// Longest an operator's command may take (`lines set` waits for the running daemons to drain
/// the lines that go).
const COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// Runs `timer-service <args>`; whether it succeeded, and what it printed (stdout, then stderr).
pub async fn run(scratch: &Scratch, args: &[&str], env: &[(String, String)]) -> (bool, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_timer-service"));
    command
        .args(args)
        .arg("--config")
        .arg(scratch.dir.path().join("absent-config.toml"))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(true);
    let output = tokio::time::timeout(COMMAND_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("timer-service {args:?} did not finish in {COMMAND_LIMIT:?}"))
        .expect("run timer-service");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// The environment that points an operator's command at a test's broker and database.
pub fn env_for(broker_url: &str, scratch: &Scratch) -> Vec<(String, String)> {
    let mut env = vec![
        ("TIMER_BROKER_URL".to_owned(), broker_url.to_owned()),
        (
            "TIMER_DB_PATH".to_owned(),
            scratch.db_path().display().to_string(),
        ),
    ];
    if let Some(url) = scratch.database_url() {
        env.push(("TIMER_DATABASE_URL".to_owned(), url));
    }
    env
}
