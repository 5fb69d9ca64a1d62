//! The workload: clients of several tenants scheduling, rescheduling and cancelling timers (by
//! CancelTimer command, through the API, and a group of keys at once by a CancelTimers of their
//! correlation id), some due at once, some in the past, some over the
//! next seconds, and bursts of thousands due at one instant (sent as ScheduleTimers). Every operation is recorded with
//! its outcome; the operations on one key are done one after another by one task, so the last
//! command per key is well defined.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use chrono::Utc;
use serde_json::{Value, json};

use super::Rng;
use super::history::{CancelAnswer, Command, Instant, Key, Op, Outcome};
use crate::common::{
    cancel_command, cancel_timers_command, rfc3339, schedule_command, schedule_timers_command,
};

pub const TENANTS: [&str; 4] = ["acme", "globex", "initech", "hooli"];
/// The tenant whose bursts put thousands of timers on one instant.
pub const BURST_TENANT: &str = "hooli";
/// Reschedules and cancels go only to timers due at least this far ahead, so that without a
/// fault they always reach the daemon before the timer is due.
pub const LEAD: chrono::Duration = chrono::Duration::seconds(3);
/// How long a client keeps re-sending a command the broker did not acknowledge.
const RETRY_FOR: Duration = Duration::from_secs(20);
/// One attempt's wait for its PubAck (or the API's answer).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(4);
const WORKERS_PER_TENANT: usize = 5;
/// Timers in each ScheduleTimers of a burst: the bursts are how the suite puts its faults on
/// that command too.
const BURST_MESSAGE: usize = 500;
const KEYS_PER_WORKER: usize = 8;

/// The operations recorded so far, shared by the workload and the nemesis's probes.
#[derive(Clone, Default)]
pub struct Recorder {
    ops: Arc<Mutex<Vec<Op>>>,
}

impl Recorder {
    pub fn record(&self, op: Op) {
        self.ops.lock().expect("recorder lock").push(op);
    }

    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().expect("recorder lock").clone()
    }
}

/// One command of [`Client::send_schedules`] and what came of it.
pub struct Sent {
    pub id: String,
    pub outcome: Outcome,
}

/// A client of the service, as an application would write one.
#[derive(Clone)]
pub struct Client {
    pub nats: async_nats::Client,
    pub js: jetstream::Context,
    pub recorder: Recorder,
}

impl Client {
    pub async fn connect(url: &str, recorder: Recorder) -> Self {
        let nats = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(url)
            .await
            .expect("the workload connects");
        let js = jetstream::ContextBuilder::new()
            .timeout(ATTEMPT_TIMEOUT)
            .ack_timeout(ATTEMPT_TIMEOUT)
            .build(nats.clone());
        Self { nats, js, recorder }
    }

    /// Publishes `bytes` on `subject` until the broker acknowledges it, re-sending for up to
    /// [`RETRY_FOR`] (a stream being re-created, a broker restarting or frozen).
    pub async fn publish(&self, subject: &str, bytes: &[u8]) -> (Outcome, u32) {
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let attempt = tokio::time::timeout(ATTEMPT_TIMEOUT, async {
                self.js
                    .publish(subject.to_owned(), bytes.to_vec().into())
                    .await
                    .map_err(|e| e.to_string())?
                    .await
                    .map_err(|e| e.to_string())
            })
            .await;
            let error = match attempt {
                Ok(Ok(_)) => return (Outcome::Acked, attempts),
                Ok(Err(e)) => e,
                Err(_) => "no PubAck in time".to_owned(),
            };
            if tokio::time::Instant::now() >= deadline {
                return (Outcome::Unknown(error), attempts);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub async fn schedule(&self, key: &Key, due_at: Instant) -> Outcome {
        self.schedule_expiring(key, due_at, None).await
    }

    /// A ScheduleTimer with `expireAfter` (whole seconds) when given.
    pub async fn schedule_expiring(
        &self,
        key: &Key,
        due_at: Instant,
        expire_after: Option<chrono::Duration>,
    ) -> Outcome {
        let mut command = schedule_command(&key.tenant, &key.id, &rfc3339(due_at), None);
        if let Some(after) = expire_after {
            command["payload"]["expireAfter"] = json!(format!("PT{}S", after.num_seconds()));
        }
        let bytes = serde_json::to_vec(&command).expect("json");
        self.send(
            key,
            Command::Schedule {
                due_at,
                expire_after,
            },
            &format!("timer.cmd.schedule.{}", key.tenant),
            &bytes,
        )
        .await
    }

    /// A ScheduleTimer of a group's key: with the group's correlation id.
    pub async fn schedule_in_group(&self, key: &Key, due_at: Instant, group: &str) -> Outcome {
        let command = schedule_command(&key.tenant, &key.id, &rfc3339(due_at), Some(group));
        let bytes = serde_json::to_vec(&command).expect("json");
        self.send(
            key,
            Command::Schedule {
                due_at,
                expire_after: None,
            },
            &format!("timer.cmd.schedule.{}", key.tenant),
            &bytes,
        )
        .await
    }

    /// A `CancelTimers` of the group's correlation id, recorded on each of its `keys` as a
    /// cancel published at that moment (nothing else writes those keys after it).
    pub async fn cancel_group(&self, tenant: &str, group: &str, keys: &[Key]) -> Outcome {
        let command = cancel_timers_command(tenant, json!({ "correlationId": group }));
        let bytes = serde_json::to_vec(&command).expect("json");
        let invoked = Utc::now();
        let (outcome, attempts) = self
            .publish(&format!("timer.cmd.cancel-many.{tenant}"), &bytes)
            .await;
        let completed = Utc::now();
        for key in keys {
            self.recorder.record(Op {
                key: key.clone(),
                command: Command::CancelMany,
                outcome: outcome.clone(),
                invoked,
                completed,
                attempts,
            });
        }
        outcome
    }

    pub async fn cancel(&self, key: &Key) -> Outcome {
        let bytes = serde_json::to_vec(&cancel_command(&key.tenant, &key.id)).expect("json");
        self.send(
            key,
            Command::Cancel,
            &format!("timer.cmd.cancel.{}", key.tenant),
            &bytes,
        )
        .await
    }

    async fn send(&self, key: &Key, command: Command, subject: &str, bytes: &[u8]) -> Outcome {
        let invoked = Utc::now();
        let (outcome, attempts) = self.publish(subject, bytes).await;
        self.recorder.record(Op {
            key: key.clone(),
            command,
            outcome: outcome.clone(),
            invoked,
            completed: Utc::now(),
            attempts,
        });
        outcome
    }

    /// Cancels through `timer.api.cancel.<tenant>`; not re-sent when unanswered.
    pub async fn api_cancel(&self, key: &Key) -> Outcome {
        let invoked = Utc::now();
        let body = serde_json::to_vec(&json!({ "serviceCallId": key.id })).expect("json");
        let reply = tokio::time::timeout(
            ATTEMPT_TIMEOUT + Duration::from_secs(1),
            self.nats
                .request(format!("timer.api.cancel.{}", key.tenant), body.into()),
        )
        .await;
        let outcome = match reply {
            Err(_) => Outcome::Unknown("no answer in time".into()),
            Ok(Err(e)) => Outcome::Unknown(e.to_string()),
            Ok(Ok(message)) => {
                let error = message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("Nats-Service-Error-Code"))
                    .map(|c| c.to_string());
                let body: Value = serde_json::from_slice(&message.payload).unwrap_or_default();
                match (
                    error,
                    body["outcome"].as_str().and_then(CancelAnswer::parse),
                ) {
                    (None, Some(answer)) => Outcome::Answered(answer),
                    (code, _) => Outcome::Unknown(format!(
                        "error {}: {}",
                        code.unwrap_or_default(),
                        super::checker::preview(&message.payload)
                    )),
                }
            }
        };
        self.recorder.record(Op {
            key: key.clone(),
            command: Command::ApiCancel,
            outcome: outcome.clone(),
            invoked,
            completed: Utc::now(),
            attempts: 1,
        });
        outcome
    }

    /// `ids` of `tenant` all due at `due_at`, sent as ScheduleTimers of [`BURST_MESSAGE`]
    /// timers, each message re-sent until the broker acknowledges it. Returns how many timers
    /// were acknowledged.
    pub async fn burst(&self, tenant: &str, ids: &[String], due_at: Instant) -> usize {
        let subject = format!("timer.cmd.schedule-many.{tenant}");
        let mut acked = 0;
        for chunk in ids.chunks(BURST_MESSAGE) {
            let timers = chunk
                .iter()
                .map(|id| json!({ "serviceCallId": id, "dueAt": rfc3339(due_at) }))
                .collect();
            let command = schedule_timers_command(tenant, timers, None);
            let bytes = serde_json::to_vec(&command).expect("json");
            let invoked = Utc::now();
            let (outcome, attempts) = self.publish(&subject, &bytes).await;
            let completed = Utc::now();
            if outcome == Outcome::Acked {
                acked += chunk.len();
            }
            for id in chunk {
                self.recorder.record(Op {
                    key: Key::new(tenant, id),
                    command: Command::Schedule {
                        due_at,
                        expire_after: None,
                    },
                    outcome: outcome.clone(),
                    invoked,
                    completed,
                    attempts,
                });
            }
        }
        acked
    }

    /// Sends `ids` of `tenant`, a ScheduleTimer each with many PubAcks in flight (each one not
    /// acknowledged sent again on its own), recording nothing: for commands the
    /// service may refuse (a tenant's quota), which the workload's invariants do not judge.
    pub async fn send_schedules(&self, tenant: &str, ids: &[String], due_at: Instant) -> Vec<Sent> {
        let subject = format!("timer.cmd.schedule.{tenant}");
        let mut sent = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let mut pending = Vec::with_capacity(chunk.len());
            for id in chunk {
                let command = schedule_command(tenant, id, &rfc3339(due_at), None);
                let bytes = serde_json::to_vec(&command).expect("json");
                let ack = tokio::time::timeout(
                    ATTEMPT_TIMEOUT,
                    self.js.publish(subject.clone(), bytes.clone().into()),
                )
                .await;
                pending.push((id, bytes, ack));
            }
            for (id, bytes, ack) in pending {
                let stored = match ack {
                    Ok(Ok(ack)) => tokio::time::timeout(ATTEMPT_TIMEOUT, ack)
                        .await
                        .is_ok_and(|a| a.is_ok()),
                    _ => false,
                };
                let outcome = if stored {
                    Outcome::Acked
                } else {
                    self.publish(&subject, &bytes).await.0
                };
                sent.push(Sent {
                    id: id.clone(),
                    outcome,
                });
            }
        }
        sent
    }
}

/// A timer one worker keeps sending commands for.
struct Live {
    key: Key,
    due: Instant,
    cancelled: bool,
}

/// Runs the workers until `stop` is set; each finishes the operation it is in.
pub async fn run(client: Client, stop: Arc<AtomicBool>, seed: u64) {
    let mut workers = Vec::new();
    for (t, tenant) in TENANTS.iter().enumerate() {
        for w in 0..WORKERS_PER_TENANT {
            let client = client.clone();
            let stop = stop.clone();
            let rng = Rng::new(seed ^ ((t as u64) << 32 | w as u64).wrapping_mul(0x9e37_79b9));
            workers.push(tokio::spawn(worker(client, tenant, w, rng, stop)));
        }
    }
    for worker in workers {
        worker.await.expect("a workload worker");
    }
}

/// A dueAt between `from_ms` and `to_ms` from now, different from every earlier one of the key
/// (so that "the dueAt a cancel cancelled" names one firing).
fn due_in(rng: &mut Rng, from_ms: i64, to_ms: i64, not: Option<Instant>) -> Instant {
    let due = crate::common::millis(
        Utc::now() + chrono::Duration::milliseconds(rng.between(from_ms, to_ms)),
    );
    if Some(due) == not {
        due + chrono::Duration::milliseconds(1)
    } else {
        due
    }
}

async fn worker(
    client: Client,
    tenant: &'static str,
    w: usize,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
) {
    let mut live: Vec<Live> = Vec::new();
    let mut n = 0u64;
    let fresh = |n: &mut u64| {
        *n += 1;
        Key::new(tenant, &format!("w{w}-{n}"))
    };
    while !stop.load(Ordering::Relaxed) {
        // Timers about to fire get no more commands: they are left to fire.
        let horizon = Utc::now() + LEAD;
        live.retain(|l| l.cancelled || l.due > horizon);
        if live.len() > KEYS_PER_WORKER {
            live.remove(0);
        }
        let roll = rng.between(0, 100);
        let pick = |rng: &mut Rng, live: &[Live], cancelled: bool| {
            let candidates: Vec<usize> = (0..live.len())
                .filter(|&i| live[i].cancelled == cancelled)
                .collect();
            (!candidates.is_empty())
                .then(|| candidates[rng.between(0, candidates.len() as i64) as usize])
        };
        if roll < 20 {
            // Due at once, in the past, or within two seconds; never touched again. Some may
            // expire: 10 s overdue with 5 s to spare always does (TimerExpired), within two
            // seconds with an hour to spare never does under these faults.
            let key = fresh(&mut n);
            let past = crate::common::millis(Utc::now() - chrono::Duration::seconds(10));
            let (due, expire_after) = match rng.between(0, 5) {
                0 => (past, None),
                1 => (crate::common::millis(Utc::now()), None),
                2 => (due_in(&mut rng, 200, 2_000, None), None),
                3 => (past, Some(chrono::Duration::seconds(5))),
                _ => (
                    due_in(&mut rng, 200, 2_000, None),
                    Some(chrono::Duration::hours(1)),
                ),
            };
            client.schedule_expiring(&key, due, expire_after).await;
        } else if roll < 40 || live.is_empty() {
            let key = fresh(&mut n);
            let due = due_in(&mut rng, 3_500, 8_000, None);
            if client.schedule(&key, due).await == Outcome::Acked {
                live.push(Live {
                    key,
                    due,
                    cancelled: false,
                });
            }
        } else if roll < 65 {
            if let Some(i) = pick(&mut rng, &live, false) {
                let due = due_in(&mut rng, 3_500, 8_000, Some(live[i].due));
                let outcome = client.schedule(&live[i].key, due).await;
                settle(&mut live, i, outcome, Some(due));
            }
        } else if roll < 77 {
            if let Some(i) = pick(&mut rng, &live, false) {
                let outcome = client.cancel(&live[i].key).await;
                settle(&mut live, i, outcome, None);
            }
        } else if roll < 89 {
            if let Some(i) = pick(&mut rng, &live, false) {
                let outcome = client.api_cancel(&live[i].key).await;
                settle(&mut live, i, outcome, None);
            }
        } else if roll < 93 {
            // A group of fresh keys of one correlation id, then one CancelTimers of them all;
            // the keys get no command after it.
            let group = format!("group-{tenant}-w{w}-{n}");
            let keys: Vec<Key> = (0..4).map(|_| fresh(&mut n)).collect();
            for key in &keys {
                let due = due_in(&mut rng, 3_500, 8_000, None);
                client.schedule_in_group(key, due, &group).await;
            }
            client.cancel_group(tenant, &group, &keys).await;
        } else if let Some(i) = pick(&mut rng, &live, true) {
            // A cancelled timer scheduled again.
            let due = due_in(&mut rng, 3_500, 8_000, Some(live[i].due));
            let outcome = client.schedule(&live[i].key, due).await;
            settle(&mut live, i, outcome, Some(due));
        }
        tokio::time::sleep(Duration::from_millis(rng.between(80, 250) as u64)).await;
    }
}

/// Updates what the worker knows of a key after a command: a key whose command may or may not
/// have taken effect gets no more commands.
fn settle(live: &mut Vec<Live>, i: usize, outcome: Outcome, due: Option<Instant>) {
    match (outcome, due) {
        (Outcome::Unknown(_), _) => {
            live.remove(i);
        }
        (_, Some(due)) => {
            live[i].due = due;
            live[i].cancelled = false;
        }
        (_, None) => live[i].cancelled = true,
    }
}
