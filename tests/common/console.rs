//! A daemon with its console on (docs/CONTRACT.md §7), a client of its broker, and requests
//! to the console as its page sends them: shared by the browser tests (`tests/console.rs`) and
//! the HTTP ones (`tests/console_http.rs`).

use std::time::Duration;

use serde_json::{Value, json};
use timer_service::config::{ConsoleSettings, Secret};

use super::{NatsServer, Scratch, TestClient, eventually, http_request};

pub const OPERATOR: &str = "operator-token-for-tests-0123";
pub const ACME: &str = "acme-token-for-tests-0123456";

/// A daemon whose console has an operator token and one for `acme` (whose `max_pending` is
/// 100), on `addr`.
pub struct Console {
    pub server: NatsServer,
    _scratch: Scratch,
    pub daemon: timer_service::Daemon,
    pub client: TestClient,
    pub addr: String,
}

pub async fn console() -> Console {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let addr = format!("127.0.0.1:{}", super::free_port());
    let mut config = super::config(&server, &scratch);
    config.http.listen = addr.clone();
    config.console = ConsoleSettings {
        operator_token: Some(Secret::from(OPERATOR)),
        tenant_tokens: [("acme".to_owned(), Secret::from(ACME))].into(),
    };
    config.quotas.tenants.insert(
        "acme".into(),
        timer_service::config::TenantQuotaSettings {
            max_pending: Some(100),
            commands_per_second: None,
        },
    );
    let daemon = timer_service::Daemon::start(config)
        .await
        .expect("daemon starts");
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    Console {
        server,
        _scratch: scratch,
        daemon,
        client,
        addr,
    }
}

/// The API's `stats` of `tenant`.
pub async fn stats(client: &TestClient, tenant: &str) -> Value {
    let (code, body) = client
        .api_request(&format!("timer.api.stats.{tenant}"), json!({}))
        .await;
    assert_eq!(code, None, "{body}");
    body
}

/// Waits until `tenant` has `n` timers pending.
pub async fn await_pending(client: &TestClient, tenant: &str, n: u64) {
    eventually(
        Duration::from_secs(15),
        &format!("{n} timers of {tenant} pending"),
        || async { (stats(client, tenant).await["scheduled"] == n).then_some(()) },
    )
    .await;
}

/// The state of one timer, by the API.
pub async fn state_of(client: &TestClient, tenant: &str, id: &str) -> String {
    timer_of(client, tenant, id).await["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// One timer as the API's `get` shows it.
pub async fn timer_of(client: &TestClient, tenant: &str, id: &str) -> Value {
    let (code, body) = client
        .api_request(
            &format!("timer.api.get.{tenant}"),
            json!({ "serviceCallId": id }),
        )
        .await;
    assert_eq!(code, None, "{body}");
    body["timer"].clone()
}

/// A `POST` to the console as its page sends one (a bearer token, JSON), with `extra` headers
/// added or replacing those.
pub async fn post(
    addr: &str,
    path: &str,
    token: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let bearer = format!("Bearer {token}");
    let mut headers = vec![
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    for (name, value) in extra {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        headers.push((name, value));
    }
    http_request(addr, "POST", path, &headers, body)
        .await
        .expect("an answer")
}

/// A `GET` of the console with `token`.
pub async fn get(addr: &str, path: &str, token: &str) -> (u16, String) {
    let bearer = format!("Bearer {token}");
    http_request(addr, "GET", path, &[("Authorization", &bearer)], "")
        .await
        .expect("an answer")
}
