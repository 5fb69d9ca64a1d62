//! Quotas hold for the tenant as a whole (docs/CONTRACT.md §9): three daemons on one
//! PostgreSQL database share each tenant's rate window and pending bound, because each
//! transaction decides its commands against the tenant's row, locked, in the database. Before,
//! each daemon counted alone: three daemons let a tenant through three times its rate, and
//! over its pending limit by what the others had in flight.
//!
//! A daemon frozen while it holds a tenant's row holds the others back only until the server
//! ends its session.
//!
//! These need PostgreSQL: they run in the PostgreSQL run (`TEST_DATABASE=postgres`).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use common::quota_checks::{all_handled, flood, pending, rejections};
use common::{DaemonProcess, NatsServer, Scratch, TestClient};
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
    let Some(scratch) = Scratch::postgres_only("several daemons share a PostgreSQL database")
    else {
        return;
    };
    let server = NatsServer::start();
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
    flood(&client, &scratch, "acme", "a", later)
        .await
        .assert_within(100.0);
    for daemon in daemons {
        daemon.shutdown().await.unwrap();
    }
}

/// A daemon frozen (SIGSTOP) inside a transaction that holds a limited tenant's `tenant_quotas`
/// row holds that tenant's commits on every other daemon, and no lease frees a row lock: the
/// server must end the session (`idle_in_transaction_session_timeout`, the statement timeout),
/// after which the others decide the tenant's commands again, the limit still exact. Bursts are
/// sent, and a daemon frozen the moment one of its sessions is seen writing the row, until a
/// freeze lands in a transaction holding it (its sessions told apart by their client ports, the lock seen in
/// `pg_locks`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_frozen_holding_a_tenants_quota_row_holds_no_one_back_past_the_session_limit() {
    let Some(scratch) = Scratch::postgres_only("several daemons share a PostgreSQL database")
    else {
        return;
    };
    let server = NatsServer::start();
    let start = |name: &str| {
        DaemonProcess::start_with(
            &server,
            &scratch,
            &[
                ("TIMER_NAME", name),
                // Every tenant limited: each command transaction locks its tenants' rows.
                ("TIMER_QUOTAS_MAX_PENDING", "300"),
                ("TIMER_POSTGRES_STATEMENT_TIMEOUT", "3s"),
                ("TIMER_POSTGRES_LOCK_TIMEOUT", "1s"),
            ],
        )
    };
    let daemons: Vec<DaemonProcess> = ["f1", "f2"].into_iter().map(start).collect();
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let db = timer_service::storage::db::connect(&scratch.database(), 1)
        .await
        .unwrap();
    // Its statement on the tenant's row under way (or waiting for the other's lock); then,
    // frozen, the session idle inside the transaction that holds the row.
    let db = &db;
    let at_work = |pid| async move {
        common::sessions_of(
            db,
            pid,
            "a.state = 'active' AND a.query ILIKE '%INTO \"tenant_quotas\"%'",
        )
        .await
            > 0
    };
    let holding_the_row = |pid| async move {
        common::sessions_of(
            db,
            pid,
            "a.state = 'idle in transaction' AND EXISTS (SELECT 1 FROM pg_locks l \
             WHERE l.pid = a.pid AND l.relation = 'tenant_quotas'::regclass \
             AND l.mode = 'RowExclusiveLock')",
        )
        .await
            > 0
    };
    let later = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
    let mut sent = 0;
    let mut frozen = None;
    for _ in 0..8 {
        // Bursts of 100 keep both daemons committing; the freeze comes in the middle of them.
        let feeding = {
            let client = TestClient::connect(&server).await;
            let first = sent;
            tokio::spawn(async move {
                for burst in 0..20 {
                    let ids: Vec<String> = (0..100)
                        .map(|i| format!("k-{:06}", first + burst * 100 + i))
                        .collect();
                    client.schedule_many("acme", &ids, later).await;
                }
            })
        };
        sent += 2_000;
        frozen = common::freeze_one_when(
            &daemons,
            Duration::from_millis(1_000),
            at_work,
            holding_the_row,
        )
        .await;
        feeding.await.unwrap();
        if frozen.is_some() {
            break;
        }
        all_handled(&client).await;
    }
    let frozen = frozen.expect("no freeze landed in a transaction holding the quota row");
    let frozen_at = Instant::now();
    // More commands of the tenant while the row is held.
    let ids: Vec<String> = (sent..sent + 500).map(|i| format!("k-{i:06}")).collect();
    client.schedule_many("acme", &ids, later).await;
    sent += 500;
    // The session limit (3 s), the ack wait of what the frozen daemon held (4 s), and a little.
    all_handled(&client).await;
    let took = frozen_at.elapsed();
    let accepted = pending(&scratch, "acme").await;
    let refused = rejections(&client, "acme").await.len();
    eprintln!(
        "{sent} commands decided {} ms after a daemon froze holding the quota row: \
         {accepted} pending, {refused} refused",
        took.as_millis()
    );
    assert!(
        took < Duration::from_secs(10),
        "the frozen daemon held the tenant back {took:?}, past the session limit (3 s) and the \
         ack wait (4 s) of the commands it held"
    );
    assert_eq!(
        accepted, 300,
        "the pending limit, exact with a daemon frozen"
    );
    assert_eq!(
        accepted as usize + refused,
        sent,
        "every command decided once"
    );
    daemons[frozen].signal(libc::SIGCONT);
    for daemon in daemons {
        daemon.kill9();
    }
}
