//! Faults of what the daemon depends on: the broker killed mid-firing, the command stream
//! deleted, the disk full, the daemon's clock stepped, the database server frozen or stopped.

use std::time::Duration;

use chrono::Utc;

use super::super::history::{Instant, Key, Window};
use super::super::observer::Observer;
use super::super::workload::BURST_TENANT;
use super::{Fault, Nemesis};
use crate::common::http_get;

const DISK_FULL_FOR: Duration = Duration::from_secs(4);
const CLOCK_STEP_FOR: Duration = Duration::from_secs(3);
/// How long the database server stays frozen: past the daemon's 3 s probe deadline, so its
/// readiness turns red, and within its 15 s operation deadline, so a statement in flight
/// completes after the thaw.
const DATABASE_PAUSE: Duration = Duration::from_secs(5);
/// How long the database server stays stopped: past the 5 s connect timeout, so operations fail
/// (and readiness turns red) before it is back.
const DATABASE_DOWN: Duration = Duration::from_secs(6);
/// How long readiness may take to turn green again once the database answers.
const READY_AGAIN_WITHIN: Duration = Duration::from_secs(15);
/// Timers of one burst, all due at one instant.
pub const BURST: usize = 3_000;

impl Nemesis {
    /// A burst of timers due at one instant; the broker is killed as soon as the first of them
    /// is seen firing, and restarted a second later on the same store.
    pub(super) async fn broker_kill_mid_firing(
        &mut self,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        let ids: Vec<String> = (0..BURST)
            .map(|i| format!("burst{}-{i:05}", self.cycle))
            .collect();
        let due = crate::common::millis(Utc::now() + chrono::Duration::seconds(4));
        let acked = self.client.burst(BURST_TENANT, &ids, due).await;
        let keys: Vec<Key> = ids.iter().map(|id| Key::new(BURST_TENANT, id)).collect();
        let fired =
            |observer: &Observer| keys.iter().filter(|k| observer.fired(k).is_some()).count();
        // Killed as soon as the firing is seen under way, restarted a second later; then once
        // more as soon as the firing is seen to resume.
        let mut seen = 0;
        for round in 0..2 {
            let wait = if round == 0 {
                (due - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(10)
            } else {
                Duration::from_secs(3)
            };
            let deadline = tokio::time::Instant::now() + wait;
            while fired(&self.observer) <= seen && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let killed = Utc::now();
            tokio::task::block_in_place(|| self.world.server.kill());
            seen = fired(&self.observer);
            notes.push(format!(
                "broker killed {} ms after the burst's dueAt, {seen} of its {acked} acknowledged \
                 timers seen fired",
                (killed - due).num_milliseconds()
            ));
            tokio::time::sleep(Duration::from_secs(1)).await;
            tokio::task::block_in_place(|| self.world.server.restart());
        }
        // The burst must finish firing after the heal, like the probes.
        self.also_awaited = keys;
        Ok(())
    }

    /// Deletes TIMER_COMMANDS (as an operator might) and waits, bounded, until the daemon has
    /// created it and its consumer again.
    pub(super) async fn delete_command_stream(
        &mut self,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        // What the daemon has not acknowledged yet goes with the stream: from the oldest such
        // command to the deletion, a PubAck'd command may be lost by the operator's hand.
        let from = self
            .oldest_unprocessed_command()
            .await
            .unwrap_or_else(Utc::now);
        let asked = std::time::Instant::now();
        let deleted = self
            .admin
            .js
            .delete_stream("TIMER_COMMANDS")
            .await
            .map_err(|e| format!("cannot delete the command stream: {e}"));
        self.destroyed.push(Window {
            from,
            to: Utc::now(),
        });
        deleted?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let back = self
                .admin
                .js
                .get_consumer_from_stream::<async_nats::jetstream::consumer::pull::Config, _, _>(
                    "timer-service",
                    "TIMER_COMMANDS",
                )
                .await
                .is_ok();
            if back {
                notes.push(format!(
                    "stream and consumer re-created {} ms after the delete",
                    asked.elapsed().as_millis()
                ));
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                notes.push("the command stream was not re-created within 20 s".into());
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// When the oldest command the daemon has not acknowledged was stored, if there is one: the
    /// command stream is a work queue, so its first message, whichever line holds it.
    async fn oldest_unprocessed_command(&self) -> Option<Instant> {
        let mut stream = self.admin.js.get_stream("TIMER_COMMANDS").await.ok()?;
        let first = stream.info().await.ok()?.state.first_sequence;
        // The first message at or after it: the one the info named may be acknowledged, and
        // gone, by now (a fallback to "now" then let a command stored just before the deletion
        // count as acknowledged and lost). The server takes a wildcard as `next_by_subj`
        // (nats-server 2.15: sequence 2 of three found by `>` from 2).
        let message = stream
            .get_first_raw_message_by_subject(">", first)
            .await
            .ok()?;
        Some(Instant::from_timestamp_nanos(
            message.time.unix_timestamp_nanos() as i64,
        ))
    }

    pub(super) async fn disk_full(&mut self, notes: &mut Vec<String>) -> Result<(), String> {
        if self.world.scratch.database_url().is_some() {
            return Err("a SQLite file's fault; not in the PostgreSQL run".into());
        }
        let Some(disk) = &self.world.disk else {
            return Err("no small filesystem could be mounted here".into());
        };
        tokio::task::block_in_place(|| disk.fill_leaving(64 * 1024));
        notes.push(format!("{} bytes left free", disk.free_bytes()));
        tokio::time::sleep(DISK_FULL_FOR).await;
        disk.free();
        Ok(())
    }

    /// The daemon's wall clock stepped 30 s ahead, set right, then 20 s behind, set right. On
    /// SQLite the daemon's clock is the clock, so what it fires early while 30 s ahead is
    /// excused (the window is recorded for the checker). On PostgreSQL the database server's
    /// clock decides: nothing is excused, a timer fired early breaks invariant (b).
    pub(super) async fn clock_step(&mut self) -> Result<(), String> {
        let own_clock_decides = self.world.scratch.database_url().is_none();
        let Some(faketime) = &self.world.faketime else {
            return Err("libfaketime is not available".into());
        };
        let from = Utc::now();
        faketime.set("+30s");
        tokio::time::sleep(CLOCK_STEP_FOR).await;
        faketime.set("+0");
        if own_clock_decides {
            self.clock_ahead.push(Window {
                from,
                to: Utc::now(),
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        faketime.set("-20s");
        tokio::time::sleep(CLOCK_STEP_FOR).await;
        faketime.set("+0");
        Ok(())
    }

    /// The database server frozen (every process SIGSTOPped) or stopped, then thawed or started
    /// again on its data. Notes how soon `/readyz` turned 503 and, after the heal, 200 again.
    pub(super) async fn database_fault(
        &mut self,
        fault: Fault,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        let Some(cluster) = self.world.postgres.as_mut() else {
            return Err(if self.world.scratch.database_url().is_some() {
                "needs a PostgreSQL server of the run's own (no PostgreSQL binaries here)".into()
            } else {
                "a PostgreSQL server's fault; not in the SQLite run".into()
            });
        };
        let down_for = if fault == Fault::DatabasePause {
            tokio::task::block_in_place(|| cluster.freeze());
            DATABASE_PAUSE
        } else {
            tokio::task::block_in_place(|| cluster.stop());
            DATABASE_DOWN
        };
        let began = std::time::Instant::now();
        let red = readyz_within(&self.world.http, 503, down_for).await;
        tokio::time::sleep(down_for.saturating_sub(began.elapsed())).await;
        let cluster = self.world.postgres.as_mut().expect("checked above");
        tokio::task::block_in_place(|| {
            if fault == Fault::DatabasePause {
                cluster.thaw()
            } else {
                cluster.restart()
            }
        });
        let green = readyz_within(&self.world.http, 200, READY_AGAIN_WITHIN).await;
        notes.push(format!(
            "/readyz 503 {} after the fault began, 200 {} after the heal",
            red.map_or(format!("not within {down_for:?}"), |t| format!(
                "{} ms",
                t.as_millis()
            )),
            green.map_or(format!("not within {READY_AGAIN_WITHIN:?}"), |t| format!(
                "{} ms",
                t.as_millis()
            )),
        ));
        Ok(())
    }
}
/// Polls `/readyz` at `addr` until it answers `code`: how long that took, or `None` after
/// `within`.
pub(super) async fn readyz_within(addr: &str, code: u16, within: Duration) -> Option<Duration> {
    let began = std::time::Instant::now();
    while began.elapsed() < within {
        if http_get(addr, "/readyz")
            .await
            .is_some_and(|(status, _)| status == code)
        {
            return Some(began.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}
