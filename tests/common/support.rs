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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
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
