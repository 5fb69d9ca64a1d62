//! Secrets never appear in logs, metrics or error messages (docs/CONTRACT.md §7): a broker URL
//! carrying a password or token, a PostgreSQL URL with a password in its user part or its query
//! string, on a daemon that runs and on one whose connection fails. Every crate logs at `debug`
//! here, the client libraries included.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{DaemonProcess, NatsServer, Scratch, eventually, free_port, http_get};

const NATS_PASSWORD: &str = "Nats-Pw-7f3kQz9";
const PG_USER_PASSWORD: &str = "Pg-User-Pw-51aX";
const PG_QUERY_PASSWORD: &str = "Pg-Query-Pw-88bY";
const CONSOLE_OPERATOR_TOKEN: &str = "Console-Operator-Tk-2c9v";
const CONSOLE_TENANT_TOKEN: &str = "Console-Tenant-Tk-6h1w";

/// A nats-server with JetStream that lets in only `svc` with [`NATS_PASSWORD`].
fn authenticated_server() -> NatsServer {
    NatsServer::start_with_config(|port, store| {
        format!(
            r#"
listen: "127.0.0.1:{port}"
jetstream {{ store_dir: "{store}" }}
authorization {{ users = [ {{ user: svc, password: "{NATS_PASSWORD}" }} ] }}
"#,
            store = store.display()
        )
    })
}

fn with_password(server: &NatsServer, password: &str) -> String {
    format!("nats://svc:{password}@127.0.0.1:{}", server.port)
}

fn assert_no_secret(text: &str, what: &str) {
    for secret in [
        NATS_PASSWORD,
        PG_USER_PASSWORD,
        PG_QUERY_PASSWORD,
        CONSOLE_OPERATOR_TOKEN,
        CONSOLE_TENANT_TOKEN,
    ] {
        assert!(!text.contains(secret), "{what} shows a secret:\n{text}");
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("the daemon's log")
}

/// A daemon whose broker URL carries its password connects with it (the password leaves the
/// URL for the connection options), is ready, and shows the password nowhere: not in its log
/// (the start-up line shows the URL as `svc:***@`), not in `/metrics`. In a PostgreSQL run its
/// database URL carries a password in the query string too. The console's tokens, used for
/// its requests, are not shown either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_broker_or_database_url_is_used_and_never_shown() {
    let server = authenticated_server();
    let scratch = Scratch::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let broker_url = with_password(&server, NATS_PASSWORD);
    let database_url = scratch
        .database_url()
        .map(|url| format!("{url}?password={PG_QUERY_PASSWORD}"));
    let tenant_tokens = format!("acme={CONSOLE_TENANT_TOKEN}");
    let mut env = vec![
        ("TIMER_BROKER_URL", broker_url.as_str()),
        ("TIMER_HTTP_LISTEN", addr.as_str()),
        ("TIMER_CONSOLE_OPERATOR_TOKEN", CONSOLE_OPERATOR_TOKEN),
        ("TIMER_CONSOLE_TENANT_TOKENS", tenant_tokens.as_str()),
        ("RUST_LOG", "debug"),
    ];
    if let Some(url) = &database_url {
        env.push(("TIMER_DATABASE_URL", url));
    }
    let process = DaemonProcess::start_with(&server, &scratch, &env);
    eventually(Duration::from_secs(15), "the daemon ready", || async {
        http_get(&addr, "/readyz")
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;
    for token in [CONSOLE_OPERATOR_TOKEN, CONSOLE_TENANT_TOKEN] {
        let bearer = format!("Bearer {token}");
        let (code, body) = common::http_request(
            &addr,
            "POST",
            "/console/api/tenants/acme/stats",
            &[
                ("Authorization", &bearer),
                ("Content-Type", "application/json"),
            ],
            "{}",
        )
        .await
        .expect("the console answers");
        assert_eq!(code, 200, "{body}");
    }
    let (_, metrics) = http_get(&addr, "/metrics").await.expect("/metrics answers");
    assert_no_secret(&metrics, "/metrics");
    let log_path = process.log.clone();
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());

    let log = read(&log_path);
    assert_no_secret(&log, "the log");
    let port = server.port;
    assert!(
        log.contains(&format!("nats://svc:***@127.0.0.1:{port}")),
        "the start-up line shows the broker URL redacted:\n{log}"
    );
    if database_url.is_some() {
        assert!(log.contains("?password=***"), "{log}");
    }
}

/// A wrong password: the daemon keeps retrying and says why, without the password it tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_password_is_not_shown_in_the_connection_errors() {
    let server = authenticated_server();
    let scratch = Scratch::new();
    let wrong = format!("{NATS_PASSWORD}-wrong");
    let broker_url = with_password(&server, &wrong);
    let env = [
        ("TIMER_BROKER_URL", broker_url.as_str()),
        ("RUST_LOG", "debug"),
    ];
    let process = DaemonProcess::start_with(&server, &scratch, &env);
    let log = eventually(
        Duration::from_secs(15),
        "the refused connection in the log",
        || async {
            let log = read(&process.log);
            log.to_ascii_lowercase()
                .contains("authorization violation")
                .then_some(log)
        },
    )
    .await;
    assert_no_secret(&log, "the log");
    process.kill9();
}

/// Failures that stop start-up report the URL redacted: a broker URL that does not parse, and
/// a PostgreSQL server that refuses the connection (a role it does not know; where no server
/// listens, the daemon gives up after its 30 s connection timeout instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_errors_show_urls_redacted() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let bad_broker = format!("nats://svc:{NATS_PASSWORD}@127.0.0.1:port");
    let refused_database = format!(
        "postgres://no_such_role:{PG_USER_PASSWORD}@127.0.0.1:5432/timers?password={PG_QUERY_PASSWORD}&sslmode=disable"
    );
    for (variable, value, redacted) in [
        ("TIMER_BROKER_URL", bad_broker.as_str(), "svc:***@127.0.0.1"),
        (
            "TIMER_DATABASE_URL",
            refused_database.as_str(),
            "no_such_role:***@127.0.0.1",
        ),
    ] {
        let env = [(variable, value), ("RUST_LOG", "debug")];
        let process = DaemonProcess::start_with(&server, &scratch, &env);
        let log_path = process.log.clone();
        let status = process.wait_exit(Duration::from_secs(60)).await;
        assert_eq!(status.code(), Some(1), "{variable}");
        let log = read(&log_path);
        assert!(log.contains("timer-service failed"), "{log}");
        assert!(log.contains(redacted), "{variable}: {log}");
        assert_no_secret(&log, "the log");
    }
}
