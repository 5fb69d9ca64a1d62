//! Helpers without a test harness behind them, shared by the tests (through `common`) and the
//! benchmark (`examples/bench`, by `#[path]`): the benchmark cannot include `common` itself,
//! which starts the daemon's binary by a path only integration tests are given.
#![allow(dead_code)]

use chrono::{DateTime, SecondsFormat, Utc};

/// `t` truncated to the millisecond, as the service stores an instant given at that precision.
pub fn millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).expect("in range")
}

/// An instant as the contract writes it: RFC 3339, milliseconds, `Z`.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A plain HTTP/1.1 GET: the status code and the body, or `None` when nothing answers.
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_request(addr, "GET", path, &[], "").await
}

/// A plain HTTP/1.1 request with `headers` and `body`: the status code and the body, or `None`
/// when nothing answers.
pub async fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// The value of one series in a Prometheus text exposition (`name{labels}` as written there,
/// labels in the exporter's order), if present.
pub fn metric(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// One statement adding `n` timers of `tenant` to `timer_schedules` (SQLite, or PostgreSQL when
/// `postgres`), the first due at `first_ms` (ms since the epoch) and each next one `step_ms`
/// later: `Scheduled`, or `Reached` at `reached_at` when given. Fills a database before a daemon
/// works on it, much faster than commands would.
pub fn prefill_sql(
    postgres: bool,
    n: u64,
    tenant: &str,
    first_ms: i64,
    step_ms: i64,
    reached_at: Option<&str>,
) -> String {
    let (state, reached) = match reached_at {
        Some(at) => ("Reached", format!("'{at}'")),
        None => ("Scheduled", "NULL".into()),
    };
    // Finished rows are deleted oldest first; their keys, like real service call ids, are in
    // no relation to that order (an odd multiplier modulo 2^32 is a bijection), so each
    // delete lands on index pages all over the file as it does in production. Pending
    // rows keep keys in due order.
    let scatter = |open: &str, close: &str, odd: u64| {
        if reached_at.is_some() {
            format!("{open}(x * {odd}) % 4294967296{close}")
        } else {
            "x".to_owned()
        }
    };
    if postgres {
        format!(
            "INSERT INTO timer_schedules
               (tenant_id, service_call_id, correlation_id, due_at, registered_at, reached_at, state, command_seq)
             SELECT '{tenant}', '{tenant}-' || {key}, 'corr-' || {corr},
                    to_char(to_timestamp(({first_ms} + x * {step_ms}) / 1000.0) AT TIME ZONE 'UTC',
                            'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
                    '2026-01-01T00:00:00.000Z', {reached}, '{state}', 0
             FROM generate_series(0::bigint, {last}) AS x",
            last = n.saturating_sub(1),
            key = scatter("lpad(to_hex(", "), 8, '0')", 2_654_435_761),
            corr = scatter("lpad(to_hex(", "), 8, '0')", 2_246_822_519),
        )
    } else {
        format!(
            "WITH RECURSIVE seq(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM seq WHERE x < {last})
             INSERT INTO timer_schedules
               (tenant_id, service_call_id, correlation_id, due_at, registered_at, reached_at, state, command_seq)
             SELECT '{tenant}', '{tenant}-' || {key}, 'corr-' || {corr},
                    strftime('%Y-%m-%dT%H:%M:%fZ', ({first_ms} + x * {step_ms}) / 1000.0, 'unixepoch'),
                    '2026-01-01T00:00:00.000Z', {reached}, '{state}', 0
             FROM seq",
            last = n.saturating_sub(1),
            key = scatter("printf('%08x', ", ")", 2_654_435_761),
            corr = scatter("printf('%08x', ", ")", 2_246_822_519),
        )
    }
}

/// The local TCP ports of the sockets process `pid` holds (from `/proc`).
pub fn tcp_ports(pid: i32) -> Vec<u16> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter_map(|target| {
                    let target = target.to_string_lossy().into_owned();
                    target
                        .strip_prefix("socket:[")
                        .and_then(|rest| rest.strip_suffix(']'))
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 9 && inodes.contains(fields[9]) {
                let port = fields[1].rsplit(':').next().unwrap_or("0");
                if let Ok(port) = u16::from_str_radix(port, 16) {
                    ports.push(port);
                }
            }
        }
    }
    ports
}

/// How many of process `pid`'s PostgreSQL sessions (told apart by their client ports) meet
/// `condition`, on `pg_stat_activity a`.
pub async fn sessions_of(db: &sea_orm::DatabaseConnection, pid: i32, condition: &str) -> i64 {
    use sea_orm::ConnectionTrait;
    let ports = tcp_ports(pid);
    if ports.is_empty() {
        return 0;
    }
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    db.query_one_raw(sea_orm::Statement::from_string(
        db.get_database_backend(),
        format!(
            "SELECT count(*) FROM pg_stat_activity a WHERE a.datname = current_database() \
             AND {condition} AND a.client_port IN ({})",
            ports.join(", ")
        ),
    ))
    .await
    .unwrap()
    .map_or(0, |row| row.try_get_by_index::<i64>(0).unwrap())
}
