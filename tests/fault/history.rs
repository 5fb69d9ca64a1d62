//! What happened during a run, as plain data: the operations the workload performed with their
//! outcomes, what a plain subscriber saw, what the event stream and the database hold at the
//! end, and when each fault was injected and healed. The checker judges only this.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

pub type Instant = DateTime<Utc>;

/// One timer: `(tenantId, serviceCallId)`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub tenant: String,
    pub id: String,
}

impl Key {
    pub fn new(tenant: &str, id: &str) -> Self {
        Self {
            tenant: tenant.to_owned(),
            id: id.to_owned(),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.tenant, self.id)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// A ScheduleTimer command, with its `expireAfter` when it set one.
    Schedule {
        due_at: Instant,
        expire_after: Option<chrono::Duration>,
    },
    /// A CancelTimer command.
    Cancel,
    /// A cancel through `timer.api.cancel.<tenant>`.
    ApiCancel,
    /// A `CancelTimers` by the correlation id of a group of keys, recorded on each of them:
    /// for each key, a cancel published at that moment.
    CancelMany,
}

/// The API's answer to a cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelAnswer {
    Cancelled,
    AlreadyCancelled,
    AlreadyReached,
    NotFound,
}

impl CancelAnswer {
    pub fn parse(outcome: &str) -> Option<Self> {
        Some(match outcome {
            "cancelled" => Self::Cancelled,
            "already_cancelled" => Self::AlreadyCancelled,
            "already_reached" => Self::AlreadyReached,
            "not_found" => Self::NotFound,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The broker's PubAck for a command: it is stored.
    Acked,
    /// The API's answer to a cancel: it is applied.
    Answered(CancelAnswer),
    /// No PubAck (or no answer) even after retries: it may or may not have been stored.
    Unknown(String),
}

/// One operation of the workload. Operations on one key are recorded in the order they were
/// performed, each after the previous one completed, so "the last command per key" is defined.
#[derive(Clone, Debug)]
pub struct Op {
    pub key: Key,
    pub command: Command,
    pub outcome: Outcome,
    pub invoked: Instant,
    /// When the PubAck (or the API's answer) arrived, or when the workload gave up.
    pub completed: Instant,
    pub attempts: u32,
}

impl Op {
    /// Known to have taken effect (PubAck'd, or answered by the API).
    pub fn decisive(&self) -> bool {
        !matches!(self.outcome, Outcome::Unknown(_))
    }

    pub fn due_at(&self) -> Option<Instant> {
        match self.command {
            Command::Schedule { due_at, .. } => Some(due_at),
            _ => None,
        }
    }
}

/// A message as it was seen: by the plain subscriber (`at` = local receive time) or read back
/// from the event stream at the end (`at` = when the broker stored it).
#[derive(Clone, Debug)]
pub struct Seen {
    pub subject: String,
    pub payload: Vec<u8>,
    pub at: Instant,
}

/// A row of `timer_schedules` at the end.
#[derive(Clone, Debug)]
pub struct Row {
    pub key: Key,
    pub state: String,
    pub due_at: Option<Instant>,
}

/// A span of time.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub from: Instant,
    pub to: Instant,
}

impl Window {
    pub fn contains(&self, t: Instant) -> bool {
        self.from <= t && t <= self.to
    }

    pub fn overlaps(&self, from: Instant, to: Instant) -> bool {
        self.from <= to && from <= self.to
    }
}

/// One fault as the nemesis injected it.
#[derive(Clone, Debug)]
pub struct FaultRecord {
    pub name: String,
    pub started: Instant,
    /// When the nemesis undid the fault (or the process it restarted was running again).
    pub healed: Instant,
    /// The probe timers scheduled right after the heal (one per tenant).
    pub probes: Vec<Key>,
    /// Why the fault was not injected, if it was not.
    pub skipped: Option<String>,
    /// Anything worth printing beside the table (exit status after SIGTERM, …).
    pub notes: Vec<String>,
    /// Whether it may hold commands up (it breaks or stops a part of the service), so that a
    /// command may lose to a firing while it lasts; a load the service must absorb (one
    /// tenant's heavy reads) does not.
    pub disturbs: bool,
    /// Until when it may still hold things up whatever its heal: a dead connection the broker
    /// keeps after a silent path until its own pings go unanswered, and hands a share of the
    /// API's requests meanwhile (docs/CONTRACT.md §1, "A silent path to the broker").
    pub lingers_until: Option<Instant>,
    /// Which invariant judges the timers the broker acknowledged before its heal, if one does
    /// (each must fire within a bound of the later of its dueAt and the heal).
    pub heal_rule: Option<HealRule>,
}

/// How soon after a heal the timers acknowledged before it must fire, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealRule {
    /// Invariant (i): the daemon was killed or frozen while it held commands; after the heal
    /// (the restarted daemon ready, the SIGCONT) they come back within an ack wait, and every
    /// timer fires within 5 s.
    HeldCommands,
    /// Invariant (k): the path to the broker went silent or distant without a reset; once a
    /// path is there again, timers fire within 10 s.
    BrokerPath,
}

/// A tenant's burst of timers all due at one instant.
#[derive(Clone, Debug)]
pub struct Burst {
    pub tenant: String,
    pub due_at: Instant,
    pub timers: usize,
}

/// One tenant's flood of heavy API reads, from its first request to its last answer: the other
/// tenants' timers due meanwhile must not wait for it.
#[derive(Clone, Debug)]
pub struct ReadFlood {
    pub tenant: String,
    pub from: Instant,
    pub to: Instant,
    pub requests: usize,
}

/// Schedules of a tenant limited by a quota, sent while the daemon was frozen and worked off
/// while it was frozen again and again (invariant (l): a refusal is final). Each key is sent
/// once, and none is in the workload's history: the quota may refuse any of them.
#[derive(Clone, Debug)]
pub struct QuotaFlood {
    pub tenant: String,
    pub due_at: Instant,
    /// Each service call id and whether the broker acknowledged it.
    pub sent: Vec<(String, bool)>,
}

/// A request of an API flood and whether it was answered.
#[derive(Clone, Debug)]
pub struct ApiRequest {
    pub subject: String,
    pub what: String,
    pub at: Instant,
    pub answered: bool,
}

/// An invalid command the flood sent; the contract wants it rejected, never stored.
#[derive(Clone, Debug)]
pub struct HostileCommand {
    pub key: Key,
    pub what: String,
    pub at: Instant,
    pub acked: bool,
}

/// Everything the checker needs.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub ops: Vec<Op>,
    /// Everything the plain subscriber on `timer.evt.>` and `timer.cmd.>` saw.
    pub seen: Vec<Seen>,
    /// The whole of `TIMER_EVENTS` at the end.
    pub stream: Vec<Seen>,
    /// The whole of `timer_schedules` at the end.
    pub rows: Vec<Row>,
    pub faults: Vec<FaultRecord>,
    /// Commands acknowledged in these spans may have been unprocessed in the command stream
    /// when it was deleted (from the oldest unacknowledged command to the deletion).
    pub destroyed: Vec<Window>,
    /// While the daemon's wall clock ran ahead of the real one.
    pub clock_ahead: Vec<Window>,
    pub api_requests: Vec<ApiRequest>,
    pub hostile: Vec<HostileCommand>,
    /// Tenants that were sent invalid commands (a rejection on their subject is expected).
    pub hostile_tenants: BTreeSet<String>,
    /// Bursts fired with no fault on: the other tenants' timers due meanwhile must not wait for
    /// them.
    pub bursts: Vec<Burst>,
    /// Floods of one tenant's heavy reads: the same holds while they last.
    pub read_floods: Vec<ReadFlood>,
    /// Schedules past a tenant's quota, worked off under freezes.
    pub quota_floods: Vec<QuotaFlood>,
    /// What the command stream still held once the workload had ended, every timer had fired
    /// and the daemon had had a while to take the rest (`None`: it could not be read).
    pub commands_left: Option<u64>,
    pub ended: Option<Instant>,
    /// The daemons' log lines, oldest first, without colours: a violated key's story shows
    /// what the daemon logged of it.
    pub daemon_log: Vec<String>,
}
