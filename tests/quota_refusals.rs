//! A refusal is final (docs/CONTRACT.md §9): a command refused for its tenant's quota is never
//! stored when the broker delivers it again, and a command stored is never refused on a later
//! copy. Copies come again whenever the daemon holds deliveries past the broker's ack wait: a
//! slow machine, a paused VM. Here the daemon process is frozen (SIGSTOP) several times, each
//! time longer than the 4 s ack wait, while it works off a queue of thousands of commands
//! limited to 300 a second. Before refusals were recorded, every round had hundreds of keys
//! rejected for the quota and stored a moment later from another copy.
//!
//! Beside it, the store's side on both databases: two copies of one command in one transaction
//! count once; a copy of a refused command is refused again, with the recorded reason, in any
//! later transaction, taking no place; the records go with the retention of finished timers.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use common::quota_checks::{all_handled, later};
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually, schedule_at};
use futures::StreamExt;
use serde_json::Value;
use timer_service::domain::Command;
use timer_service::domain::quota::{Exceeded, Limits, Quota, Quotas};
use timer_service::storage::Store;
use timer_service::storage::db::migrate;

/// Every rejection the daemon publishes for `tenant` (not what the event stream kept after
/// deduplication), as `(service call id, reason)`, collected from a subscription of its own.
async fn collect_rejections(
    client: &TestClient,
    tenant: &str,
) -> Arc<Mutex<Vec<(String, String)>>> {
    let mut subscription = client
        .client
        .subscribe(format!("timer.evt.rejected.{tenant}"))
        .await
        .expect("subscribe");
    client.client.flush().await.expect("flush");
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let into = seen.clone();
    tokio::spawn(async move {
        while let Some(message) = subscription.next().await {
            let event: Value = serde_json::from_slice(&message.payload).expect("JSON event");
            let payload = &event["payload"];
            let original: Value = payload["original"]
                .as_str()
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or(Value::Null);
            let id = original["payload"]["serviceCallId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let reason = payload["reason"].as_str().unwrap_or_default().to_owned();
            into.lock().expect("rejections").push((id, reason));
        }
    });
    seen
}

/// The keys of `tenant` with a row in `table` (`timer_schedules`: stored; `command_refusals`:
/// refused for a quota, recorded), read on a connection of the test's own.
async fn keys_in(scratch: &Scratch, table: &str, tenant: &str) -> BTreeSet<String> {
    let sql = format!("SELECT service_call_id FROM {table} WHERE tenant_id = '{tenant}'");
    common::query_rows(&scratch.database(), &sql, |row| {
        row.try_get_by_index::<String>(0).expect("service_call_id")
    })
    .await
    .into_iter()
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_refused_for_its_quota_is_never_stored_from_a_later_copy() {
    const SENT: usize = 6_000;
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let daemon = DaemonProcess::start_with(
        &server,
        &scratch,
        &[("TIMER_QUOTAS_COMMANDS_PER_SECOND", "300")],
    );
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let rejected = collect_rejections(&client, "acme").await;

    // The queue is published while the daemon is frozen, so it meets thousands at once.
    daemon.signal(libc::SIGSTOP);
    let ids: Vec<String> = (0..SENT).map(|i| format!("k-{i:05}")).collect();
    client.schedule_many("acme", &ids, later()).await;
    daemon.signal(libc::SIGCONT);

    // Frozen three times while it drains, each past the ack wait: what it holds comes again.
    // A freeze may fall where it holds nothing; then it is frozen again, up to three more
    // times, while commands are left.
    for round in 0..6 {
        let before = client.commands_outstanding().await;
        let redelivered = client.commands_delivered().await.unwrap_or(0) > SENT as u64;
        if before == 0 || (round >= 3 && redelivered) {
            break;
        }
        eventually(
            Duration::from_secs(10),
            "the daemon working the queue",
            || async {
                let now = client.commands_outstanding().await;
                (now + 300 <= before || now == 0).then_some(())
            },
        )
        .await;
        daemon.signal(libc::SIGSTOP);
        // The fault's length, not a wait for a condition.
        tokio::time::sleep(Duration::from_secs(5)).await;
        daemon.signal(libc::SIGCONT);
    }
    all_handled(&client).await;
    let delivered = client.commands_delivered().await.unwrap_or(0);
    assert!(
        delivered > SENT as u64,
        "{delivered} deliveries of {SENT} commands: the freezes brought none again"
    );

    // Every key decided: stored, or refused with its refusal recorded (the record is the
    // decision; its TimerCommandRejected may still be on its way, or lost with a publish that
    // failed, which leaves it in the log only: docs/CONTRACT.md §3).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (stored, recorded) = loop {
        let stored = keys_in(&scratch, "timer_schedules", "acme").await;
        let recorded = keys_in(&scratch, "command_refusals", "acme").await;
        if stored.union(&recorded).count() == SENT {
            break (stored, recorded);
        }
        if std::time::Instant::now() > deadline {
            let undecided: Vec<&String> = ids
                .iter()
                .filter(|id| !stored.contains(*id) && !recorded.contains(*id))
                .collect();
            let log = daemon.log_text();
            let about: Vec<&str> = log
                .lines()
                .filter(|line| {
                    undecided
                        .iter()
                        .take(3)
                        .any(|id| line.contains(id.as_str()))
                })
                .take(20)
                .collect();
            panic!(
                "{} keys neither stored nor refused after 10 s, e.g. {:?}; the daemon's log of them: {about:#?}",
                undecided.len(),
                undecided.iter().take(5).collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let refused: BTreeSet<String> = rejected
        .lock()
        .expect("rejections")
        .iter()
        .filter(|(_, reason)| reason.starts_with("quota exceeded"))
        .map(|(id, _)| id.clone())
        .collect();
    let unrecorded: Vec<&String> = refused.difference(&recorded).collect();
    assert!(
        unrecorded.is_empty(),
        "{} keys rejected for the quota without a recorded refusal, e.g. {:?}",
        unrecorded.len(),
        unrecorded.iter().take(5).collect::<Vec<_>>()
    );
    let both: Vec<&String> = stored.intersection(&recorded).collect();
    eprintln!(
        "{SENT} commands, {delivered} deliveries: {} stored, {} refused ({} rejections seen), {} both",
        stored.len(),
        recorded.len(),
        refused.len(),
        both.len()
    );
    assert!(!refused.is_empty(), "the quota refused nothing");
    assert!(
        both.is_empty(),
        "{} keys rejected for the quota and stored too, e.g. {:?}",
        both.len(),
        both.iter().take(5).collect::<Vec<_>>()
    );
    drop(daemon);
}

/// A migrated database of the test's own, its store deciding by the instants the test passes.
async fn store() -> (Scratch, Store) {
    let scratch = Scratch::new();
    migrate(&scratch.database()).await.unwrap();
    let store = Store::open(&scratch.database())
        .await
        .unwrap()
        .with_callers_clock();
    (scratch, store)
}

const T0: i64 = 1_800_000_000_000;

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(T0 + ms).unwrap()
}

/// A ScheduleTimer of acme's for `id` in stream order `seq`.
fn schedule(id: &str, seq: u64) -> Command {
    schedule_at("acme", id, seq, later())
}

/// acme limited to `per_second` commands a second.
fn rate(per_second: u32) -> Quotas {
    Quotas::new(
        Limits::default(),
        HashMap::from([(
            "acme".to_owned(),
            Limits {
                commands_per_second: Some(per_second),
                ..Limits::default()
            },
        )]),
    )
}

/// Positions refused by one apply at `ms`.
async fn refused_at(store: &Store, commands: &[Command], quotas: &Quotas, ms: i64) -> Vec<usize> {
    let applied = store
        .apply_within_quotas(commands, quotas, T0 + ms)
        .await
        .unwrap();
    applied.refused.iter().map(|(i, _)| *i).collect()
}

async fn keys(scratch: &Scratch) -> BTreeSet<String> {
    keys_in(scratch, "timer_schedules", "acme").await
}

#[tokio::test]
async fn two_copies_of_one_command_in_one_transaction_count_once() {
    let (scratch, store) = store().await;
    let quotas = rate(3);
    // k-0 and k-1 twice each (a redelivery met its first copy in one pull): two places.
    let copies = [
        schedule("k-0", 1),
        schedule("k-0", 1),
        schedule("k-1", 2),
        schedule("k-1", 2),
    ];
    assert_eq!(
        refused_at(&store, &copies, &quotas, 0).await,
        Vec::<usize>::new()
    );
    // The third place is still free within the same second; the fourth command is refused.
    let more = [schedule("k-2", 3), schedule("k-3", 4)];
    assert_eq!(refused_at(&store, &more, &quotas, 10).await, [1]);
    assert_eq!(
        keys(&scratch).await,
        BTreeSet::from(["k-0", "k-1", "k-2"].map(String::from))
    );
    // Both copies of a refused command are refused, and it is stored by neither.
    let refused_twice = [schedule("k-4", 5), schedule("k-4", 5)];
    assert_eq!(
        refused_at(&store, &refused_twice, &quotas, 20).await,
        [0, 1]
    );
    assert!(!keys(&scratch).await.contains("k-4"));
}

#[tokio::test]
async fn a_copy_of_a_refused_command_is_refused_again_and_takes_no_place() {
    let (scratch, store) = store().await;
    let quotas = rate(1);
    assert_eq!(
        refused_at(
            &store,
            &[schedule("k-0", 1), schedule("k-1", 2)],
            &quotas,
            0
        )
        .await,
        [1]
    );
    // Seconds later the window is empty, yet the copy of k-1 is refused with the first
    // reason; even after a reload raised the limit.
    let copy = [schedule("k-1", 2)];
    let applied = store
        .apply_within_quotas(&copy, &rate(100), T0 + 5_000)
        .await
        .unwrap();
    assert_eq!(
        applied.refused,
        [(
            0,
            Exceeded {
                quota: Quota::CommandsPerSecond,
                limit: 1
            }
        )]
    );
    // It took no place: a new command in that second goes in.
    assert_eq!(
        refused_at(&store, &[schedule("k-2", 3)], &quotas, 5_010).await,
        Vec::<usize>::new()
    );
    // A command of another key under the same order is no copy of it.
    assert_eq!(
        refused_at(&store, &[schedule("other", 2)], &quotas, 9_000).await,
        Vec::<usize>::new()
    );
    assert_eq!(
        keys(&scratch).await,
        BTreeSet::from(["k-0", "k-2", "other"].map(String::from))
    );
}

#[tokio::test]
async fn refusal_records_go_with_the_retention_of_finished_timers() {
    let (scratch, store) = store().await;
    let quotas = rate(1);
    refused_at(
        &store,
        &[schedule("k-0", 1), schedule("k-1", 2)],
        &quotas,
        0,
    )
    .await;
    let records = || async {
        common::query_rows(
            &scratch.database(),
            "SELECT COUNT(*) FROM command_refusals",
            |row| row.try_get_by_index::<i64>(0).expect("count"),
        )
        .await[0]
    };
    assert_eq!(records().await, 1);
    let keep = Duration::from_secs(60);
    assert_eq!(
        store.delete_finished(at(59_000), keep, 100).await.unwrap(),
        0
    );
    assert_eq!(records().await, 1, "kept while younger than the retention");
    assert_eq!(
        store.delete_finished(at(61_000), keep, 100).await.unwrap(),
        1
    );
    assert_eq!(records().await, 0);
}
