//! The fault-injection suite, in the manner of Jepsen:
//!
//! - `workload`: clients of four tenants schedule, reschedule and cancel timers (one bursting),
//!   recording every operation with its outcome;
//! - `nemesis`: one fault after another (broker killed mid-firing and frozen; daemon killed
//!   mid-burst, stopped, frozen under load; command stream deleted; disk full; clock stepped;
//!   hostile API input; one tenant's heavy reads (`read_flood`); the database server frozen
//!   and stopped, on PostgreSQL, where the run has a server of its own), each healed after a
//!   few seconds and followed by a probe timer per tenant;
//! - `observer`: a plain subscriber, and the event stream and database read at the end;
//! - `history`: the record all of these produce;
//! - `checker`: pure functions judging that record against the contract's invariants (the
//!   fairness one, (h), in `fairness`; (i), prompt after a heal, in `checker::after_heal`);
//! - `report`: the table per fault.

pub mod checker;
pub mod fairness;
pub mod history;
pub mod nemesis;
pub mod observer;
pub mod read_flood;
pub mod report;
pub mod workload;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::Utc;

use crate::common::net_proxy::NetProxy;
use crate::common::{NatsServer, PostgresCluster, Scratch, SmallDisk, TestClient, free_port};
use history::{Op, Run};
use nemesis::{Faketime, Fault, Nemesis, World};

/// A small deterministic generator (xorshift64*), so a run can be replayed from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `from..to`.
    pub fn between(&mut self, from: i64, to: i64) -> i64 {
        from + (self.next() % (to - from).max(1) as u64) as i64
    }
}

/// How long to run: one pass over every fault, or passes until `seconds` have gone by.
pub struct Plan {
    pub seconds: Option<u64>,
    pub seed: u64,
}

impl Plan {
    /// `FAULT_SUITE_SECONDS` selects the long run; `FAULT_SUITE_SEED` replays a run.
    pub fn from_env() -> Self {
        let seconds = std::env::var("FAULT_SUITE_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok());
        let seed = std::env::var("FAULT_SUITE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| Utc::now().timestamp_micros() as u64);
        Self { seconds, seed }
    }
}

/// Runs the workload under the nemesis, then reads back what the service left behind.
pub async fn run(plan: &Plan) -> Run {
    // The broker writes each message before its PubAck (`sync_interval: always`), so a SIGKILL
    // loses nothing it acknowledged; on a tmpfs where one can be mounted, so that costs little.
    // It pings its clients as docs/deployment.md advises (5 s apart, two unanswered), so that a
    // connection whose path went silent is dropped by the broker too, within about 15 s: until
    // then the API requests it hands that connection (a member of the API's queue group) go
    // unanswered.
    let broker_disk = SmallDisk::mount(1 << 30);
    let broker_store = broker_disk.as_ref().map(|d| d.path().join("js"));
    let server = NatsServer::start_with_config(|port, dir| {
        format!(
            "listen: 127.0.0.1:{port}\nping_interval: \"5s\"\nping_max: 2\njetstream {{\n  store_dir: \"{}\"\n  sync_interval: always\n}}\n",
            broker_store.as_deref().unwrap_or(dir).display()
        )
    });
    // The PostgreSQL run brings a server of its own, which the nemesis freezes and restarts.
    let postgres = crate::common::database::postgres_run()
        .then(|| {
            tokio::task::block_in_place(PostgresCluster::start)
                .map_err(|why| {
                    crate::common::lacking(
                        "the database faults",
                        &format!("the shared server is used instead of one of their own: {why}"),
                    )
                })
                .ok()
        })
        .flatten();
    let scratch = match &postgres {
        Some(cluster) => Scratch::on_postgres(cluster.url()),
        None => Scratch::new(),
    };
    let sqlite = scratch.database_url().is_none();
    let disk = if sqlite {
        SmallDisk::mount(128 << 20)
    } else {
        None
    };
    // On PostgreSQL too: there the database server's clock judges, and a daemon whose own
    // clock is stepped must fire nothing early.
    let faketime = Faketime::find(scratch.dir.path())
        .map_err(|why| crate::common::lacking("the clock fault", &why))
        .ok();
    let http = format!("127.0.0.1:{}", free_port());
    let proxy = NetProxy::start(server.port).await;
    let mut env = vec![
        ("TIMER_RETENTION_KEEP_FINISHED".to_owned(), "0".to_owned()),
        ("TIMER_HTTP_LISTEN".to_owned(), http.clone()),
        (
            "TIMER_QUOTAS_TENANTS".to_owned(),
            nemesis::QUOTA_SETTING.to_owned(),
        ),
    ];
    if let Some(disk) = &disk {
        env.push((
            "TIMER_DB_PATH".into(),
            disk.path().join("timers.db").display().to_string(),
        ));
    }
    if let Some(faketime) = &faketime {
        env.extend(faketime.env());
    }
    let mut world = World {
        server,
        proxy,
        via_proxy: false,
        _broker_disk: broker_disk,
        scratch,
        disk,
        faketime,
        daemon: None,
        env,
        postgres,
        http,
    };
    // The heavy reader's timers are there before the daemon starts, as on a service that has run
    // a while.
    let run_for = Duration::from_secs(plan.seconds.unwrap_or(0));
    read_flood::hold_pending(&world.database(), run_for).await;
    world.start_daemon();
    let url = world.server.url();
    let admin = TestClient::connect(&world.server).await;
    admin.wait_for_command_stream().await;
    let observer = observer::Observer::start(&url).await;
    let recorder = workload::Recorder::default();
    let client = workload::Client::connect(&url, recorder.clone()).await;

    let stop = Arc::new(AtomicBool::new(false));
    let workload = tokio::spawn(workload::run(client.clone(), stop.clone(), plan.seed));
    tokio::time::sleep(Duration::from_secs(3)).await; // the workload alone first
    let bursts = vec![quiet_burst(&client, &observer).await];

    let mut nemesis = Nemesis::new(world, client, observer.clone(), admin);
    let mut faults = Vec::new();
    let until = plan
        .seconds
        .map(|s| std::time::Instant::now() + Duration::from_secs(s));
    'passes: loop {
        for fault in Fault::ALL {
            if until.is_some_and(|until| std::time::Instant::now() >= until) {
                break 'passes;
            }
            eprintln!("nemesis: {}", fault.name());
            faults.push(nemesis.inject(fault).await);
        }
        nemesis.next_cycle();
        if until.is_none() {
            break;
        }
    }

    stop.store(true, Ordering::Relaxed);
    if tokio::time::timeout(Duration::from_secs(30), workload)
        .await
        .is_err()
    {
        eprintln!("the workload did not stop within 30 s");
    }
    let ops = recorder.ops();
    drain(&ops, &observer, &nemesis.admin.js).await;
    let commands_left = commands_left(&nemesis.admin).await;

    let exit = nemesis.world.stop_daemon(Duration::from_secs(15)).await;
    if !exit.is_some_and(|s| s.success()) {
        eprintln!("the daemon's final SIGTERM: {exit:?}");
    }
    keep_daemon_logs(&nemesis.world.scratch);
    let daemon_log = daemon_log(&nemesis.world.scratch);
    observer.flush().await;
    let stream = observer::read_event_stream(&nemesis.admin.js).await;
    let rows = observer::read_rows(&nemesis.world.database()).await;
    let hostile_tenants = nemesis
        .hostile
        .iter()
        .map(|h| h.key.tenant.clone())
        .collect();
    Run {
        ops,
        seen: observer.seen(),
        stream,
        rows,
        faults,
        clock_ahead: nemesis.clock_ahead,
        destroyed: nemesis.destroyed,
        api_requests: nemesis.api_requests,
        hostile: nemesis.hostile,
        hostile_tenants,
        bursts,
        read_floods: nemesis.read_floods,
        quota_floods: nemesis.quota_floods,
        commands_left,
        ended: Some(Utc::now()),
        daemon_log,
    }
}

/// How long the daemon is given, once every timer has fired, to take what the command stream
/// still holds: commands handed back by a fault come back within the ack wait (4 s), those no
/// consumer reads within the Sweeper's two looks (4 s).
const COMMANDS_SETTLE: Duration = Duration::from_secs(15);

/// What the command stream still holds after [`COMMANDS_SETTLE`] at most (invariant j).
async fn commands_left(admin: &crate::common::TestClient) -> Option<u64> {
    let deadline = tokio::time::Instant::now() + COMMANDS_SETTLE;
    loop {
        let left = tokio::time::timeout(Duration::from_secs(12), admin.commands_outstanding())
            .await
            .ok()?;
        if left == 0 || tokio::time::Instant::now() >= deadline {
            return Some(left);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Timers of the fault-free burst: enough that firing them takes seconds in a test build.
const QUIET_BURST: usize = 10_000;

/// With no fault on, the bursting tenant sends [`QUIET_BURST`] timers due at one instant, and
/// this waits until they have all been seen firing: meanwhile the other tenants' timers must
/// not wait for them (invariant h).
async fn quiet_burst(client: &workload::Client, observer: &observer::Observer) -> history::Burst {
    let tenant = workload::BURST_TENANT;
    let due_at = crate::common::millis(Utc::now() + chrono::Duration::seconds(5));
    let ids: Vec<String> = (0..QUIET_BURST).map(|i| format!("fair-{i:05}")).collect();
    eprintln!("a burst of {QUIET_BURST} timers, no fault on");
    let timers = client.burst(tenant, &ids, due_at).await;
    let deadline = due_at + chrono::Duration::seconds(60);
    while Utc::now() < deadline
        && ids
            .iter()
            .any(|id| observer.fired(&history::Key::new(tenant, id)).is_none())
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    history::Burst {
        tenant: tenant.to_owned(),
        due_at,
        timers,
    }
}

/// Waits until every timer whose key's last command is an acknowledged schedule has fired, up
/// to 20 s after the last of them was due. Fired means seen by the observer, or stored in the
/// event stream: the observer's plain subscription misses what was published while the broker
/// was down (the daemon's retry is then dropped by the broker as a duplicate), so once the
/// last timer is due the stream is read too, every few seconds.
async fn drain(ops: &[Op], observer: &observer::Observer, js: &async_nats::jetstream::Context) {
    // A key's last operation, whatever came of it: a schedule followed by a cancel that got no
    // PubAck may or may not have been cancelled, and need not fire.
    let mut last = std::collections::HashMap::new();
    for op in ops {
        last.insert(&op.key, op.decisive().then(|| op.due_at()).flatten());
    }
    let mut expected: Vec<_> = last
        .into_iter()
        .filter_map(|(key, due)| due.map(|due| (key, due)))
        .collect();
    let latest = expected
        .iter()
        .map(|(_, due)| *due)
        .max()
        .unwrap_or_else(Utc::now);
    let deadline = latest.max(Utc::now()) + chrono::Duration::seconds(20);
    let mut stream_read: Option<tokio::time::Instant> = None;
    loop {
        expected.retain(|(key, _)| observer.fired(key).is_none());
        let now = Utc::now();
        if expected.is_empty() && now > latest {
            break;
        }
        if now > latest
            && !expected.is_empty()
            && stream_read.is_none_or(|at| at.elapsed() >= Duration::from_secs(3))
        {
            stream_read = Some(tokio::time::Instant::now());
            let stored: std::collections::HashSet<history::Key> = observer::read_event_stream(js)
                .await
                .iter()
                .filter_map(|seen| checker::parse_due(&seen.subject, &seen.payload).ok())
                .map(|event| event.key)
                .collect();
            expected.retain(|(key, _)| !stored.contains(*key));
            continue;
        }
        if now >= deadline {
            eprintln!(
                "drain: {} expected timers had not fired 20 s after the last was due (e.g. {:?})",
                expected.len(),
                expected.iter().take(3).collect::<Vec<_>>()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With `FAULT_SUITE_LOGS=DIR`, copies the daemon's logs (one file per start) into DIR, for a
/// failed run to be read afterwards; the scratch directory goes with the run.
/// The lines of every daemon's log in the run's directory, oldest daemon first (their names
/// are time-ordered), without colour codes.
fn daemon_log(scratch: &Scratch) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(scratch.dir.path()) else {
        return Vec::new();
    };
    let mut logs: Vec<_> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("daemon-"))
        })
        .collect();
    logs.sort();
    logs.iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|text| text.lines().map(without_colours).collect::<Vec<_>>())
        .collect()
}

/// `line` without its ANSI colour codes (`ESC [ … m`).
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

fn keep_daemon_logs(scratch: &Scratch) {
    let Some(dir) = std::env::var_os("FAULT_SUITE_LOGS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let _ = std::fs::create_dir_all(&dir);
    let Ok(entries) = std::fs::read_dir(scratch.dir.path()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("daemon-") {
            let _ = std::fs::copy(entry.path(), dir.join(&name));
        }
    }
    eprintln!("daemon logs copied to {}", dir.display());
}

#[cfg(test)]
mod tests {
    #[test]
    fn colour_codes_are_taken_out_of_a_log_line() {
        assert_eq!(
            super::without_colours("\x1b[2m2026\x1b[0m \x1b[32m INFO\x1b[0m done"),
            "2026  INFO done"
        );
    }
}
