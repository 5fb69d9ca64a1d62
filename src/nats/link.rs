//! The link to the broker, watched. A path that goes silent without a reset (the broker's
//! machine lost, a NAT or load balancer that dropped the connection's state) closes nothing:
//! the connection just stops bringing anything back. Two things notice it within
//! `[nats] link_timeout`: the client pings a third of it apart whenever nothing comes in and
//! drops the connection after three unanswered pings; and this watch forces a reconnection
//! when a batch of events waits out its bound, no PubAck came since it was handed over, and a
//! question to the broker's JetStream is not answered within [`PROBE_BOUND`] either (a path
//! silent only toward the broker, while requests to the API still come in, keeps the client
//! from pinging). The question tells a silent path from a wait that ran out on the daemon's
//! side: a daemon paused (SIGSTOP, a VM suspended) past its bounds finds them all run out on
//! waking, before it has read the answers waiting in its socket, and the path is fine. Either way the loss is logged with its cause and counted
//! (`timer_broker_links_lost_total`), and readiness is red until the client is connected again.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_nats::Client;
use tokio::time::Instant;

use crate::health::Health;

/// How often the bytes received are sampled, to tell a silent path from a closed connection.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// How long the broker's JetStream may take to answer before the path counts as silent: ample
/// for a broker 200 ms away, short beside the bound that ran out before it is asked.
pub const PROBE_BOUND: Duration = Duration::from_secs(1);

/// Shared, cheap to clone: the connection's events, the event bus and the sampler report here.
#[derive(Clone)]
pub struct LinkWatch {
    inner: Arc<Inner>,
}

struct Inner {
    health: Health,
    timeout: Duration,
    client: std::sync::OnceLock<Client>,
    state: Mutex<State>,
}

struct State {
    /// When bytes last came in from the broker (as sampled), and the count then.
    heard_at: Instant,
    in_bytes: u64,
    /// When the broker last acknowledged a publish.
    answered_at: Instant,
    /// When this watch last forced a reconnection.
    forced_at: Option<Instant>,
    /// When the client last connected: what was handed over before says nothing of this
    /// connection.
    connected_at: Instant,
    /// Whether a question to the broker is under way: one at a time.
    probing: bool,
}

/// Why the link was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Nothing came back for long enough: a silent path.
    Silent,
    /// The connection closed (the broker restarted, refused, or reset it).
    Closed,
}

impl Loss {
    fn label(self) -> &'static str {
        match self {
            Loss::Silent => "silent",
            Loss::Closed => "closed",
        }
    }
}

impl LinkWatch {
    /// A watch judging silence by `timeout` (`[nats] link_timeout`).
    pub fn new(health: Health, timeout: Duration) -> Self {
        let now = Instant::now();
        Self {
            inner: Arc::new(Inner {
                health,
                timeout,
                client: std::sync::OnceLock::new(),
                state: Mutex::new(State {
                    heard_at: now,
                    in_bytes: 0,
                    answered_at: now,
                    forced_at: None,
                    connected_at: now,
                    probing: false,
                }),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle for the connection's event callback, which the client owns: a weak one, so
    /// that the client does not keep the watch (which holds the client) alive.
    pub fn downgrade(&self) -> WeakLinkWatch {
        WeakLinkWatch(Arc::downgrade(&self.inner))
    }

    /// Watches `client`: samples the bytes it receives until the watch is dropped.
    pub fn attach(&self, client: Client) {
        let statistics = client.statistics();
        if self.inner.client.set(client).is_err() {
            return;
        }
        let weak = self.downgrade();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SAMPLE_EVERY);
            loop {
                every.tick().await;
                let Some(watch) = weak.upgrade() else { return };
                let received = statistics
                    .in_bytes
                    .load(std::sync::atomic::Ordering::Relaxed);
                let mut state = watch.state();
                if received != state.in_bytes {
                    state.in_bytes = received;
                    state.heard_at = Instant::now();
                }
            }
        });
    }

    /// The client connected (again).
    pub fn connected(&self) {
        let mut state = self.state();
        state.heard_at = Instant::now();
        state.connected_at = state.heard_at;
        drop(state);
        self.inner.health.set_broker_connected(true);
        tracing::info!(actor = "broker", "connected to NATS");
    }

    /// The client lost its connection and reconnects: logged with the cause, unless this watch
    /// forced it and said so already.
    pub fn disconnected(&self) {
        self.inner.health.set_broker_connected(false);
        let state = self.state();
        if state
            .forced_at
            .is_some_and(|at| at.elapsed() < self.inner.timeout)
        {
            tracing::info!(
                actor = "broker",
                "disconnected from NATS as asked; reconnecting"
            );
            return;
        }
        let quiet = state.heard_at.elapsed();
        drop(state);
        // Three pings a third of the timeout apart went unanswered: the sampled silence is
        // two thirds of it at least, less one sample.
        if quiet + SAMPLE_EVERY >= self.inner.timeout * 2 / 3 {
            lost(Loss::Silent);
            tracing::warn!(actor = "broker", quiet_s = quiet.as_secs_f64(),
                link_timeout = ?self.inner.timeout,
                "broker link lost: nothing came back from the broker (a silent path); reconnecting");
        } else {
            lost(Loss::Closed);
            tracing::warn!(
                actor = "broker",
                "broker link lost: the connection closed; reconnecting"
            );
        }
    }

    /// Whether the client is connected (a watch without a client yet: as far as it knows).
    pub fn is_up(&self) -> bool {
        self.inner.client.get().is_none_or(|client| {
            client.connection_state() == async_nats::connection::State::Connected
        })
    }

    /// The broker answered: it acknowledged a publish, or delivered to or closed a pull request.
    pub fn answered(&self) {
        self.state().answered_at = Instant::now();
    }

    /// Whether the broker has answered anything since `since`.
    pub fn answered_since(&self, since: Instant) -> bool {
        self.state().answered_at >= since
    }

    /// `what`, handed over at `since`, was not answered within its bound. If the broker has
    /// acknowledged nothing since either, its JetStream is asked a question; unanswered within
    /// [`PROBE_BOUND`], the link counts as lost and the client is made to
    /// reconnect (at most once per `link_timeout`). A broker that still acknowledges other
    /// publishes sees no reconnection, nor does a connection made after `since` (the wait ran
    /// out on the one before), nor a broker that answers the question.
    pub fn unanswered(&self, what: &str, since: Instant) {
        let Some(client) = self.inner.client.get() else {
            return;
        };
        if client.connection_state() != async_nats::connection::State::Connected {
            return;
        }
        let mut state = self.state();
        if self.holds(&state, since) || state.probing {
            return;
        }
        state.probing = true;
        drop(state);
        let watch = self.clone();
        let client = client.clone();
        let what = what.to_owned();
        tokio::spawn(async move {
            let answered = round_trip(&client, PROBE_BOUND).await;
            // The client may have found the loss itself meanwhile (its pings): counted once.
            let connected = client.connection_state() == async_nats::connection::State::Connected;
            match watch.after_question(answered, connected, since) {
                Some(unanswered_for) => watch.force(&client, &what, unanswered_for).await,
                None if answered => tracing::info!(
                    actor = "broker",
                    what,
                    "unanswered, but the broker answered a question at once: the wait ran out \
                     on this side (the daemon paused or starved); the link stays"
                ),
                None => {}
            }
        });
    }

    /// Settles the question asked after `since` went unanswered: how long nothing had been
    /// answered when the link is to be counted lost, `None` when it stays.
    fn after_question(&self, answered: bool, connected: bool, since: Instant) -> Option<Duration> {
        let mut state = self.state();
        state.probing = false;
        if answered {
            state.answered_at = Instant::now();
            return None;
        }
        if !connected || self.holds(&state, since) {
            return None;
        }
        state.forced_at = Some(Instant::now());
        Some(state.answered_at.elapsed())
    }

    /// Whether the link is to be kept although `since` went unanswered: the broker answered
    /// something after it, the client connected after it (the wait ran out on the connection
    /// before), or this watch forced a reconnection a moment ago.
    fn holds(&self, state: &State, since: Instant) -> bool {
        state.answered_at >= since
            || since < state.connected_at
            || state
                .forced_at
                .is_some_and(|at| at.elapsed() < self.inner.timeout)
    }

    /// Counts the link lost to a silent path and makes the client reconnect.
    async fn force(&self, client: &Client, what: &str, unanswered_for: Duration) {
        let timeout = self.inner.timeout;
        lost(Loss::Silent);
        tracing::warn!(actor = "broker", what, unanswered_s = unanswered_for.as_secs_f64(),
            link_timeout = ?timeout,
            "broker link lost: the broker acknowledged nothing (a silent path); reconnecting");
        self.inner.health.set_broker_connected(false);
        // The client's command queue may be full behind the silent connection: bounded.
        let _ = tokio::time::timeout(timeout, client.force_reconnect()).await;
    }
}

/// Whether the broker's JetStream answers a question (the account's info) within `bound`:
/// the path carries bytes both ways now and JetStream, which the daemon's waits were on,
/// answers. An error JetStream sends back is an answer; "no responders" is not (no JetStream on
/// this server: another may have one). Bounded as a whole, the client's command queue included
/// (it may be full behind a silent connection).
async fn round_trip(client: &Client, bound: Duration) -> bool {
    use async_nats::jetstream::context::AccountErrorKind;
    let jetstream = async_nats::jetstream::new(client.clone());
    match tokio::time::timeout(bound, jetstream.query_account()).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => matches!(e.kind(), AccountErrorKind::JetStream(_)),
        Err(_) => false,
    }
}

fn lost(loss: Loss) {
    metrics::counter!(crate::telemetry::BROKER_LINKS_LOST, "cause" => loss.label()).increment(1);
}

/// A [`LinkWatch`] that does not keep it alive.
#[derive(Clone)]
pub struct WeakLinkWatch(Weak<Inner>);

impl WeakLinkWatch {
    pub fn upgrade(&self) -> Option<LinkWatch> {
        self.0.upgrade().map(|inner| LinkWatch { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readiness_follows_the_connection_and_an_unattached_watch_forces_nothing() {
        let health = Health::new();
        let watch = LinkWatch::new(health.clone(), Duration::from_secs(3));
        watch.connected();
        assert!(health.status().broker_connected);
        watch.unanswered("PubAck", Instant::now());
        assert!(health.status().broker_connected, "no client to reconnect");
        watch.disconnected();
        assert!(!health.status().broker_connected);
    }
}
