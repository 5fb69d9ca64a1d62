//! Database faults on PostgreSQL are outages the daemon waits out (docs/CONTRACT.md §7, §8): the
//! server frozen (every process SIGSTOPped) or stopped and started again while timers are
//! scheduled and fire at 100 a second. In each: `/readyz` turns 503 within seconds, even while
//! a statement hangs on the frozen server, and 200 again by itself once the server answers;
//! every timer scheduled fires (counted as the daemon publishes them, on a plain subscriber, so
//! the broker's deduplication hides nothing). And a daemon started while its database is
//! frozen waits for it, then becomes ready. And a daemon stopped mid-burst while its database
//! is frozen exits within its stop's budget, and loses nothing.
//!
//! Each test runs a PostgreSQL server of its own (`common::postgres_cluster`), in the SQLite run
//! as in the PostgreSQL one; where this machine has no PostgreSQL binaries, the tests say so
//! and pass without running.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use common::{
    DaemonProcess, NatsServer, PostgresCluster, Scratch, TestClient, free_port, http_get,
};
use futures::StreamExt;

/// How soon `/readyz` must turn red once the database stops answering: the write proof's bound
/// (three probe intervals, 6 s) and a margin for a loaded machine.
const RED_WITHIN: Duration = Duration::from_secs(8);
/// How soon `/readyz` must turn green again once the database answers again.
const GREEN_WITHIN: Duration = Duration::from_secs(15);
/// Timers scheduled per second, each due a second after it is sent.
const RATE: usize = 100;

/// A daemon with HTTP, on the test's own PostgreSQL server.
struct World {
    cluster: PostgresCluster,
    server: NatsServer,
    scratch: Scratch,
    addr: String,
    daemon: Option<DaemonProcess>,
}

impl World {
    /// The cluster, a broker, and (when `start_daemon`) the daemon, ready; `None` (the test is
    /// skipped) without PostgreSQL binaries.
    async fn start(what: &str, start_daemon: bool) -> Option<World> {
        let cluster = tokio::task::block_in_place(|| PostgresCluster::start_or_skip(what))?;
        let server = NatsServer::start();
        let scratch = Scratch::on_postgres(cluster.url());
        let addr = format!("127.0.0.1:{}", free_port());
        let mut world = World {
            cluster,
            server,
            scratch,
            addr,
            daemon: None,
        };
        if start_daemon {
            world.start_daemon();
            world
                .await_readyz(200, Duration::from_secs(30), "ready at start")
                .await;
        }
        Some(world)
    }

    fn start_daemon(&mut self) {
        self.start_daemon_with(&[]);
    }

    fn start_daemon_with(&mut self, env: &[(&str, &str)]) {
        let mut env = env.to_vec();
        env.push(("TIMER_HTTP_LISTEN", self.addr.as_str()));
        self.daemon = Some(DaemonProcess::start_with(&self.server, &self.scratch, &env));
    }

    /// Polls `/readyz` until it answers `code`; returns how long that took and what it said.
    /// Fails after `within`, with the daemon's log.
    async fn await_readyz(&self, code: u16, within: Duration, what: &str) -> (Duration, String) {
        let started = Instant::now();
        loop {
            if let Some((status, body)) = http_get(&self.addr, "/readyz").await
                && status == code
            {
                return (started.elapsed(), body);
            }
            if started.elapsed() >= within {
                let log = self
                    .daemon
                    .as_ref()
                    .and_then(|d| std::fs::read_to_string(&d.log).ok())
                    .unwrap_or_default();
                panic!(
                    "/readyz did not answer {code} within {within:?} ({what}); daemon log:\n{log}"
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// What the daemon publishes, as a plain (core NATS) subscriber sees it: every
/// `DueTimeReached` by service call id, duplicates counted.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<HashMap<String, usize>>>);

impl Seen {
    async fn subscribe(client: &async_nats::Client) -> Seen {
        let seen = Seen::default();
        let mut events = client
            .subscribe("timer.evt.due.>")
            .await
            .expect("subscribe");
        client.flush().await.expect("flush");
        let into = seen.clone();
        tokio::spawn(async move {
            while let Some(message) = events.next().await {
                let Ok(event) = serde_json::from_slice::<serde_json::Value>(&message.payload)
                else {
                    continue;
                };
                if let Some(id) = event["payload"]["serviceCallId"].as_str() {
                    *into.0.lock().unwrap().entry(id.to_owned()).or_default() += 1;
                }
            }
        });
        seen
    }

    fn missing<'a>(&self, ids: &'a [String]) -> Vec<&'a String> {
        let seen = self.0.lock().unwrap();
        ids.iter().filter(|id| !seen.contains_key(*id)).collect()
    }

    /// Waits up to `within` until every one of `ids` was published; fails naming the missing
    /// (`what`: which timers they are).
    async fn await_all(&self, ids: &[String], within: Duration, what: &str) {
        let deadline = Instant::now() + within;
        while !self.missing(ids).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let missing = self.missing(ids);
        assert!(
            missing.is_empty(),
            "{what}: {} of {} never fired, e.g. {:?}",
            missing.len(),
            ids.len(),
            &missing[..missing.len().min(5)]
        );
    }

    fn duplicates(&self) -> usize {
        self.0.lock().unwrap().values().map(|n| n - 1).sum()
    }
}

/// Schedules [`RATE`] timers a second (each due a second later, each PubAck'd) until `stop`,
/// and returns their ids.
fn load(
    client: Arc<TestClient>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut ids = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut n = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            tick.tick().await;
            let due = Utc::now() + chrono::Duration::seconds(1);
            let batch: Vec<String> = (0..RATE / 10)
                .map(|_| {
                    n += 1;
                    format!("load-{n:06}")
                })
                .collect();
            futures::future::join_all(
                batch
                    .iter()
                    .map(|id| client.schedule("acme", id, due, None)),
            )
            .await;
            ids.extend(batch);
        }
        ids
    })
}

/// The load running, from before a fault to after it.
struct Load {
    seen: Seen,
    stop: Arc<std::sync::atomic::AtomicBool>,
    scheduling: tokio::task::JoinHandle<Vec<String>>,
}

impl Load {
    /// Starts the load, and returns once it runs end to end (so the fault meets operations in
    /// flight).
    async fn start(world: &World) -> Load {
        let client = Arc::new(TestClient::connect(&world.server).await);
        client.wait_for_command_stream().await;
        let seen = Seen::subscribe(&client.client).await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let scheduling = load(client, stop.clone());
        common::eventually(Duration::from_secs(30), "the load to fire", || async {
            (seen.0.lock().unwrap().len() >= RATE).then_some(())
        })
        .await;
        Load {
            seen,
            stop,
            scheduling,
        }
    }

    /// Runs two more seconds after the heal, stops, and asserts that every timer scheduled
    /// fired; prints the counts.
    async fn finish(self, name: &str) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let ids = self.scheduling.await.expect("the load");
        self.seen
            .await_all(&ids, Duration::from_secs(45), &format!("{name}: timers"))
            .await;
        eprintln!(
            "{name}: {} timers scheduled and acknowledged, all fired, {} duplicates published",
            ids.len(),
            self.seen.duplicates()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_database_turns_readiness_red_within_seconds_and_loses_nothing() {
    let what = "a frozen database";
    let Some(mut world) = World::start(what, true).await else {
        return;
    };
    let load = Load::start(&world).await;
    tokio::task::block_in_place(|| world.cluster.freeze());
    let frozen = Instant::now();
    let (red, body) = world
        .await_readyz(503, RED_WITHIN, "after the freeze")
        .await;
    assert!(body.contains("database"), "the database is named: {body}");
    // Frozen for 10 s in all: longer than the server's own limits, shorter than the
    // daemon's deadline on an operation (a statement in flight completes after the thaw).
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(frozen.elapsed())).await;
    assert_eq!(
        http_get(&world.addr, "/readyz").await.map(|(code, _)| code),
        Some(503),
        "not ready while frozen"
    );
    tokio::task::block_in_place(|| world.cluster.thaw());
    let (green, _) = world
        .await_readyz(200, GREEN_WITHIN, "after the thaw")
        .await;
    eprintln!(
        "{what}: /readyz 503 {} ms after the freeze ({body}), 200 {} ms after the thaw",
        red.as_millis(),
        green.as_millis()
    );
    load.finish(what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_and_restarted_database_turns_readiness_red_and_back_and_loses_nothing() {
    let what = "a database stopped and restarted";
    let Some(mut world) = World::start(what, true).await else {
        return;
    };
    let load = Load::start(&world).await;
    tokio::task::block_in_place(|| world.cluster.stop());
    let stopped = Instant::now();
    let (red, body) = world.await_readyz(503, RED_WITHIN, "after the stop").await;
    assert!(body.contains("database"), "the database is named: {body}");
    tokio::time::sleep(Duration::from_secs(8).saturating_sub(stopped.elapsed())).await;
    tokio::task::block_in_place(|| world.cluster.restart());
    let (green, _) = world
        .await_readyz(200, GREEN_WITHIN, "after the restart")
        .await;
    eprintln!(
        "{what}: /readyz 503 {} ms after the stop ({body}), 200 {} ms after the restart",
        red.as_millis(),
        green.as_millis()
    );
    load.finish(what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_started_while_its_database_is_frozen_becomes_ready_once_it_thaws() {
    let what = "a daemon started on a frozen database";
    let Some(mut world) = World::start(what, false).await else {
        return;
    };
    tokio::task::block_in_place(|| world.cluster.freeze());
    world.start_daemon();
    // It waits for the database, and says so, rather than exiting.
    let log = world.daemon.as_ref().expect("started").log.clone();
    common::eventually(
        Duration::from_secs(20),
        "the daemon to report the database unreachable",
        || async {
            std::fs::read_to_string(&log)
                .ok()
                .filter(|log| log.contains("database not reachable"))
                .map(|_| ())
        },
    )
    .await;
    assert!(
        world
            .daemon
            .as_mut()
            .expect("started")
            .try_status()
            .is_none(),
        "the daemon waits for its database"
    );
    let client = TestClient::connect(&world.server).await;
    let thawed = Instant::now();
    tokio::task::block_in_place(|| world.cluster.thaw());
    let (green, _) = world
        .await_readyz(200, Duration::from_secs(30), "after the thaw")
        .await;
    // And it works: a timer scheduled now fires.
    client.wait_for_command_stream().await;
    client
        .schedule("acme", "after-thaw", Utc::now(), None)
        .await;
    client
        .await_due("acme", "after-thaw", Duration::from_secs(15))
        .await;
    eprintln!(
        "{what}: /readyz 200 {} ms after the thaw (the readiness poll includes the rest of \
         start-up)",
        (green.max(thawed.elapsed())).as_millis()
    );
}

/// The stop's budget of the test below: short, so that a stop that outlasts it (13 s, before
/// it was one budget) cannot pass.
const STOP_BUDGET: Duration = Duration::from_secs(5);
/// What the process adds to the budget: starting its exit, the runtime's end.
const EXIT_MARGIN: Duration = Duration::from_millis(1_500);

/// A SIGTERM mid-burst, the database frozen: the CommandHandler holds commands it cannot
/// commit, the Poller batches it cannot mark, Persistence statements that do not answer. The
/// daemon exits within `[supervisor] shutdown_timeout`, and everything the broker acknowledged
/// fires after the thaw, from the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_with_a_frozen_database_ends_within_its_budget_and_loses_nothing() {
    let what = "a stop with a frozen database";
    let Some(mut world) = World::start(what, false).await else {
        return;
    };
    let budget = format!("{}ms", STOP_BUDGET.as_millis());
    world.start_daemon_with(&[("TIMER_SUPERVISOR_SHUTDOWN_TIMEOUT", budget.as_str())]);
    world
        .await_readyz(200, Duration::from_secs(30), "ready at start")
        .await;
    let client = Arc::new(TestClient::connect(&world.server).await);
    client.wait_for_command_stream().await;
    let seen = Seen::subscribe(&client.client).await;
    let schedule = |prefix: &'static str, count: usize, due_in_ms: i64| {
        let client = client.clone();
        async move {
            let due = Utc::now() + chrono::Duration::milliseconds(due_in_ms);
            let ids: Vec<String> = (0..count).map(|i| format!("{prefix}-{i:05}")).collect();
            for chunk in ids.chunks(250) {
                futures::future::join_all(
                    chunk
                        .iter()
                        .map(|id| client.schedule("acme", id, due, None)),
                )
                .await;
            }
            ids
        }
    };
    let mut ids = schedule("burst", 4_000, 1_500).await;
    common::eventually(Duration::from_secs(30), "the burst to fire", || async {
        (seen.0.lock().unwrap().len() >= 200).then_some(())
    })
    .await;
    tokio::task::block_in_place(|| world.cluster.freeze());
    // Commands the daemon pulls and cannot commit.
    ids.extend(schedule("late", 500, 1_000).await);
    let daemon = world.daemon.take().expect("started");
    let asked = Instant::now();
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(30)).await;
    let took = asked.elapsed();
    let fired_by_then = seen.0.lock().unwrap().len();
    assert!(status.success(), "exit status {status}");
    assert!(
        took <= STOP_BUDGET + EXIT_MARGIN,
        "the stop took {took:?}, its budget {STOP_BUDGET:?}"
    );
    tokio::task::block_in_place(|| world.cluster.thaw());
    world.start_daemon();
    seen.await_all(
        &ids,
        Duration::from_secs(60),
        &format!("{what}: acknowledged timers"),
    )
    .await;
    eprintln!(
        "{what}: exited {status} {} ms after SIGTERM (budget {} ms); {fired_by_then} of {} \
         fired before it, all after the next start, {} duplicates published",
        took.as_millis(),
        STOP_BUDGET.as_millis(),
        ids.len(),
        seen.duplicates()
    );
}
