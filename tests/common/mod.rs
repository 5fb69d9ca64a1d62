//! Shared test harness: a real `nats-server` per test (own port, own storage directory, killable
//! and restartable), the daemon in-process or as a child process, and a client that speaks the
//! wire contract with plain JSON.
#![allow(dead_code, unused_imports)]

mod backups;
pub mod browser;
pub mod console;
pub mod database;
pub mod doubles;
pub mod nats_cluster;
mod nats_server;
pub mod net_proxy;
pub mod operator;
pub mod persistence;
pub mod pki;
pub mod postgres_cluster;
pub mod previous_release;
pub mod quota_checks;
mod small_disk;
mod support;
pub mod tls_front;
pub mod write_lock;
pub use backups::{backup_command, backup_process, exit_within, output_within, partials};
pub use nats_server::{NatsServer, free_port};
pub use postgres_cluster::PostgresCluster;
pub use small_disk::SmallDisk;
pub use support::{
    http_get, http_request, metric, millis, prefill_sql, rfc3339, sessions_of, tcp_ports,
};

use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tempfile::TempDir;
use timer_service::Config;
use timer_service::storage::db::DatabaseTarget;

/// Polls `check` until it yields `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A test's scratch directory and its database: the SQLite file in the directory, or, in a
/// PostgreSQL run (see [`database`]), a PostgreSQL database of the test's own.
pub struct Scratch {
    pub dir: TempDir,
    postgres: Option<database::PostgresDatabase>,
    /// A PostgreSQL database the test brought itself (a [`PostgresCluster`] of its own).
    own_url: Option<String>,
}

impl Scratch {
    pub fn new() -> Self {
        let postgres = database::postgres_run().then(|| {
            database::PostgresDatabase::create()
                .unwrap_or_else(|e| panic!("{e} (unset TEST_DATABASE to run on SQLite)"))
        });
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            postgres,
            own_url: None,
        }
    }

    /// A scratch directory whose database is the PostgreSQL database at `url`, whatever the run.
    pub fn on_postgres(url: String) -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            postgres: None,
            own_url: Some(url),
        }
    }

    /// The SQLite file (used unless this is a PostgreSQL run).
    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("timers.db")
    }

    /// The test's database.
    pub fn database(&self) -> DatabaseTarget {
        match self.database_url() {
            Some(url) => DatabaseTarget::Postgres { url },
            None => DatabaseTarget::sqlite(self.db_path()),
        }
    }

    /// The PostgreSQL URL, in a PostgreSQL run or on a database of the test's own.
    pub fn database_url(&self) -> Option<String> {
        self.own_url
            .clone()
            .or_else(|| self.postgres.as_ref().map(|pg| pg.url.clone()))
    }

    /// A scratch for a test of something only PostgreSQL has (several daemons on one
    /// database): in the PostgreSQL run; in the SQLite run `None`, saying so (`what`).
    pub fn postgres_only(what: &str) -> Option<Scratch> {
        if !database::postgres_run() {
            eprintln!(
                "{what}: PostgreSQL only; skipped in the SQLite run (TEST_DATABASE=postgres)"
            );
            return None;
        }
        Some(Scratch::new())
    }

    /// A test of something only a SQLite file has says so and is skipped in a PostgreSQL run.
    pub fn sqlite_only(&self, what: &str) -> bool {
        if self.database_url().is_some() {
            eprintln!("{what}: a SQLite file's concern; skipped in the PostgreSQL run");
            return false;
        }
        true
    }
}

/// Says that a test, or a part of it, is skipped for want of a server or library (`why`) this
/// machine lacks. Under `CI=true` it fails instead: CI must provide what the tests need, and a
/// check that passes because its part is absent cannot fail.
pub fn lacking(what: &str, why: &str) {
    if std::env::var("CI").is_ok_and(|ci| ci == "true" || ci == "1") {
        panic!("{what}: {why}; under CI=true the machine must provide it");
    }
    eprintln!("{what}: skipped, {why}");
}

/// Daemon configuration for a test: its own database, the test's broker, default intervals
/// (so a timer firing well inside the 5 s polling interval proves the exact wake-up).
pub fn config(server: &NatsServer, scratch: &Scratch) -> Config {
    Config {
        broker_url: server.url(),
        db_path: scratch.db_path(),
        database_url: scratch.database_url(),
        // No HTTP unless a test asks for it: daemons of one test binary would share a port.
        http: timer_service::config::HttpSettings {
            listen: String::new(),
        },
        // Stable across a test's restarts, as a deployment's names should be.
        name: Some("test".into()),
        ..Config::default()
    }
}

/// A broker, a database and the daemon running on them in-process, plus a client; returns once
/// the daemon has created its command stream.
pub async fn started() -> (NatsServer, Scratch, timer_service::Daemon, TestClient) {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let daemon = timer_service::Daemon::start(config(&server, &scratch))
        .await
        .expect("daemon starts");
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    (server, scratch, daemon, client)
}

/// The daemon binary as a child process, for SIGKILL and SIGTERM.
pub struct DaemonProcess {
    child: Child,
    pub log: PathBuf,
}

impl DaemonProcess {
    pub fn start(server: &NatsServer, scratch: &Scratch) -> Self {
        Self::start_with(server, scratch, &[])
    }

    /// The daemon with extra environment settings (`TIMER_HTTP_LISTEN`, `TIMER_LOG_FORMAT`…).
    pub fn start_with(server: &NatsServer, scratch: &Scratch, env: &[(&str, &str)]) -> Self {
        Self::start_without(server, scratch, env, &[])
    }

    /// Like [`Self::start_with`], with the variables `unset` left out (`TIMER_NAME`: a daemon
    /// that picks its own name).
    pub fn start_without(
        server: &NatsServer,
        scratch: &Scratch,
        env: &[(&str, &str)],
        unset: &[&str],
    ) -> Self {
        let config = scratch.dir.path().join("absent-config.toml");
        Self::start_configured(server, scratch, &config, env, unset)
    }

    /// Like [`Self::start_without`], reading the configuration file `config`.
    pub fn start_configured(
        server: &NatsServer,
        scratch: &Scratch,
        config: &std::path::Path,
        env: &[(&str, &str)],
        unset: &[&str],
    ) -> Self {
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_timer-service"));
        Self::launch(binary, server, scratch, config, env, unset)
    }

    /// Another build of the daemon (an earlier release, `previous_release`), set up as
    /// [`Self::start_with`] sets up this one.
    pub fn start_binary(
        binary: &std::path::Path,
        server: &NatsServer,
        scratch: &Scratch,
        env: &[(&str, &str)],
    ) -> Self {
        let config = scratch.dir.path().join("absent-config.toml");
        Self::launch(binary, server, scratch, &config, env, &[])
    }

    fn launch(
        binary: &std::path::Path,
        server: &NatsServer,
        scratch: &Scratch,
        config: &std::path::Path,
        env: &[(&str, &str)],
        unset: &[&str],
    ) -> Self {
        let log = scratch
            .dir
            .path()
            .join(format!("daemon-{}.log", uuid::Uuid::now_v7()));
        let out = std::fs::File::create(&log).expect("log");
        let mut command = Command::new(binary);
        command
            .arg("run")
            .arg("--config")
            .arg(config)
            .env("TIMER_BROKER_URL", server.url())
            .env("TIMER_DB_PATH", scratch.db_path())
            .envs(
                scratch
                    .database_url()
                    .map(|url| ("TIMER_DATABASE_URL", url)),
            )
            .env("RUST_LOG", "info,timer_service=debug")
            .env("TIMER_HTTP_LISTEN", "")
            .env("TIMER_NAME", "test");
        // Only the OTEL_* settings the test gives: one from the caller's shell could make the
        // daemon export spans, or refuse to start.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        command
            .envs(env.iter().copied())
            .stdout(out.try_clone().expect("log"))
            .stderr(out);
        for name in unset {
            command.env_remove(name);
        }
        let child = command.spawn().expect("start timer-service");
        Self { child, log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The daemon's log so far (empty before its first line).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the daemon logs `line`, up to `timeout`; returns the log then.
    pub async fn await_log(&self, line: &str, timeout: Duration) -> String {
        eventually(timeout, line, || async {
            let log = self.log_text();
            log.contains(line).then_some(log)
        })
        .await
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// The exit status, if the process has exited.
    pub fn try_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for the process to exit, up to `timeout`; prints its log when it failed.
    pub async fn wait_exit(mut self, timeout: Duration) -> std::process::ExitStatus {
        let child = &mut self.child;
        let status = eventually(timeout, "the daemon process to exit", || {
            let status = child.try_wait().ok().flatten();
            async move { status }
        })
        .await;
        if !status.success() {
            eprintln!(
                "daemon log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        status
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Freezes (SIGSTOP) one of `daemons` the moment `at_work(pid)` sees it inside a transaction (a
/// statement of its under way on the server), within `window`; then polls `landed(pid)` for up
/// to 100 ms (the statement finishes, the session waits for the frozen client). When a freeze
/// caught it where the test wants it, it is left frozen and its index returned; otherwise it
/// is thawed (SIGCONT) and the watch goes on. A freeze at a random instant mostly finds a
/// daemon between transactions.
pub async fn freeze_one_when<W, WF, L, LF>(
    daemons: &[DaemonProcess],
    window: Duration,
    mut at_work: W,
    mut landed: L,
) -> Option<usize>
where
    W: FnMut(i32) -> WF,
    WF: Future<Output = bool>,
    L: FnMut(i32) -> LF,
    LF: Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < until {
        let mut seen = None;
        for (i, daemon) in daemons.iter().enumerate() {
            if at_work(daemon.pid()).await {
                seen = Some(i);
                break;
            }
        }
        let Some(i) = seen else {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        let daemon = &daemons[i];
        daemon.signal(libc::SIGSTOP);
        let look_until = tokio::time::Instant::now() + Duration::from_millis(100);
        while tokio::time::Instant::now() < look_until {
            if landed(daemon.pid()).await {
                return Some(i);
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        daemon.signal(libc::SIGCONT);
    }
    None
}

/// A ScheduleTimer envelope, as a client writes it.
pub fn schedule_command(
    tenant: &str,
    service_call_id: &str,
    due_at: &str,
    correlation_id: Option<&str>,
) -> Value {
    let mut payload = json!({
        "tenantId": tenant,
        "serviceCallId": service_call_id,
        "dueAt": due_at,
    });
    if let Some(c) = correlation_id {
        payload["correlationId"] = json!(c);
    }
    json!({
        "id": uuid::Uuid::now_v7(),
        "type": "ScheduleTimer",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "correlationId": null,
        "causationId": null,
        "aggregateId": service_call_id,
        "payload": payload,
    })
}

/// A CancelTimer envelope, as a client writes it.
pub fn cancel_command(tenant: &str, service_call_id: &str) -> Value {
    json!({
        "id": uuid::Uuid::now_v7(),
        "type": "CancelTimer",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "correlationId": null,
        "causationId": null,
        "aggregateId": service_call_id,
        "payload": { "tenantId": tenant, "serviceCallId": service_call_id },
    })
}

/// A CancelTimers envelope of `tenant` with the filter `filter` (`{"all": true}`, a
/// correlation id, a range), as a client writes it.
pub fn cancel_timers_command(tenant: &str, filter: Value) -> Value {
    let mut payload = filter;
    payload["tenantId"] = json!(tenant);
    json!({
        "id": uuid::Uuid::now_v7(),
        "type": "CancelTimers",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "correlationId": null,
        "causationId": null,
        "aggregateId": null,
        "payload": payload,
    })
}

/// A ScheduleTimers envelope of `tenant` holding `timers` (each a ScheduleTimer's payload
/// without `tenantId`), as a client writes it.
pub fn schedule_timers_command(
    tenant: &str,
    timers: Vec<Value>,
    correlation_id: Option<&str>,
) -> Value {
    json!({
        "id": uuid::Uuid::now_v7(),
        "type": "ScheduleTimers",
        "tenantId": tenant,
        "timestampMs": Utc::now().timestamp_millis(),
        "correlationId": correlation_id,
        "payload": { "tenantId": tenant, "timers": timers },
    })
}

/// One event read back from the event stream.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub subject: String,
    pub msg_id: Option<String>,
    /// The `traceparent` and `tracestate` headers.
    pub trace: (Option<String>, Option<String>),
    pub envelope: Value,
    /// When the broker stored it.
    pub stored_at: DateTime<Utc>,
}

impl StoredEvent {
    pub fn service_call_id(&self) -> &str {
        self.envelope["payload"]["serviceCallId"]
            .as_str()
            .unwrap_or_default()
    }

    pub fn due_at(&self) -> DateTime<Utc> {
        self.envelope["payload"]["dueAt"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .expect("dueAt")
    }
}

/// A client of the service: publishes commands, reads events.
pub struct TestClient {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
}

impl TestClient {
    pub async fn connect(server: &NatsServer) -> Self {
        Self::connect_to(&server.url()).await
    }

    /// A client of the servers at `urls` (comma-separated: a cluster).
    pub async fn connect_to(urls: &str) -> Self {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(timer_service::nats::server_addrs(urls).expect("URLs"))
            .await
            .expect("connect");
        let js = jetstream::new(client.clone());
        Self { client, js }
    }

    /// Publishes `command` on `subject` with a `traceparent` (and the `tracestate`
    /// `congo=t61rcWkgMzE` beside it); none when `None`. Returns once the broker stored it.
    pub async fn publish_traced(&self, subject: &str, command: &Value, traceparent: Option<&str>) {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(parent) = traceparent {
            headers.insert("traceparent", parent);
            headers.insert("tracestate", "congo=t61rcWkgMzE");
        }
        self.js
            .publish_with_headers(
                subject.to_owned(),
                headers,
                serde_json::to_vec(command).expect("json").into(),
            )
            .await
            .expect("publish")
            .await
            .expect("stored");
    }

    /// Waits until the daemon has created the command stream (so publishes are stored).
    /// Waits for the command stream and the daemon's consumer on it (created together).
    pub async fn wait_for_command_stream(&self) {
        eventually(
            Duration::from_secs(15),
            "the TIMER_COMMANDS stream and its consumer",
            || async {
                self.js
                    .get_consumer_from_stream::<consumer::pull::Config, _, _>(
                        "timer-service",
                        "TIMER_COMMANDS",
                    )
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await
    }

    /// Publishes raw bytes on `subject` and waits for the broker to store them. Right after a
    /// stream is created a loaded broker may briefly answer "no responders" (nothing stored):
    /// that publish is sent again, as any client would.
    pub async fn publish_raw(&self, subject: &str, bytes: Vec<u8>) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let ack = self
                .js
                .publish(subject.to_owned(), bytes.clone().into())
                .await
                .expect("publish")
                .await;
            match ack {
                Ok(_) => return,
                Err(e)
                    if e.kind() == jetstream::context::PublishErrorKind::StreamNotFound
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("PubAck: {e}"),
            }
        }
    }

    pub async fn schedule(
        &self,
        tenant: &str,
        service_call_id: &str,
        due_at: DateTime<Utc>,
        correlation_id: Option<&str>,
    ) {
        let command = schedule_command(tenant, service_call_id, &rfc3339(due_at), correlation_id);
        self.publish_raw(
            &format!("timer.cmd.schedule.{tenant}"),
            serde_json::to_vec(&command).expect("json"),
        )
        .await;
    }

    /// Publishes a ScheduleTimer for each of `ids`, a thousand PubAcks in flight at a time, and
    /// returns once the broker has stored every one.
    pub async fn schedule_many(&self, tenant: &str, ids: &[String], due_at: DateTime<Utc>) {
        let subject = format!("timer.cmd.schedule.{tenant}");
        for chunk in ids.chunks(1000) {
            let mut acks = Vec::with_capacity(chunk.len());
            for id in chunk {
                let command = schedule_command(tenant, id, &rfc3339(due_at), None);
                let bytes = serde_json::to_vec(&command).expect("json");
                acks.push(
                    self.js
                        .publish(subject.clone(), bytes.into())
                        .await
                        .expect("publish"),
                );
            }
            for (id, ack) in chunk.iter().zip(acks) {
                if ack.await.is_err() {
                    let command = schedule_command(tenant, id, &rfc3339(due_at), None);
                    self.publish_raw(&subject, serde_json::to_vec(&command).expect("json"))
                        .await;
                }
            }
        }
    }

    /// Waits until every one of `ids` of `tenant` has fired at least once, and asserts that
    /// none was stored before its `dueAt`. Returns every due event of `tenant`.
    pub async fn await_all_fired(
        &self,
        tenant: &str,
        ids: &[String],
        timeout: Duration,
    ) -> Vec<StoredEvent> {
        let filter = format!("timer.evt.due.{tenant}");
        let events = eventually(timeout, "every timer to fire", || async {
            let events = self.events(&filter).await;
            let fired: std::collections::HashSet<&str> =
                events.iter().map(|e| e.service_call_id()).collect();
            ids.iter()
                .all(|id| fired.contains(id.as_str()))
                .then_some(events.clone())
        })
        .await;
        for event in &events {
            assert!(
                event.stored_at >= event.due_at(),
                "{} fired before dueAt",
                event.service_call_id()
            );
        }
        events
    }

    /// The distinct service call ids of `tenant` that have a `DueTimeReached` on the stream.
    pub async fn fired_ids(&self, tenant: &str) -> std::collections::HashSet<String> {
        self.events(&format!("timer.evt.due.{tenant}"))
            .await
            .iter()
            .map(|e| e.service_call_id().to_owned())
            .collect()
    }

    /// Every event stored so far on subjects matching `filter` (e.g. `timer.evt.due.>`), in
    /// stream order. Empty while the event stream does not exist yet.
    pub async fn events(&self, filter: &str) -> Vec<StoredEvent> {
        let Ok(stream) = self.js.get_stream("TIMER_EVENTS").await else {
            return Vec::new();
        };
        let Ok(consumer) = stream
            .create_consumer(consumer::pull::Config {
                filter_subject: filter.to_owned(),
                deliver_policy: consumer::DeliverPolicy::All,
                ack_policy: consumer::AckPolicy::None,
                inactive_threshold: Duration::from_secs(5),
                ..Default::default()
            })
            .await
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        loop {
            let Ok(mut batch) = consumer.fetch().max_messages(1000).messages().await else {
                break;
            };
            // The status that ends a no-wait fetch may never come (a fetch has no expiry of its
            // own): a batch silent for 3 s is taken as ended, and the caller polls again.
            let mut messages = Vec::new();
            let mut silent = false;
            loop {
                match tokio::time::timeout(
                    Duration::from_secs(3),
                    futures::StreamExt::next(&mut batch),
                )
                .await
                {
                    Ok(Some(message)) => messages.push(message),
                    Ok(None) => break,
                    Err(_) => {
                        silent = true;
                        break;
                    }
                }
            }
            if messages.is_empty() {
                break;
            }
            for message in messages.into_iter().flatten() {
                let stored_at = message
                    .info()
                    .map(|i| {
                        DateTime::<Utc>::from_timestamp_nanos(
                            i.published.unix_timestamp_nanos() as i64
                        )
                    })
                    .expect("info");
                out.push(StoredEvent {
                    subject: message.subject.to_string(),
                    msg_id: message
                        .headers
                        .as_ref()
                        .and_then(|h| h.get("Nats-Msg-Id"))
                        .map(|v| v.to_string()),
                    trace: (
                        message
                            .headers
                            .as_ref()
                            .and_then(|h| h.get("traceparent"))
                            .map(|v| v.to_string()),
                        message
                            .headers
                            .as_ref()
                            .and_then(|h| h.get("tracestate"))
                            .map(|v| v.to_string()),
                    ),
                    envelope: serde_json::from_slice(&message.payload).expect("event is JSON"),
                    stored_at,
                });
            }
            if silent {
                break;
            }
        }
        out
    }

    /// Waits until at least `count` events match `filter`, and returns them all.
    pub async fn await_events(
        &self,
        filter: &str,
        count: usize,
        timeout: Duration,
    ) -> Vec<StoredEvent> {
        eventually(timeout, &format!("{count} events on {filter}"), || async {
            let events = self.events(filter).await;
            (events.len() >= count).then_some(events)
        })
        .await
    }

    /// Waits until the event for `service_call_id` of `tenant` is stored, and returns it.
    pub async fn await_due(
        &self,
        tenant: &str,
        service_call_id: &str,
        timeout: Duration,
    ) -> StoredEvent {
        let filter = format!("timer.evt.due.{tenant}");
        eventually(
            timeout,
            &format!("DueTimeReached for {service_call_id}"),
            || async {
                self.events(&filter)
                    .await
                    .into_iter()
                    .find(|e| e.service_call_id() == service_call_id)
            },
        )
        .await
    }

    /// Schedules a sentinel timer due now and waits for it: every command published before it
    /// has then been handled, and everything due before it has fired.
    /// Waits until the API answers (the responder has started).
    pub async fn api_ready(&self) {
        eventually(Duration::from_secs(15), "the API to answer", || async {
            self.client
                .request("timer.api.stats.acme", "{}".into())
                .await
                .ok()
                .map(|_| ())
        })
        .await
    }

    pub async fn barrier(&self, tenant: &str) {
        let id = format!("sentinel-{}", uuid::Uuid::now_v7());
        self.schedule(tenant, &id, Utc::now(), None).await;
        self.await_due(tenant, &id, Duration::from_secs(15)).await;
    }

    /// Number of events for `service_call_id` on `tenant`'s due subject.
    pub async fn count_due(&self, tenant: &str, service_call_id: &str) -> usize {
        self.events(&format!("timer.evt.due.{tenant}"))
            .await
            .iter()
            .filter(|e| e.service_call_id() == service_call_id)
            .count()
    }

    /// Commands the broker still holds for the daemon (undelivered or unacknowledged): the
    /// command stream is a work queue, so every message still in it, whichever consumer (line)
    /// reads it.
    pub async fn commands_outstanding(&self) -> u64 {
        // A broker busy with a backlog may let one request time out: asked again, for 10 s.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = match self.js.get_stream("TIMER_COMMANDS").await {
                Ok(mut stream) => stream
                    .info()
                    .await
                    .map(|info| info.state.messages)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match answer {
                Ok(messages) => return messages,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    panic!("command stream: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Waits, up to `timeout`, until the command stream holds nothing: every command sent so
    /// far was applied and acknowledged by the daemon.
    pub async fn await_commands_applied(&self, timeout: Duration) {
        eventually(timeout, "the command stream to be empty", || async {
            (self.commands_outstanding().await == 0).then_some(())
        })
        .await
    }

    /// The command stream as the broker describes it now.
    pub async fn command_stream_info(&self) -> jetstream::stream::Info {
        let mut stream = self.js.get_stream("TIMER_COMMANDS").await.expect("stream");
        stream.info().await.expect("stream info").clone()
    }

    /// The names of the command stream's consumers, sorted.
    pub async fn command_consumer_names(&self) -> Vec<String> {
        use futures::TryStreamExt;
        let stream = self.js.get_stream("TIMER_COMMANDS").await.expect("stream");
        let mut names: Vec<String> = stream.consumer_names().try_collect().await.expect("names");
        names.sort();
        names
    }

    /// Deliveries the consumers of the command stream have made so far (the first one and each
    /// line's), redeliveries included.
    pub async fn commands_delivered(&self) -> Option<u64> {
        use futures::TryStreamExt;
        let stream = self.js.get_stream("TIMER_COMMANDS").await.ok()?;
        let names: Vec<String> = stream.consumer_names().try_collect().await.ok()?;
        let mut delivered = 0;
        for name in names {
            let mut consumer: consumer::PullConsumer = stream.get_consumer(&name).await.ok()?;
            delivered += consumer.info().await.ok()?.delivered.consumer_sequence;
        }
        Some(delivered)
    }

    /// Commands delivered to the daemon and not yet acknowledged, over every consumer of the
    /// command stream (the first one and each line's).
    pub async fn commands_held(&self) -> u64 {
        use futures::TryStreamExt;
        let stream = self
            .js
            .get_stream("TIMER_COMMANDS")
            .await
            .expect("command stream");
        let names: Vec<String> = stream.consumer_names().try_collect().await.expect("names");
        let mut held = 0;
        for name in names {
            let mut consumer: consumer::PullConsumer =
                stream.get_consumer(&name).await.expect("consumer");
            held += consumer
                .info()
                .await
                .expect("consumer info")
                .num_ack_pending as u64;
        }
        held
    }

    /// A raw API request on `subject`: the error code header (if any) and the JSON body.
    /// Waited for as long as a NATS client's usual request timeout (the API answers within
    /// it, docs/CONTRACT.md §6): a flood of a tenant's cancels queues for its turns, and on a
    /// loaded machine the last of 300 waited more than 10 s.
    pub async fn api_request(&self, subject: &str, body: Value) -> (Option<u16>, Value) {
        let reply = tokio::time::timeout(
            Duration::from_secs(30),
            self.client.request(
                subject.to_owned(),
                serde_json::to_vec(&body).unwrap().into(),
            ),
        )
        .await
        .expect("an answer in time")
        .expect("a reply");
        let code = reply
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Service-Error-Code"))
            .map(|c| c.as_str().parse().unwrap());
        let body = serde_json::from_slice(&reply.payload).expect("a JSON body");
        (code, body)
    }
}

/// Waits until the stored timer `tenant`/`id` is in `state` (its event can reach a subscriber
/// a moment before the row is marked), and returns it.
pub async fn await_state(
    persistence: &timer_service::actors::PersistenceClient,
    tenant: &str,
    id: &str,
    state: timer_service::domain::TimerState,
) -> timer_service::domain::Timer {
    eventually(
        Duration::from_secs(10),
        &format!("{tenant}/{id} {state}"),
        || async {
            persistence
                .get(tenant, id)
                .await
                .ok()
                .flatten()
                .filter(|t| t.state == state)
        },
    )
    .await
}

/// The claimant a test's own Persistence or Store uses (the name a test daemon gets too).
pub fn claimant() -> timer_service::storage::Claimant {
    timer_service::storage::Claimant {
        name: "test".into(),
        lease: Duration::from_secs(30),
    }
}

/// An accepted ScheduleTimer for `tenant`/`id` due at `due_at`, with stream sequence `seq`.
pub fn schedule_at(
    tenant: &str,
    id: &str,
    seq: u64,
    due_at: DateTime<Utc>,
) -> timer_service::domain::Command {
    timer_service::domain::Command {
        tenant_id: tenant.into(),
        service_call_id: id.into(),
        correlation_id: format!("corr-{seq}"),
        action: timer_service::domain::Action::Schedule {
            due_at,
            data: None,
            expires_at: None,
        },
        seq,
        received_at: due_at,
        trace: None,
        item: None,
    }
}

/// An accepted CancelTimer for `tenant`/`id`, with stream sequence `seq`, received at `at`.
pub fn cancel_at(
    tenant: &str,
    id: &str,
    seq: u64,
    at: DateTime<Utc>,
) -> timer_service::domain::Command {
    timer_service::domain::Command {
        action: timer_service::domain::Action::Cancel,
        received_at: at,
        trace: None,
        item: None,
        ..schedule_at(tenant, id, seq, at)
    }
}

/// The rows `sql` selects, each turned into a `T` by `map`, read on a connection of the test's
/// own.
pub async fn query_rows<T>(
    database: &DatabaseTarget,
    sql: &str,
    map: impl Fn(&sea_orm::QueryResult) -> T,
) -> Vec<T> {
    use sea_orm::{ConnectionTrait, Statement};
    let db = timer_service::storage::db::connect(database, 1)
        .await
        .expect("open the database");
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            sql.to_owned(),
        ))
        .await
        .expect("read the rows");
    let out = rows.iter().map(map).collect();
    db.close().await.expect("close");
    out
}

/// Rows of the database by state, read on a connection of the test's own.
pub async fn rows_by_state(database: &DatabaseTarget) -> std::collections::BTreeMap<String, i64> {
    query_rows(
        database,
        "SELECT state, COUNT(*) FROM timer_schedules GROUP BY state",
        |row| {
            (
                row.try_get_by_index::<String>(0).expect("state"),
                row.try_get_by_index::<i64>(1).expect("count"),
            )
        },
    )
    .await
    .into_iter()
    .collect()
}
