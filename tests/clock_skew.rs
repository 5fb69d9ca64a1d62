//! One clock (docs/CONTRACT.md §1, §8): daemons sharing a PostgreSQL database fire by the
//! database server's clock, whatever their own clocks say. A daemon whose wall clock runs
//! seconds behind holds nothing back; one whose clock runs seconds ahead fires nothing early.
//! The clocks are moved with libfaketime (wall clock only; the monotonic clock keeps real time),
//! the real binary runs against a real nats-server and PostgreSQL, and the test counts the
//! events the daemons publish, as a core subscriber receives them, by the test's own clock.
//!
//! PostgreSQL only: on SQLite one daemon owns its file, and its clock is the clock.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::quota_checks;
use common::{DaemonProcess, NatsServer, Scratch, TestClient, eventually};
use futures::StreamExt;
use timer_service::domain::timestamp::parse_stored;

/// One event received: the timer's `dueAt` and when it arrived, by the test's clock.
type Firing = (DateTime<Utc>, DateTime<Utc>);

/// How far each daemon's wall clock is off.
const SKEW: &str = "3s";
/// Timers per phase, due over [`SPREAD`] from a second after they are sent.
const TIMERS: usize = 200;
const SPREAD: chrono::Duration = chrono::Duration::seconds(3);
/// On time: a timer fires within this of its `dueAt` (a clock 3 s behind would hold it 3 s).
const ON_TIME: chrono::Duration = chrono::Duration::milliseconds(1_000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_with_wrong_clocks_fire_by_the_database_clock() {
    let Some(faketime) = prerequisites() else {
        return;
    };
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let mut events = client.client.subscribe("timer.evt.due.acme").await.unwrap();
    let arrivals = tokio::spawn(async move {
        let mut seen: HashMap<String, Vec<Firing>> = HashMap::new();
        while let Some(message) = events.next().await {
            let received = Utc::now();
            let event: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
            let id = event["payload"]["serviceCallId"]
                .as_str()
                .unwrap()
                .to_owned();
            let due = parse_stored(event["payload"]["dueAt"].as_str().unwrap()).unwrap();
            seen.entry(id).or_default().push((due, received));
            if seen.len() == 2 * TIMERS {
                break;
            }
        }
        seen
    });

    // Phase 1: only the daemon whose clock runs behind.
    let behind = skewed(&server, &scratch, &faketime, "behind", &format!("-{SKEW}"));
    client.wait_for_command_stream().await;
    schedule_phase(&client, "behind").await;
    // Phase 2: the daemon whose clock runs ahead joins it.
    let ahead = skewed(&server, &scratch, &faketime, "ahead", &format!("+{SKEW}"));
    eventually(
        Duration::from_secs(20),
        "the second daemon to start",
        || async {
            std::fs::read_to_string(&ahead.log)
                .ok()?
                .contains("running")
                .then_some(())
        },
    )
    .await;
    schedule_phase(&client, "ahead").await;

    let seen = tokio::time::timeout(Duration::from_secs(40), arrivals)
        .await
        .expect("every timer fired within 40 s")
        .unwrap();
    let mut early = Vec::new();
    let mut held = Vec::new();
    for (id, firings) in &seen {
        let (due, first) = firings.iter().min_by_key(|(_, at)| *at).copied().unwrap();
        if firings.iter().any(|(_, at)| *at < due) {
            early.push(id.clone());
        }
        if first - due > ON_TIME {
            held.push(format!("{id} {} ms late", (first - due).num_milliseconds()));
        }
    }
    assert!(
        early.is_empty() && held.is_empty(),
        "{} of {} fired before dueAt: {:?}; {} held back by a clock: {:?}",
        early.len(),
        seen.len(),
        &early[..early.len().min(10)],
        held.len(),
        &held[..held.len().min(10)]
    );
    for daemon in [behind, ahead] {
        daemon.kill9();
    }
}

/// The rate quota under wrong clocks (CONTRACT.md §9): the tenant's one-second window is kept in
/// wall-clock slots by whichever daemon decides, so a daemon 3 s ahead writes slots the others'
/// clocks have not reached. The window is kept by the database server's clock: whatever the
/// daemons' clocks, no second of real time takes in more than the limit, and a tenant flooding
/// at four times its limit still gets most of it. (By the daemons' clocks, the one ahead found
/// the window empty and let in up to a second limit's worth: 302 to 357 accepted in 3.05 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_with_wrong_clocks_keep_a_tenants_rate() {
    let Some(faketime) = prerequisites() else {
        return;
    };
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let limit = [("TIMER_QUOTAS_COMMANDS_PER_SECOND", "100")];
    let daemons: Vec<DaemonProcess> = [("behind", "-3s"), ("ahead", "+3s"), ("right", "+0s")]
        .into_iter()
        .map(|(name, offset)| skewed_with(&server, &scratch, &faketime, name, offset, &limit))
        .collect();
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    for daemon in &daemons {
        eventually(Duration::from_secs(20), "every daemon running", || async {
            std::fs::read_to_string(&daemon.log)
                .ok()?
                .contains("running")
                .then_some(())
        })
        .await;
    }
    let later = Utc::now() + chrono::Duration::days(1);
    // Every second of real time at most the limit, whichever daemon's clock decided.
    quota_checks::flood(&client, &scratch, "acme", "r", later)
        .await
        .assert_within(100.0);
    for daemon in daemons {
        daemon.kill9();
    }
}

/// Schedules [`TIMERS`] timers named after the phase, due over [`SPREAD`] from a second from
/// now.
async fn schedule_phase(client: &TestClient, phase: &str) {
    let start = Utc::now() + chrono::Duration::seconds(1);
    for i in 0..TIMERS {
        let due = start + SPREAD * i as i32 / TIMERS as i32;
        client
            .schedule("acme", &format!("{phase}-{i}"), due, None)
            .await;
    }
    // The phase's last timer is due by now plus its spread; wait for it to pass.
    let last = start + SPREAD + chrono::Duration::milliseconds(500);
    eventually(
        Duration::from_secs(20),
        "the phase's last dueAt",
        || async { (Utc::now() >= last).then_some(()) },
    )
    .await;
}

/// A daemon named `name` whose wall clock is off by `offset` ("+3s", "-3s").
fn skewed(
    server: &NatsServer,
    scratch: &Scratch,
    library: &str,
    name: &str,
    offset: &str,
) -> DaemonProcess {
    skewed_with(server, scratch, library, name, offset, &[])
}

/// [`skewed`], with more settings.
fn skewed_with(
    server: &NatsServer,
    scratch: &Scratch,
    library: &str,
    name: &str,
    offset: &str,
    settings: &[(&str, &str)],
) -> DaemonProcess {
    let mut env = vec![
        ("TIMER_NAME", name),
        ("LD_PRELOAD", library),
        ("FAKETIME", offset),
        // Only the wall clock moves; the name of this setting changed across versions.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ("DONT_FAKE_MONOTONIC", "1"),
    ];
    env.extend_from_slice(settings);
    DaemonProcess::start_with(server, scratch, &env)
}

/// libfaketime, on a PostgreSQL run (on SQLite one daemon owns its file, and its clock is the
/// clock); `None` with a notice otherwise (a failure under `CI=true` when the library lacks).
fn prerequisites() -> Option<String> {
    if !common::database::postgres_run() {
        eprintln!("skipped: PostgreSQL only (TEST_DATABASE=postgres): several daemons");
        return None;
    }
    let library = faketime_library();
    if library.is_none() {
        common::lacking(
            "clock skew",
            "libfaketime not found (scripts/faketime-lib.sh, or set FAKETIME_LIB)",
        );
    }
    library
}

/// The library named by `FAKETIME_LIB`, or where Debian installs it.
fn faketime_library() -> Option<String> {
    let library = std::env::var("FAKETIME_LIB")
        .unwrap_or_else(|_| "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".into());
    std::path::Path::new(&library).exists().then_some(library)
}
