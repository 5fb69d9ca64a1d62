//! A rollback to the previous release and forward again, by the documented procedure
//! (docs/operations.md, "Rollback"), while the workload flows: `lines set 1` while this release
//! runs, SIGTERM, `migrate --to` the previous release's newest migration, the previous release's
//! binary (built from its git commit, `common::previous_release`) run a while; then SIGTERM,
//! this release again (it migrates up and adopts the stream's one line), and `lines set` back to
//! the line count it had. Every invariant holds across both switches; (j) finds nothing left
//! in the stream.

use std::time::Duration;

use super::Nemesis;
use super::outages::readyz_within;
use crate::common::{operator, previous_release};

/// How long the previous release runs under the workload.
const ROLLED_BACK_FOR: Duration = Duration::from_secs(4);
/// How long either release may take to be ready after its start.
const READY_WITHIN: Duration = Duration::from_secs(20);
/// The daemon's lines before the rollback (the default `command_partitions`), set again after.
const LINES: &str = "16";

impl Nemesis {
    pub(super) async fn rollback_and_forward(
        &mut self,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        let previous = tokio::task::spawn_blocking(previous_release::binary)
            .await
            .map_err(|e| format!("building the previous release: {e}"))?
            .ok_or("the previous release could not be built (see the notice above)")?;
        let env = self.world.operator_env();
        self.operator(&["lines", "set", "1"], &env).await;
        let stopped = self.world.stop_daemon(Duration::from_secs(15)).await;
        self.operator(
            &["migrate", "--to", previous_release::NEWEST_MIGRATION],
            &env,
        )
        .await;
        self.world.start_binary(&previous);
        let older_ready = readyz_within(&self.world.http, 200, READY_WITHIN).await;
        tokio::time::sleep(ROLLED_BACK_FOR).await; // the workload runs on the older release
        let older_stopped = self.world.stop_daemon(Duration::from_secs(15)).await;
        self.world.start_daemon();
        let ready = readyz_within(&self.world.http, 200, READY_WITHIN).await;
        self.operator(&["lines", "set", LINES], &env).await;
        let ms = |t: Option<Duration>| t.map_or("not".into(), |t| format!("{} ms", t.as_millis()));
        notes.push(format!(
            "this release stopped ({stopped:?}); the previous one ready {} after its start, ran \
             {ROLLED_BACK_FOR:?}, stopped ({older_stopped:?}); this release ready {} after its \
             start; lines set back to {LINES}",
            ms(older_ready),
            ms(ready)
        ));
        Ok(())
    }

    /// An operator's command on this world. One that fails is a broken procedure, not a
    /// fault the run can skip: the run stops there.
    async fn operator(&self, args: &[&str], env: &[(String, String)]) {
        let (ok, out) = operator::run(&self.world.scratch, args, env).await;
        assert!(
            ok,
            "the rollback's `timer-service {}` failed:\n{out}",
            args.join(" ")
        );
    }
}
