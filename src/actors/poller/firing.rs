//! The Poller's next step, taken after every message once a call is free
//! ([`PollerState::advance`]): settle the batches the broker answered, end the run once no
//! claimed timer is left, then start a mark if one is due (`marks`), else the round of claims
//! that a tick, a wake-up or a settled batch asked for (`phase::Round`). A failure backs off
//! (100 ms, doubling to 2 s) before the next claim. A graceful stop ends here too.

use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::ActorRef;
use tokio::time::Instant;

use super::marks::{self, MARK_AT_MOST, Marked};
use super::phase::{Claim, NextClaim, Round};
use super::queue::Waiting;
use super::run::Run;
use super::{PollerMsg, PollerState, claim_size, hold_limit};
use crate::backoff::Retry;
use crate::domain::DueTimer;
use crate::stop::Reserve;

/// The retry policy, at most 2 s: short enough that firing resumes within seconds once a lost
/// broker link is back (a batch published into the lost link fails only as its PubAck wait
/// ends, after the reconnection, and each failure starts the backoff anew).
pub(super) const RETRY: Retry = Retry::new(Duration::from_millis(100), Duration::from_secs(2));

impl PollerState {
    /// The next step, once a call is free: nothing at Persistence, or, where claims and marks
    /// run side by side, one of them free.
    pub(super) fn advance(&mut self, myself: &ActorRef<PollerMsg>) {
        if self.phase.waits() {
            return;
        }
        let (claiming, marking) = (self.phase.claiming(), self.phase.marking());
        let side_by_side = self.phase.side_by_side();
        self.settle(myself);
        // A run ends with nothing under way: a claim or a mark still belongs to it (a claim
        // after the run could take the timers under a mark again, and publish them twice).
        if !claiming && !marking && self.publisher.is_empty() && self.marks.is_empty() {
            self.end_run();
        }
        let now = Instant::now();
        let backoff = self.phase.backoff(now);
        // A closed run takes no claim: a round asked for then must not put off the mark owed,
        // or nothing would be left to call `advance` again (no batch at the broker).
        let closed = self.run.as_ref().is_some_and(Run::closed);
        // One call at a time: marks and rounds take turns. Side by side, a mark never waits.
        let claims_first = !side_by_side
            && self.round_asked
            && backoff.is_none()
            && !closed
            && self.marks.yields_to_claims();
        if !marking
            && !claims_first
            && self
                .marks
                .due(self.publisher.batches_at_broker(), backoff.is_some())
        {
            self.mark(myself);
            if !side_by_side {
                return;
            }
        }
        if claiming || !std::mem::take(&mut self.round_asked) {
            return;
        }
        match backoff {
            // The round is for the retry's wake-up; a round stopped short claims again as
            // batches settle.
            Some(until) => {
                self.next_claim = NextClaim::AsBatchesSettle;
                self.wake.after(myself, until - now);
            }
            None => {
                self.begin_round(myself);
                // A round that could start no claim (no room while marks are owed) leaves the
                // mark due now: no other message may come before the tick (nothing at the
                // broker), and a burst would fire one mark per tick.
                if !self.phase.claiming()
                    && !self.phase.marking()
                    && self.marks.due(self.publisher.batches_at_broker(), false)
                {
                    self.mark(myself);
                }
            }
        }
    }

    /// Settles the batches the broker answered: what it acknowledged is owed its mark, what it
    /// did not stays `Scheduled` and is claimed again after a backoff.
    fn settle(&mut self, myself: &ActorRef<PollerMsg>) {
        let answers = self.publisher.take_answers();
        if answers.is_empty() {
            return;
        }
        for _ in 0..answers.lost {
            tracing::error!(
                actor = "poller",
                "a publishing task ended without an outcome"
            );
            self.failed_publish();
            self.retry_later(myself);
        }
        let published_any = !answers.published.is_empty();
        let mut error = None;
        for published in answers.published {
            if let Some(e) = published.error {
                error.get_or_insert(e);
            }
            self.marks.owe(published.fired);
        }
        match error {
            Some(error) => {
                tracing::warn!(actor = "poller", error = %error,
                    "DueTimeReached not acknowledged by the broker; timers stay Scheduled and are retried");
                self.failed_publish();
                self.retry_later(myself);
            }
            None if published_any && self.failures.succeeded() > 0 => {
                tracing::info!(actor = "poller", "firing again after failures");
            }
            None => {}
        }
        // More may be due, or timers wait (the fair claim of their turn may be due).
        if self.next_claim == NextClaim::AsBatchesSettle || !self.publisher.queue_is_empty() {
            self.round_asked = true;
        }
    }

    /// A batch was not published: its timers are behind the cursor and fenced, claimed in this
    /// run. The run takes no more claims, so that it ends as soon as what it holds settles, and
    /// the claim after it, from the first due timer, takes them again (`Run::close`).
    fn failed_publish(&mut self) {
        match &mut self.run {
            Some(run) => run.close(),
            None => self.round_asked = true,
        }
    }

    /// No claimed timer is left (queued, at the broker or owed its mark): the next claim starts from the first due timer, and may take
    /// this daemon's own claims again (what is left of them was not published).
    fn end_run(&mut self) {
        if let Some(run) = self.run.take() {
            self.fairness.run_ended();
            if run.rewinds() {
                self.round_asked = true;
            }
        }
    }

    /// Begins the round of claims asked for.
    fn begin_round(&mut self, myself: &ActorRef<PollerMsg>) {
        self.marks.claims_begin();
        // A backlog: the last claim came back full (or its round stopped short), or timers wait.
        let backlog =
            self.next_claim == NextClaim::AsBatchesSettle || !self.publisher.queue_is_empty();
        // Whatever stops this round before its claim in `dueAt` order answers (no room, marks
        // owed after a failure) leaves batches at the broker: claim again as they settle, so
        // that no wake-up is lost.
        self.next_claim = NextClaim::AsBatchesSettle;
        self.next_claim_of(myself, Round::begin(backlog));
    }

    /// Starts the next claim of `round`, if it has one. None while a failure's backoff holds;
    /// while a failed mark is owed (nothing new is claimed before it is marked); nor once a
    /// failure closed the run (the next claim waits for its end). So a mark or a publish that
    /// fails while a claim is under way beside it (side by side) ends that claim's round.
    pub(super) fn next_claim_of(&mut self, myself: &ActorRef<PollerMsg>, mut round: Round) {
        let now = Instant::now();
        let closed = self.run.as_ref().is_some_and(Run::closed);
        if self.phase.backoff(now).is_some() || self.marks.failed() || closed {
            return;
        }
        let batch_size = self.args.batch_size;
        let (held, limit) = (self.publisher.held(), hold_limit(batch_size));
        // Room to hold another claim, and not so many owed their mark that it would be long.
        let room = held + claim_size(batch_size) <= limit && self.marks.timers() < MARK_AT_MOST;
        let fairness = &self.fairness;
        match round.next(|backlog| fairness.due(now, backlog, held, limit), room) {
            Some(Claim::Fair) => self.claim_fair(myself, now),
            Some(Claim::Due) => self.claim_due(myself),
            None => return,
        }
        self.phase.claim(round);
    }

    /// Queues claimed timers for publishing. The first claim of a run begins it.
    pub(super) fn hold(
        &mut self,
        timers: Vec<DueTimer>,
        decided_at: DateTime<Utc>,
        started: std::time::Instant,
    ) {
        if timers.is_empty() {
            return;
        }
        let lease = self.args.lease;
        self.run
            .get_or_insert_with(|| Run::begin(decided_at, lease));
        let held_at = std::time::Instant::now();
        self.publisher.hold(timers.into_iter().map(|timer| Waiting {
            timer,
            reached_at: decided_at,
            started,
            held_at,
        }));
    }

    /// Backs off after a failure: no claim before the delay, which doubles while failures
    /// repeat. Monotonic: a backoff is about the broker and the disk, not about timer time.
    pub(super) fn retry_later(&mut self, myself: &ActorRef<PollerMsg>) {
        let delay = self.failures.failed();
        self.phase.back_off(Instant::now() + delay);
        self.wake.after(myself, delay);
    }

    /// A graceful stop: waits, within its share of the stop's budget (`crate::stop`), for the
    /// batches at the broker and a mark under way, then marks what they fired. A claim under way
    /// is not waited for: its timers stay claimed, as the queued ones do, and are claimed again
    /// after a restart; on a shared database the daemon gives those claims up with its name
    /// once every actor has stopped (`daemon::name`), so the other daemons fire them at once.
    pub(super) async fn stop(&mut self) {
        self.wake.cancel();
        // One deadline for them all: each batch's own wait is bounded too, but a hundred of
        // them one after another would not be.
        let stop = self.args.registry.stop().clone();
        let deadline = stop.until(Reserve::ForMark);
        let (answers, at_broker) = self.publisher.stop();
        let mut outcomes = answers.published;
        let mut unfinished = answers.lost;
        for task in at_broker {
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Ok(Some(published))) => outcomes.push(published),
                _ => unfinished += 1,
            }
        }
        for _ in 0..unfinished {
            tracing::warn!(
                actor = "poller",
                "a batch in flight did not finish before the stop; it will be published again"
            );
        }
        for published in outcomes {
            if let Some(error) = published.error {
                tracing::warn!(actor = "poller", error = %error,
                    "DueTimeReached not acknowledged by the broker; timers stay Scheduled and are retried");
            }
            self.marks.owe(published.fired);
        }
        // What is not marked now is published again after a restart: a duplicate, not a loss.
        let mut unmarked = None;
        if let Some(answer) = self.phase.marked() {
            match tokio::time::timeout_at(stop.until(Reserve::ForStorage), answer).await {
                Ok(Ok(Marked {
                    batches,
                    result: Ok(count),
                })) => marks::record(&batches, count),
                Ok(Ok(Marked { batches, .. })) => self.marks.not_marked(batches),
                _ => unmarked = Some("the mark under way did not answer in time".to_owned()),
            }
        }
        if !self.marks.is_empty() {
            let batches = self.marks.take(usize::MAX);
            let persistence = self.args.registry.persistence();
            let mark = persistence.mark_reached(marks::keys(&batches));
            match tokio::time::timeout_at(stop.until(Reserve::ForStorage), mark).await {
                Ok(Ok(count)) => marks::record(&batches, count),
                Ok(Err(e)) => unmarked = Some(e.to_string()),
                Err(_) => unmarked = Some("the last mark did not answer in time".to_owned()),
            }
        }
        if let Some(error) = unmarked {
            tracing::warn!(actor = "poller", error = %error,
                "published timers could not be marked Reached before the stop; they will be published again");
        }
    }
}
