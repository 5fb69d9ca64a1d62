//! The Poller's calls to Persistence: claims and marks, each in a task of its own, whose answer
//! comes back as a message (`PollerMsg::Claimed`, `PollerMsg::Marked`); `phase` says which are
//! under way. Every call answers, a panic included, or the Poller would wait for it for ever.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use ractor::{ActorProcessingErr, ActorRef};
use tokio::time::Instant;

use super::fairness::SHARING_CLAIM;
use super::marks::{self, MARK_AT_MOST, Marked};
use super::phase::NextClaim;
use super::run::Run;
use super::{PollerMsg, PollerState, claim_size};
use crate::actors::persistence::CallError;
use crate::domain::DueTimer;
use crate::storage::DueBatch;
use crate::storage::fair::FairBatch;
use crate::telemetry::spans;

/// A claim's answer.
pub struct Claimed {
    answer: Answer,
    /// This daemon's clock when the claim was asked: the claim's instant where that clock
    /// decides what is due (SQLite).
    asked_at: DateTime<Utc>,
    /// This daemon's clock when the answer arrived, to learn the store's lead by.
    answered_at: DateTime<Utc>,
    /// When the claim was asked: `timer_polling_duration_seconds` runs from there to the mark.
    started: std::time::Instant,
}

enum Answer {
    /// A claim in `dueAt` order of at most this many timers.
    Due(usize, Result<DueBatch, CallError>),
    Fair(Result<FairBatch, CallError>),
}

impl PollerState {
    /// Claims the due timers in `dueAt` order, after the cursor (or from a timer stored due
    /// before it), fenced by the run.
    pub(super) fn claim_due(&mut self, myself: &ActorRef<PollerMsg>) {
        let stored = self.stored_since_claim.take();
        let after = self.run.as_ref().and_then(|run| run.claim_after(stored));
        let fence = self.run.as_ref().map(Run::fence);
        let limit = match self.short_writes() {
            true => SHARING_CLAIM.min(claim_size(self.args.batch_size)),
            false => claim_size(self.args.batch_size),
        };
        let persistence = self.args.registry.persistence();
        let answer = move |result| Answer::Due(limit, result);
        self.call(myself, answer, move |now| async move {
            persistence.claim_due(now, after, limit, fence).await
        });
    }

    /// Whether this claim or mark is kept to [`SHARING_CLAIM`] timers: tenants share a backlog,
    /// on a database where that shortens the fair claims' wait (`fairness`).
    fn short_writes(&self) -> bool {
        let full = claim_size(self.args.batch_size);
        self.fairness
            .short_writes(Instant::now(), self.args.short_writes, full)
    }

    /// Claims a share of the due timers of each tenant with none held.
    pub(super) fn claim_fair(&mut self, myself: &ActorRef<PollerMsg>, now: Instant) {
        let fence = self.run.as_ref().map(Run::fence);
        let claim = self
            .fairness
            .start(now, self.publisher.held_tenants(), fence);
        let persistence = self.args.registry.persistence();
        self.call(myself, Answer::Fair, move |at| async move {
            persistence
                .claim_fair(at, claim.skip, claim.resume_after, claim.limit, claim.fence)
                .await
        });
    }

    /// Runs `claim`, asked at this daemon's clock's now, in a task of its own; the answer comes
    /// back as `PollerMsg::Claimed`.
    fn call<T, Call, Fut>(
        &self,
        myself: &ActorRef<PollerMsg>,
        answer: impl FnOnce(Result<T, CallError>) -> Answer + Send + 'static,
        claim: Call,
    ) where
        T: Send + 'static,
        Call: FnOnce(DateTime<Utc>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, CallError>> + Send + 'static,
    {
        let (myself, clock) = (myself.clone(), self.args.clock.clone());
        let asked_at = clock.now();
        let started = std::time::Instant::now();
        tokio::spawn(async move {
            let result = answered(claim(asked_at)).await;
            let claimed = Claimed {
                answer: answer(result),
                asked_at,
                answered_at: clock.now(),
                started,
            };
            let _ = myself.cast(PollerMsg::Claimed(claimed));
        });
    }

    /// A claim answered: its timers are queued for publishing, and its round goes on.
    pub(super) fn claimed(
        &mut self,
        myself: &ActorRef<PollerMsg>,
        claimed: Claimed,
    ) -> Result<(), ActorProcessingErr> {
        let Some(mut round) = self.phase.claimed() else {
            return Err("a claim answered while none was asked".into());
        };
        let Claimed {
            answer,
            asked_at,
            answered_at,
            started,
        } = claimed;
        match answer {
            Answer::Due(_, Err(e)) | Answer::Fair(Err(e)) => {
                tracing::warn!(actor = "poller", error = %e, "cannot read due timers; retrying");
                if let Some(run) = &mut self.run {
                    run.close();
                }
                self.retry_later(myself);
            }
            Answer::Fair(Ok(fair)) => {
                self.wake.learn(fair.batch.server_now, answered_at);
                claim_spans(&fair.batch.timers, asked_at, answered_at);
                let claimed = fair.batch.timers.len();
                self.fairness
                    .answered(Instant::now(), fair.resume_after, claimed);
                tracing::debug!(
                    actor = "poller",
                    claimed = fair.batch.timers.len(),
                    "fair claim for the tenants with nothing held"
                );
                let decided_at = fair.batch.server_now.unwrap_or(asked_at);
                self.hold(fair.batch.timers, decided_at, started);
                self.next_claim_of(myself, round);
            }
            Answer::Due(limit, Ok(batch)) => {
                self.wake.learn(batch.server_now, answered_at);
                claim_spans(&batch.timers, asked_at, answered_at);
                // The instant the timers were found due, by the clock that decided it: their
                // `reachedAt`.
                let decided_at = batch.server_now.unwrap_or(asked_at);
                let full = batch.timers.len() >= limit;
                self.fairness
                    .pace
                    .observe(batch.timers.len(), started.elapsed());
                let last = batch.timers.last().map(DueTimer::position);
                self.hold(batch.timers, decided_at, started);
                if let (Some(run), Some(last)) = (&mut self.run, last) {
                    run.claimed_up_to(last);
                }
                if full {
                    self.next_claim = NextClaim::AsBatchesSettle;
                    round.next_turn();
                    self.next_claim_of(myself, round);
                } else {
                    // Nothing more is due now: sleep until the next timer is.
                    self.next_claim = NextClaim::AtWakeUp;
                    match batch.next_due_at {
                        Some(at) => self.wake.at(myself, at),
                        None => self.wake.cancel(),
                    }
                }
            }
        }
        Ok(())
    }

    /// Marks everything owed, in one transaction, in a task of its own; the answer comes back
    /// as `PollerMsg::Marked`.
    pub(super) fn mark(&mut self, myself: &ActorRef<PollerMsg>) {
        // Short while other tenants are served beside a backlog (`fairness`), and bounded
        // always (`marks::MARK_AT_MOST`).
        let at_most = match self.short_writes() {
            true => SHARING_CLAIM,
            false => MARK_AT_MOST,
        };
        let batches = self.marks.take(at_most);
        let persistence = self.args.registry.persistence();
        let myself = myself.clone();
        let answer = tokio::spawn(async move {
            let result = answered(persistence.mark_reached(marks::keys(&batches)))
                .await
                .map_err(|e| e.to_string());
            let marked = Marked { batches, result };
            let _ = myself.cast(PollerMsg::Marked(marked.clone()));
            marked
        });
        self.phase.mark(answer);
    }

    /// A mark answered. What it could not mark stays owed (the events are out; the rows stay
    /// `Scheduled` until then), and nothing new is claimed before it is marked (a claim under
    /// way beside it ends its round).
    pub(super) fn marked(
        &mut self,
        myself: &ActorRef<PollerMsg>,
        marked: Marked,
    ) -> Result<(), ActorProcessingErr> {
        if self.phase.marked().is_none() {
            return Err("a mark answered while none was asked".into());
        }
        match marked.result {
            Ok(count) => {
                marks::record(&marked.batches, count);
                if self.marks.failed() {
                    tracing::info!(
                        actor = "poller",
                        "published timers marked Reached after failures"
                    );
                }
                self.marks.marked();
                // A round stopped short for want of room (marks owed) claims again now that
                // there is room: no batch may be left at the broker to ask for it as it settles.
                if self.next_claim == NextClaim::AsBatchesSettle {
                    self.round_asked = true;
                }
            }
            Err(error) => {
                self.marks.not_marked(marked.batches);
                tracing::error!(actor = "poller", error = %error, waiting = self.marks.timers(),
                    "published timers not marked Reached; retrying before firing more");
                self.retry_later(myself);
            }
        }
        Ok(())
    }
}

/// Awaits a call to Persistence, a panic included: every call answers, or the Poller would wait
/// for its answer for ever.
async fn answered<T>(call: impl Future<Output = Result<T, CallError>>) -> Result<T, CallError> {
    AssertUnwindSafe(call)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(CallError::Messaging("the call panicked".into())))
}

/// The `claim timers` span of each traced timer of a claim asked at `asked_at` and answered at
/// `answered_at`.
fn claim_spans(timers: &[DueTimer], asked_at: DateTime<Utc>, answered_at: DateTime<Utc>) {
    if !spans::enabled() {
        return;
    }
    for timer in timers {
        spans::claimed(
            timer.trace.as_ref(),
            asked_at.into(),
            answered_at.into(),
            timers.len(),
        );
    }
}
