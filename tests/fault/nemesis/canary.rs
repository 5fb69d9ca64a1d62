//! A second process with another line count (a canary, a one-off run with the defaults)
//! started and stopped mid-workload beside the daemon, on the same broker and database: it
//! adopts the command stream's lines, and every command acknowledged meanwhile is applied by
//! one of the two (docs/CONTRACT.md §9, "The lines belong to the stream").

use std::time::Duration;

use super::Nemesis;
use crate::common::DaemonProcess;

/// Lines the canary asks for: not the daemon's (16 by default).
const CANARY_LINES: &str = "7";
/// How long the canary runs once it reads commands.
const CANARY_RUNS: Duration = Duration::from_secs(3);

impl Nemesis {
    pub(super) async fn canary_with_other_lines(
        &mut self,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        if self.world.scratch.database_url().is_none() {
            return Err("a second daemon needs PostgreSQL (one SQLite file, one daemon)".into());
        }
        let mut env: Vec<(&str, &str)> = self
            .world
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend([
            ("TIMER_NATS_COMMAND_PARTITIONS", CANARY_LINES),
            ("TIMER_NAME", "canary"),
            ("TIMER_HTTP_LISTEN", ""),
        ]);
        let canary = DaemonProcess::start_with(&self.world.server, &self.world.scratch, &env);
        let started = tokio::time::Instant::now() + Duration::from_secs(20);
        while !canary
            .log_text()
            .contains("reading the command stream's consumers in turns")
        {
            if tokio::time::Instant::now() >= started {
                return Err("the canary did not read commands within 20 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(CANARY_RUNS).await; // the workload runs beside it
        canary.signal(libc::SIGTERM);
        let adopted = canary.log_text().contains("command_partitions is 7");
        let status = canary.wait_exit(Duration::from_secs(15)).await;
        notes.push(format!(
            "canary with {CANARY_LINES} lines ran {CANARY_RUNS:?}, exited {status}; {}",
            if adopted {
                "it adopted the stream's lines"
            } else {
                "it did not log adopting the stream's lines"
            }
        ));
        Ok(())
    }
}
