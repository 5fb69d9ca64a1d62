//! The link to the broker, watched. A path that goes silent without a reset (the broker's
//! machine lost, a NAT or load balancer that dropped the connection's state) closes nothing:
//! the connection just stops bringing anything back. Two things notice it within
//! `[nats] link_timeout`: the client pings a third of it apart whenever nothing comes in and
//! drops the connection after three unanswered pings; and this watch forces a reconnection
//! when a batch of events waits out its bound and no PubAck came since it was handed over (a
//! path silent only toward the broker, while requests to the API still come in, keeps the
//! client from pinging). Either way the loss is logged with its cause and counted
//! (`timer_broker_links_lost_total`), and readiness is red until the client is connected again.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_nats::Client;
use tokio::time::Instant;

use crate::health::Health;

/// How often the bytes received are sampled, to tell a silent path from a closed connection.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

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

    /// `what`, handed over at `since`, was not answered within its bound. If the broker has
    /// acknowledged nothing since either, the link counts as lost and the client is made to
    /// reconnect (at most once per `link_timeout`). A broker that still acknowledges other
    /// publishes sees no reconnection, nor does a connection made after `since` (the wait ran
    /// out on the one before).
    pub fn unanswered(&self, what: &str, since: Instant) {
        let Some(client) = self.inner.client.get() else {
            return;
        };
        if client.connection_state() != async_nats::connection::State::Connected {
            return;
        }
        let timeout = self.inner.timeout;
        let mut state = self.state();
        let unanswered_for = state.answered_at.elapsed();
        let before_this_connection = since < state.connected_at;
        if before_this_connection
            || state.answered_at >= since
            || state.forced_at.is_some_and(|at| at.elapsed() < timeout)
        {
            return;
        }
        state.forced_at = Some(Instant::now());
        drop(state);
        lost(Loss::Silent);
        tracing::warn!(actor = "broker", what, unanswered_s = unanswered_for.as_secs_f64(),
            link_timeout = ?timeout,
            "broker link lost: the broker acknowledged nothing (a silent path); reconnecting");
        self.inner.health.set_broker_connected(false);
        let client = client.clone();
        // The client's command queue may be full behind the silent connection: bounded.
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, client.force_reconnect()).await;
        });
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
