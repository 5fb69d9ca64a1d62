//! What the daemon knows about its own health: whether the broker is connected, whether the
//! database accepts writes, and which actors are down. The parts that observe these (the broker
//! connection, Persistence, the Supervisor) write here; readiness, metrics and tests read it.
//!
//! Storage faults and broker outages are outages the daemon waits out, never reasons to exit:
//! this is where "waiting" becomes visible to an operator.
//!
//! "The database accepts writes" is judged by the last failed operation's error, how long ago a
//! write last committed, and (on PostgreSQL) how long the operation under way has waited. A
//! database that stops answering (a frozen or unreachable server) makes no operation fail for
//! as long as the operation waits, so a failure alone would keep readiness green meanwhile; an
//! operation waiting longer than [`OPERATION_WAIT_MAX`], or a write proof older than
//! [`STORAGE_PROOF_MAX_AGE`], turns it red whatever hangs, and the next commit turns it green.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

/// A snapshot of the daemon's health.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Status {
    pub broker_connected: bool,
    /// The broker objects the service relies on (the streams and the command consumers) were
    /// found or made once: a client may create its consumer of the event stream as soon as
    /// `/readyz` is 200.
    pub streams_ready: bool,
    /// The cause of the last failed database operation, while the database fails.
    pub storage_error: Option<String>,
    /// Actors that are not running (failed, waiting for their restart).
    pub actors_down: BTreeSet<String>,
    /// Why the service cannot read commands from the broker objects as they are (an
    /// operator-made consumer it cannot use), while that lasts.
    pub intake_refused: Option<String>,
}

impl Status {
    /// What keeps the daemon from being ready; empty when it is ready.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.broker_connected {
            problems.push("broker: not connected".to_owned());
        } else if !self.streams_ready {
            problems.push("broker: the streams are not ready yet".to_owned());
        }
        if let Some(error) = &self.storage_error {
            problems.push(format!("database: {error}"));
        }
        for actor in &self.actors_down {
            problems.push(format!("actor {actor}: not running"));
        }
        if let Some(reason) = &self.intake_refused {
            problems.push(format!("commands: {reason}"));
        }
        problems
    }
}

/// How often Persistence proves with a small write that the database accepts writes.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// The probe's own deadline on PostgreSQL (shorter than other operations': it is one small
/// write, and its failure is what readiness waits for).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How old the last committed write may be before the database counts as not accepting
/// writes: three probe intervals, so that one slow probe is no outage, and a database that
/// stops answering shows within seconds even while an operation hangs on it.
pub const STORAGE_PROOF_MAX_AGE: Duration = Duration::from_secs(3 * PROBE_INTERVAL.as_secs());

/// How long one operation may wait for the database before the database counts as not
/// answering: the probe's own deadline, which a working database meets with room to spare.
pub const OPERATION_WAIT_MAX: Duration = PROBE_TIMEOUT;

/// Shared, cheap to clone; every daemon has its own.
#[derive(Debug, Clone)]
pub struct Health {
    inner: Arc<Mutex<Inner>>,
}

/// One actor's life so far, as the Supervisor saw it: what the console shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorLife {
    pub name: String,
    pub running: bool,
    /// When it was last started (UTC, `YYYY-MM-DDTHH:MM:SS.sssZ`).
    pub started_at: String,
    /// Times it was started again after a failure.
    pub restarts: u32,
    /// Why it last failed, and when.
    pub last_failure: Option<String>,
    pub last_failure_at: Option<String>,
}

#[derive(Debug)]
struct Inner {
    status: Status,
    /// Every actor started, in the order first started.
    actors: Vec<ActorLife>,
    /// When a database write last committed (or the daemon started: a grace period to prove
    /// the database the first time).
    last_write: Instant,
    /// Since when the operation under way on each watched lane waits for the database.
    waiting_since: BTreeMap<&'static str, Instant>,
    /// Whether the database has been seen not answering, so that the change is logged once.
    stale: bool,
}

impl Inner {
    /// Why the database counts as not answering, if it does.
    fn silence(&self) -> Option<String> {
        let waited = self.waiting_since.values().min().map(Instant::elapsed);
        if let Some(waited) = waited.filter(|w| *w > OPERATION_WAIT_MAX) {
            return Some(format!(
                "an operation has waited {:.1} s for the database (it does not answer)",
                waited.as_secs_f64()
            ));
        }
        let age = self.last_write.elapsed();
        (age > STORAGE_PROOF_MAX_AGE).then(|| {
            format!(
                "no write has committed for {:.1} s (the database does not answer in time)",
                age.as_secs_f64()
            )
        })
    }
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                status: Status::default(),
                actors: Vec::new(),
                last_write: Instant::now(),
                waiting_since: BTreeMap::new(),
                stale: false,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The health now: a database that does not answer (see `Inner::silence`) shows as a
    /// storage error when no operation has failed (yet).
    pub fn status(&self) -> Status {
        let inner = self.lock();
        let mut status = inner.status.clone();
        if status.storage_error.is_none() {
            status.storage_error = inner.silence();
        }
        status
    }

    /// An operation of `lane` starts waiting for the database (`true`) or is done (`false`):
    /// watched where operations have a deadline, so that one hanging shows before that
    /// deadline. Each lane runs one operation at a time.
    pub fn waiting_on_database(&self, lane: &'static str, waiting: bool) {
        let mut inner = self.lock();
        if waiting {
            inner.waiting_since.insert(lane, Instant::now());
        } else {
            inner.waiting_since.remove(lane);
        }
    }

    /// Brings `timer_storage_ok` in line with the age of the write proof, and logs once when the
    /// proof turns too old. Called periodically: nothing else happens while an operation hangs.
    pub fn check_storage(&self) {
        let mut inner = self.lock();
        let cause = inner.silence();
        match (&cause, inner.stale) {
            (Some(cause), false) => {
                inner.stale = true;
                if inner.status.storage_error.is_none() {
                    tracing::warn!(error = %cause,
                        "the database does not accept writes; not ready until it does");
                }
                metrics::gauge!(crate::telemetry::STORAGE_OK).set(0.0);
            }
            (None, true) => inner.stale = false,
            _ => {}
        }
    }

    pub fn set_broker_connected(&self, connected: bool) {
        self.lock().status.broker_connected = connected;
        metrics::gauge!(crate::telemetry::BROKER_CONNECTED).set(f64::from(u8::from(connected)));
    }

    /// A database write committed: storage works (again).
    pub fn storage_ok(&self) {
        let mut inner = self.lock();
        inner.status.storage_error = None;
        inner.last_write = Instant::now();
        inner.stale = false;
        metrics::gauge!(crate::telemetry::STORAGE_OK).set(1.0);
    }

    pub fn storage_failed(&self, cause: impl Into<String>) {
        self.lock().status.storage_error = Some(cause.into());
        metrics::gauge!(crate::telemetry::STORAGE_OK).set(0.0);
    }

    /// The streams and the command consumers were found or made.
    pub fn streams_ready(&self) {
        self.lock().status.streams_ready = true;
    }

    /// The broker objects cannot be used as they are (`Some`), or again can (`None`).
    pub fn intake_refused(&self, reason: Option<String>) {
        self.lock().status.intake_refused = reason;
    }

    pub fn actor_down(&self, actor: &str) {
        let mut inner = self.lock();
        inner.status.actors_down.insert(actor.to_owned());
        if let Some(life) = inner.actors.iter_mut().find(|a| a.name == actor) {
            life.running = false;
        }
    }

    /// `actor` failed (or stopped when it should not have) for `reason`.
    pub fn actor_failed(&self, actor: &str, reason: &str) {
        let now = crate::domain::timestamp::format_utc(chrono::Utc::now());
        if let Some(life) = self.lock().actors.iter_mut().find(|a| a.name == actor) {
            life.last_failure = Some(reason.to_owned());
            life.last_failure_at = Some(now);
        }
    }

    pub fn actor_up(&self, actor: &str) {
        let now = crate::domain::timestamp::format_utc(chrono::Utc::now());
        let mut inner = self.lock();
        inner.status.actors_down.remove(actor);
        match inner.actors.iter_mut().find(|a| a.name == actor) {
            Some(life) => {
                life.running = true;
                life.started_at = now;
                life.restarts += 1;
            }
            None => inner.actors.push(ActorLife {
                name: actor.to_owned(),
                running: true,
                started_at: now,
                restarts: 0,
                last_failure: None,
                last_failure_at: None,
            }),
        }
    }

    /// Every actor started so far, and how its life went.
    pub fn actors(&self) -> Vec<ActorLife> {
        self.lock().actors.clone()
    }

    /// Makes the last committed write `age` old: for tests of the proof's age.
    #[cfg(test)]
    fn age_write_proof(&self, age: Duration) {
        let mut inner = self.lock();
        inner.last_write = Instant::now().checked_sub(age).unwrap_or(inner.last_write);
    }

    /// Makes the operation under way wait since `waited` ago: for tests.
    #[cfg(test)]
    fn waited(&self, lane: &'static str, waited: Duration) {
        if let Some(since) = Instant::now().checked_sub(waited) {
            self.lock().waiting_since.insert(lane, since);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_name_each_failing_part() {
        let health = Health::new();
        assert_eq!(health.status().problems(), ["broker: not connected"]);
        health.set_broker_connected(true);
        assert_eq!(
            health.status().problems(),
            ["broker: the streams are not ready yet"]
        );
        health.streams_ready();
        assert!(health.status().problems().is_empty());
        health.storage_failed("database or disk is full");
        health.actor_down("poller");
        assert_eq!(
            health.status().problems(),
            [
                "database: database or disk is full",
                "actor poller: not running"
            ]
        );
        health.storage_ok();
        health.actor_up("poller");
        assert!(health.status().problems().is_empty());
    }

    #[test]
    fn an_actors_life_counts_its_restarts_and_keeps_why_it_failed() {
        let health = Health::new();
        health.actor_up("poller");
        health.actor_down("poller");
        health.actor_failed("poller", "panicked: a bug");
        let down = &health.actors()[0];
        assert!(!down.running);
        assert_eq!(down.restarts, 0);
        health.actor_up("poller");
        let up = &health.actors()[0];
        assert!(up.running);
        assert_eq!(up.restarts, 1);
        assert_eq!(up.last_failure.as_deref(), Some("panicked: a bug"));
    }

    #[test]
    fn a_write_proof_too_old_is_a_storage_problem_until_the_next_commit() {
        let health = Health::new();
        health.set_broker_connected(true);
        health.streams_ready();
        health.age_write_proof(STORAGE_PROOF_MAX_AGE - Duration::from_millis(500));
        assert!(health.status().problems().is_empty(), "still fresh enough");
        health.age_write_proof(STORAGE_PROOF_MAX_AGE + Duration::from_millis(500));
        let problems = health.status().problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("database: no write has committed for 6."),
            "{problems:?}"
        );
        health.check_storage();
        // A failure's own cause is shown rather than the age.
        health.storage_failed("statement timed out");
        assert_eq!(
            health.status().problems(),
            ["database: statement timed out"]
        );
        health.storage_ok();
        health.check_storage();
        assert!(health.status().problems().is_empty());
    }

    #[test]
    fn an_operation_waiting_too_long_is_a_storage_problem_until_it_ends() {
        let health = Health::new();
        health.set_broker_connected(true);
        health.streams_ready();
        health.waiting_on_database("writer", true);
        health.waiting_on_database("firing", true);
        assert!(health.status().problems().is_empty(), "a wait just begun");
        health.waited("writer", OPERATION_WAIT_MAX + Duration::from_millis(500));
        let problems = health.status().problems();
        assert!(
            problems[0].starts_with("database: an operation has waited 3."),
            "{problems:?}"
        );
        health.waiting_on_database("writer", false);
        assert!(
            health.status().problems().is_empty(),
            "the other lane's wait is still short"
        );
    }
}
