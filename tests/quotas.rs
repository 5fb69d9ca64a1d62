//! Per-tenant quotas (docs/CONTRACT.md §9): a burst past `commands_per_second` has exactly its
//! excess rejected while other tenants are counted apart; `max_pending` refuses new keys at the
//! limit but never a reschedule or a cancel; SIGHUP puts a changed limit in force and keeps the
//! old one when the file has become invalid. Every refusal is a `TimerCommandRejected` naming the
//! limit, and nothing refused is stored.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::quota_checks::{
    all_handled, later, pending, publish_schedules, quota_rejections, rejections,
};
use common::{DaemonProcess, Scratch, TestClient, cancel_command, eventually, query_rows};
use timer_service::config::{HttpSettings, TenantQuotaSettings};

/// A burst of 200 ScheduleTimers from a tenant allowed 50 per second has exactly 150 rejected
/// and 50 stored; another tenant's 100, under the default of 150, all go in; a third tenant's
/// 160 under that default has 10 rejected. The burst is published while the daemon is stopped,
/// so that it reaches the handler within well under a second whatever the machine's load (the
/// limit counts commands when handled); the daemon then starts and works it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_rate_limit_has_exactly_its_excess_rejected() {
    let (server, scratch, daemon, client) = common::started().await;
    daemon.shutdown().await.unwrap();

    let mut sent: Vec<(String, String)> = Vec::new();
    for i in 0..200 {
        sent.push(("acme".into(), format!("a-{i:03}")));
        if i % 2 == 0 {
            sent.push(("globex".into(), format!("g-{i:03}")));
        }
        if i < 160 {
            sent.push(("initech".into(), format!("i-{i:03}")));
        }
    }
    publish_schedules(&client, &sent).await;

    let addr = format!("127.0.0.1:{}", common::free_port());
    let mut config = common::config(&server, &scratch);
    config.http = HttpSettings {
        listen: addr.clone(),
    };
    config.quotas.commands_per_second = 150;
    config.quotas.tenants = BTreeMap::from([(
        "acme".to_owned(),
        TenantQuotaSettings {
            commands_per_second: Some(50),
            ..TenantQuotaSettings::default()
        },
    )]);
    let daemon = timer_service::Daemon::start(config).await.unwrap();
    all_handled(&client).await;

    let acme = rejections(&client, "acme").await;
    assert_eq!(acme.len(), 150, "exactly the excess of acme's burst");
    for (_, reason) in &acme {
        assert_eq!(
            reason,
            "quota exceeded: commands_per_second 50 for tenant acme"
        );
    }
    let mut refused: Vec<&str> = acme.iter().map(|(id, _)| id.as_str()).collect();
    refused.sort_unstable();
    let stored = query_rows(
        &scratch.database(),
        "SELECT service_call_id FROM timer_schedules WHERE tenant_id = 'acme'",
        |row| row.try_get_by_index::<String>(0).expect("id"),
    )
    .await;
    let mut all: Vec<&str> = refused
        .iter()
        .copied()
        .chain(stored.iter().map(String::as_str))
        .collect();
    all.sort_unstable();
    let sent_ids: Vec<String> = (0..200).map(|i| format!("a-{i:03}")).collect();
    assert_eq!(all, sent_ids, "each command stored or refused, never both");
    if scratch.database_url().is_none() {
        // One transaction at a time (SQLite): the room goes in stream order.
        let expected: Vec<String> = (50..200).map(|i| format!("a-{i:03}")).collect();
        assert_eq!(refused, expected, "the first 50 in stream order go in");
    }
    // On PostgreSQL two transactions commit side by side, and the room goes to whichever
    // takes the tenant's quota row first (docs/CONTRACT.md §9), as between two daemons.
    assert!(rejections(&client, "globex").await.is_empty());
    let initech = rejections(&client, "initech").await;
    assert_eq!(initech.len(), 10);
    assert!(
        initech
            .iter()
            .all(|(_, r)| r == "quota exceeded: commands_per_second 150 for tenant initech")
    );

    assert_eq!(pending(&scratch, "acme").await, 50);
    assert_eq!(pending(&scratch, "globex").await, 100);
    assert_eq!(pending(&scratch, "initech").await, 150);

    // Labelled by tenant only for a tenant with an override of its own.
    let acme_count = quota_rejections(&addr, "acme", "commands_per_second").await;
    assert_eq!(acme_count, Some(150.0));
    let others = quota_rejections(&addr, "_other", "commands_per_second").await;
    assert_eq!(others, Some(10.0));
    assert_eq!(
        quota_rejections(&addr, "initech", "commands_per_second").await,
        None
    );
    daemon.shutdown().await.unwrap();
}

/// A tenant's pending timers are counted (a walk of its range of the pending index, a cost
/// that grows with what it holds) at most about once a second while its schedules stay far
/// below its limit, not once for every batch of commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pending_count_is_not_taken_for_every_batch() {
    let server = common::NatsServer::start();
    let scratch = Scratch::new();
    let process = common::DaemonProcess::start_with(
        &server,
        &scratch,
        &[("TIMER_QUOTAS_MAX_PENDING", "1000000")],
    );
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let started = std::time::Instant::now();
    let ids: Vec<String> = (0..5_000).map(|i| format!("a-{i:04}")).collect();
    client.schedule_many("acme", &ids, later()).await;
    all_handled(&client).await;
    let took = started.elapsed();
    assert_eq!(pending(&scratch, "acme").await, 5_000);

    // Pulled 100 at a time (`batch_size`): at least 50 batches.
    let log = std::fs::read_to_string(&process.log).unwrap();
    let counts = log
        .lines()
        .filter(|l| l.contains("pending timers counted for the pending limit"))
        .count();
    eprintln!("{counts} counts in {took:?}");
    assert!(counts >= 1, "the limit was checked");
    assert!(
        (counts as u64) <= took.as_secs() + 2 && counts < 50,
        "{counts} counts in {took:?}"
    );
    drop(process);
}

/// With `max_pending = 20`, 30 new keys have exactly 10 refused. At the limit, a reschedule of a
/// pending key and a cancel still go in; each cancelled timer frees a place for a new key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pending_limit_refuses_new_keys_only() {
    let server = common::NatsServer::start();
    let scratch = Scratch::new();
    let mut config = common::config(&server, &scratch);
    config.quotas.tenants = BTreeMap::from([(
        "acme".to_owned(),
        TenantQuotaSettings {
            max_pending: Some(20),
            ..TenantQuotaSettings::default()
        },
    )]);
    let daemon = timer_service::Daemon::start(config).await.unwrap();
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let reason = "quota exceeded: max_pending 20 for tenant acme";

    let ids: Vec<String> = (0..30).map(|i| format!("sc-{i:02}")).collect();
    client.schedule_many("acme", &ids, later()).await;
    // Another tenant is not limited.
    let globex: Vec<String> = (0..30).map(|i| format!("g-{i:02}")).collect();
    client.schedule_many("globex", &globex, later()).await;
    all_handled(&client).await;
    let refused = rejections(&client, "acme").await;
    assert_eq!(refused.len(), 10);
    assert!(refused.iter().all(|(_, r)| r == reason), "{refused:?}");
    let mut refused_ids: Vec<&str> = refused.iter().map(|(id, _)| id.as_str()).collect();
    refused_ids.sort_unstable();
    assert_eq!(
        refused_ids,
        ids[20..].iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(pending(&scratch, "acme").await, 20);
    assert_eq!(pending(&scratch, "globex").await, 30);

    // At the limit: a reschedule of a pending key goes in, a new key does not.
    let rescheduled = later() + chrono::Duration::days(1);
    client.schedule("acme", "sc-00", rescheduled, None).await;
    client.schedule("acme", "new-1", later(), None).await;
    all_handled(&client).await;
    let timer = daemon
        .persistence()
        .get("acme", "sc-00")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(timer.due_at, Some(rescheduled));
    let refused = rejections(&client, "acme").await;
    assert_eq!(refused.len(), 11);
    assert_eq!(refused[10], ("new-1".to_owned(), reason.to_owned()));

    // Cancels are never refused, and each frees a place.
    for id in &ids[..5] {
        let command = cancel_command("acme", id);
        client
            .publish_raw(
                "timer.cmd.cancel.acme",
                serde_json::to_vec(&command).unwrap(),
            )
            .await;
    }
    all_handled(&client).await;
    assert_eq!(pending(&scratch, "acme").await, 15);
    let more: Vec<String> = (0..6).map(|i| format!("more-{i}")).collect();
    client.schedule_many("acme", &more, later()).await;
    all_handled(&client).await;
    let refused = rejections(&client, "acme").await;
    assert_eq!(refused.len(), 12, "{refused:?}");
    assert_eq!(refused[11], ("more-5".to_owned(), reason.to_owned()));
    assert_eq!(pending(&scratch, "acme").await, 20);
    daemon.shutdown().await.unwrap();
}

/// SIGHUP reads the file again: a lowered `max_pending` applies to the next command; a file
/// that no longer loads keeps the quotas in force; a later valid file applies again, and a
/// setting other than the quotas changed in it is reported as waiting for a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_puts_changed_quotas_in_force() {
    let server = common::NatsServer::start();
    let scratch = Scratch::new();
    let file = scratch.dir.path().join("config.toml");
    std::fs::write(&file, "[quotas]\nmax_pending = 50\n").unwrap();
    let daemon = DaemonProcess::start_configured(&server, &scratch, &file, &[], &[]);
    let client = TestClient::connect(&server).await;
    client.wait_for_command_stream().await;
    let log = || std::fs::read_to_string(&daemon.log).unwrap_or_default();
    let logged = |what: &'static str, times: usize| {
        let log = &log;
        async move {
            eventually(Duration::from_secs(15), what, || async {
                (log().matches(what).count() >= times).then_some(())
            })
            .await
        }
    };
    logged("timer-service running", 1).await;

    let ids: Vec<String> = (0..10).map(|i| format!("sc-{i}")).collect();
    client.schedule_many("acme", &ids, later()).await;
    all_handled(&client).await;
    assert_eq!(pending(&scratch, "acme").await, 10);
    assert!(rejections(&client, "acme").await.is_empty());

    std::fs::write(&file, "[quotas]\nmax_pending = 10\n").unwrap();
    daemon.signal(libc::SIGHUP);
    logged("quotas reloaded", 1).await;
    client.schedule("acme", "over-1", later(), None).await;
    all_handled(&client).await;
    assert_eq!(
        rejections(&client, "acme").await,
        [(
            "over-1".to_owned(),
            "quota exceeded: max_pending 10 for tenant acme".to_owned()
        )]
    );

    // An invalid file is refused, and the quotas in force stay.
    std::fs::write(&file, "[quotas]\nmax_pending = \"lots\"\n").unwrap();
    daemon.signal(libc::SIGHUP);
    logged("configuration not reloaded", 1).await;
    assert!(
        log().contains("quotas.max_pending"),
        "the log names the key"
    );
    client.schedule("acme", "over-2", later(), None).await;
    all_handled(&client).await;
    let refused = rejections(&client, "acme").await;
    assert_eq!(refused.len(), 2);
    assert_eq!(
        refused[1].1,
        "quota exceeded: max_pending 10 for tenant acme"
    );

    // Valid again, with a setting that only a restart changes.
    std::fs::write(&file, "batch_size = 7\n[quotas]\nmax_pending = 12\n").unwrap();
    daemon.signal(libc::SIGHUP);
    logged("quotas reloaded", 2).await;
    logged("take effect at the next start", 1).await;
    assert!(log().contains("batch_size"), "the changed setting is named");
    let more: Vec<String> = (0..3).map(|i| format!("more-{i}")).collect();
    client.schedule_many("acme", &more, later()).await;
    all_handled(&client).await;
    let refused = rejections(&client, "acme").await;
    assert_eq!(refused.len(), 3);
    assert_eq!(
        refused[2],
        (
            "more-2".to_owned(),
            "quota exceeded: max_pending 12 for tenant acme".to_owned()
        )
    );
    assert_eq!(pending(&scratch, "acme").await, 12);

    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait_exit(Duration::from_secs(30)).await.success());
}
