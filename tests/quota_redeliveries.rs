//! Quotas and commands the broker delivers again (docs/CONTRACT.md §9): a command whose first
//! delivery was stored but not acknowledged is never refused by a limit when it comes again
//! (its timer is stored and will fire), and a command handed back before its rate was decided
//! is decided when it returns.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::quota_checks::{all_handled, later, pending, publish_schedules, rejections};
use common::{Scratch, TestClient, eventually};
use sea_orm::ConnectionTrait;
use timer_service::config::TenantQuotaSettings;
use timer_service::storage::Store;

/// The service call ids of `tenant`'s rejected commands, sorted.
async fn refused_ids(client: &TestClient, tenant: &str) -> Vec<String> {
    let mut ids: Vec<String> = rejections(client, tenant)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    ids.sort_unstable();
    ids
}

/// A ScheduleTimer whose transaction committed but whose acknowledgement was lost comes again
/// behind a burst that fills its tenant's limit. It is not refused: a TimerCommandRejected
/// would name a timer that is stored and will fire. Tenant acme is limited to 50 commands a
/// second, globex to 50 pending timers; each sends 60 new keys, then the command stored
/// before (as the daemon would have, were it killed between its commit and its ack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_stored_before_its_ack_was_lost_is_not_refused_when_it_comes_again() {
    let (server, scratch, daemon, client) = common::started().await;
    daemon.shutdown().await.unwrap();

    let mut stored_first = Vec::new();
    for tenant in ["acme", "globex"] {
        let mut keys: Vec<(String, String)> = (0..60)
            .map(|i| (tenant.to_owned(), format!("{tenant}-{i:03}")))
            .collect();
        keys.push((tenant.to_owned(), "stored-first".to_owned()));
        let sequences = publish_schedules(&client, &keys).await;
        stored_first.push(common::schedule_at(
            tenant,
            "stored-first",
            *sequences.last().unwrap(),
            later(),
        ));
    }
    // Its first delivery's commit, with the daemon gone before its acknowledgement.
    let store = Store::open(&scratch.database()).await.unwrap();
    store.apply(&stored_first).await.unwrap();
    drop(store);

    let mut config = common::config(&server, &scratch);
    config.quotas.tenants = BTreeMap::from([
        (
            "acme".to_owned(),
            TenantQuotaSettings {
                commands_per_second: Some(50),
                ..TenantQuotaSettings::default()
            },
        ),
        (
            "globex".to_owned(),
            TenantQuotaSettings {
                max_pending: Some(50),
                ..TenantQuotaSettings::default()
            },
        ),
    ]);
    let daemon = timer_service::Daemon::start(config).await.unwrap();
    all_handled(&client).await;

    let refused = |tenant: &str, from: usize, to: usize| -> Vec<String> {
        (from..to).map(|i| format!("{tenant}-{i:03}")).collect()
    };
    assert_eq!(
        refused_ids(&client, "acme").await,
        refused("acme", 50, 60),
        "the burst's excess only"
    );
    assert_eq!(
        refused_ids(&client, "globex").await,
        refused("globex", 49, 60),
        "the stored timer holds one of the 50 places"
    );
    assert_eq!(pending(&scratch, "acme").await, 51);
    assert_eq!(pending(&scratch, "globex").await, 50);
    daemon.shutdown().await.unwrap();
}

/// A command handed back before its rate was decided (here its stream's epoch could not be
/// had: another process holds the database's write lock) is decided against the rate when the
/// broker delivers it again, not waved through as "counted when first delivered".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_handed_back_before_the_rate_was_decided_are_decided_when_they_return() {
    let server = common::NatsServer::start();
    let scratch = Scratch::new();
    if !scratch.sqlite_only("holding the SQLite file's write lock from another connection") {
        return;
    }
    let mut config = common::config(&server, &scratch);
    config.sqlite.busy_timeout = Duration::from_millis(200);
    config.quotas.tenants = BTreeMap::from([(
        "acme".to_owned(),
        TenantQuotaSettings {
            commands_per_second: Some(50),
            ..TenantQuotaSettings::default()
        },
    )]);
    let daemon = timer_service::Daemon::start(config).await.unwrap();
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;

    let lock = timer_service::storage::db::connect(&scratch.database(), 1)
        .await
        .unwrap();
    lock.execute_unprepared("BEGIN IMMEDIATE").await.unwrap();
    let ids: Vec<String> = (0..200).map(|i| format!("a-{i:03}")).collect();
    client.schedule_many("acme", &ids, later()).await;
    // Handed back: the consumers have delivered every command at least twice, or so.
    eventually(
        Duration::from_secs(20),
        "the commands delivered again",
        || async { (client.commands_delivered().await? >= 400).then_some(()) },
    )
    .await;
    lock.execute_unprepared("COMMIT").await.unwrap();
    all_handled(&client).await;

    assert_eq!(
        rejections(&client, "acme").await.len(),
        150,
        "the burst's excess is refused"
    );
    assert_eq!(pending(&scratch, "acme").await, 50);
    daemon.shutdown().await.unwrap();
}
