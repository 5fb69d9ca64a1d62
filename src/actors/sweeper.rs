//! Sweeper actor: [`EVERY`] after its last look, looks for commands the command stream holds that no consumer
//! reads (`ports::UnreadCommands`) and hands them to the CommandHandler, which applies or
//! rejects each as if it had been pulled (docs/CONTRACT.md §3). A command is handed over only
//! when two looks in a row found it: a consumer being created (a daemon changing the lines,
//! `timer-service lines set`) is given that long to take what is its own.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::command_handler::{CommandHandler, CommandHandlerMsg};
use super::periodic::{Every, Next, Periodic};
use super::registry::Registry;
use super::supervisor::NamedActor;
use crate::ports::{InboundCommand, UnreadCommands};

/// How often the stream is looked at: an unread command is handed over within two of these.
pub const EVERY: Duration = Duration::from_secs(2);
/// Most commands handed over per look.
const MAX_PER_LOOK: usize = 1_000;
/// A command handed over and still found later (its commit or rejection under way, or failed)
/// is handed over again only after this.
const HAND_AGAIN_AFTER: Duration = Duration::from_secs(30);

/// The Sweeper actor: a look per round ([`Every`]).
pub type Sweeper = Every<StrayCommands>;

#[derive(Clone)]
pub struct SweeperArgs {
    pub registry: Registry,
    pub strays: Arc<dyn UnreadCommands>,
}

/// A command by its stream incarnation and sequence.
type Key = (i64, u64);

/// The Sweeper's work and what it remembers between looks.
pub struct StrayCommands {
    args: SweeperArgs,
    /// What the last look found.
    seen: HashSet<Key>,
    /// What was handed over, and when.
    handed: HashMap<Key, Instant>,
    hand_overs: HandOvers,
}

impl Periodic for StrayCommands {
    const NAME: &'static str = "sweeper";
    /// Each look is planned once the last is done: a look held up by a broker that does not
    /// answer (its requests bounded at 5 s each) does not pile looks up behind it.
    const EVERY: Duration = EVERY;
    const AT_START: bool = false;
    type Args = SweeperArgs;

    fn new(args: SweeperArgs) -> Self {
        Self {
            args,
            seen: HashSet::new(),
            handed: HashMap::new(),
            hand_overs: HandOvers::default(),
        }
    }

    fn registry(&self) -> &Registry {
        &self.args.registry
    }

    async fn round(&mut self) -> Result<Next, String> {
        look(self).await?;
        Ok(Next::Scheduled)
    }

    fn failed(&self) -> &'static str {
        "cannot look for unread commands"
    }
}

async fn look(state: &mut StrayCommands) -> Result<(), String> {
    let found = state
        .args
        .strays
        .unread(MAX_PER_LOOK)
        .await
        .map_err(|e| e.to_string())?;
    let now = Instant::now();
    state
        .handed
        .retain(|_, at| now.duration_since(*at) < HAND_AGAIN_AFTER);
    let key = |c: &InboundCommand| (c.stream.created_ns, c.sequence);
    let seen = found.iter().map(key).collect();
    let mut ready: Vec<InboundCommand> = found
        .into_iter()
        .filter(|c| state.seen.contains(&key(c)) && !state.handed.contains_key(&key(c)))
        .collect();
    state.seen = seen;
    state.hand_overs.forget_gone(&state.seen);
    if ready.is_empty() {
        return Ok(());
    }
    let Some(handler) = state
        .args
        .registry
        .get::<CommandHandlerMsg>(CommandHandler::NAME)
    else {
        return Ok(());
    };
    let keys: Vec<Key> = ready.iter().map(key).collect();
    let counts = state.hand_overs.next(&keys);
    for (command, deliveries) in ready.iter_mut().zip(&counts) {
        command.deliveries = *deliveries;
    }
    tracing::info!(
        actor = StrayCommands::NAME,
        commands = ready.len(),
        "commands no consumer reads handed to the command handler"
    );
    // Only a hand-over that reached the handler counts: one that did not (the handler
    // restarting) is not a delivery, and must not bring a stray nearer to being given up.
    if handler.cast(CommandHandlerMsg::Deliver(ready)).is_ok() {
        state.hand_overs.record(keys.iter().copied().zip(counts));
        state.handed.extend(keys.into_iter().map(|k| (k, now)));
    }
    Ok(())
}

/// How many times each stray still found was handed over. A stray's hand-overs are its
/// deliveries, as the broker counts a consumer's: so a rejection that stays unpublished is
/// given up at the tenth (docs/CONTRACT.md §3) for it too, not retried every
/// [`HAND_AGAIN_AFTER`] for as long as the daemon runs.
#[derive(Debug, Default)]
struct HandOvers(HashMap<Key, u64>);

impl HandOvers {
    /// Forgets the commands the last look no longer found (`seen`): settled, or in a stream
    /// created anew.
    fn forget_gone(&mut self, seen: &HashSet<Key>) {
        self.0.retain(|key, _| seen.contains(key));
    }

    /// Each of `keys`' delivery count if it is handed over now.
    fn next(&self, keys: &[Key]) -> Vec<u64> {
        keys.iter()
            .map(|key| self.0.get(key).copied().unwrap_or(0) + 1)
            .collect()
    }

    /// The hand-overs that reached the handler, with their counts.
    fn record(&mut self, counted: impl IntoIterator<Item = (Key, u64)>) {
        self.0.extend(counted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A look: forget what is gone, count the hand-over of `keys`, and record it if `reached`.
    fn look(
        hand_overs: &mut HandOvers,
        seen: &HashSet<Key>,
        keys: &[Key],
        reached: bool,
    ) -> Vec<u64> {
        hand_overs.forget_gone(seen);
        let counts = hand_overs.next(keys);
        if reached {
            hand_overs.record(keys.iter().copied().zip(counts.clone()));
        }
        counts
    }

    #[test]
    fn a_stray_is_delivered_once_more_at_each_hand_over_until_it_is_gone() {
        let mut hand_overs = HandOvers::default();
        let (a, b) = ((1, 7), (1, 8));
        let seen: HashSet<Key> = [a, b].into();
        assert_eq!(look(&mut hand_overs, &seen, &[a], true), [1]);
        assert_eq!(look(&mut hand_overs, &seen, &[a, b], true), [2, 1]);
        // `a` settled (removed from the stream): its count goes with it.
        let seen: HashSet<Key> = [b].into();
        assert_eq!(look(&mut hand_overs, &seen, &[b], true), [2]);
        assert_eq!(hand_overs.0, HashMap::from([(b, 2)]));
        // The same sequence in a stream created anew is another command.
        let c = (2, 7);
        let seen: HashSet<Key> = [b, c].into();
        assert_eq!(look(&mut hand_overs, &seen, &[c], true), [1]);
    }

    #[test]
    fn a_hand_over_that_did_not_reach_the_handler_is_not_counted() {
        let mut hand_overs = HandOvers::default();
        let a = (1, 7);
        let seen: HashSet<Key> = [a].into();
        assert_eq!(look(&mut hand_overs, &seen, &[a], true), [1]);
        assert_eq!(look(&mut hand_overs, &seen, &[a], false), [2]);
        assert_eq!(
            look(&mut hand_overs, &seen, &[a], true),
            [2],
            "the failed cast was not a delivery"
        );
    }
}
