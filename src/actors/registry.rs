//! How the actors of one daemon find each other.
//!
//! Each actor is registered under a name unique to its daemon and looked up at each use, so a
//! sibling restarted by the Supervisor is reached under the same name and no actor holds a
//! reference to a dead peer. The prefix is the daemon's name, so log lines name the daemon
//! (`Actor{name="timers-1/poller"}`); later daemons of the same process (tests run several)
//! get a number after it (`timers-1#2`), since actor names are process-global.

use std::sync::atomic::{AtomicU64, Ordering};

use ractor::{ActorRef, Message};

use crate::stop::StopDeadline;

/// Names of one daemon's actors.
#[derive(Debug, Clone)]
pub struct Registry {
    prefix: String,
    /// The deadline of the daemon's stop, once one began: every actor's stop waits until a
    /// point derived from it (`crate::stop`).
    stop: StopDeadline,
}

impl Registry {
    /// The names of the daemon called `daemon`.
    pub fn new(daemon: &str) -> Self {
        static DAEMONS: AtomicU64 = AtomicU64::new(0);
        let prefix = match DAEMONS.fetch_add(1, Ordering::Relaxed) {
            0 => daemon.to_owned(),
            nth => format!("{daemon}#{}", nth + 1),
        };
        Self {
            prefix,
            stop: StopDeadline::default(),
        }
    }

    /// The deadline of this daemon's stop.
    pub fn stop(&self) -> &StopDeadline {
        &self.stop
    }

    /// The process-wide name of this daemon's actor `actor`.
    pub fn name(&self, actor: &str) -> String {
        format!("{}/{actor}", self.prefix)
    }

    pub fn supervisor_name(&self) -> String {
        format!("{}/supervisor", self.prefix)
    }

    /// This daemon's running actor `actor`, if it runs (a restarting actor does not).
    pub fn get<M: Message>(&self, actor: &str) -> Option<ActorRef<M>> {
        ActorRef::where_is(self.name(actor))
    }
}
