//! One base for the actors that work on a schedule: the Janitor (retention), the Gauges
//! (pending counts), the Checkpointer (the SQLite WAL) and the Sweeper (commands no consumer
//! reads). Each is a [`Periodic`]: its state, and one round of its work; [`Every`] is the actor
//! that runs the rounds. It owns what they had each written for themselves:
//!
//! - the schedule: the next round starts [`Periodic::EVERY`] after the last one ended (never
//!   from a timer that runs on while a round is slow, so rounds never pile up or overlap); a
//!   round may ask for its continuation sooner ([`Next::After`]: the Janitor's next step);
//! - failures: a failed round is retried by the one retry policy ([`crate::backoff::Retry`]),
//!   never later than the next round would have come; the first failure and every
//!   [`WARN_EVERY`]th after it are warnings, the rest debug lines, and the first success after
//!   failures says so; the actor itself never fails over a round;
//! - the stop: [`Periodic::stop`], within the stop's budget (`crate::stop`).

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::backoff::Retries;
use crate::stop::Reserve;

/// While rounds keep failing, every this many is logged as a warning.
pub const WARN_EVERY: u32 = 60;

/// Work done round after round by an actor of its own ([`Every`]).
pub trait Periodic: Sized + Send + 'static {
    /// The actor's name (registry, logs, metrics).
    const NAME: &'static str;
    /// From the end of one round to the start of the next.
    const EVERY: Duration;
    /// Whether the first round runs at once, or `EVERY` after the start.
    const AT_START: bool;
    type Args: Clone + Send + Sync + 'static;

    fn new(args: Self::Args) -> Self;

    /// The registry of the daemon it works for (its stop's budget).
    fn registry(&self) -> &Registry;

    /// Whether it has any work at all (the Janitor with retention off has none): `false` runs
    /// no round.
    fn enabled(&self) -> bool {
        true
    }

    /// One round. An error is the round's failure, told by the base (`what failed; retrying`).
    fn round(&mut self) -> impl Future<Output = Result<Next, String>> + Send;

    /// What a failed round did not do, for its log line ("finished timers not deleted").
    fn failed(&self) -> &'static str;

    /// Lets go of what it holds at a graceful stop (a connection), within the stop's budget.
    fn stop(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// When the next round starts, after one that succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// [`Periodic::EVERY`] after this one.
    Scheduled,
    /// After this pause: the round's work goes on (a sweep with rows left).
    After(Duration),
}

/// The actor that runs a [`Periodic`]'s rounds.
pub struct Every<P>(PhantomData<fn() -> P>);

impl<P> Default for Every<P> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<P: Periodic> NamedActor for Every<P> {
    const NAME: &'static str = P::NAME;
}

pub struct EveryState<P> {
    work: P,
    retries: Retries,
}

/// The one message: run a round. Only the base makes one (its field is private), each after
/// the last round ended, so one chain of rounds runs.
pub struct Round(());

/// Plans the next round `after` from now.
fn plan(myself: &ActorRef<Round>, after: Duration) {
    myself.send_after(after, || Round(()));
}

impl<P: Periodic> Actor for Every<P> {
    type Msg = Round;
    type State = EveryState<P>;
    type Arguments = P::Args;

    async fn pre_start(
        &self,
        _myself: ActorRef<Round>,
        args: P::Args,
    ) -> Result<EveryState<P>, ActorProcessingErr> {
        Ok(EveryState {
            work: P::new(args),
            retries: Retries::default(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Round>,
        state: &mut EveryState<P>,
    ) -> Result<(), ActorProcessingErr> {
        if !state.work.enabled() {
            return Ok(());
        }
        let first = match P::AT_START {
            true => Duration::ZERO,
            false => P::EVERY,
        };
        plan(&myself, first);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Round>,
        state: &mut EveryState<P>,
    ) -> Result<(), ActorProcessingErr> {
        let until = state.work.registry().stop().until(Reserve::ForStorage);
        let _ = tokio::time::timeout_at(until, state.work.stop()).await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Round>,
        _round: Round,
        state: &mut EveryState<P>,
    ) -> Result<(), ActorProcessingErr> {
        let next = match state.work.round().await {
            Ok(next) => {
                let failures = state.retries.succeeded();
                if failures > 0 {
                    tracing::info!(actor = P::NAME, failures, "working again after failures");
                }
                match next {
                    Next::Scheduled => P::EVERY,
                    Next::After(pause) => pause,
                }
            }
            Err(error) => {
                let delay = state.retries.failed().min(P::EVERY);
                let attempt = state.retries.failures();
                let what = state.work.failed();
                if attempt % WARN_EVERY == 1 {
                    tracing::warn!(actor = P::NAME, %error, attempt,
                        retry_in_ms = delay.as_millis() as u64, "{what}; retrying");
                } else {
                    tracing::debug!(actor = P::NAME, %error, attempt,
                        retry_in_ms = delay.as_millis() as u64, "{what}; retrying");
                }
                delay
            }
        };
        plan(&myself, next);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Fails its first `fail` rounds, then asks for its continuation `steps` times.
    struct Counting {
        registry: Registry,
        rounds: Arc<AtomicUsize>,
        fail: usize,
        steps: usize,
    }

    impl Periodic for Counting {
        const NAME: &'static str = "counting";
        const EVERY: Duration = Duration::from_secs(3600);
        const AT_START: bool = true;
        type Args = (Arc<AtomicUsize>, usize, usize);

        fn new((rounds, fail, steps): Self::Args) -> Self {
            Self {
                registry: Registry::new("periodic-test"),
                rounds,
                fail,
                steps,
            }
        }

        fn registry(&self) -> &Registry {
            &self.registry
        }

        async fn round(&mut self) -> Result<Next, String> {
            let n = self.rounds.fetch_add(1, Ordering::SeqCst);
            if n < self.fail {
                return Err("no".into());
            }
            match n < self.fail + self.steps {
                true => Ok(Next::After(Duration::from_millis(1))),
                false => Ok(Next::Scheduled),
            }
        }

        fn failed(&self) -> &'static str {
            "nothing counted"
        }
    }

    async fn rounds_after(fail: usize, steps: usize, watched: Duration) -> usize {
        let rounds = Arc::new(AtomicUsize::new(0));
        let (actor, _) = Actor::spawn(
            None,
            Every::<Counting>::default(),
            (rounds.clone(), fail, steps),
        )
        .await
        .unwrap();
        tokio::time::sleep(watched).await;
        actor.stop(None);
        rounds.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_that_asks_for_more_goes_on_then_waits_for_its_interval() {
        // At start, then three steps, then nothing within the hour.
        assert_eq!(rounds_after(0, 3, Duration::from_secs(60)).await, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_rounds_are_retried_by_the_retry_policy() {
        // 100, 200, 400, 800 ms after the four failures: the fifth round succeeds by 1.6 s.
        assert_eq!(rounds_after(4, 0, Duration::from_millis(1_400)).await, 4);
        assert_eq!(rounds_after(4, 0, Duration::from_millis(1_600)).await, 5);
    }
}
