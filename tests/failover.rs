//! More than one daemon (docs/CONTRACT.md §8), on one PostgreSQL database and one NATS: they share
//! the command consumer and divide the due timers between them by claims. Killed with SIGKILL
//! or stopped, the others take over; nothing is lost, nothing fires early, and a timer is
//! published twice only when its daemon died between publishing and marking it.
//!
//! These need PostgreSQL: they run in the PostgreSQL run (`TEST_DATABASE=postgres`) and say
//! so otherwise.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually};
use futures::StreamExt;
use sea_orm::ConnectionTrait;
use serde_json::Value;

/// A PostgreSQL database for the test, or `None` (with a word why) when this is not a
/// PostgreSQL run.
fn postgres_scratch() -> Option<Scratch> {
    Scratch::postgres_only("several daemons share a PostgreSQL database")
}

fn daemon(server: &NatsServer, scratch: &Scratch, name: &str, lease: &str) -> DaemonProcess {
    DaemonProcess::start_with(
        server,
        scratch,
        &[("TIMER_NAME", name), ("TIMER_CLAIM_LEASE", lease)],
    )
}

/// One publication of a timer's event: its `dueAt` and when it arrived.
type Firing = (DateTime<Utc>, DateTime<Utc>);

/// Every `DueTimeReached` the daemons publish (a plain subscription: the broker's duplicate
/// filter hides nothing from it), with the instant it arrived.
struct Published {
    arrivals: tokio::sync::mpsc::UnboundedReceiver<(String, DateTime<Utc>, DateTime<Utc>)>,
    by_id: HashMap<String, Vec<Firing>>,
}

impl Published {
    async fn subscribe(client: &TestClient, subject: &str) -> Self {
        let mut subscriber = client.client.subscribe(subject.to_owned()).await.unwrap();
        client.client.flush().await.unwrap();
        let (tx, arrivals) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(message) = subscriber.next().await {
                let arrived = Utc::now();
                let event: Value = serde_json::from_slice(&message.payload).unwrap();
                let id = event["payload"]["serviceCallId"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                let due: DateTime<Utc> =
                    event["payload"]["dueAt"].as_str().unwrap().parse().unwrap();
                if tx.send((id, due, arrived)).is_err() {
                    break;
                }
            }
        });
        Self {
            arrivals,
            by_id: HashMap::new(),
        }
    }

    /// Whether every publication seen came at or after its timer's `dueAt`.
    fn none_early(&self) -> bool {
        self.by_id
            .values()
            .flatten()
            .all(|(due, arrived)| arrived >= due)
    }

    /// Waits until every one of `ids` was published at least once.
    async fn await_all(&mut self, ids: &[String], timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while !ids.iter().all(|id| self.by_id.contains_key(id)) {
            let missing = ids
                .iter()
                .filter(|id| !self.by_id.contains_key(*id))
                .count();
            match tokio::time::timeout_at(deadline, self.arrivals.recv()).await {
                Ok(Some((id, due, arrived))) => {
                    self.by_id.entry(id).or_default().push((due, arrived))
                }
                _ => panic!("{missing} of {} timers never fired", ids.len()),
            }
        }
        // What is still on its way (a duplicate published just now) is counted too.
        while let Ok(Some((id, due, arrived))) =
            tokio::time::timeout(Duration::from_millis(300), self.arrivals.recv()).await
        {
            self.by_id.entry(id).or_default().push((due, arrived));
        }
    }
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Timers due evenly over `span` from `start`, sent with many PubAcks in flight.
async fn schedule_spread(
    client: &TestClient,
    ids: &[String],
    start: DateTime<Utc>,
    span: Duration,
) {
    let step = span.as_micros() as i64 / ids.len().max(1) as i64;
    for (chunk_index, chunk) in ids.chunks(1000).enumerate() {
        let mut acks = Vec::new();
        for (i, id) in chunk.iter().enumerate() {
            let n = (chunk_index * 1000 + i) as i64;
            let due = start + chrono::Duration::microseconds(step * n);
            let command = common::schedule_command("acme", id, &common::rfc3339(due), None);
            acks.push(
                client
                    .js
                    .publish(
                        "timer.cmd.schedule.acme",
                        serde_json::to_vec(&command).unwrap().into(),
                    )
                    .await
                    .unwrap(),
            );
        }
        for ack in acks {
            ack.await.unwrap();
        }
    }
}

/// Three daemons, 5,000 timers due over 10 s, one daemon `kill -9`ed half-way: every timer
/// fires, none early, and the duplicates are at most the timers the dead daemon had claimed
/// and not marked. Its claimed timers fire once its lease has passed. Half-way, a burst of
/// 1,000 timers falls due at one instant, and the daemon is frozen (SIGSTOP) 20 ms into it
/// (the burst takes about a hundred), so it dies holding claims, published or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemons_timers_are_taken_over_and_nothing_is_lost() {
    let Some(scratch) = postgres_scratch() else {
        return;
    };
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    // Long enough that a survivor slowed by a busy machine does not see its own claims lapse
    // (which would publish a timer twice without d2), short enough to wait out.
    let lease = Duration::from_secs(4);
    let mut daemons: Vec<Option<DaemonProcess>> = ["d1", "d2", "d3"]
        .iter()
        .map(|name| Some(daemon(&server, &scratch, name, "4s")))
        .collect();
    client.wait_for_command_stream().await;
    let mut published = Published::subscribe(&client, "timer.evt.due.acme").await;

    let spread = ids("f", 4000);
    let burst = ids("b", 1000);
    let start = Utc::now() + chrono::Duration::seconds(3);
    let halfway = start + chrono::Duration::seconds(5);
    schedule_spread(&client, &spread, start, Duration::from_secs(10)).await;
    schedule_spread(&client, &burst, halfway, Duration::ZERO).await;
    let ids: Vec<String> = spread.iter().chain(&burst).cloned().collect();
    let db = timer_service::storage::db::connect(&scratch.database(), 1)
        .await
        .unwrap();
    let freeze = halfway + chrono::Duration::milliseconds(20);
    while Utc::now() < freeze {
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    let d2 = daemons[1].take().unwrap();
    d2.signal(libc::SIGSTOP);
    let killed_at = Utc::now();
    let orphaned: Vec<String> = db
        .query_all_raw(sea_orm::Statement::from_string(
            db.get_database_backend(),
            "SELECT service_call_id FROM timer_schedules WHERE claimed_by = 'd2' AND state = 'Scheduled'",
        ))
        .await
        .unwrap()
        .iter()
        .map(|row| row.try_get_by_index::<String>(0).unwrap())
        .collect();
    d2.kill9();

    published.await_all(&ids, Duration::from_secs(60)).await;
    let mut duplicates = 0;
    let mut worst = chrono::Duration::zero();
    let mut lateness_ms: Vec<f64> = Vec::new();
    for (id, firings) in &published.by_id {
        if firings.len() > 1 {
            duplicates += 1;
            assert!(
                orphaned.contains(id),
                "{id} published twice, not one of d2's claims"
            );
        }
        for (due, arrived) in firings {
            assert!(arrived >= due, "{id} fired before its dueAt");
        }
        if orphaned.contains(id) {
            // The survivors' publish once d2's claim lapsed (an earlier one may be d2's own).
            let (due, taken_over) = firings[firings.len() - 1];
            worst = worst.max(taken_over - due);
        } else {
            let (due, arrived) = firings[0];
            lateness_ms.push((arrived - due).num_microseconds().unwrap() as f64 / 1000.0);
        }
    }
    lateness_ms.sort_by(f64::total_cmp);
    let p = |q: f64| lateness_ms[((lateness_ms.len() - 1) as f64 * q) as usize];
    eprintln!(
        "failover: {} timers, d2 killed at {killed_at} holding {} claimed and unmarked; \
         {duplicates} published twice; the survivors took them over at most {} ms late \
         (lease {lease:?}); \
         the others p50 {:.1} ms, p99 {:.1} ms",
        ids.len(),
        orphaned.len(),
        worst.num_milliseconds(),
        p(0.5),
        p(0.99)
    );
    assert!(duplicates <= orphaned.len());
    assert!(
        worst <= chrono::Duration::from_std(lease).unwrap() + chrono::Duration::seconds(1),
        "taken over within the lease and a little"
    );
    for process in daemons.into_iter().flatten() {
        process.signal(libc::SIGTERM);
        assert!(process.wait_exit(Duration::from_secs(10)).await.success());
    }
}

/// Two of three daemons stopped (SIGTERM) while timers fall due: the last one fires them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_daemon_standing_fires_everything() {
    let Some(scratch) = postgres_scratch() else {
        return;
    };
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    let mut daemons: Vec<DaemonProcess> = ["s1", "s2", "s3"]
        .iter()
        .map(|name| daemon(&server, &scratch, name, "2s"))
        .collect();
    client.wait_for_command_stream().await;
    let mut published = Published::subscribe(&client, "timer.evt.due.acme").await;
    let ids = ids("s", 1000);
    let start = Utc::now() + chrono::Duration::seconds(1);
    schedule_spread(&client, &ids, start, Duration::from_secs(4)).await;
    while Utc::now() < start + chrono::Duration::seconds(1) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for process in daemons.drain(..2) {
        process.signal(libc::SIGTERM);
        assert!(process.wait_exit(Duration::from_secs(10)).await.success());
    }
    published.await_all(&ids, Duration::from_secs(30)).await;
    assert!(
        published.none_early(),
        "a timer was published before its dueAt"
    );
    let last = daemons.pop().unwrap();
    last.signal(libc::SIGTERM);
    assert!(last.wait_exit(Duration::from_secs(10)).await.success());
}

/// A daemon stopped gracefully while it holds claimed timers it has not published (queued
/// behind a slow broker path) gives those claims up as it exits: a daemon of another name fires
/// them at once, not when their 30 s lease lapses (docs/CONTRACT.md §8, "Takeover").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_daemons_unpublished_claims_fire_at_once_on_the_others() {
    let Some(scratch) = postgres_scratch() else {
        return;
    };
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    let proxy = common::net_proxy::NetProxy::start(server.port).await;
    let slow = DaemonProcess::start_with(
        &server,
        &scratch,
        &[
            ("TIMER_NAME", "slow"),
            ("TIMER_CLAIM_LEASE", "30s"),
            ("TIMER_BROKER_URL", proxy.url().as_str()),
        ],
    );
    client.wait_for_command_stream().await;
    let mut published = Published::subscribe(&client, "timer.evt.due.acme").await;
    let ids = ids("q", 5000);
    let due = Utc::now() + chrono::Duration::seconds(3);
    schedule_spread(&client, &ids, due, Duration::ZERO).await;
    eventually(Duration::from_secs(20), "every command stored", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;
    // Its events now take 300 ms each way: most of what it claims waits in its queue.
    proxy.latency(Duration::from_millis(300));
    while Utc::now() < due + chrono::Duration::milliseconds(300) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    slow.signal(libc::SIGTERM);
    let log = slow
        .await_log("claims given up", Duration::from_secs(25))
        .await;
    assert!(slow.wait_exit(Duration::from_secs(25)).await.success());
    let given_up: u64 = log
        .lines()
        .find(|line| line.contains("claims given up"))
        .and_then(|line| line.split("claims=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the count of claims given up");
    assert!(given_up > 0, "the stopped daemon held no unpublished claim");

    let other = daemon(&server, &scratch, "other", "30s");
    published.await_all(&ids, Duration::from_secs(40)).await;
    let latest = published
        .by_id
        .values()
        .map(|firings| firings[0].1)
        .max()
        .unwrap();
    assert!(
        published.none_early(),
        "a timer was published before its dueAt"
    );
    eprintln!(
        "the stopped daemon gave up {given_up} claims; the last of {} timers fired {} ms after its dueAt",
        ids.len(),
        (latest - due).num_milliseconds()
    );
    assert!(
        latest < due + chrono::Duration::seconds(12),
        "the given-up claims fired {} ms after their dueAt: they waited for the lease",
        (latest - due).num_milliseconds()
    );
    other.signal(libc::SIGTERM);
    assert!(other.wait_exit(Duration::from_secs(10)).await.success());
}

/// Three daemons pull from the shared consumer at once and write to one table concurrently;
/// schedules, reschedules and cancels for the same keys still end as their last command in
/// stream order says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_daemons_apply_every_key_in_stream_order() {
    let Some(scratch) = postgres_scratch() else {
        return;
    };
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    let daemons: Vec<DaemonProcess> = ["c1", "c2", "c3"]
        .iter()
        .map(|name| daemon(&server, &scratch, name, "30s"))
        .collect();
    client.wait_for_command_stream().await;

    // 200 keys, 10 commands each, interleaved: each key's last command decides.
    let far = Utc::now() + chrono::Duration::hours(1);
    let mut last: HashMap<String, (bool, String)> = HashMap::new();
    let mut acks = Vec::new();
    for round in 0..10 {
        for key in 0..200 {
            let id = format!("k{key}");
            let cancel = (key + round) % 3 == 0;
            let (subject, command) = if cancel {
                let envelope = timer_service::domain::command::cancel_timer_command(
                    "acme",
                    &id,
                    "c",
                    Utc::now(),
                );
                (
                    "timer.cmd.cancel.acme",
                    serde_json::to_value(envelope).unwrap(),
                )
            } else {
                let due = common::rfc3339(far + chrono::Duration::seconds(round * 1000 + key));
                (
                    "timer.cmd.schedule.acme",
                    common::schedule_command("acme", &id, &due, None),
                )
            };
            let due_text = command["payload"]["dueAt"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            last.insert(id, (cancel, due_text));
            acks.push(
                client
                    .js
                    .publish(subject, serde_json::to_vec(&command).unwrap().into())
                    .await
                    .unwrap(),
            );
        }
    }
    for ack in acks {
        ack.await.unwrap();
    }
    eventually(Duration::from_secs(30), "every command handled", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;
    let store = timer_service::storage::Store::open(&scratch.database())
        .await
        .unwrap();
    for (id, (cancelled, due)) in &last {
        let row = store.get("acme", id).await.unwrap().unwrap();
        if *cancelled {
            assert_eq!(
                row.state,
                timer_service::domain::TimerState::Cancelled,
                "{id}"
            );
        } else {
            assert_eq!(
                row.state,
                timer_service::domain::TimerState::Scheduled,
                "{id}"
            );
            assert_eq!(
                row.due_at
                    .map(timer_service::domain::timestamp::format_utc)
                    .as_deref(),
                Some(due.as_str()),
                "{id}"
            );
        }
    }
    for process in daemons {
        process.signal(libc::SIGTERM);
        assert!(process.wait_exit(Duration::from_secs(10)).await.success());
    }
}

/// A daemon frozen (SIGSTOP) inside a transaction holds the locks of the rows it touched (its
/// uncommitted claim, and rows its `SKIP LOCKED` scan locked and rechecked away, which another
/// daemon had claimed), and no lease frees a lock. The others must still fire and mark every
/// timer while it stays frozen: the server ends a session left idle in a transaction past
/// `statement_timeout`. Bursts are sent, and a daemon frozen the moment one of its sessions is
/// seen running a statement, until a freeze lands inside one of its transactions (its sessions
/// told apart by their client ports). The bench's failover figure met the case
/// where the held locks stopped the others' marks for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_frozen_inside_a_transaction_does_not_hold_the_others_back() {
    let Some(scratch) = postgres_scratch() else {
        return;
    };
    let server = NatsServer::start();
    let client = TestClient::connect(&server).await;
    let start = |name: &str| {
        DaemonProcess::start_with(
            &server,
            &scratch,
            &[
                ("TIMER_NAME", name),
                ("TIMER_CLAIM_LEASE", "2s"),
                ("TIMER_POSTGRES_STATEMENT_TIMEOUT", "3s"),
                ("TIMER_POSTGRES_LOCK_TIMEOUT", "1s"),
            ],
        )
    };
    let daemons: Vec<DaemonProcess> = ["d1", "d2", "d3"].into_iter().map(start).collect();
    client.wait_for_command_stream().await;
    let mut published = Published::subscribe(&client, "timer.evt.due.acme").await;
    let db = timer_service::storage::db::connect(&scratch.database(), 1)
        .await
        .unwrap();
    // A statement under way (not a commit); then, frozen, the session idle inside its
    // transaction.
    let db = &db;
    let at_work = |pid| async move {
        common::sessions_of(db, pid, "state = 'active' AND query NOT ILIKE 'COMMIT%'").await > 0
    };
    let idle_in_transaction = |pid| async move {
        common::sessions_of(db, pid, "state = 'idle in transaction'").await > 0
    };
    let mut all = Vec::new();
    let mut frozen = None;
    for attempt in 0..8 {
        let burst = ids(&format!("b{attempt}"), 3000);
        let due = Utc::now() + chrono::Duration::seconds(2);
        schedule_spread(&client, &burst, due, Duration::ZERO).await;
        all.extend(burst.iter().cloned());
        while Utc::now() < due {
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        let window = Duration::from_millis(1_500);
        frozen = common::freeze_one_when(&daemons, window, at_work, idle_in_transaction).await;
        if frozen.is_some() {
            eprintln!("the freeze landed inside a transaction in burst {attempt}");
            break;
        }
        published.await_all(&burst, Duration::from_secs(30)).await;
    }
    let frozen = frozen.expect("no freeze of 8 landed inside a transaction");
    let frozen_at = Utc::now();
    // Within the session limit (3 s) and the lease (2 s), and a little: every timer published
    // and marked `Reached` (a mark waiting on the frozen daemon's locks never ends).
    published.await_all(&all, Duration::from_secs(20)).await;
    let pending = || async {
        db.query_one_raw(sea_orm::Statement::from_string(
            db.get_database_backend(),
            "SELECT count(*) FROM timer_schedules WHERE state = 'Scheduled'",
        ))
        .await
        .unwrap()
        .map_or(0, |row| row.try_get_by_index::<i64>(0).unwrap())
    };
    eventually(
        Duration::from_secs(20),
        "every timer marked Reached while a daemon is frozen",
        || async { (pending().await == 0).then_some(()) },
    )
    .await;
    eprintln!(
        "every timer fired and marked {} ms after a daemon froze inside a transaction",
        (Utc::now() - frozen_at).num_milliseconds()
    );
    for (id, firings) in &published.by_id {
        for (due, arrived) in firings {
            assert!(arrived >= due, "{id} fired before its dueAt");
        }
    }
    daemons[frozen].signal(libc::SIGCONT);
    for process in daemons {
        process.kill9();
    }
}
