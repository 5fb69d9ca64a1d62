//! NATS security (docs/CONTRACT.md §7): the daemon on a TLS-only, authenticated nats-server with
//! mutual TLS, as its own user with only the permissions it needs, and tenants kept apart by
//! subject permissions alone. The server configuration is the one the README shows.

mod common;

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use common::pki::{CertFiles, Pki};
use common::{NatsServer, Scratch, config, eventually};
use futures::{FutureExt, StreamExt};
use serde_json::json;
use timer_service::Daemon;
use timer_service::client::TimerClient;

/// The multi-tenant server configuration of the README: TLS with client certificates, the
/// service's own user, one user per tenant.
fn server_config(port: u16, store: &Path, pki: &Pki) -> String {
    let tenant = |name: &str| {
        format!(
            r#"{{ user: {name}, password: "{name}-secret", permissions: {{
                publish:   {{ allow: ["timer.cmd.*.{name}", "timer.api.*.{name}"] }},
                subscribe: {{ allow: ["timer.evt.*.{name}", "_INBOX.{name}.>"] }}
            }} }}"#
        )
    };
    format!(
        r#"
listen: "127.0.0.1:{port}"
jetstream {{ store_dir: "{store}" }}
tls {{
  cert_file: "{cert}"
  key_file:  "{key}"
  ca_file:   "{ca}"
  verify:    true
}}
authorization {{
  users = [
    {{ user: timer-service, password: "service-secret", permissions: {{
        publish:   {{ allow: ["$JS.API.>", "$JS.ACK.TIMER_COMMANDS.>", "timer.evt.>", "timer.cmd.cancel.>", "timer.cmd.cancel-many.>", "_INBOX.>", "$SRV.>"] }},
        subscribe: {{ allow: ["_INBOX.>", "timer.api.>", "$SRV.>"] }}
    }} }}
    {acme}
    {globex}
  ]
}}
"#,
        store = store.display(),
        cert = pki.server_cert.display(),
        key = pki.server_key.display(),
        ca = pki.ca_file.display(),
        acme = tenant("acme"),
        globex = tenant("globex"),
    )
}

/// Long enough for a cancel-many's turn and commit on a busy machine.
const TEN_S: Duration = Duration::from_secs(10);

async fn tenant_client(
    server: &NatsServer,
    pki: &Pki,
    cert: &CertFiles,
    tenant: &str,
) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(tenant.into(), format!("{tenant}-secret"))
        .add_root_certificates(pki.ca_file.clone())
        .add_client_certificate(cert.cert.clone(), cert.key.clone())
        .require_tls(true)
        .custom_inbox_prefix(format!("_INBOX.{tenant}"))
        .connect(server.url())
        .await
        .expect("the tenant connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_with_credentials_each_tenant_reaches_only_its_own_timers() {
    let pki = Pki::new();
    let server = NatsServer::start_with_config(|port, store| server_config(port, store, &pki));
    let scratch = Scratch::new();
    let service_cert = pki.client("timer-service");
    let mut daemon_config = config(&server, &scratch);
    daemon_config.nats.user = Some("timer-service".into());
    daemon_config.nats.password = Some("service-secret".into());
    daemon_config.nats.tls_ca = Some(pki.ca_file.clone());
    daemon_config.nats.tls_cert = Some(service_cert.cert.clone());
    daemon_config.nats.tls_key = Some(service_cert.key.clone());
    let http = format!("127.0.0.1:{}", common::free_port());
    daemon_config.http.listen = http.clone();
    daemon_config.name = Some("test".into());
    daemon_config.nats.inbox_per_tenant = true;
    let daemon = Daemon::start(daemon_config).await.unwrap();
    eventually(
        Duration::from_secs(15),
        "the daemon connected over TLS",
        || async { daemon.health().broker_connected.then_some(()) },
    )
    .await;

    let acme_cert = pki.client("acme");
    let globex_cert = pki.client("globex");
    let acme_nats = tenant_client(&server, &pki, &acme_cert, "acme").await;
    let globex_nats = tenant_client(&server, &pki, &globex_cert, "globex").await;
    let timeout = Duration::from_secs(1);
    let acme = TimerClient::with_timeout(acme_nats.clone(), Default::default(), timeout);
    let globex = TimerClient::with_timeout(globex_nats.clone(), Default::default(), timeout);
    let mut acme_events = acme_nats.subscribe("timer.evt.due.acme").await.unwrap();
    let mut acme_spying = acme_nats.subscribe("timer.evt.due.globex").await.unwrap();
    let mut globex_events = globex_nats.subscribe("timer.evt.due.globex").await.unwrap();
    acme_nats.flush().await.unwrap();
    globex_nats.flush().await.unwrap();

    // Each tenant schedules its own timer and receives its event.
    let soon = Utc::now() + chrono::Duration::milliseconds(800);
    let soon_text = common::rfc3339(soon);
    eventually(Duration::from_secs(15), "acme's command stored", || async {
        acme.schedule("acme", "mine", &soon_text, None).await.ok()
    })
    .await;
    globex
        .schedule("globex", "theirs", &soon_text, None)
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(10), acme_events.next())
        .await
        .expect("acme's timer fires")
        .unwrap();
    assert!(String::from_utf8_lossy(&event.payload).contains("\"mine\""));
    tokio::time::timeout(Duration::from_secs(10), globex_events.next())
        .await
        .expect("globex's timer fires")
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "acme's timer marked Reached",
        || async { (acme.get("acme", "mine").await.ok()?.state == "Reached").then_some(()) },
    )
    .await;

    // acme cannot schedule for, query, cancel or read the events of globex.
    let forged = acme.schedule("globex", "forged", &soon_text, None).await;
    assert!(forged.is_err(), "acme scheduled for globex: {forged:?}");
    let peek = acme
        .request(
            timer_service::domain::api::Verb::Get,
            "globex",
            &json!({"serviceCallId": "theirs"}),
        )
        .await;
    assert!(peek.is_err(), "acme read globex's timer: {peek:?}");
    let cancel = acme.cancel("globex", "theirs").await;
    assert!(cancel.is_err(), "acme cancelled globex's timer: {cancel:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(500), acme_spying.next())
            .await
            .is_err(),
        "acme received globex's events"
    );
    eventually(
        Duration::from_secs(10),
        "globex's timer still its own, Reached",
        || async { (globex.get("globex", "theirs").await.ok()?.state == "Reached").then_some(()) },
    )
    .await;
    let forged = globex.get("globex", "forged").await;
    assert_eq!(
        forged.unwrap_err().code(),
        Some(404),
        "nothing was stored for acme's forgery"
    );

    // The API's cancel-many goes through the command stream: the service's permissions above
    // (docs/deployment.md) let it order one for acme.
    let later = common::rfc3339(Utc::now() + chrono::Duration::hours(1));
    acme.schedule("acme", "later", &later, None).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "acme's later timer stored",
        || async { acme.get("acme", "later").await.ok() },
    )
    .await;
    let patient = TimerClient::with_timeout(acme_nats.clone(), Default::default(), TEN_S);
    let cancelled = patient
        .request(
            timer_service::domain::api::Verb::CancelMany,
            "acme",
            &json!({"all": true}),
        )
        .await
        .expect("acme's cancel-many is answered");
    assert_eq!(cancelled["count"], 1, "{cancelled}");

    // Nor can acme have the service publish for it: a reply subject on globex's events is no
    // inbox, so the request is dropped (counted before it could be answered) and globex's
    // subscriber, which sees its own events, gets nothing.
    acme_nats
        .publish_with_reply("timer.api.stats.acme", "timer.evt.due.globex", "{}".into())
        .await
        .unwrap();
    acme_nats.flush().await.unwrap();
    let dropped = "timer_api_requests_dropped_total{daemon=\"test\",reason=\"reply_not_inbox\"}";
    eventually(Duration::from_secs(10), "the drop counted", || {
        if let Some(Some(m)) = globex_events.next().now_or_never() {
            panic!(
                "acme's request was answered on globex's event subject: {:?}",
                String::from_utf8_lossy(&m.payload)
            );
        }
        let http = http.clone();
        async move {
            let (_, body) = common::http_get(&http, "/metrics").await?;
            (common::metric(&body, dropped)? == 1.0).then_some(())
        }
    })
    .await;
    acme.get("acme", "mine").await.unwrap();
    assert!(
        globex_events.next().now_or_never().is_none(),
        "acme's request was answered on globex's event subject"
    );

    // Nor in globex's inboxes, which acme may not publish on: with inboxes per tenant, a reply
    // subject under another tenant's is dropped too, while acme's own requests are answered.
    let mut globex_inbox = globex_nats.subscribe("_INBOX.globex.spoof").await.unwrap();
    globex_nats.flush().await.unwrap();
    acme_nats
        .publish_with_reply("timer.api.stats.acme", "_INBOX.globex.spoof", "{}".into())
        .await
        .unwrap();
    acme_nats.flush().await.unwrap();
    eventually(Duration::from_secs(10), "the second drop counted", || {
        if let Some(Some(m)) = globex_inbox.next().now_or_never() {
            panic!(
                "acme's request was answered in globex's inbox: {:?}",
                String::from_utf8_lossy(&m.payload)
            );
        }
        let http = http.clone();
        async move {
            let (_, body) = common::http_get(&http, "/metrics").await?;
            (common::metric(&body, dropped)? == 2.0).then_some(())
        }
    })
    .await;
    acme.get("acme", "mine").await.unwrap();
    assert!(
        globex_inbox.next().now_or_never().is_none(),
        "acme's request was answered in globex's inbox"
    );

    // No client certificate, or a wrong password: no connection at all.
    let no_cert =
        async_nats::ConnectOptions::with_user_and_password("acme".into(), "acme-secret".into())
            .add_root_certificates(pki.ca_file.clone())
            .require_tls(true)
            .connect(server.url())
            .await;
    assert!(no_cert.is_err(), "connected without a client certificate");
    let wrong_password =
        async_nats::ConnectOptions::with_user_and_password("acme".into(), "guess".into())
            .add_root_certificates(pki.ca_file.clone())
            .add_client_certificate(acme_cert.cert.clone(), acme_cert.key.clone())
            .require_tls(true)
            .connect(server.url())
            .await;
    assert!(wrong_password.is_err(), "connected with a wrong password");
    daemon.shutdown().await.unwrap();
}
