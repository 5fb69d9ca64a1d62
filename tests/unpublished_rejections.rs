//! A rejection the broker does not take (docs/CONTRACT.md §3): while the service's user may not
//! publish on one tenant's rejection subject, that tenant's bad command is handed back and
//! decided again, not terminated unreported, and its rejection is published once the
//! permission is granted. The other tenants' commands are stored and fire meanwhile. A
//! permission never granted costs ten deliveries, then the command is terminated. A quota
//! refusal decided again meanwhile is counted once.

mod common;

use std::time::Duration;

use chrono::Utc;
use common::{NatsServer, Scratch, TestClient, config, eventually, quota_checks};
use timer_service::Daemon;

/// A server whose service user may publish anywhere but on `denied` (none when empty); a client
/// without credentials is the unrestricted `tester`.
fn server_config(port: u16, store: &std::path::Path, denied: &[&str]) -> String {
    let denied: Vec<String> = denied.iter().map(|s| format!("{s:?}")).collect();
    format!(
        r#"
listen: "127.0.0.1:{port}"
jetstream {{ store_dir: "{store}" }}
authorization {{
  users = [
    {{ user: timer-service, password: "service-secret", permissions: {{
        publish:   {{ allow: [">"], deny: [{denied}] }},
        subscribe: {{ allow: [">"] }}
    }} }}
    {{ user: tester, password: "tester-secret" }}
  ]
}}
no_auth_user: tester
"#,
        store = store.display(),
        denied = denied.join(", "),
    )
}

/// The times the server refused the service a publish on `subject`.
fn refusals(server: &NatsServer, subject: &str) -> usize {
    server
        .log()
        .lines()
        .filter(|line| line.contains("Violation") && line.contains(subject))
        .count()
}

/// The daemon (its configuration changed by `tweak`) as the service user of a server that
/// denies it `denied`, and a client.
async fn denied_daemon(
    denied: &str,
    tweak: impl FnOnce(&mut timer_service::config::Config),
) -> (NatsServer, Scratch, Daemon, TestClient) {
    let server = NatsServer::start_with_config(|port, store| server_config(port, store, &[denied]));
    let scratch = Scratch::new();
    let mut daemon_config = config(&server, &scratch);
    daemon_config.nats.user = Some("timer-service".into());
    daemon_config.nats.password = Some("service-secret".into());
    tweak(&mut daemon_config);
    let daemon = Daemon::start(daemon_config).await.expect("daemon starts");
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    (server, scratch, daemon, client)
}

/// [`denied_daemon`], and a client that has sent acme a command that is not JSON.
async fn started(denied: &str) -> (NatsServer, Scratch, Daemon, TestClient) {
    let (server, scratch, daemon, client) = denied_daemon(denied, |_| {}).await;
    client
        .publish_raw("timer.cmd.schedule.acme", b"{not json".to_vec())
        .await;
    (server, scratch, daemon, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_the_broker_refused_is_published_once_it_can_be() {
    let denied = "timer.evt.rejected.acme";
    let (server, _scratch, daemon, client) = started(denied).await;
    // Refused once, then decided and refused again: the command was handed back, not
    // terminated with its rejection unpublished.
    eventually(
        Duration::from_secs(30),
        "the rejection refused twice by the broker",
        || async { (refusals(&server, denied) >= 2).then_some(()) },
    )
    .await;
    assert!(
        client.events("timer.evt.rejected.acme").await.is_empty(),
        "no rejection could be published yet"
    );

    // Another tenant's timer is stored and fires meanwhile.
    let due = Utc::now() + chrono::Duration::milliseconds(500);
    client.schedule("globex", "meanwhile", due, None).await;
    client
        .await_events("timer.evt.due.globex", 1, Duration::from_secs(15))
        .await;

    server.reconfigure(|port, store| server_config(port, store, &[]));
    let rejections = client
        .await_events("timer.evt.rejected.acme", 1, Duration::from_secs(30))
        .await;
    let reason = rejections[0].envelope["payload"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.contains("not a valid MessageEnvelope"),
        "the rejection gives its reason: {reason:?}"
    );
    // Terminated once reported: nothing left to deliver again.
    quota_checks::all_handled(&client).await;
    daemon.shutdown().await.unwrap();
}

/// The deliveries after which a command whose rejection is still not published is terminated
/// (`command_handler::rejection::UNREPORTED_DELIVERIES`).
const UNREPORTED_DELIVERIES: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_the_broker_never_takes_is_given_up_after_ten_deliveries() {
    let denied = "timer.evt.rejected.acme";
    let (server, _scratch, daemon, client) = started(denied).await;
    // Each delivery waits out the PubAck's 5 s, then 1 s before the next.
    eventually(
        Duration::from_secs(120),
        "the command terminated",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;
    assert_eq!(
        refusals(&server, denied),
        UNREPORTED_DELIVERIES,
        "one publish refused per delivery"
    );
    daemon.shutdown().await.unwrap();
}

/// A quota refusal decided again at each delivery while its rejection cannot be published is
/// counted once in `timer_quota_rejections_total`, when it is settled (docs/CONTRACT.md §7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_refusal_handed_back_is_counted_once() {
    let denied = "timer.evt.rejected.acme";
    let addr = format!("127.0.0.1:{}", common::free_port());
    let (server, scratch, daemon, client) = denied_daemon(denied, |config| {
        config.http.listen = addr.clone();
        config.quotas.tenants = std::collections::BTreeMap::from([(
            "acme".to_owned(),
            timer_service::config::TenantQuotaSettings {
                max_pending: Some(1),
                ..Default::default()
            },
        )]);
    })
    .await;
    let keys = [("acme".to_owned(), "first".to_owned())];
    quota_checks::publish_schedules(&client, &keys).await;
    eventually(
        Duration::from_secs(20),
        "the first timer stored",
        || async { (quota_checks::pending(&scratch, "acme").await == 1).then_some(()) },
    )
    .await;
    let keys = [("acme".to_owned(), "second".to_owned())];
    quota_checks::publish_schedules(&client, &keys).await;
    eventually(
        Duration::from_secs(30),
        "the refusal's rejection refused twice by the broker",
        || async { (refusals(&server, denied) >= 2).then_some(()) },
    )
    .await;

    server.reconfigure(|port, store| server_config(port, store, &[]));
    client
        .await_events("timer.evt.rejected.acme", 1, Duration::from_secs(30))
        .await;
    quota_checks::all_handled(&client).await;
    assert_eq!(
        quota_checks::quota_rejections(&addr, "acme", "max_pending").await,
        Some(1.0),
        "one refused command, decided at least twice"
    );
    daemon.shutdown().await.unwrap();
}
