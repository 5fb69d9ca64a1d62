//! Canceller actor: runs the `CancelTimers` commands (docs/CONTRACT.md §3), a step at a time.
//!
//! A cancel of many timers is work of unknown size (a million timers is a few minutes of
//! writes), so it runs here, beside the CommandHandler, not inside its transactions: the
//! commands after it on its line go on being stored meanwhile, and its steps keep its place in
//! the stream by the rows' order (`storage::cancel_many`), not by waiting. The jobs take turns
//! at the writer: each turn is one transaction that takes a step of every job waiting, in
//! their order, [`STEP`] timers at most in all, in turn with the command commits (claims go
//! first: as background work, a step could wait out another tenant's whole burst of commits,
//! past its timers' `dueAt`), with the Janitor's pause after a full one (`steps::PAUSE`). So
//! a flood of small cancels (a few timers each) is one turn of the writer, not one each: a
//! turn waits its place among the commits of a burst, and one at a time, they fell behind
//! by that wait each.
//!
//! A job first waits (at most [`EARLIER_COMMANDS_WAIT`]) until the commands before it on its
//! line are handled, by whichever daemon reads them: the CommandHandler commits what it
//! gathered before handing a job over, but another daemon may hold an earlier command of the
//! same line (a schedule this cancel must find). Each job waits on its own and joins the turns
//! when its wait ends: a wait that takes its whole bound (a broker path gone silent) holds no
//! other job's steps, and the jobs queued meanwhile do not each wait behind it. At most
//! [`WAITS_AT_ONCE`] wait at once (each look is a few requests to the broker): a flood of
//! cancels queues for them.
//!
//! A job comes from the CommandHandler with the command's delivery, acknowledged once the last
//! step committed (held until then, the broker sees it in progress), or from the API with a
//! reply, which counts what the command cancelled. The same command met twice (the API's and
//! the CommandHandler's copy) is one job. A job whose step fails is tried again (the one retry
//! policy); a stop or a crash drops the deliveries unsettled, so the broker delivers them
//! again and the steps resume where the rows say they stopped.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::persistence::CallError;
use super::registry::Registry;
use super::steps::PAUSE;
use super::supervisor::NamedActor;
use crate::backoff::Retries;
use crate::domain::CancelMany;
use crate::ports::{CommandPublisher, InboundCommand};

/// Timers one turn cancels at most, in a transaction of its own: 500 take about 5 ms of the
/// writer on SQLite in a release build, so a due timer waits at most that long behind a turn.
/// Steps sized by time like the Janitor's shrank to a few rows in debug builds, and the tests'
/// cancels of 40,000 took minutes (BENCHMARKS.md, "Cancel many").
pub const STEP: usize = 500;

/// Jobs one turn steps at most: a bound on the statements of one transaction.
pub const JOBS_PER_TURN: usize = 64;

/// How long a job's first step waits for the commands before it on its line to be handled
/// (stored, by this daemon or another reading the same line): a ScheduleTimer sent just
/// before it is then stored first, and cancelled. Past this (a backlog, storage failing) the
/// steps begin anyway.
pub const EARLIER_COMMANDS_WAIT: Duration = Duration::from_secs(10);

/// Jobs that wait for their earlier commands at once, at most; the others queue for a turn.
/// A wait that ends at once (the usual case) costs three requests to the broker, one that runs
/// its bound a look every 100 ms.
pub const WAITS_AT_ONCE: usize = 16;

#[derive(Default)]
pub struct Canceller;

impl NamedActor for Canceller {
    const NAME: &'static str = "canceller";
}

#[derive(Clone)]
pub struct CancellerArgs {
    pub registry: Registry,
    /// Tells when the commands before a `CancelTimers` have been handled.
    pub publisher: Arc<dyn CommandPublisher>,
}

/// What the API waits for: the timers the command cancelled, or why that is not known.
pub type Cancelled = Result<u64, String>;

/// One `CancelTimers` to run: with the delivery to acknowledge once it is done (the
/// CommandHandler's), or the reply to send then (the API's).
pub struct Job {
    pub cancel: CancelMany,
    /// Its sequence in the command stream (the broker's, without the epoch).
    pub stream_seq: u64,
    pub delivery: Option<InboundCommand>,
    pub reply: Option<RpcReplyPort<Cancelled>>,
}

pub enum CancellerMsg {
    Run(Job),
    /// The commands before job `key` are handled (or the wait for them ran out): its steps
    /// may begin.
    Ready(JobKey),
    /// A turn of the jobs `keys` (in their order) ended: what each step did.
    Stepped(Vec<JobKey>, Result<Turn, CallError>),
    /// The backoff after a failed step is over.
    Resume,
}

/// A job's identity: the tenant and the command's place in the stream.
pub type JobKey = (String, u64);

/// What one turn did: a step of each job it reached, in their order (the jobs after them
/// were not reached: the turn's timers ran out first).
pub struct Turn {
    pub steps: Vec<StepOutcome>,
    /// How long it held the writer, for its log line.
    pub took: Duration,
}

/// What one step did.
pub struct StepOutcome {
    pub cancelled: u64,
    /// Set on the last step: the timers the command cancelled, still cancelled.
    pub done: Option<u64>,
}

struct Running {
    cancel: CancelMany,
    deliveries: Vec<InboundCommand>,
    replies: Vec<RpcReplyPort<Cancelled>>,
    steps: u64,
    cancelled: u64,
    /// When it was taken, and when its wait for the commands before it ended: its log line
    /// says how long each part took.
    taken: Instant,
    ready: Option<Instant>,
}

pub struct CancellerState {
    registry: Registry,
    publisher: Arc<dyn CommandPublisher>,
    jobs: BTreeMap<JobKey, Running>,
    /// Whose step is next: jobs take turns, a step each.
    turns: VecDeque<JobKey>,
    /// Jobs yet to wait for their earlier commands (with their place in the stream), and how
    /// many wait now.
    to_wait: VecDeque<(JobKey, u64)>,
    waiting_jobs: usize,
    /// The jobs whose turn is at Persistence, if any: one turn at a time.
    stepping: Vec<JobKey>,
    failures: Retries,
    /// A pause after a step, or a backoff after a failed one, holds the next step.
    paused: bool,
}

impl Actor for Canceller {
    type Msg = CancellerMsg;
    type State = CancellerState;
    type Arguments = CancellerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: CancellerArgs,
    ) -> Result<CancellerState, ActorProcessingErr> {
        Ok(CancellerState {
            registry: args.registry,
            publisher: args.publisher,
            jobs: BTreeMap::new(),
            turns: VecDeque::new(),
            to_wait: VecDeque::new(),
            waiting_jobs: 0,
            stepping: Vec::new(),
            failures: Retries::default(),
            paused: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: CancellerMsg,
        state: &mut CancellerState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CancellerMsg::Run(job) => state.take(job, &myself),
            CancellerMsg::Ready(key) => state.ready(key, &myself),
            CancellerMsg::Stepped(keys, outcome) => {
                state.stepping.clear();
                match outcome {
                    Ok(turn) => {
                        state.failures.succeeded();
                        let reached = turn.steps.len();
                        let full = reached < keys.len()
                            || turn.steps.iter().any(|step| step.done.is_none());
                        tracing::debug!(
                            actor = Canceller::NAME,
                            jobs = reached,
                            took_ms = turn.took.as_millis() as u64,
                            "CancelTimers turn"
                        );
                        // The jobs the turn did not reach go first next time.
                        for key in keys[reached..].iter().rev() {
                            state.turns.push_front(key.clone());
                        }
                        for (key, step) in keys.into_iter().zip(turn.steps) {
                            state.stepped(key, step).await;
                        }
                        if full {
                            // The writer's turn for everything else (on SQLite, the claims of
                            // due timers wait for a turn that is running).
                            state.paused = true;
                            myself.send_after(PAUSE, || CancellerMsg::Resume);
                        }
                    }
                    Err(e) => {
                        let delay = state.failures.failed();
                        tracing::warn!(actor = Canceller::NAME, jobs = keys.len(),
                            first_tenant_id = %keys[0].0, first_sequence = keys[0].1,
                            error = %e, retry_in_ms = delay.as_millis() as u64,
                            "a turn of CancelTimers steps failed; it is tried again");
                        for key in keys.into_iter().rev() {
                            state.turns.push_front(key);
                        }
                        state.paused = true;
                        myself.send_after(delay, || CancellerMsg::Resume);
                    }
                }
            }
            CancellerMsg::Resume => state.paused = false,
        }
        state.next_step(&myself);
        Ok(())
    }
}

impl CancellerState {
    /// Takes a job, or joins it to the same command's job under way. A new job first waits
    /// for the commands before it, on its own.
    fn take(&mut self, job: Job, myself: &ActorRef<CancellerMsg>) {
        let key = (job.cancel.tenant_id.clone(), job.cancel.seq);
        let to_wait = &mut self.to_wait;
        let running = self.jobs.entry(key.clone()).or_insert_with(|| {
            tracing::info!(actor = Canceller::NAME, tenant_id = %job.cancel.tenant_id,
                sequence = job.cancel.seq, filter = ?job.cancel.filter, "CancelTimers begins");
            to_wait.push_back((key.clone(), job.stream_seq));
            Running {
                cancel: job.cancel.clone(),
                deliveries: Vec::new(),
                replies: Vec::new(),
                steps: 0,
                cancelled: 0,
                taken: Instant::now(),
                ready: None,
            }
        });
        running.deliveries.extend(job.delivery);
        running.replies.extend(job.reply);
        self.start_waits(myself);
    }

    /// Starts the waits of the jobs queued for one, as long as fewer than [`WAITS_AT_ONCE`]
    /// wait.
    fn start_waits(&mut self, myself: &ActorRef<CancellerMsg>) {
        while self.waiting_jobs < WAITS_AT_ONCE {
            let Some((key, stream_seq)) = self.to_wait.pop_front() else {
                return;
            };
            self.waiting_jobs += 1;
            let (publisher, myself) = (self.publisher.clone(), myself.clone());
            tokio::spawn(async move {
                if !publisher
                    .await_handled_before(stream_seq, EARLIER_COMMANDS_WAIT)
                    .await
                {
                    tracing::warn!(actor = Canceller::NAME, tenant_id = %key.0,
                        sequence = stream_seq,
                        "commands before a CancelTimers still pending; it begins ahead of them");
                }
                let _ = myself.cast(CancellerMsg::Ready(key));
            });
        }
    }

    /// A job's wait is over: it takes its turns, and the next queued job waits.
    fn ready(&mut self, key: JobKey, myself: &ActorRef<CancellerMsg>) {
        self.waiting_jobs = self.waiting_jobs.saturating_sub(1);
        if let Some(running) = self.jobs.get_mut(&key) {
            running.ready = Some(Instant::now());
            self.turns.push_back(key);
        }
        self.start_waits(myself);
    }

    /// Notes a step; the job's last one settles it, another puts it at the end of the turns.
    async fn stepped(&mut self, key: JobKey, step: StepOutcome) {
        let Some(running) = self.jobs.get_mut(&key) else {
            return;
        };
        running.steps += 1;
        tracing::debug!(actor = Canceller::NAME, tenant_id = %key.0, sequence = key.1,
            cancelled = step.cancelled, "CancelTimers step");
        running.cancelled += step.cancelled;
        let Some(count) = step.done else {
            self.turns.push_back(key);
            return;
        };
        let Some(running) = self.jobs.remove(&key) else {
            return;
        };
        let ready = running.ready.unwrap_or(running.taken);
        tracing::info!(actor = Canceller::NAME, tenant_id = %key.0, sequence = key.1,
            steps = running.steps, cancelled_here = running.cancelled, cancelled = count,
            waited_ms = (ready - running.taken).as_millis() as u64,
            ran_ms = ready.elapsed().as_millis() as u64, "CancelTimers done");
        for reply in running.replies {
            let _ = reply.send(Ok(count));
        }
        for delivery in running.deliveries {
            if let Err(e) = delivery.ack().await {
                tracing::warn!(actor = Canceller::NAME, error = %e,
                    "a CancelTimers done could not be acknowledged; the broker delivers it again, and it finds nothing left to cancel");
            }
        }
    }

    /// Starts the next turn, of the jobs waiting in their order, when none is at Persistence
    /// and no backoff holds.
    fn next_step(&mut self, myself: &ActorRef<CancellerMsg>) {
        if !self.stepping.is_empty() || self.paused {
            return;
        }
        let mut cancels = Vec::new();
        while cancels.len() < JOBS_PER_TURN {
            let Some(key) = self.turns.pop_front() else {
                break;
            };
            if let Some(running) = self.jobs.get(&key) {
                cancels.push(running.cancel.clone());
                self.stepping.push(key);
            }
        }
        if cancels.is_empty() {
            return;
        }
        let persistence = self.registry.persistence();
        let (myself, keys) = (myself.clone(), self.stepping.clone());
        tokio::spawn(async move {
            let outcome = turn(&persistence, cancels).await;
            let _ = myself.cast(CancellerMsg::Stepped(keys, outcome));
        });
    }
}

/// One turn: a step of each of `cancels` as far as [`STEP`] timers go; after a command's last,
/// the count of what it cancelled.
async fn turn(
    persistence: &super::PersistenceClient,
    cancels: Vec<CancelMany>,
) -> Result<Turn, CallError> {
    let (steps, took) = persistence.cancel_steps(cancels.clone(), STEP).await?;
    let counts = cancels.iter().zip(&steps).map(|(cancel, step)| async move {
        match step.last {
            true => persistence
                .count_cancelled_by(&cancel.tenant_id, cancel.seq)
                .await
                .map(Some),
            false => Ok(None),
        }
    });
    let counts = futures::future::try_join_all(counts).await?;
    let steps = steps
        .iter()
        .zip(counts)
        .map(|(step, done)| StepOutcome {
            cancelled: step.cancelled,
            done,
        })
        .collect();
    Ok(Turn { steps, took })
}

impl Registry {
    /// Hands a `CancelTimers` to this daemon's Canceller. When it does not run (restarting),
    /// the job is dropped: its delivery is handed back to the broker, which delivers it again,
    /// and its reply fails. Says whether it was handed over.
    pub fn cancel_many(&self, job: Job) -> bool {
        self.get::<CancellerMsg>(Canceller::NAME)
            .is_some_and(|canceller| canceller.cast(CancellerMsg::Run(job)).is_ok())
    }
}
