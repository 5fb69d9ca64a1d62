//! Faults of the path between the daemon and its broker, made by the run's own proxy
//! (`common::net_proxy`), none of them announced by a reset: the path gone silent both ways (a
//! lost machine, a NAT that dropped the connection's state), silent from the daemon to the
//! broker only, and a distant broker (200 ms each way). The first of them restarts the daemon on
//! the proxy's address (it stays there). The broker itself runs on, and the workload's clients
//! reach it directly, so commands keep being acknowledged meanwhile.
//! Invariant (k) judges each heal: every timer acknowledged before it fires within 10 s of the
//! later of its dueAt and the heal (docs/CONTRACT.md §1, "The broker link").

use std::time::Duration;

use super::Nemesis;
use super::outages::readyz_within;

/// Longer than the daemon's `link_timeout` (6 s), so that it must notice the silence and
/// reconnect once a path is there again (the connections the silence caught stay dead).
const SILENT_FOR: Duration = Duration::from_secs(8);
const ONE_WAY_FOR: Duration = Duration::from_secs(7);
/// A distant broker: each byte delivered this long after it was sent, each way.
const DISTANCE: Duration = Duration::from_millis(200);
const DISTANT_FOR: Duration = Duration::from_secs(5);

impl Nemesis {
    /// Puts the run's proxy between the daemon and the broker, if it is not there yet: the
    /// daemon is stopped (SIGTERM) and started again on the proxy's address.
    async fn daemon_via_proxy(&mut self, notes: &mut Vec<String>) {
        if self.world.via_proxy {
            return;
        }
        self.world.via_proxy = true;
        let status = self.world.stop_daemon(Duration::from_secs(15)).await;
        self.world.start_daemon();
        let ready = readyz_within(&self.world.http, 200, Duration::from_secs(20)).await;
        notes.push(format!(
            "the daemon restarted on the proxy's address first (stopped: {status:?}; ready {})",
            ready.map_or("not within 20 s".into(), |t| format!(
                "{} ms after",
                t.as_millis()
            ))
        ));
    }

    /// The path silent both ways (`one_way`: from the daemon to the broker only) for a while,
    /// then a new path there; notes when `/readyz` turned 503.
    pub(super) async fn silent_path(&mut self, one_way: bool, notes: &mut Vec<String>) {
        self.daemon_via_proxy(notes).await;
        let silent_for = if one_way { ONE_WAY_FOR } else { SILENT_FOR };
        if one_way {
            self.world.proxy.one_way();
        } else {
            self.world.proxy.silent();
        }
        let began = std::time::Instant::now();
        let red = readyz_within(&self.world.http, 503, silent_for).await;
        tokio::time::sleep(silent_for.saturating_sub(began.elapsed())).await;
        self.world.proxy.heal();
        notes.push(format!(
            "{} for {silent_for:?}: /readyz 503 {}",
            if one_way {
                "daemon-to-broker path silent"
            } else {
                "path silent both ways"
            },
            red.map_or("never while it lasted".into(), |t| format!(
                "{} ms into it",
                t.as_millis()
            ))
        ));
    }

    /// Every byte between daemon and broker delayed [`DISTANCE`] each way for a while.
    pub(super) async fn distant_broker(&mut self, notes: &mut Vec<String>) {
        self.daemon_via_proxy(notes).await;
        self.world.proxy.latency(DISTANCE);
        tokio::time::sleep(DISTANT_FOR).await;
        self.world.proxy.latency(Duration::ZERO);
        notes.push(format!(
            "broker {} ms away each way for {DISTANT_FOR:?}",
            DISTANCE.as_millis()
        ));
    }
}
