//! The nemesis: injects one fault after another while the workload runs, each for a few
//! seconds, heals it, and then schedules a probe timer per tenant (due a second later) to see
//! how long the service takes to fire again. Its parts: `world` (the processes and files under
//! attack), `outages` (the broker, the command stream, the disk, the clock, the database
//! server), `paths` (the path to the broker silent or distant), `api_flood` (hostile requests),
//! `canary` (a second process with another line count), `quota_freeze` (the daemon frozen while
//! a quota refuses), `rollback` (to the previous release and forward again); one tenant's heavy
//! reads are in `read_flood`.

mod api_flood;
mod canary;
mod daemon;
mod outages;
mod paths;
mod quota_freeze;
mod rollback;
mod world;

use std::time::Duration;

use chrono::Utc;

use super::history::{
    ApiRequest, FaultRecord, HealRule, HostileCommand, Instant, Key, Outcome, QuotaFlood,
    ReadFlood, Window,
};
use super::observer::Observer;
use super::workload::{Client, TENANTS};
use crate::common::TestClient;

pub use quota_freeze::QUOTA_SETTING;
pub use world::{Faketime, World};

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
    OtherLinesCanary,
    SilentPath,
    OneWayPath,
    DistantBroker,
    QuotaFreeze,
    Rollback,
}

impl Fault {
    pub const ALL: [Fault; 18] = [
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
        Self::OtherLinesCanary,
        Self::SilentPath,
        Self::OneWayPath,
        Self::DistantBroker,
        Self::QuotaFreeze,
        // Last: on a new machine it waits for the previous release's build.
        Self::Rollback,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::BrokerKillMidFiring => "broker SIGKILL mid-firing",
            Self::BrokerPause => "broker SIGSTOP 7s",
            Self::DaemonKill => "daemon SIGKILL mid-burst",
            Self::DaemonTerm => "daemon SIGTERM",
            Self::DaemonPause => "daemon SIGSTOP 4s under load",
            Self::CommandStreamDeleted => "command stream deleted",
            Self::DiskFull => "disk full",
            Self::ClockStep => "clock stepped",
            Self::ApiFlood => "API flood",
            Self::ReadFlood => "one tenant's heavy reads",
            Self::DatabasePause => "database SIGSTOP 5s",
            Self::DatabaseRestart => "database stopped 6s, restarted",
            Self::OtherLinesCanary => "second process, other lines",
            Self::SilentPath => "broker path silent 8s",
            Self::OneWayPath => "daemon-to-broker path silent 7s",
            Self::DistantBroker => "broker 200ms away 5s",
            Self::QuotaFreeze => "daemon frozen while quotas refuse",
            Self::Rollback => "rollback to the previous release",
        }
    }

    /// Whether it may hold commands up (see `FaultRecord::disturbs`): every fault but one
    /// tenant's heavy reads, a load the service must take without the others noticing.
    pub fn disturbs(self) -> bool {
        self != Self::ReadFlood
    }

    /// Whether the broker keeps a dead connection of the daemon's after it (a path gone silent),
    /// handing it API requests until its own pings go unanswered.
    pub fn broker_keeps_dead_connection(self) -> bool {
        matches!(self, Self::SilentPath | Self::OneWayPath)
    }

    /// Which invariant judges the timers acknowledged before its heal (`FaultRecord::heal_rule`):
    /// (i) where the daemon holds commands it has not acknowledged, killed in the middle of a
    /// burst or frozen under load; (k) where its path to the broker goes silent or distant.
    pub fn heal_rule(self) -> Option<HealRule> {
        match self {
            Self::DaemonKill | Self::DaemonPause => Some(HealRule::HeldCommands),
            Self::SilentPath | Self::OneWayPath | Self::DistantBroker => Some(HealRule::BrokerPath),
            _ => None,
        }
    }
}

/// How soon after a path went silent the broker drops the dead connection: its pings 5 s
/// apart, two unanswered (the run's broker configuration, as docs/deployment.md advises), and a
/// ping's worth of slack.
const BROKER_DROPS_DEAD_WITHIN: chrono::Duration = chrono::Duration::seconds(20);

/// How long the broker stays frozen: longer than the daemon's 5 s JetStream timeout.
const BROKER_PAUSE: Duration = Duration::from_secs(7);

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
    pub quota_floods: Vec<QuotaFlood>,
    /// How long to wait for probes at most; shortened once a probe did not fire, so a wedged
    /// service does not make every later fault wait the whole bound (the checker still judges
    /// the probes by when they fire, whenever that is).
    probe_wait: Duration,
    /// Timers of the fault itself that must fire after the heal, like the probes (the burst).
    also_awaited: Vec<Key>,
    /// When the fault was healed, if not when its injection returned (the daemon restarted
    /// while the burst it was killed in is still being sent).
    healed_at: Option<Instant>,
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
            quota_floods: Vec::new(),
            probe_wait: super::checker::LIVENESS_BOUND.to_std().expect("positive"),
            also_awaited: Vec::new(),
            healed_at: None,
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
            Fault::DaemonKill => self.daemon_kill_mid_burst(&mut notes).await,
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
            Fault::DaemonPause => self.daemon_pause_under_load(&mut notes).await,
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
            Fault::OtherLinesCanary => self.canary_with_other_lines(&mut notes).await,
            Fault::SilentPath | Fault::OneWayPath => {
                self.silent_path(fault == Fault::OneWayPath, &mut notes)
                    .await;
                Ok(())
            }
            Fault::DistantBroker => {
                self.distant_broker(&mut notes).await;
                Ok(())
            }
            Fault::QuotaFreeze => self.freeze_while_quotas_refuse(&mut notes).await,
            Fault::Rollback => self.rollback_and_forward(&mut notes).await,
        };
        let healed = self.healed_at.take().unwrap_or_else(Utc::now);
        let (probes, skipped) = match outcome {
            Ok(()) => {
                let probes = self.probe().await;
                if let Some(rule) = fault.heal_rule() {
                    self.await_held_timers(healed, rule).await;
                }
                (probes, None)
            }
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
            lingers_until: fault
                .broker_keeps_dead_connection()
                .then(|| started + BROKER_DROPS_DEAD_WITHIN),
            heal_rule: fault.heal_rule(),
        }
    }

    /// Waits until every timer the broker acknowledged before the heal (its key's last
    /// operation) and due by then has fired, up to the rule's bound after the heal and a second
    /// more: the next fault does not begin while one may still break (i) or (k), so that a timer
    /// late past the bound is judged, not excused as held up by the next fault.
    async fn await_held_timers(&self, healed: Instant, rule: HealRule) {
        let mut last = std::collections::HashMap::new();
        for op in self.client.recorder.ops() {
            last.insert(op.key.clone(), op);
        }
        let held: Vec<(Key, Instant)> = last
            .into_values()
            .filter(|op| op.outcome == Outcome::Acked && op.completed <= healed)
            .filter_map(|op| op.due_at().map(|due| (op.key, due)))
            .filter(|(_, due)| *due <= healed)
            .collect();
        let until = healed + rule.bound() + chrono::Duration::seconds(1);
        while Utc::now() < until
            && held
                .iter()
                .any(|(key, due)| !self.observer.fired_due(key, *due))
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
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
}
