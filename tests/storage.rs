//! Storage: the schema and its migrations, the rules of docs/CONTRACT.md §3 in SQL, claims for
//! firing, the query API's reads, tenant scoping and the query plans — on a real SQLite file
//! with the real migrations.
//!
//! The conformance suite of the storage backends: every test here runs on SQLite, and on
//! PostgreSQL when `TEST_DATABASE=postgres`, against the same expectations.

mod common;
#[path = "storage/explain.rs"]
mod explain;

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, TimeZone, Utc};
use common::{Scratch, cancel_at, claimant, schedule_at};
use proptest::prelude::*;
use sea_orm::{ConnectionTrait, Statement};
use timer_service::domain::api::{ListCursor, ListFilter};
use timer_service::domain::forecast::ForecastWindow;
use timer_service::domain::timer::apply_command;
use timer_service::domain::{Action, CancelOutcome, Command, DueTimer, Timer, TimerState};
use timer_service::storage::db::{DatabaseTarget, connect, migrate};
use timer_service::storage::{Claimant, Store};

/// A migrated database of the test's own (SQLite, or PostgreSQL in a PostgreSQL run).
async fn store() -> (Scratch, Store) {
    let scratch = Scratch::new();
    migrate(&scratch.database()).await.unwrap();
    let store = Store::open(&scratch.database())
        .await
        .unwrap()
        .with_callers_clock();
    (scratch, store)
}

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(1_800_000_000_000 + ms).unwrap()
}

fn schedule(tenant: &str, id: &str, seq: u64, due: i64) -> Command {
    schedule_at(tenant, id, seq, at(due))
}

fn cancel(tenant: &str, id: &str, seq: u64, now: i64) -> Command {
    cancel_at(tenant, id, seq, at(now))
}

/// Every query shape the service runs on large tables is an index range: no table scan, no
/// sort. The service never runs `ANALYZE`, so SQLite plans without statistics and the plan on
/// this small table is the plan at ten million rows.
#[tokio::test]
async fn every_query_is_served_by_an_index() {
    let (dir, store) = store().await;
    let rows: Vec<Command> = (0..2000)
        .map(|i| schedule(&format!("t{}", i % 7), &format!("c{i}"), i, i as i64))
        .collect();
    store.apply(&rows).await.unwrap();
    let db = connect(&dir.database(), 1).await.unwrap();
    let plans = explain::explain_queries(&db).await.unwrap();
    assert!(plans.len() >= 8, "{plans:?}");
    for (name, plan) in plans {
        eprintln!("{name}: {plan}");
        // SQLite: "SEARCH … USING INDEX", never "SCAN" or a temp b-tree for ORDER BY.
        // PostgreSQL: "Index (Only) Scan using …", never "Seq Scan" or a "Sort" node.
        let indexed = plan.contains("USING INDEX")
            || plan.contains("USING COVERING INDEX")
            || plan.contains("Index Scan using")
            || plan.contains("Index Only Scan using");
        assert!(indexed, "{name}: {plan}");
        assert!(
            !plan.contains("SCAN timer_schedules") && !plan.contains("Seq Scan"),
            "{name} scans: {plan}"
        );
        assert!(
            !plan.contains("TEMP B-TREE") && !plan.contains("Sort"),
            "{name} sorts: {plan}"
        );
        if name == "claim due (PostgreSQL)" {
            // The rows picked are read from the pending index's start up to now only: with the
            // instant as a join filter, a claim read every pending timer, due or not.
            let picked = plan
                .split_once("CTE picked")
                .and_then(|(_, rest)| rest.split_once("CTE claimed"))
                .map(|(picked, _)| picked)
                .unwrap_or_default();
            assert!(picked.contains("Index Cond: (due_at <="), "{name}: {plan}");
        }
        if name == "cancel step update" {
            // By the keys only: led by the terms it checks again (tenant and state), SQLite
            // walked the tenant's pending timers and compared each with the keys, 90 ms a
            // step beside a million (BENCHMARKS.md, "Cancel many").
            assert!(
                plan.contains(
                    "sqlite_autoindex_timer_schedules_1 (tenant_id=? AND service_call_id=?)"
                ) || plan.contains("Index Scan using timer_schedules_pkey"),
                "{name}: {plan}"
            );
        }
        if name == "mark reached (PostgreSQL)" {
            // The keys are the outer side, each row reached by its `ctid`, and the key,
            // `dueAt` and state checked again on the row updated (tests/mark_race.rs).
            assert!(plan.contains("Function Scan on k"), "{name}: {plan}");
            assert!(
                plan.contains("TID Cond: (ctid = m.row_id)"),
                "{name}: {plan}"
            );
            assert!(plan.contains("(m.due_at)::text = due_at"), "{name}: {plan}");
        }
    }
}

#[tokio::test]
async fn reads_are_scoped_by_tenant() {
    let (_dir, store) = store().await;
    store
        .apply(&[
            schedule("acme", "same-id", 1, 10),
            schedule("globex", "same-id", 2, 20),
        ])
        .await
        .unwrap();
    let acme = store.get("acme", "same-id").await.unwrap().unwrap();
    assert_eq!(
        (acme.tenant_id.as_str(), acme.due_at),
        ("acme", Some(at(10)))
    );
    let globex = store.get("globex", "same-id").await.unwrap().unwrap();
    assert_eq!(globex.due_at, Some(at(20)));
    assert!(store.get("initech", "same-id").await.unwrap().is_none());
    let listed = store
        .list("acme", &ListFilter::default(), 100)
        .await
        .unwrap();
    assert_eq!(listed.timers.len(), 1);
    assert!(listed.timers.iter().all(|t| t.tenant_id == "acme"));
    assert_eq!(store.stats("initech", at(0)).await.unwrap().scheduled, 0);
}

#[tokio::test]
async fn claim_due_claims_only_scheduled_timers_due_by_now_earliest_first() {
    let (_dir, store) = store().await;
    let me = claimant();
    store
        .apply(&[
            schedule("a", "late", 1, 300),
            schedule("a", "early", 2, 100),
            schedule("a", "future", 3, 900),
            cancel("a", "gone", 4, 0),
        ])
        .await
        .unwrap();
    let due = store.claim_due(at(300), None, 10, &me).await.unwrap();
    let ids: Vec<&str> = due
        .timers
        .iter()
        .map(|t| t.service_call_id.as_str())
        .collect();
    assert_eq!(ids, ["early", "late"]);
    assert_eq!(
        due.next_due_at,
        Some(at(900)),
        "fewer than asked for: nothing more is due, and the next wake-up comes along"
    );
    let first = store.claim_due(at(300), None, 1, &me).await.unwrap();
    assert_eq!(
        first.next_due_at, None,
        "a full batch: the caller asks again, more may be due"
    );
    assert_eq!(
        first.timers[0].service_call_id, "early",
        "its own claims are its to resume"
    );
    let rest = store
        .claim_due(at(300), Some(&first.timers[0].position()), 10, &me)
        .await
        .unwrap();
    assert_eq!(rest.timers.len(), 1);
    assert_eq!(rest.timers[0].service_call_id, "late");
    store
        .mark_reached(&[(due.timers.clone().into(), at(301))])
        .await
        .unwrap();
    let nothing_due = store.claim_due(at(300), None, 10, &me).await.unwrap();
    assert!(nothing_due.timers.is_empty());
    assert_eq!(
        nothing_due.next_due_at,
        Some(at(900)),
        "nothing due: the next wake-up comes along"
    );
}

/// A fair claim takes an equal share of each due tenant's timers, each tenant's earliest first,
/// leaves out the tenants the caller says it holds, and, fenced, does not take again what the
/// caller claimed since the fence (in flight) while it takes what it claimed before.
#[tokio::test]
async fn a_fair_claim_takes_a_share_of_each_due_tenant_and_respects_the_fence() {
    let (_dir, store) = store().await;
    let me = claimant();
    let mut commands: Vec<Command> = (0..10)
        .map(|i| schedule("bulk", &format!("b-{i}"), i + 1, 100 + i as i64))
        .collect();
    commands.extend([
        schedule("quiet", "q-late", 20, 250),
        schedule("quiet", "q-early", 21, 200),
        schedule("quiet", "q-future", 22, 900),
        schedule("held", "h-0", 23, 100),
    ]);
    store.apply(&commands).await.unwrap();
    let held = std::collections::BTreeSet::from(["held".to_owned()]);
    let keys = |batch: &timer_service::storage::DueBatch| -> Vec<String> {
        batch
            .timers
            .iter()
            .map(|t| t.service_call_id.clone())
            .collect()
    };

    // A share of 4 / 2 tenants = 2 each: bulk's two earliest, quiet's two due.
    let fair = store
        .claim_fair(at(300), &held, None, 4, at(0), &me)
        .await
        .unwrap();
    assert_eq!(keys(&fair.batch), ["b-0", "b-1", "q-early", "q-late"]);
    assert_eq!(fair.resume_after, None);

    // Claimed at 300 with a 30 s lease: behind a fence at 30,300 they are in flight. Both
    // tenants still have timers due, so each gets a share of 2; quiet's are all in flight.
    let lease = chrono::Duration::seconds(30);
    let next = store
        .claim_fair(at(400), &held, None, 4, at(300) + lease, &me)
        .await
        .unwrap();
    assert_eq!(keys(&next.batch), ["b-2", "b-3"]);

    // A fence after every claim so far (a run that began after them): they are this daemon's
    // to take again, each tenant's earliest first.
    let again = store
        .claim_fair(at(500), &held, None, 2, at(500) + lease, &me)
        .await
        .unwrap();
    assert_eq!(keys(&again.batch), ["b-0", "q-early"]);

    // The claim in `dueAt` order keeps off fenced claims too: behind a fence at 30,400 the
    // claims of 400 and 500 are in flight, those of 300 not.
    let fenced = store
        .claim_due_fenced(at(500), None, 100, Some(at(400) + lease), &me)
        .await
        .unwrap();
    assert_eq!(
        keys(&fenced),
        [
            "h-0", "b-1", "b-4", "b-5", "b-6", "b-7", "b-8", "b-9", "q-late"
        ],
        "only what no claim since the fence holds"
    );
}

/// Another daemon's live claim keeps a timer off this one; a lapsed claim (its daemon died)
/// does not.
#[tokio::test]
async fn a_claim_holds_off_other_daemons_until_it_lapses() {
    let (_dir, store) = store().await;
    store.apply(&[schedule("a", "x", 1, 100)]).await.unwrap();
    let one = claimant();
    let other = Claimant {
        name: "other".into(),
        ..claimant()
    };
    assert_eq!(
        store
            .claim_due(at(100), None, 10, &one)
            .await
            .unwrap()
            .timers
            .len(),
        1
    );
    assert!(
        store
            .claim_due(at(200), None, 10, &other)
            .await
            .unwrap()
            .timers
            .is_empty()
    );
    let after_lease = at(100) + chrono::Duration::from_std(one.lease).unwrap();
    let taken_over = store
        .claim_due(
            after_lease + chrono::Duration::milliseconds(1),
            None,
            10,
            &other,
        )
        .await
        .unwrap();
    assert_eq!(taken_over.timers.len(), 1);
}

#[tokio::test]
async fn a_timer_rescheduled_while_firing_is_not_marked_reached_and_fires_again() {
    let (_dir, store) = store().await;
    store.apply(&[schedule("a", "x", 1, 100)]).await.unwrap();
    let fired = store
        .claim_due(at(100), None, 10, &claimant())
        .await
        .unwrap()
        .timers;
    store.apply(&[schedule("a", "x", 2, 500)]).await.unwrap(); // while the event is in flight
    assert_eq!(
        store
            .mark_reached(&[(fired.clone().into(), at(101))])
            .await
            .unwrap(),
        0
    );
    let row = store.get("a", "x").await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.due_at),
        (TimerState::Scheduled, Some(at(500)))
    );
    let other = Claimant {
        name: "other".into(),
        ..claimant()
    };
    let again = store.claim_due(at(500), None, 10, &other).await.unwrap();
    assert_eq!(
        again.timers.len(),
        1,
        "a reschedule releases the claim on the old dueAt"
    );
}

/// A cancel racing the firing is decided by the row: whichever of "picked for firing" (the
/// claim) and "cancel applied" commits first wins.
#[tokio::test]
async fn a_cancel_racing_the_firing_is_decided_by_the_row() {
    let (_dir, store) = store().await;
    let me = claimant();
    store
        .apply(&[
            schedule("a", "fired-first", 1, 100),
            schedule("a", "cancelled-first", 2, 100),
        ])
        .await
        .unwrap();

    // Picked for firing first: the cancel is too late, the timer is marked once published.
    let picked = store.claim_due(at(100), None, 1, &me).await.unwrap().timers;
    assert_eq!(picked[0].service_call_id, "cancelled-first");
    let (outcome, timer) = store
        .cancel(&cancel("a", "cancelled-first", 3, 101))
        .await
        .unwrap();
    assert_eq!(outcome, CancelOutcome::AlreadyReached);
    assert_eq!(timer.unwrap().state, TimerState::Scheduled);
    assert_eq!(
        store
            .mark_reached(&[(picked.clone().into(), at(102))])
            .await
            .unwrap(),
        1
    );

    // Cancelled first: nothing to pick any more.
    let (outcome, timer) = store
        .cancel(&cancel("a", "fired-first", 4, 101))
        .await
        .unwrap();
    assert_eq!(outcome, CancelOutcome::Cancelled);
    assert_eq!(timer.unwrap().state, TimerState::Cancelled);
    assert!(
        store
            .claim_due(at(200), None, 10, &me)
            .await
            .unwrap()
            .timers
            .is_empty()
    );
}

/// A claimed timer fires, even when its claim has lapsed (the mark failed for longer than the
/// lease, or its daemon died and another takes it over): a cancel arriving then is too late,
/// never a `Cancelled` row whose event is out.
#[tokio::test]
async fn a_cancel_after_a_lapsed_claim_is_too_late() {
    let (_dir, store) = store().await;
    let me = claimant();
    store
        .apply(&[schedule("a", "published", 1, 100)])
        .await
        .unwrap();
    let picked = store.claim_due(at(100), None, 1, &me).await.unwrap().timers;
    assert_eq!(picked.len(), 1);
    // Long after the lease ran out, the event published but not yet marked.
    let late = 100 + 2 * me.lease.as_millis() as i64;
    let (outcome, timer) = store
        .cancel(&cancel("a", "published", 2, late))
        .await
        .unwrap();
    assert_eq!(outcome, CancelOutcome::AlreadyReached);
    assert_eq!(timer.unwrap().state, TimerState::Scheduled);
    assert_eq!(
        store
            .mark_reached(&[(picked.into(), at(late + 1))])
            .await
            .unwrap(),
        1,
        "the published timer is marked Reached"
    );
}

/// A refused cancel still counts as applied for the order of commands: a reschedule older
/// than it, arriving after it (another daemon's slower batch, or the API's cancel applied
/// ahead of earlier commands), changes nothing.
#[tokio::test]
async fn a_refused_cancel_still_orders_older_commands() {
    let (_dir, store) = store().await;
    let me = claimant();
    store.apply(&[schedule("a", "k", 1, 100)]).await.unwrap();
    let picked = store.claim_due(at(100), None, 1, &me).await.unwrap().timers;
    let (outcome, _) = store.cancel(&cancel("a", "k", 10, 101)).await.unwrap();
    assert_eq!(outcome, CancelOutcome::AlreadyReached);
    // An older reschedule arrives after the refused cancel.
    store.apply(&[schedule("a", "k", 9, 5000)]).await.unwrap();
    let row = store.get("a", "k").await.unwrap().unwrap();
    assert_eq!(
        (row.due_at, row.command_seq),
        (Some(at(100)), 10),
        "the older reschedule changed nothing"
    );
    store
        .mark_reached(&[(picked.into(), at(102))])
        .await
        .unwrap();
    assert_eq!(
        store.get("a", "k").await.unwrap().unwrap().state,
        TimerState::Reached
    );
}

#[tokio::test]
async fn cancel_outcomes_cover_every_state_and_a_command_applied_twice() {
    let (_dir, store) = store().await;
    store
        .apply(&[
            schedule("a", "pending", 1, 900),
            schedule("a", "done", 2, 100),
        ])
        .await
        .unwrap();
    let fired = store
        .claim_due(at(100), None, 10, &claimant())
        .await
        .unwrap()
        .timers;
    store
        .mark_reached(&[(fired.clone().into(), at(100))])
        .await
        .unwrap();

    let cases = [
        ("pending", 10, CancelOutcome::Cancelled),
        ("pending", 11, CancelOutcome::AlreadyCancelled),
        ("done", 12, CancelOutcome::AlreadyReached),
        ("unknown", 13, CancelOutcome::NotFound),
        ("unknown", 14, CancelOutcome::AlreadyCancelled),
    ];
    for (id, seq, expected) in cases {
        let command = cancel("a", id, seq, 200);
        assert_eq!(
            store.cancel(&command).await.unwrap().0,
            expected,
            "{id} #{seq}"
        );
        // The CommandHandler meeting the same command later changes nothing, and reading
        // the outcome again gives the same answer.
        assert_eq!(
            store.apply(std::slice::from_ref(&command)).await.unwrap(),
            0
        );
        assert_eq!(
            store.cancel(&command).await.unwrap().0,
            expected,
            "{id} #{seq} again"
        );
    }
    let tombstone = store.get("a", "unknown").await.unwrap().unwrap();
    assert_eq!(
        (tombstone.state, tombstone.due_at),
        (TimerState::Cancelled, None)
    );
    // An older ScheduleTimer redelivered after the tombstone creates nothing.
    store
        .apply(&[schedule("a", "unknown", 5, 100)])
        .await
        .unwrap();
    assert_eq!(
        store.get("a", "unknown").await.unwrap().unwrap().due_at,
        None
    );
    // A newer one schedules it.
    store
        .apply(&[schedule("a", "unknown", 20, 100)])
        .await
        .unwrap();
    let scheduled = store.get("a", "unknown").await.unwrap().unwrap();
    assert_eq!(
        (scheduled.state, scheduled.due_at),
        (TimerState::Scheduled, Some(at(100)))
    );
}

/// `list`: `(dueAt, serviceCallId)` order, tombstones first, across states; every filter; a
/// cursor that walks the whole set page by page without loss or repetition.
#[tokio::test]
async fn list_pages_through_every_filter_in_order() {
    let (_dir, store) = store().await;
    let mut commands = Vec::new();
    for i in 0..60u64 {
        let mut command = schedule("acme", &format!("s{i:02}"), i + 1, (i % 20) as i64 * 10);
        command.correlation_id = if i % 3 == 0 {
            "trace-x".into()
        } else {
            format!("c{i}")
        };
        commands.push(command);
    }
    commands.push(cancel("acme", "tomb-a", 100, 0));
    commands.push(cancel("acme", "tomb-b", 101, 0));
    commands.push(cancel("acme", "s05", 102, 0));
    commands.push(schedule("globex", "s01", 103, 0));
    store.apply(&commands).await.unwrap();
    let fired = store
        .claim_due(at(50), None, 1000, &claimant())
        .await
        .unwrap()
        .timers;
    store
        .mark_reached(&[(fired.clone().into(), at(51))])
        .await
        .unwrap();

    let everything = walk(&store, &ListFilter::default(), 7).await;
    assert_eq!(everything.len(), 62, "every timer of acme once");
    assert_eq!(everything[0].service_call_id, "tomb-a");
    assert_eq!(everything[1].service_call_id, "tomb-b");
    let keys: Vec<_> = everything
        .iter()
        .map(|t| (t.due_at, t.service_call_id.clone()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(
        keys, sorted,
        "(dueAt, serviceCallId) order, tombstones first"
    );

    let scheduled = walk(
        &store,
        &ListFilter {
            state: Some(TimerState::Scheduled),
            ..Default::default()
        },
        4,
    )
    .await;
    assert!(scheduled.iter().all(|t| t.state == TimerState::Scheduled));
    let reached = walk(
        &store,
        &ListFilter {
            state: Some(TimerState::Reached),
            ..Default::default()
        },
        4,
    )
    .await;
    let cancelled = walk(
        &store,
        &ListFilter {
            state: Some(TimerState::Cancelled),
            ..Default::default()
        },
        4,
    )
    .await;
    assert_eq!(scheduled.len() + reached.len() + cancelled.len(), 62);
    assert_eq!(cancelled.len(), 3);
    let ranged = walk(
        &store,
        &ListFilter {
            due_from: Some(at(30)),
            due_to: Some(at(60)),
            ..Default::default()
        },
        4,
    )
    .await;
    assert!(!ranged.is_empty());
    assert!(
        ranged
            .iter()
            .all(|t| t.due_at >= Some(at(30)) && t.due_at < Some(at(60)))
    );
    let traced = walk(
        &store,
        &ListFilter {
            correlation_id: Some("trace-x".into()),
            ..Default::default()
        },
        4,
    )
    .await;
    assert_eq!(traced.len(), 20);
    assert!(traced.iter().all(|t| t.correlation_id == "trace-x"));
    let traced_reached = walk(
        &store,
        &ListFilter {
            correlation_id: Some("trace-x".into()),
            state: Some(TimerState::Reached),
            ..Default::default()
        },
        4,
    )
    .await;
    assert!(
        traced_reached
            .iter()
            .all(|t| t.state == TimerState::Reached && t.correlation_id == "trace-x")
    );
}

/// Every timer `filter` selects, fetched `page` at a time through the cursor.
async fn walk(store: &Store, filter: &ListFilter, page: usize) -> Vec<Timer> {
    let mut all = Vec::new();
    let mut after: Option<ListCursor> = None;
    loop {
        let filter = ListFilter {
            after: after.clone(),
            ..filter.clone()
        };
        let result = store.list("acme", &filter, page).await.unwrap();
        assert!(result.timers.len() <= page);
        all.extend(result.timers);
        match result.next {
            Some(next) => after = Some(next),
            None => return all,
        }
    }
}

#[tokio::test]
async fn stats_count_pending_and_overdue_timers() {
    let (_dir, store) = store().await;
    store
        .apply(&[
            schedule("acme", "old", 1, 0),
            schedule("acme", "recent", 2, 9_500),
            schedule("acme", "later", 3, 20_000),
            cancel("acme", "gone", 4, 0),
        ])
        .await
        .unwrap();
    let stats = store.stats("acme", at(10_000)).await.unwrap();
    assert_eq!(
        (stats.scheduled, stats.overdue),
        (3, 1),
        "overdue: due more than 1 s ago"
    );
    assert_eq!(stats.next_due_at, Some(at(0)));
}

/// What the pending limit reads: each tenant's pending count (tenants with none count 0) and
/// the state and last command of the keys asked about that have a row.
#[tokio::test]
async fn pending_of_counts_each_tenants_pending_timers_and_reads_the_keys_asked_about() {
    use timer_service::domain::quota::KeyState;
    let (_dir, store) = store().await;
    let me = claimant();
    store
        .apply(&[
            schedule("acme", "p1", 1, 100),
            schedule("acme", "p2", 2, 200),
            schedule("acme", "fired", 3, 0),
            schedule("acme", "gone", 4, 300),
            cancel("acme", "gone", 5, 0),
            schedule("globex", "p1", 6, 100),
        ])
        .await
        .unwrap();
    let due = store.claim_due(at(50), None, 10, &me).await.unwrap();
    store
        .mark_reached(&[(due.timers.into(), at(50))])
        .await
        .unwrap();
    let asked = vec![
        (
            "acme".to_owned(),
            ["p1", "fired", "gone", "never"].map(String::from).to_vec(),
        ),
        ("initech".to_owned(), vec!["p1".to_owned()]),
    ];
    let pending = store.pending_of(&asked).await.unwrap();
    assert_eq!(pending.len(), 2, "globex was not asked about");
    let acme = &pending["acme"];
    assert_eq!(acme.pending, 2);
    let state = |id: &str| acme.keys.get(id).copied();
    let key = |state, seq| Some(KeyState { state, seq });
    assert_eq!(state("p1"), key(TimerState::Scheduled, 1));
    assert_eq!(state("fired"), key(TimerState::Reached, 3));
    assert_eq!(state("gone"), key(TimerState::Cancelled, 5));
    assert_eq!(state("never"), None);
    assert_eq!(pending["initech"].pending, 0);
    assert!(pending["initech"].keys.is_empty());
}

/// A tenant's pending counts, and its forecast: each minute's range of `dueAt`, the first from
/// now on; nothing already due, finished, or another tenant's.
#[tokio::test]
async fn the_forecast_counts_a_tenants_pending_timers_by_minute() {
    let (_dir, store) = store().await;
    // `at(0)` is on a whole minute; now is half a minute into the second.
    let now = at(90_000);
    store
        .apply(&[
            schedule("acme", "overdue", 1, 0),
            schedule("acme", "just-due", 2, 89_500),
            schedule("acme", "now", 3, 90_000),
            schedule("acme", "end-of-first", 4, 119_999),
            schedule("acme", "second", 5, 120_000),
            schedule("acme", "third-a", 6, 180_000),
            schedule("acme", "third-b", 7, 239_999),
            schedule("acme", "beyond", 8, 240_000),
            schedule("acme", "gone", 9, 150_000),
            cancel("acme", "gone", 10, 0),
            schedule("globex", "other", 11, 150_000),
        ])
        .await
        .unwrap();
    let counts = store.pending_counts("acme", now).await.unwrap();
    assert_eq!((counts.pending, counts.overdue), (8, 1));
    let forecast = store
        .forecast("acme", &ForecastWindow::new(now, 3))
        .await
        .unwrap();
    let minutes: Vec<(DateTime<Utc>, u64)> = forecast.iter().map(|m| (m.minute, m.due)).collect();
    assert_eq!(
        minutes,
        [(at(60_000), 2), (at(120_000), 1), (at(180_000), 2)]
    );
    let idle = store
        .forecast("initech", &ForecastWindow::new(now, 2))
        .await
        .unwrap();
    assert_eq!(idle.iter().map(|m| m.due).collect::<Vec<_>>(), [0, 0]);
}

#[tokio::test]
async fn the_schema_refuses_bad_rows_and_migrating_twice_is_harmless() {
    let scratch = Scratch::new();
    let target = scratch.database();
    migrate(&target).await.unwrap();
    migrate(&target).await.unwrap();
    let db = connect(&target, 1).await.unwrap();
    let insert = |id: &str, due: &str, state: &str, seq: &str| {
        Statement::from_string(
            db.get_database_backend(),
            format!(
                "INSERT INTO timer_schedules (tenant_id, service_call_id, correlation_id, due_at, registered_at, state, command_seq)
                 VALUES ('t', '{id}', 'c', {due}, '2026-01-01T00:00:00.000Z', '{state}', {seq})"
            ),
        )
    };
    let due = "'2026-01-01T00:00:00.000Z'";
    assert!(
        db.execute_raw(insert("ok", due, "Scheduled", "1"))
            .await
            .is_ok()
    );
    assert!(
        db.execute_raw(insert("tomb", "NULL", "Cancelled", "1"))
            .await
            .is_ok()
    );
    assert!(
        db.execute_raw(insert("f", due, "Fired", "1"))
            .await
            .is_err(),
        "state CHECK"
    );
    assert!(
        db.execute_raw(insert("s", due, "Scheduled", "'seven'"))
            .await
            .is_err(),
        "typed"
    );
    assert!(
        db.execute_raw(insert("n", "NULL", "Scheduled", "1"))
            .await
            .is_err(),
        "only a Cancelled row may have no dueAt"
    );
    if matches!(target, DatabaseTarget::Sqlite { .. }) {
        let journal = db
            .query_one_raw(Statement::from_string(
                db.get_database_backend(),
                "PRAGMA journal_mode",
            ))
            .await
            .unwrap()
            .unwrap()
            .try_get_by_index::<String>(0)
            .unwrap();
        assert_eq!(journal, "wal");
    }
}

/// A database written by the previous version (first migration only) is upgraded in place:
/// its timers keep their fields and still fire.
#[tokio::test]
async fn a_database_of_the_previous_schema_is_upgraded_with_its_timers() {
    use migration::{Migrator, MigratorTrait};
    let scratch = Scratch::new();
    let target = scratch.database();
    migrate(&target).await.unwrap();
    let db = connect(&target, 1).await.unwrap();
    Migrator::down(&db, Some(1)).await.unwrap();
    db.execute_unprepared(
        "INSERT INTO timer_schedules
           (tenant_id, service_call_id, correlation_id, due_at, registered_at, reached_at, state, command_seq)
         VALUES
           ('acme', 'old-pending', 'corr-1', '2026-01-01T00:00:00.000Z', '2025-12-31T00:00:00.000Z', NULL, 'Scheduled', 7),
           ('acme', 'old-fired', 'corr-2', '2025-01-01T00:00:00.000Z', '2024-12-31T00:00:00.000Z', '2025-01-01T00:00:00.004Z', 'Reached', 8)",
    )
    .await
    .unwrap();
    db.close().await.unwrap();

    migrate(&target).await.unwrap();
    let store = Store::open(&target).await.unwrap();
    let fired = store.get("acme", "old-fired").await.unwrap().unwrap();
    assert_eq!((fired.state, fired.command_seq), (TimerState::Reached, 8));
    let due = store
        .claim_due(Utc::now(), None, 10, &claimant())
        .await
        .unwrap();
    assert_eq!(due.timers.len(), 1);
    assert_eq!(due.timers[0].service_call_id, "old-pending");
    assert_eq!(due.timers[0].correlation_id, "corr-1");
}

/// One step of the property test: a command for key `k<key>`, or a firing round.
#[derive(Debug, Clone)]
enum Step {
    Schedule {
        key: usize,
        seq: u64,
        due: i64,
        /// `expireAfter`, in ms: the timers fire at 1000, so some in time and some not.
        expire_after: Option<i64>,
    },
    Cancel {
        key: usize,
        seq: u64,
    },
    /// Everything due is claimed (picked for firing) and marked `Reached` at once.
    Fire,
    /// Everything due is claimed, and stays in flight until the next `Mark`.
    Claim,
    /// What is in flight is marked `Reached` (a timer rescheduled meanwhile stays pending).
    Mark,
}

/// How a timer of the model fired at 1000: `Expired` past its deadline (`expiry`).
fn fired_state(timer: &Timer) -> TimerState {
    if timer_service::domain::expiry::is_expired(timer.expires_at, at(1000)) {
        TimerState::Expired
    } else {
        TimerState::Reached
    }
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..3, 1u64..40, 0i64..50, prop::option::of(1i64..2000)).prop_map(
            |(key, seq, due, expire_after)| Step::Schedule { key, seq, due, expire_after }
        ),
        2 => (0usize..3, 1u64..40).prop_map(|(key, seq)| Step::Cancel { key, seq }),
        1 => Just(Step::Fire),
        1 => Just(Step::Claim),
        1 => Just(Step::Mark),
    ]
}

/// Whatever the order of schedules, cancels (alone or several in one batch, redelivered or
/// not), claims and firings, the SQL keeps the rules of the contract as written once in
/// `apply_command`: a cancel meeting a claimed timer is refused and still orders later
/// commands. Every case has a tenant of its own in one database.
#[test]
fn sql_follows_the_rules_table() {
    use proptest::test_runner::{Config, TestRunner};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (_scratch, store) = runtime.block_on(store());
    let cases = std::sync::atomic::AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config::with_cases(32));
    let strategy = (prop::collection::vec(step(), 1..40), 1usize..4);
    let outcome = runner.run(&strategy, |(steps, batch)| {
        let tenant = format!(
            "case-{}",
            cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        runtime.block_on(async {
            let mut model: HashMap<String, Timer> = HashMap::new();
            // Keys whose row holds a claim, and the claimed timers not yet marked.
            let mut claimed: HashSet<String> = HashSet::new();
            let mut in_flight: Vec<DueTimer> = Vec::new();
            let mut pending: Vec<Command> = Vec::new();
            let flush = |pending: &mut Vec<Command>,
                         model: &mut HashMap<String, Timer>,
                         claimed: &mut HashSet<String>| {
                let commands = std::mem::take(pending);
                let mut ordered = commands.clone();
                ordered.sort_by_key(|c| c.seq);
                for command in &ordered {
                    let key = &command.service_call_id;
                    if let Some(next) =
                        apply_command(model.get(key), command, claimed.contains(key))
                    {
                        if matches!(command.action, Action::Schedule { .. }) {
                            // A reschedule releases the claim on the old dueAt.
                            claimed.remove(key);
                        }
                        model.insert(key.clone(), next);
                    }
                }
                commands
            };
            for step in steps {
                match step {
                    Step::Schedule {
                        key,
                        seq,
                        due,
                        expire_after,
                    } => {
                        let mut command = schedule(&tenant, &format!("k{key}"), seq, due);
                        if let Action::Schedule { expires_at, .. } = &mut command.action {
                            *expires_at = expire_after.map(|after| at(due + after));
                        }
                        pending.push(command)
                    }
                    Step::Cancel { key, seq } => {
                        pending.push(cancel(&tenant, &format!("k{key}"), seq, 1))
                    }
                    Step::Claim => {
                        let commands = flush(&mut pending, &mut model, &mut claimed);
                        store.apply(&commands).await.unwrap();
                        let due = store
                            .claim_due(at(1000), None, 1000, &claimant())
                            .await
                            .unwrap()
                            .timers;
                        let mut picked: Vec<String> = Vec::new();
                        for t in due.into_iter().filter(|t| t.tenant_id == tenant) {
                            picked.push(t.service_call_id.clone());
                            claimed.insert(t.service_call_id.clone());
                            in_flight.push(t);
                        }
                        picked.sort();
                        let mut expected: Vec<String> = model
                            .iter()
                            .filter(|(_, t)| t.state == TimerState::Scheduled)
                            .map(|(id, _)| id.clone())
                            .collect();
                        expected.sort();
                        prop_assert_eq!(picked, expected, "every pending timer is due and claimed");
                    }
                    Step::Mark => {
                        let fired = std::mem::take(&mut in_flight);
                        store
                            .mark_reached(&[(fired.clone().into(), at(1000))])
                            .await
                            .unwrap();
                        for t in fired {
                            let m = model.get_mut(&t.service_call_id).unwrap();
                            if m.state == TimerState::Scheduled && m.due_at == Some(t.due_at) {
                                m.state = fired_state(m);
                                m.reached_at = Some(at(1000));
                                claimed.remove(&t.service_call_id);
                            }
                        }
                    }
                    Step::Fire => {
                        let commands = flush(&mut pending, &mut model, &mut claimed);
                        store.apply(&commands).await.unwrap();
                        // Everything due fires (earlier cases' leftovers too, which are done).
                        loop {
                            let due = store
                                .claim_due(at(1000), None, 100, &claimant())
                                .await
                                .unwrap()
                                .timers;
                            if due.is_empty() {
                                break;
                            }
                            store
                                .mark_reached(&[(due.clone().into(), at(1000))])
                                .await
                                .unwrap();
                            for t in due.iter().filter(|t| t.tenant_id == tenant) {
                                let m = model.get_mut(&t.service_call_id).unwrap();
                                m.state = fired_state(m);
                                m.reached_at = Some(at(1000));
                                claimed.remove(&t.service_call_id);
                            }
                        }
                    }
                }
                if pending.len() >= batch {
                    let commands = flush(&mut pending, &mut model, &mut claimed);
                    store.apply(&commands).await.unwrap();
                }
            }
            let commands = flush(&mut pending, &mut model, &mut claimed);
            store.apply(&commands).await.unwrap();
            for (id, expected) in &model {
                let stored = store.get(&tenant, id).await.unwrap().unwrap();
                prop_assert_eq!(&stored, expected);
            }
            Ok(())
        })
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

#[tokio::test]
async fn the_wal_is_checkpointed_from_a_second_connection_not_by_commits() {
    let (scratch, store) = store().await;
    if !scratch.sqlite_only("WAL checkpoints") {
        return;
    }
    let target = scratch.database();
    let rows: Vec<Command> = (0..3000)
        .map(|i| schedule("acme", &format!("c{i}"), i, i as i64))
        .collect();
    store.apply(&rows).await.unwrap();
    let checkpointer = connect(&target, 1).await.unwrap();
    let autocheckpoint = checkpointer
        .query_one_raw(Statement::from_string(
            checkpointer.get_database_backend(),
            "PRAGMA wal_autocheckpoint",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get_by_index::<i64>(0)
        .unwrap();
    assert!(
        autocheckpoint >= 10_000,
        "commits must not checkpoint a small WAL: {autocheckpoint}"
    );
    let done = timer_service::storage::db::checkpoint(&checkpointer)
        .await
        .unwrap();
    assert!(done.wal_pages > 0);
    assert_eq!(
        done.checkpointed_pages, done.wal_pages,
        "a passive checkpoint with no writer copies it all"
    );
}

/// Each incarnation of the command stream gets an epoch the first time it is met, in the
/// order they are met; one older than a known incarnation of the same stream was deleted, and
/// its commands cannot be ordered.
#[tokio::test]
async fn incarnations_of_the_command_stream_get_epochs_in_order() {
    use timer_service::domain::StreamIncarnation;
    let (_dir, store) = store().await;
    let incarnation = |created_ns| StreamIncarnation {
        name: "TIMER_COMMANDS".into(),
        created_ns,
    };
    let now = at(0);
    assert_eq!(
        store.command_epoch(&incarnation(100), now).await.unwrap(),
        0
    );
    assert_eq!(
        store.command_epoch(&incarnation(100), now).await.unwrap(),
        0
    );
    assert_eq!(
        store.command_epoch(&incarnation(200), now).await.unwrap(),
        1
    );
    assert!(matches!(
        store.command_epoch(&incarnation(150), now).await,
        Err(timer_service::storage::StoreError::StaleStream(_))
    ));
    assert_eq!(
        store.command_epoch(&incarnation(100), now).await.unwrap(),
        0
    );
    let other = StreamIncarnation {
        name: "OTHER_COMMANDS".into(),
        created_ns: 50,
    };
    assert_eq!(store.command_epoch(&other, now).await.unwrap(), 2);
}
