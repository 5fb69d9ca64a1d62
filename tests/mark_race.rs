//! Commands that commit while a PostgreSQL mark waits for the row (docs/CONTRACT.md §3, "when
//! a cancel races the firing"). The mark waits for the row's lock and then meets the row's
//! newest version:
//! - a reschedule must win: the row stays `Scheduled` at its new `dueAt`, so the timer still
//!   fires then; that is decided by the conditions on the updated row alone, whatever the
//!   server's minor release does with rows found by `ctid`;
//! - a refused cancel (the row keeps its claim and `dueAt`, only the cancel's place in the
//!   stream is written) must not: the timer was published, and a row left `Scheduled` with the
//!   claim would be claimed and published again.
//!
//! Needs PostgreSQL (SQLite has one writer: nothing can wait for a row): it runs in the
//! PostgreSQL run (`TEST_DATABASE=postgres`) and says so otherwise.

mod common;

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use common::{Scratch, claimant, eventually, schedule_at};
use sea_orm::{ConnectionTrait, Statement, TransactionTrait};
use timer_service::domain::TimerState;
use timer_service::domain::timestamp::format_utc;
use timer_service::storage::Store;
use timer_service::storage::db::{connect, migrate};

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(1_800_000_000_000 + ms).unwrap()
}

#[tokio::test]
async fn a_reschedule_committed_while_the_mark_waits_for_the_row_is_not_marked() {
    let Some(scratch) = Scratch::postgres_only("a mark waiting for a row") else {
        return;
    };
    let reschedule = format!(
        "UPDATE timer_schedules SET due_at = '{}', command_seq = 2, \
         claimed_by = NULL, claim_until = NULL \
         WHERE tenant_id = 'a' AND service_call_id = 'x'",
        format_utc(at(500))
    );
    let (store, marked) = mark_while_another_writes_the_row(&scratch, &reschedule).await;
    assert_eq!(marked, 0, "the rescheduled timer is not marked Reached");
    let row = store.get("a", "x").await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.due_at),
        (TimerState::Scheduled, Some(at(500))),
        "the timer is still pending at its new dueAt"
    );
    let again = store.claim_due(at(500), None, 10, &claimant()).await;
    assert_eq!(again.unwrap().timers.len(), 1, "and fires then");
}

#[tokio::test]
async fn a_refused_cancel_committed_while_the_mark_waits_for_the_row_is_marked_all_the_same() {
    let Some(scratch) = Scratch::postgres_only("a mark waiting for a row") else {
        return;
    };
    // What a cancel meeting a claimed timer writes: its place in the stream, nothing else.
    let refused_cancel = "UPDATE timer_schedules SET command_seq = 2 \
         WHERE tenant_id = 'a' AND service_call_id = 'x'";
    let (store, marked) = mark_while_another_writes_the_row(&scratch, refused_cancel).await;
    assert_eq!(marked, 1, "the published timer is marked Reached");
    let row = store.get("a", "x").await.unwrap().unwrap();
    assert_eq!(row.state, TimerState::Reached);
    let again = store.claim_due(at(500), None, 10, &claimant()).await;
    assert_eq!(
        again.unwrap().timers.len(),
        0,
        "and is not claimed to be published again"
    );
}

/// Schedules `a/x` at `at(100)` and claims it; then `write` runs in another connection's
/// transaction that holds the row until the mark of the claim waits for it, and commits.
/// Returns the store and what the mark counted.
async fn mark_while_another_writes_the_row(scratch: &Scratch, write: &str) -> (Store, u64) {
    migrate(&scratch.database()).await.unwrap();
    let store = Store::open(&scratch.database())
        .await
        .unwrap()
        .with_callers_clock();
    store
        .apply(&[schedule_at("a", "x", 1, at(100))])
        .await
        .unwrap();
    let fired = store
        .claim_due(at(100), None, 10, &claimant())
        .await
        .unwrap()
        .timers;
    assert_eq!(fired.len(), 1);

    // Another daemon's command: it holds the row while the mark starts.
    let other = connect(&scratch.database(), 1).await.unwrap();
    let command = other.begin().await.unwrap();
    command
        .execute_raw(Statement::from_string(sea_orm::DbBackend::Postgres, write))
        .await
        .unwrap();

    let marking = {
        let store = store.clone();
        tokio::spawn(async move { store.mark_reached(&[(fired.into(), at(101))]).await })
    };
    let watcher = connect(&scratch.database(), 1).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the mark waits for the row",
        || {
            let watcher = &watcher;
            async move {
                let waiting = watcher
                    .query_one_raw(Statement::from_string(
                        sea_orm::DbBackend::Postgres,
                        "SELECT count(*) AS n FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock' \
                       AND query LIKE 'UPDATE timer_schedules t SET state = ''Reached''%'",
                    ))
                    .await
                    .ok()??
                    .try_get::<i64>("", "n")
                    .ok()?;
                (waiting > 0).then_some(())
            }
        },
    )
    .await;
    command.commit().await.unwrap();

    let marked = tokio::time::timeout(Duration::from_secs(10), marking)
        .await
        .expect("the mark ends once the row is free")
        .unwrap()
        .unwrap();
    (store, marked)
}
