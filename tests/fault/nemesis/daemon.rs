//! Faults of the daemon under load: killed (SIGKILL) in the middle of a burst of commands and
//! started again half a second later; frozen (SIGSTOP) for 4 s while commands arrive and their
//! timers come due. Each records its heal for invariant (i): the restarted daemon ready again
//! (`/readyz` 200: on PostgreSQL a daemon restarted under its name after a crash first watches
//! its name for up to 5 s, CONTRACT.md §8), the SIGCONT. The commands the daemon held come back
//! within an ack wait, so every timer the broker had acknowledged fires within seconds of the
//! later of its dueAt and the heal.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::Utc;

use super::super::history::{Command, Key, Op, Outcome};
use super::super::workload::{BURST_TENANT, Client};
use super::Nemesis;
use super::outages::readyz_within;
use crate::common::{millis, rfc3339, schedule_command};

/// Commands of the burst the daemon is killed in the middle of, each due [`KILL_LEAD`] after
/// it is sent, sent as fast as the broker acknowledges them.
const KILL_BURST: usize = 4_000;
const KILL_LEAD: chrono::Duration = chrono::Duration::seconds(3);
/// How long the daemon stays dead before it is started again.
const KILL_DOWN: Duration = Duration::from_millis(500);
/// How long the restarted daemon may take to be ready (its name watch is 5 s on PostgreSQL).
const READY_WITHIN: Duration = Duration::from_secs(20);
/// The feed of commands the daemon is frozen under: [`FREEZE_CHUNK`] commands every
/// [`FREEZE_EVERY`], each due [`FREEZE_LEAD`] after it is sent, for about 6 s.
const FREEZE_FEED: usize = 2_400;
const FREEZE_CHUNK: usize = 40;
const FREEZE_EVERY: Duration = Duration::from_millis(100);
const FREEZE_LEAD: chrono::Duration = chrono::Duration::seconds(1);
const DAEMON_PAUSE: Duration = Duration::from_secs(4);

impl Nemesis {
    /// A burst of [`KILL_BURST`] commands; once half of them are acknowledged by the broker and
    /// the daemon holds some it has not acknowledged yet, SIGKILL, and a new daemon half a
    /// second later while the rest of the burst is still being sent; healed once it is ready.
    pub(super) async fn daemon_kill_mid_burst(
        &mut self,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        let ids: Vec<String> = (0..KILL_BURST)
            .map(|i| format!("kill{}-{i:05}", self.cycle))
            .collect();
        let acked = Arc::new(AtomicUsize::new(0));
        let burst = feed(
            self.client.clone(),
            ids.clone(),
            KILL_LEAD,
            250,
            Duration::ZERO,
            acked.clone(),
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while acked.load(Ordering::Relaxed) < KILL_BURST / 2
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Some of them delivered to the daemon and not yet acknowledged by it.
        let held_by = tokio::time::Instant::now() + Duration::from_secs(2);
        let mut held = self.commands_held().await;
        while held == Some(0) && tokio::time::Instant::now() < held_by {
            tokio::time::sleep(Duration::from_millis(5)).await;
            held = self.commands_held().await;
        }
        let acked_at_kill = acked.load(Ordering::Relaxed);
        if let Some(daemon) = self.world.daemon.take() {
            daemon.kill9();
        }
        tokio::time::sleep(KILL_DOWN).await;
        self.world.start_daemon();
        let ready = readyz_within(&self.world.http, 200, READY_WITHIN).await;
        self.healed_at = Some(Utc::now());
        let sent = burst.await.map_err(|e| format!("the burst's task: {e}"))?;
        notes.push(format!(
            "killed with {acked_at_kill} of the burst's {KILL_BURST} commands acknowledged by the \
             broker, {} delivered to the daemon and not acknowledged by it; started again {} ms \
             later, ready {} after that; {sent} acknowledged in all",
            held.map_or("an unknown number".into(), |n| n.to_string()),
            KILL_DOWN.as_millis(),
            ready.map_or(format!("not within {READY_WITHIN:?}"), |t| format!(
                "{} ms",
                t.as_millis()
            )),
        ));
        self.also_awaited = ids.iter().map(|id| Key::new(BURST_TENANT, id)).collect();
        Ok(())
    }

    /// A feed of commands whose timers come due a second after they are sent; once the first
    /// of them has fired, SIGSTOP for [`DAEMON_PAUSE`], then SIGCONT while the feed goes on.
    pub(super) async fn daemon_pause_under_load(
        &mut self,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        let ids: Vec<String> = (0..FREEZE_FEED)
            .map(|i| format!("freeze{}-{i:05}", self.cycle))
            .collect();
        let keys: Vec<Key> = ids.iter().map(|id| Key::new(BURST_TENANT, id)).collect();
        let acked = Arc::new(AtomicUsize::new(0));
        let began = std::time::Instant::now();
        let load = feed(
            self.client.clone(),
            ids,
            FREEZE_LEAD,
            FREEZE_CHUNK,
            FREEZE_EVERY,
            acked.clone(),
        );
        // Commands flowing and their timers firing.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !keys.iter().any(|k| self.observer.fired(k).is_some())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let fired = keys
            .iter()
            .filter(|k| self.observer.fired(k).is_some())
            .count();
        let acked_at_stop = acked.load(Ordering::Relaxed);
        let held = self.commands_held().await;
        self.world.signal_daemon(libc::SIGSTOP);
        let stopped = began.elapsed();
        tokio::time::sleep(DAEMON_PAUSE).await;
        self.world.signal_daemon(libc::SIGCONT);
        self.healed_at = Some(Utc::now());
        let sent = load.await.map_err(|e| format!("the feed's task: {e}"))?;
        notes.push(format!(
            "frozen {} ms into a feed of {FREEZE_FEED} commands ({acked_at_stop} acknowledged by \
             the broker, {} held by the daemon, {fired} of their timers fired); {sent} \
             acknowledged in all",
            stopped.as_millis(),
            held.map_or("an unknown number".into(), |n| n.to_string()),
        ));
        self.also_awaited = keys;
        Ok(())
    }

    /// How many commands the daemon has been delivered and not yet acknowledged, over every
    /// consumer of the command stream (the first one and each line's).
    async fn commands_held(&self) -> Option<usize> {
        use futures::TryStreamExt;
        let stream = self.admin.js.get_stream("TIMER_COMMANDS").await.ok()?;
        let names: Vec<String> = stream.consumer_names().try_collect().await.ok()?;
        let mut held = 0;
        for name in names {
            let mut consumer: async_nats::jetstream::consumer::PullConsumer =
                stream.get_consumer(&name).await.ok()?;
            held += consumer.info().await.ok()?.num_ack_pending;
        }
        Some(held)
    }
}

/// Sends a ScheduleTimer of [`BURST_TENANT`] for each of `ids`, `chunk` at a time with their
/// PubAcks in flight together, a chunk every `every` (or at once), each due `lead` after it is
/// sent. A command the broker does not acknowledge is sent again on its own. Every command is
/// recorded; `acked` counts the acknowledged ones as they come. The task returns that count.
fn feed(
    client: Client,
    ids: Vec<String>,
    lead: chrono::Duration,
    chunk: usize,
    every: Duration,
    acked: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let subject = format!("timer.cmd.schedule.{BURST_TENANT}");
        let mut next = tokio::time::Instant::now();
        for ids in ids.chunks(chunk) {
            tokio::time::sleep_until(next).await;
            next += every;
            let invoked = Utc::now();
            let mut pending = Vec::with_capacity(ids.len());
            for id in ids {
                let due_at = millis(Utc::now() + lead);
                let command = schedule_command(BURST_TENANT, id, &rfc3339(due_at), None);
                let bytes = serde_json::to_vec(&command).expect("json");
                let ack = client
                    .js
                    .publish(subject.clone(), bytes.clone().into())
                    .await;
                pending.push((id, due_at, bytes, ack));
            }
            for (id, due_at, bytes, ack) in pending {
                let stored = match ack {
                    Ok(ack) => tokio::time::timeout(Duration::from_secs(4), ack)
                        .await
                        .is_ok_and(|a| a.is_ok()),
                    Err(_) => false,
                };
                let (outcome, attempts) = if stored {
                    (Outcome::Acked, 1)
                } else {
                    let (outcome, attempts) = client.publish(&subject, &bytes).await;
                    (outcome, attempts + 1)
                };
                if outcome == Outcome::Acked {
                    acked.fetch_add(1, Ordering::Relaxed);
                }
                client.recorder.record(Op {
                    key: Key::new(BURST_TENANT, id),
                    command: Command::Schedule {
                        due_at,
                        expire_after: None,
                    },
                    outcome,
                    invoked,
                    completed: Utc::now(),
                    attempts,
                });
            }
        }
        acked.load(Ordering::Relaxed)
    })
}
