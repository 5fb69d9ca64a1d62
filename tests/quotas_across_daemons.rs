//! Quotas hold for the tenant as a whole (docs/CONTRACT.md §9): three daemons on one
//! PostgreSQL database share each tenant's rate window and pending bound, because each
//! transaction decides its commands against the tenant's row, locked, in the database. Before,
//! each daemon counted alone: three daemons let a tenant through three times its rate, and
//! over its pending limit by what the others had in flight.
//!
//! These need PostgreSQL: they run in the PostgreSQL run (`TEST_DATABASE=postgres`).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use common::quota_checks::{all_handled, pending, rejections};
use common::{NatsServer, Scratch, TestClient};
use timer_service::config::TenantQuotaSettings;
use timer_service::{Config, Daemon};

/// Three daemons on `scratch`'s database with `quotas` for their tenants.
async fn three_daemons(
    server: &NatsServer,
    scratch: &Scratch,
    quotas: BTreeMap<String, TenantQuotaSettings>,
) -> Vec<Daemon> {
    let mut daemons = Vec::new();
    for name in ["q1", "q2", "q3"] {
        let mut config = Config {
            name: Some(name.into()),
            ..common::config(server, scratch)
        };
        config.quotas.tenants = quotas.clone();
        daemons.push(Daemon::start(config).await.expect("daemon starts"));
    }
    daemons
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_hold_for_the_tenant_whatever_the_number_of_daemons() {
    if !common::database::postgres_run() {
        eprintln!("several daemons share a PostgreSQL database: run with TEST_DATABASE=postgres");
        return;
    }
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let quotas = BTreeMap::from([
        (
            "acme".to_owned(),
            TenantQuotaSettings {
                commands_per_second: Some(100),
                ..TenantQuotaSettings::default()
            },
        ),
        (
            "globex".to_owned(),
            TenantQuotaSettings {
                max_pending: Some(300),
                ..TenantQuotaSettings::default()
            },
        ),
    ]);
    let daemons = three_daemons(&server, &scratch, quotas).await;
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let later = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();

    // The pending limit: 900 new keys in bursts the three daemons take in parallel leave
    // exactly 300 pending.
    let ids: Vec<String> = (0..900).map(|i| format!("g-{i:03}")).collect();
    for burst in ids.chunks(100) {
        client.schedule_many("globex", burst, later).await;
    }
    all_handled(&client).await;
    assert_eq!(pending(&scratch, "globex").await, 300, "the pending limit");
    assert_eq!(rejections(&client, "globex").await.len(), 600);

    // The rate: 4 times the limit for 3 s. Every second, at most the limit goes in, whichever
    // daemon takes the commands; nothing accepted falls outside the span from the first
    // command sent to the last handled.
    let started = Instant::now();
    let mut sent = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while started.elapsed() < Duration::from_secs(3) {
        tick.tick().await;
        let ids: Vec<String> = (sent..sent + 4).map(|i| format!("a-{i:05}")).collect();
        client.schedule_many("acme", &ids, later).await;
        sent += 4;
    }
    let fed = started.elapsed().as_secs_f64();
    all_handled(&client).await;
    let span = started.elapsed().as_secs_f64();
    let accepted = pending(&scratch, "acme").await as f64;
    let refused = rejections(&client, "acme").await.len() as f64;
    eprintln!(
        "acme: {sent} sent in {fed:.2} s, handled within {span:.2} s: {accepted} accepted \
         ({:.1}/s over the feed), {refused} refused",
        accepted / fed
    );
    assert_eq!(
        accepted + refused,
        sent as f64,
        "every command decided once"
    );
    assert!(
        accepted <= 100.0 * (span + 1.0),
        "{accepted} accepted within {span:.2} s: more than 100 per second"
    );
    assert!(
        accepted >= 100.0 * (fed - 1.0),
        "{accepted} accepted in a {fed:.2} s feed at 4 times the limit"
    );
    for daemon in daemons {
        daemon.shutdown().await.unwrap();
    }
}
