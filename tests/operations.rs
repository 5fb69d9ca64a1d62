//! What an operator sees, on a real daemon process over real HTTP: `/metrics` moving by what
//! was sent and fired, `/healthz`, `/readyz` turning red when the broker or the disk goes and
//! green when they return, and JSON logs that parse line by line.

mod common;

use std::time::{Duration, Instant};

use chrono::Utc;
use common::{
    DaemonProcess, NatsServer, Scratch, SmallDisk, TestClient, eventually, free_port, http_get,
    metric,
};

fn http_env(addr: &str) -> [(&str, &str); 1] {
    [("TIMER_HTTP_LISTEN", addr)]
}

async fn scrape(addr: &str) -> String {
    let (status, body) = http_get(addr, "/metrics").await.expect("/metrics answers");
    assert_eq!(status, 200);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_was_sent_and_fired() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let process = DaemonProcess::start_with(&server, &scratch, &http_env(&addr));
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;

    let now: Vec<String> = (0..120).map(|i| format!("now-{i}")).collect();
    let later: Vec<String> = (0..30).map(|i| format!("later-{i}")).collect();
    client.schedule_many("acme", &now, Utc::now()).await;
    client
        .schedule_many("acme", &later, Utc::now() + chrono::Duration::hours(1))
        .await;
    for i in 0..7 {
        client
            .publish_raw(
                "timer.cmd.schedule.acme",
                format!("not json {i}").into_bytes(),
            )
            .await;
    }
    client
        .await_all_fired("acme", &now, Duration::from_secs(15))
        .await;

    // Counters move as the work is done; the pending gauge is counted every ten seconds.
    let body = eventually(
        Duration::from_secs(20),
        "the counters and the gauge to settle",
        || async {
            let body = scrape(&addr).await;
            let fired = metric(&body, "timer_schedules_processed_total{daemon=\"test\"}");
            let pending = metric(&body, "timer_scheduled{daemon=\"test\"}");
            (fired == Some(120.0) && pending == Some(30.0)).then_some(body)
        },
    )
    .await;
    let value =
        |series: &str| metric(&body, series).unwrap_or_else(|| panic!("no {series} in\n{body}"));
    assert_eq!(
        value("timer_commands_received_total{daemon=\"test\",outcome=\"stored\"}"),
        150.0
    );
    assert_eq!(
        value("timer_commands_received_total{daemon=\"test\",outcome=\"rejected\"}"),
        7.0
    );
    assert_eq!(
        value("timer_fire_lateness_seconds_count{daemon=\"test\"}"),
        120.0
    );
    assert!(value("timer_polling_duration_seconds_count{daemon=\"test\"}") >= 1.0);
    assert_eq!(value("timer_broker_connected{daemon=\"test\"}"), 1.0);
    assert_eq!(value("timer_storage_ok{daemon=\"test\"}"), 1.0);
    assert!(
        body.contains("timer_fire_lateness_seconds_bucket{daemon=\"test\",le=\"0.005\"}"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE timer_fire_lateness_seconds histogram"),
        "{body}"
    );
    assert!(!body.contains("tenant"), "no per-tenant label");
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());
}

/// With `[metrics] tenants` listing acme, acme's timers are counted under its label (pending,
/// overdue, fired, lateness, rejections by reason) beside the totals, and globex, not listed,
/// only in the totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_label_the_listed_tenants_only() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let process = DaemonProcess::start_with(
        &server,
        &scratch,
        &[
            ("TIMER_HTTP_LISTEN", addr.as_str()),
            ("TIMER_METRICS_TENANTS", "acme,initech"),
        ],
    );
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;

    let ids = |prefix: &str, n: usize| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}-{i}")).collect()
    };
    let (acme_now, acme_later) = (ids("now", 5), ids("later", 3));
    let (globex_now, globex_later) = (ids("now", 4), ids("later", 2));
    let later = Utc::now() + chrono::Duration::hours(1);
    client.schedule_many("acme", &acme_now, Utc::now()).await;
    client.schedule_many("acme", &acme_later, later).await;
    client
        .schedule_many("globex", &globex_now, Utc::now())
        .await;
    client.schedule_many("globex", &globex_later, later).await;
    for (tenant, bad) in [("acme", 2), ("globex", 1)] {
        for i in 0..bad {
            client
                .publish_raw(
                    &format!("timer.cmd.schedule.{tenant}"),
                    format!("not json {i}").into_bytes(),
                )
                .await;
        }
    }
    client
        .await_all_fired("acme", &acme_now, Duration::from_secs(15))
        .await;
    client
        .await_all_fired("globex", &globex_now, Duration::from_secs(15))
        .await;

    let acme = |name: &str| format!("{name}{{daemon=\"test\",tenant=\"acme\"}}");
    let rejected = |tenant: &str, reason: &str| {
        format!(
            "timer_tenant_rejected_total{{daemon=\"test\",tenant=\"{tenant}\",reason=\"{reason}\"}}"
        )
    };
    // The gauges are counted every ten seconds.
    let body = eventually(
        Duration::from_secs(25),
        "acme's series to settle",
        || async {
            let body = scrape(&addr).await;
            let settled = metric(&body, &acme("timer_tenant_pending")) == Some(3.0)
                && metric(&body, &acme("timer_tenant_fired_total")) == Some(5.0)
                && metric(&body, "timer_scheduled{daemon=\"test\"}") == Some(5.0)
                && metric(&body, &rejected("acme", "invalid")) == Some(2.0);
            settled.then_some(body)
        },
    )
    .await;
    let value =
        |series: &str| metric(&body, series).unwrap_or_else(|| panic!("no {series} in\n{body}"));
    assert_eq!(value(&acme("timer_tenant_overdue")), 0.0);
    assert_eq!(
        value(&acme("timer_tenant_fire_lateness_seconds_count")),
        5.0
    );
    assert!(
        body.contains("timer_tenant_fire_lateness_seconds_bucket{daemon=\"test\",tenant=\"acme\",le=\"0.005\"}"),
        "{body}"
    );
    for reason in ["order", "refused"] {
        assert_eq!(value(&rejected("acme", reason)), 0.0, "{reason}");
    }
    // A listed tenant that never wrote shows at zero, for dashboards to list.
    assert_eq!(
        value("timer_tenant_pending{daemon=\"test\",tenant=\"initech\"}"),
        0.0
    );
    assert!(
        !body.contains("globex"),
        "an unlisted tenant has no label:\n{body}"
    );
    // The totals count every tenant.
    assert_eq!(
        value("timer_schedules_processed_total{daemon=\"test\"}"),
        9.0
    );
    assert_eq!(
        value("timer_commands_received_total{daemon=\"test\",outcome=\"rejected\"}"),
        3.0
    );
    assert_eq!(
        value("timer_fire_lateness_seconds_count{daemon=\"test\"}"),
        9.0
    );
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());
}

/// Waits until `/readyz` answers `code`, and returns what it said.
async fn await_readyz(addr: &str, code: u16, timeout: Duration, what: &str) -> String {
    eventually(timeout, what, || async {
        http_get(addr, "/readyz")
            .await
            .filter(|(c, _)| *c == code)
            .map(|(_, body)| body)
    })
    .await
}

/// `/readyz` goes 503 within seconds of losing the broker and 200 again when it is back;
/// `/healthz` stays 200 throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_broker() {
    let mut server = NatsServer::start();
    let scratch = Scratch::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let process = DaemonProcess::start_with(&server, &scratch, &http_env(&addr));
    await_readyz(&addr, 200, Duration::from_secs(15), "ready").await;

    server.kill();
    let lost = Instant::now();
    let body = await_readyz(
        &addr,
        503,
        Duration::from_secs(10),
        "not ready without the broker",
    )
    .await;
    let red_after = lost.elapsed();
    assert!(body.contains("broker: not connected"), "{body}");
    assert_eq!(http_get(&addr, "/healthz").await.map(|(c, _)| c), Some(200));

    server.restart();
    let back = Instant::now();
    await_readyz(&addr, 200, Duration::from_secs(15), "ready again").await;
    eprintln!(
        "readiness: red {red_after:?} after the broker died, green {:?} after it returned",
        back.elapsed()
    );
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());
}

/// An idle daemon notices a full disk (its probe writes every two seconds) and says so; it is
/// ready again once space is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_disk_even_when_idle() {
    let scratch = Scratch::new();
    if !scratch.sqlite_only("a full disk") {
        return;
    }
    let Some(disk) = SmallDisk::mount(64 << 20) else {
        return;
    };
    let server = NatsServer::start();
    let addr = format!("127.0.0.1:{}", free_port());
    let db = disk.path().join("timers.db");
    let env = [
        ("TIMER_HTTP_LISTEN", addr.as_str()),
        ("TIMER_DB_PATH", db.to_str().unwrap()),
    ];
    let process = DaemonProcess::start_with(&server, &scratch, &env);
    await_readyz(&addr, 200, Duration::from_secs(15), "ready").await;
    disk.fill_leaving(256 * 1024);
    let full = Instant::now();
    let body = await_readyz(
        &addr,
        503,
        Duration::from_secs(10),
        "not ready on a full disk",
    )
    .await;
    let red_after = full.elapsed();
    assert!(body.contains("database:"), "{body}");
    disk.free();
    let freed = Instant::now();
    await_readyz(&addr, 200, Duration::from_secs(10), "ready again").await;
    eprintln!(
        "readiness: red {red_after:?} after the disk filled, green {:?} after space came back",
        freed.elapsed()
    );
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_with_the_actor_field() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let process = DaemonProcess::start_with(&server, &scratch, &[("TIMER_LOG_FORMAT", "json")]);
    client.wait_for_command_stream().await;
    client
        .publish_raw("timer.cmd.schedule.acme", b"{broken".to_vec())
        .await;
    client.barrier("acme").await;
    let log_path = process.log.clone();
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());

    let log = std::fs::read_to_string(log_path).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    assert!(lines.len() > 10);
    assert!(
        lines.iter().all(|l| l["timestamp"].is_string()
            && l["level"].is_string()
            && l["message"].is_string())
    );
    let started: Vec<&str> = lines
        .iter()
        .filter(|l| l["message"] == "actor started")
        .map(|l| l["actor"].as_str().unwrap())
        .collect();
    assert!(
        started.contains(&"persistence") && started.contains(&"poller"),
        "{started:?}"
    );
    let rejected = lines
        .iter()
        .find(|l| l["message"] == "command rejected")
        .expect("the rejection is logged");
    assert_eq!(rejected["tenant_id"], "acme");
    assert_eq!(rejected["level"], "WARN");
}

/// What Kubernetes puts in the environment of every pod next to a Service named `timer`.
const KUBERNETES_SERVICE_VARIABLES: &[(&str, &str)] = &[
    ("TIMER_SERVICE_HOST", "10.96.71.12"),
    ("TIMER_SERVICE_PORT", "4222"),
    ("TIMER_SERVICE_PORT_NATS", "4222"),
    ("TIMER_PORT", "tcp://10.96.71.12:4222"),
    ("TIMER_PORT_4222_TCP", "tcp://10.96.71.12:4222"),
    ("TIMER_PORT_4222_TCP_PROTO", "tcp"),
    ("TIMER_PORT_4222_TCP_PORT", "4222"),
    ("TIMER_PORT_4222_TCP_ADDR", "10.96.71.12"),
];

/// The JSON log lines of a daemon process that has exited.
fn json_log(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the daemon's log")
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

/// Unknown `TIMER_*` variables that are no service links, each named in a warning.
const UNKNOWN_VARIABLES: &[(&str, &str)] = &[
    ("TIMER_NATS_COLOUR", "blue-7a1e"),
    // Named like a link of a Service `timer-http`, but not written as one.
    ("TIMER_HTTP_PORT", "9464"),
];

/// A daemon started next to a Kubernetes Service named `timer` runs and says nothing of its
/// service links; it names (never shows) each other unknown variable it ignored; a bad value
/// of a variable it knows still stops it with code 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_links_are_ignored_and_other_unknown_variables_warned_about() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut env = KUBERNETES_SERVICE_VARIABLES.to_vec();
    env.extend(UNKNOWN_VARIABLES);
    env.extend([
        ("TIMER_HTTP_LISTEN", addr.as_str()),
        ("TIMER_LOG_FORMAT", "json"),
    ]);
    let process = DaemonProcess::start_with(&server, &scratch, &env);
    await_readyz(&addr, 200, Duration::from_secs(15), "ready").await;
    let log_path = process.log.clone();
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());

    let lines = json_log(&log_path);
    let mut warned: Vec<&str> = lines
        .iter()
        .filter(|l| l["message"] == "environment variable names no setting; ignored")
        .inspect(|l| assert_eq!(l["level"], "WARN"))
        .filter_map(|l| l["variable"].as_str())
        .collect();
    warned.sort();
    let mut expected: Vec<&str> = UNKNOWN_VARIABLES.iter().map(|(k, _)| *k).collect();
    expected.sort();
    assert_eq!(warned, expected);
    let log = std::fs::read_to_string(&log_path).unwrap();
    for value in ["10.96.71.12", "blue-7a1e"] {
        assert!(!log.contains(value), "a value was logged:\n{log}");
    }

    let mut env = KUBERNETES_SERVICE_VARIABLES.to_vec();
    env.push(("TIMER_BATCH_SIZE", "lots"));
    let process = DaemonProcess::start_with(&server, &scratch, &env);
    let log_path = process.log.clone();
    let status = process.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(2));
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("TIMER_BATCH_SIZE"), "{log}");
}

/// Waits until a daemon process has started (its log says so), then stops it.
async fn start_and_stop(process: DaemonProcess) -> std::path::PathBuf {
    let log_path = process.log.clone();
    eventually(Duration::from_secs(15), "the daemon running", || async {
        std::fs::read_to_string(&log_path)
            .ok()
            .filter(|log| log.contains("timer-service running"))
    })
    .await;
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());
    log_path
}

/// The SQLite file a fresh daemon creates, and its WAL, are readable by their owner only; a
/// file that exists keeps the mode the operator gave it, with a warning when others may read
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_file_is_created_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    if !scratch.sqlite_only("the database file's mode") {
        return;
    }
    let server = NatsServer::start();
    let mode = |path: std::path::PathBuf| {
        std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let db = scratch.db_path();
    let wal = db.with_extension("db-wal");
    let process = DaemonProcess::start_with(&server, &scratch, &[("TIMER_LOG_FORMAT", "json")]);
    eventually(Duration::from_secs(15), "the WAL file", || async {
        wal.exists().then_some(())
    })
    .await;
    assert_eq!(mode(db.clone()), 0o600);
    assert_eq!(mode(wal.clone()), 0o600);
    start_and_stop(process).await;

    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let process = DaemonProcess::start_with(&server, &scratch, &[("TIMER_LOG_FORMAT", "json")]);
    let lines = json_log(&start_and_stop(process).await);
    assert_eq!(mode(db.clone()), 0o644, "an existing file keeps its mode");
    let warning = lines
        .iter()
        .find(|l| l["level"] == "WARN" && l["mode"] == "644")
        .unwrap_or_else(|| panic!("no warning about the mode in {lines:?}"));
    assert!(warning["message"].as_str().unwrap().contains("chmod 600"));
}

/// Start-up logs the absolute path of the SQLite file it opened, and whether it created it: a
/// relative `db_path` read from the wrong working directory shows as a new file somewhere
/// unexpected, instead of passing unnoticed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_logs_the_absolute_database_path_and_whether_it_was_created() {
    let scratch = Scratch::new();
    if !scratch.sqlite_only("the database file's path") {
        return;
    }
    let server = NatsServer::start();
    // The test's file, named relative to the daemon's working directory (the test's own).
    let cwd = std::env::current_dir().unwrap();
    let relative = std::path::PathBuf::from("../".repeat(cwd.components().count() - 1))
        .join(scratch.db_path().strip_prefix("/").unwrap());
    let relative = relative.to_str().unwrap();
    let opened = |created: bool| {
        let env = [("TIMER_LOG_FORMAT", "json"), ("TIMER_DB_PATH", relative)];
        let process = DaemonProcess::start_with(&server, &scratch, &env);
        async move {
            let lines = json_log(&start_and_stop(process).await);
            let line = lines
                .iter()
                .find(|l| l["message"] == "database file opened")
                .unwrap_or_else(|| panic!("no \"database file opened\" in {lines:?}"));
            assert_eq!(line["level"], "INFO");
            assert_eq!(line["created"], created, "{line}");
            line["path"].as_str().unwrap().to_owned()
        }
    };
    let first = opened(true).await;
    let absolute = std::fs::canonicalize(scratch.db_path()).unwrap();
    assert_eq!(first, absolute.to_str().unwrap());
    assert_eq!(opened(false).await, first);
}

/// The Grafana dashboard shipped in `ops/` asks only for series the daemon exports, in its
/// panels (rows hold none of their own) and in its template variables.
#[test]
fn the_dashboard_queries_only_metrics_the_daemon_exports() {
    use timer_service::telemetry::*;
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../ops/grafana-dashboard.json")).expect("valid JSON");
    let exported = [
        COMMANDS_RECEIVED,
        SCHEDULES_PROCESSED,
        POLLING_DURATION,
        FIRE_LATENESS,
        SCHEDULED,
        ACTOR_RESTARTS,
        BROKER_CONNECTED,
        STORAGE_OK,
        API_REQUESTS,
        RETENTION_DELETED,
        TENANT_PENDING,
        TENANT_OVERDUE,
        TENANT_FIRED,
        TENANT_FIRE_LATENESS,
        TENANT_REJECTED,
        DATABASE_QUEUE_DEPTH,
        DATABASE_WAIT,
    ];
    let mut exprs: Vec<&str> = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        // A collapsed row carries its panels inside it.
        let nested = panel["panels"].as_array().into_iter().flatten();
        for panel in std::iter::once(panel).chain(nested) {
            match panel["targets"].as_array() {
                Some(targets) => exprs.extend(targets.iter().map(|t| t["expr"].as_str().unwrap())),
                None => assert_eq!(panel["type"], "row", "a panel without queries: {panel}"),
            }
        }
    }
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    exprs.extend(
        variables
            .iter()
            .filter(|v| v["type"] == "query")
            .map(|v| v["query"].as_str().unwrap()),
    );
    let mut queried = 0;
    for expr in exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("timer_") {
                let name = word.trim_end_matches("_bucket");
                assert!(
                    exported.contains(&name),
                    "{name} is not exported (in {expr})"
                );
                queried += 1;
            }
        }
    }
    assert!(queried >= 20, "{queried}");
    let tenant = variables
        .iter()
        .find(|v| v["name"] == "tenant")
        .expect("a tenant variable");
    assert_eq!(
        tenant["query"],
        "label_values(timer_tenant_pending, tenant)"
    );
    assert_eq!(
        (&tenant["multi"], &tenant["includeAll"]),
        (&true.into(), &true.into())
    );
}
