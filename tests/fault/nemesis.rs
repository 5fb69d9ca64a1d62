//! The nemesis: injects one fault after another while the workload runs, each for a few
//! seconds, heals it, and then schedules a probe timer per tenant (due a second later) to see
//! how long the service takes to fire again. One tenant's heavy reads are in `read_flood`.

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use super::history::{
    ApiRequest, FaultRecord, HostileCommand, Instant, Key, Outcome, ReadFlood, Window,
};
use super::observer::Observer;
use super::workload::{BURST_TENANT, Client, TENANTS};
use crate::common::{
    DaemonProcess, NatsServer, PostgresCluster, Scratch, SmallDisk, TestClient, http_get,
};
use timer_service::storage::db::DatabaseTarget;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    BrokerKillMidFiring,
    BrokerPause,
    DaemonKill,
    DaemonTerm,
    DaemonPause,
    CommandStreamDeleted,
    DiskFull,
    ClockStep,
    ApiFlood,
    ReadFlood,
    DatabasePause,
    DatabaseRestart,
}

impl Fault {
    pub const ALL: [Fault; 12] = [
        Self::BrokerKillMidFiring,
        Self::BrokerPause,
        Self::DaemonKill,
        Self::DaemonTerm,
        Self::DaemonPause,
        Self::CommandStreamDeleted,
        Self::DiskFull,
        Self::ClockStep,
        Self::ApiFlood,
        Self::ReadFlood,
        Self::DatabasePause,
        Self::DatabaseRestart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::BrokerKillMidFiring => "broker SIGKILL mid-firing",
            Self::BrokerPause => "broker SIGSTOP 7s",
            Self::DaemonKill => "daemon SIGKILL",
            Self::DaemonTerm => "daemon SIGTERM",
            Self::DaemonPause => "daemon SIGSTOP 4s",
            Self::CommandStreamDeleted => "command stream deleted",
            Self::DiskFull => "disk full",
            Self::ClockStep => "clock stepped",
            Self::ApiFlood => "API flood",
            Self::ReadFlood => "one tenant's heavy reads",
            Self::DatabasePause => "database SIGSTOP 5s",
            Self::DatabaseRestart => "database stopped 6s, restarted",
        }
    }

    /// Whether it may hold commands up (see `FaultRecord::disturbs`): every fault but one
    /// tenant's heavy reads, a load the service must take without the others noticing.
    pub fn disturbs(self) -> bool {
        self != Self::ReadFlood
    }
}

/// How long the broker stays frozen: longer than the daemon's 5 s JetStream timeout.
const BROKER_PAUSE: Duration = Duration::from_secs(7);
const DAEMON_PAUSE: Duration = Duration::from_secs(4);
const DISK_FULL_FOR: Duration = Duration::from_secs(4);
const CLOCK_STEP_FOR: Duration = Duration::from_secs(3);
const FLOOD_FOR: Duration = Duration::from_secs(2);
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

/// libfaketime for the daemon: the library and the file whose offset it reads at every call.
pub struct Faketime {
    pub library: PathBuf,
    pub file: PathBuf,
}

impl Faketime {
    /// The library named by `FAKETIME_LIB` (set by `scripts/faketime-lib.sh`), or where Debian
    /// installs it; `Err` says why there is none.
    pub fn find(dir: &std::path::Path) -> Result<Self, String> {
        let library = std::env::var_os("FAKETIME_LIB")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".into());
        if !library.exists() {
            return Err(format!(
                "libfaketime not found at {} (run scripts/faketime-lib.sh, or set FAKETIME_LIB)",
                library.display()
            ));
        }
        let faketime = Self {
            library,
            file: dir.join("faketime.rc"),
        };
        faketime.set("+0");
        Ok(faketime)
    }

    /// Sets the daemon's clock offset ("+30s", "-20s", "+0"), in one rename so the library
    /// never reads a half-written file.
    pub fn set(&self, offset: &str) {
        let next = self.file.with_extension("next");
        std::fs::write(&next, format!("{offset}\n")).expect("write the faketime file");
        std::fs::rename(&next, &self.file).expect("replace the faketime file");
    }

    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", self.library.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1".into()),
            // Only the wall clock moves: timeouts and sleeps keep real time. The variable's
            // name changed across libfaketime versions; both are set.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
            ("DONT_FAKE_MONOTONIC", "1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// The processes and files under attack.
pub struct World {
    pub server: NatsServer,
    /// The tmpfs the broker keeps its streams on, when one could be mounted (held for its life).
    pub _broker_disk: Option<SmallDisk>,
    pub scratch: Scratch,
    /// The small filesystem the SQLite file lives on (SQLite runs where mounting is allowed).
    pub disk: Option<SmallDisk>,
    pub faketime: Option<Faketime>,
    pub daemon: Option<DaemonProcess>,
    pub env: Vec<(String, String)>,
    /// The PostgreSQL server of the run's own (the PostgreSQL run, where its binaries exist).
    pub postgres: Option<PostgresCluster>,
    /// The daemon's `/readyz` address.
    pub http: String,
}

impl World {
    pub fn start_daemon(&mut self) {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.daemon = Some(DaemonProcess::start_with(&self.server, &self.scratch, &env));
    }

    pub fn database(&self) -> DatabaseTarget {
        match &self.disk {
            Some(disk) if self.scratch.database_url().is_none() => {
                DatabaseTarget::sqlite(disk.path().join("timers.db"))
            }
            _ => self.scratch.database(),
        }
    }

    fn signal_daemon(&self, signal: i32) {
        if let Some(daemon) = &self.daemon {
            daemon.signal(signal);
        }
    }

    /// Stops the daemon with SIGTERM and waits up to `timeout`; the exit status, if it exited.
    pub async fn stop_daemon(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut daemon = self.daemon.take()?;
        daemon.signal(libc::SIGTERM);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = daemon.try_status() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                daemon.kill9();
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub struct Nemesis {
    pub world: World,
    pub client: Client,
    pub observer: Observer,
    pub admin: TestClient,
    pub clock_ahead: Vec<Window>,
    pub destroyed: Vec<Window>,
    pub api_requests: Vec<ApiRequest>,
    pub hostile: Vec<HostileCommand>,
    pub read_floods: Vec<ReadFlood>,
    /// How long to wait for probes at most; shortened once a probe did not fire, so a wedged
    /// service does not make every later fault wait the whole bound (the checker still judges
    /// the probes by when they fire, whenever that is).
    probe_wait: Duration,
    /// Timers of the fault itself that must fire after the heal, like the probes (the burst).
    also_awaited: Vec<Key>,
    cycle: usize,
}

impl Nemesis {
    pub fn new(world: World, client: Client, observer: Observer, admin: TestClient) -> Self {
        Self {
            world,
            client,
            observer,
            admin,
            clock_ahead: Vec::new(),
            destroyed: Vec::new(),
            api_requests: Vec::new(),
            hostile: Vec::new(),
            read_floods: Vec::new(),
            probe_wait: super::checker::LIVENESS_BOUND.to_std().expect("positive"),
            also_awaited: Vec::new(),
            cycle: 0,
        }
    }

    pub fn next_cycle(&mut self) {
        self.cycle += 1;
    }

    /// Injects `fault`, heals it, and waits for the probes (bounded).
    pub async fn inject(&mut self, fault: Fault) -> FaultRecord {
        let mut notes = Vec::new();
        let started = Utc::now();
        let outcome = match fault {
            Fault::BrokerKillMidFiring => self.broker_kill_mid_firing(&mut notes).await,
            Fault::BrokerPause => {
                self.world.server.pause();
                tokio::time::sleep(BROKER_PAUSE).await;
                self.world.server.resume();
                Ok(())
            }
            Fault::DaemonKill => {
                if let Some(daemon) = self.world.daemon.take() {
                    daemon.kill9();
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                self.world.start_daemon();
                Ok(())
            }
            Fault::DaemonTerm => {
                let asked = std::time::Instant::now();
                let status = self.world.stop_daemon(Duration::from_secs(15)).await;
                notes.push(match status {
                    Some(status) => format!(
                        "exited {status} {} ms after SIGTERM",
                        asked.elapsed().as_millis()
                    ),
                    None => "did not exit within 15 s of SIGTERM (killed)".into(),
                });
                self.world.start_daemon();
                Ok(())
            }
            Fault::DaemonPause => {
                self.world.signal_daemon(libc::SIGSTOP);
                tokio::time::sleep(DAEMON_PAUSE).await;
                self.world.signal_daemon(libc::SIGCONT);
                Ok(())
            }
            Fault::CommandStreamDeleted => self.delete_command_stream(&mut notes).await,
            Fault::DiskFull => self.disk_full(&mut notes).await,
            Fault::ClockStep => self.clock_step().await,
            Fault::ApiFlood => {
                self.api_flood(&mut notes).await;
                Ok(())
            }
            Fault::ReadFlood => {
                let url = self.world.server.url();
                let flooded = super::read_flood::flood(&self.client, &url, self.cycle).await;
                notes.push(flooded.note);
                self.api_requests.extend(flooded.requests);
                self.read_floods.push(flooded.flood);
                Ok(())
            }
            Fault::DatabasePause => self.database_fault(fault, &mut notes).await,
            Fault::DatabaseRestart => self.database_fault(fault, &mut notes).await,
        };
        let healed = Utc::now();
        let (probes, skipped) = match outcome {
            Ok(()) => (self.probe().await, None),
            Err(why) => {
                eprintln!("fault '{}' skipped: {why}", fault.name());
                (Vec::new(), Some(why))
            }
        };
        tokio::time::sleep(Duration::from_secs(1)).await; // a quiet moment between faults
        FaultRecord {
            name: fault.name().to_owned(),
            started,
            healed,
            probes,
            skipped,
            notes,
            disturbs: fault.disturbs(),
        }
    }

    /// A probe per tenant, due a second after the heal (and the fault's own timers, if any);
    /// waits until all fired, or the bound.
    async fn probe(&mut self) -> Vec<Key> {
        let since = std::time::Instant::now();
        let due = crate::common::millis(Utc::now() + chrono::Duration::seconds(1));
        let mut keys: Vec<Key> = TENANTS
            .iter()
            .map(|t| Key::new(t, &format!("probe-{}-{}", self.cycle, uuid::Uuid::now_v7())))
            .collect();
        futures::future::join_all(keys.iter().map(|k| self.client.schedule(k, due))).await;
        keys.append(&mut self.also_awaited);
        let deadline =
            tokio::time::Instant::now() + self.probe_wait.saturating_sub(since.elapsed());
        loop {
            if keys.iter().all(|k| self.observer.fired(k).is_some()) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                // Wedged: later faults wait less for theirs.
                self.probe_wait = Duration::from_secs(6);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        keys
    }

    /// A burst of timers due at one instant; the broker is killed as soon as the first of them
    /// is seen firing, and restarted a second later on the same store.
    async fn broker_kill_mid_firing(&mut self, notes: &mut Vec<String>) -> Result<(), String> {
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
    async fn delete_command_stream(&mut self, notes: &mut Vec<String>) -> Result<(), String> {
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

    /// When the oldest command the daemon has not acknowledged was stored, if there is one.
    async fn oldest_unprocessed_command(&self) -> Option<Instant> {
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = self
            .admin
            .js
            .get_consumer_from_stream("timer-service", "TIMER_COMMANDS")
            .await
            .ok()?;
        let floor = consumer.info().await.ok()?.ack_floor.stream_sequence;
        let stream = self.admin.js.get_stream("TIMER_COMMANDS").await.ok()?;
        let message = stream.get_raw_message(floor + 1).await.ok()?;
        Some(Instant::from_timestamp_nanos(
            message.time.unix_timestamp_nanos() as i64,
        ))
    }

    async fn disk_full(&mut self, notes: &mut Vec<String>) -> Result<(), String> {
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
    async fn clock_step(&mut self) -> Result<(), String> {
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
    async fn database_fault(
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

    /// Hostile API requests (bodies no parser expects; reply subjects of another tenant's
    /// events and commands) and invalid commands, for a couple of seconds.
    async fn api_flood(&mut self, notes: &mut Vec<String>) {
        let mut garbage = vec![0u8; (1 << 20) - 4096];
        let mut rng = super::Rng::new(self.cycle as u64 + 7);
        for byte in &mut garbage {
            *byte = rng.between(0, 256) as u8;
        }
        let bodies: Vec<(&str, Vec<u8>)> = vec![
            ("invalid JSON", b"{\"serviceCallId\": ".to_vec()),
            ("a JSON key holding a newline", br#"{"a\nb":1}"#.to_vec()),
            ("a raw newline inside a JSON key", b"{\"a\nb\":1}".to_vec()),
            ("NUL bytes", b"\0\0{\0}\0".to_vec()),
            (
                "a NUL inside a value",
                br#"{"serviceCallId":"x\u0000y"}"#.to_vec(),
            ),
            ("1 MiB of garbage", garbage),
        ];
        let verbs = ["get", "list", "cancel", "stats"];
        let before = self.api_requests.len();
        let until = std::time::Instant::now() + FLOOD_FOR;
        let mut round = 0;
        while std::time::Instant::now() < until && round < 20 {
            round += 1;
            let mut requests = Vec::new();
            for verb in verbs {
                for (what, body) in &bodies {
                    let tenant = TENANTS[round % TENANTS.len()];
                    let subject = format!("timer.api.{verb}.{tenant}");
                    let nats = self.client.nats.clone();
                    let body = body.clone();
                    let what = what.to_string();
                    requests.push(async move {
                        let at = Utc::now();
                        let reply = tokio::time::timeout(
                            Duration::from_secs(5),
                            nats.request(subject.clone(), body.into()),
                        )
                        .await;
                        ApiRequest {
                            subject,
                            what,
                            at,
                            answered: matches!(reply, Ok(Ok(_))),
                        }
                    });
                }
            }
            self.api_requests
                .extend(futures::future::join_all(requests).await);
        }
        // Replies aimed at another tenant's subjects: the service must drop them.
        for (subject, reply) in [
            ("timer.api.stats.acme", "timer.evt.due.globex"),
            ("timer.api.stats.acme", "timer.cmd.cancel.globex"),
            ("timer.api.get.acme", "timer.evt.due.initech"),
        ] {
            let body = serde_json::to_vec(&json!({ "serviceCallId": "anything" })).expect("json");
            let body = if subject.contains("stats") {
                b"{}".to_vec()
            } else {
                body
            };
            let _ = self
                .client
                .nats
                .publish_with_reply(subject, reply, body.into())
                .await;
        }
        let _ = self.client.nats.flush().await;
        // Invalid commands: a NUL in correlationId (refused by the contract's validation).
        for n in 0..3 {
            let key = Key::new("acme", &format!("hostile-{}-{n}", self.cycle));
            let mut command = crate::common::schedule_command(
                &key.tenant,
                &key.id,
                &crate::common::rfc3339(Utc::now()),
                Some("corr\u{0}elation"),
            );
            command["correlationId"] = json!("env\u{0}corr");
            let bytes = serde_json::to_vec(&command).expect("json");
            let at = Utc::now();
            let (outcome, _) = self
                .client
                .publish(&format!("timer.cmd.schedule.{}", key.tenant), &bytes)
                .await;
            self.hostile.push(HostileCommand {
                key,
                what: "a ScheduleTimer with a NUL in its correlationId".into(),
                at,
                acked: outcome == Outcome::Acked,
            });
        }
        let sent = &self.api_requests[before..];
        let answered = sent.iter().filter(|r| r.answered).count();
        notes.push(format!(
            "{} hostile API requests ({answered} answered), 3 foreign reply subjects, 3 invalid commands",
            sent.len()
        ));
    }
}

/// Polls `/readyz` at `addr` until it answers `code`: how long that took, or `None` after
/// `within`.
async fn readyz_within(addr: &str, code: u16, within: Duration) -> Option<Duration> {
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
