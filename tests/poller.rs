//! The Poller on its own, with the in-memory EventBus and a manual clock: it never publishes
//! before `dueAt` by the clock, marks `Reached` only what the bus acknowledged, and retries what
//! the bus refused. (The contract-level firing tests run against real NATS in `firing.rs`.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use common::eventually;
use ractor::Actor;
use timer_service::actors::Registry;
use timer_service::actors::persistence::PersistenceArgs;
use timer_service::actors::poller::{Poller, PollerArgs, PollerMsg};
use timer_service::actors::{NamedActor, Persistence};
use timer_service::domain::{Subjects, TimerState};
use timer_service::persistence::db::migrate;
use timer_service::ports::{InMemoryEventBus, ManualClock};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_only_what_is_due_and_retries_what_the_bus_refused() {
    let scratch = common::Scratch::new();
    migrate(&scratch.database()).await.unwrap();
    let registry = Registry::new("poller-test");
    let (persistence_ref, _) = Actor::spawn(
        Some(registry.name(Persistence::NAME)),
        Persistence,
        PersistenceArgs {
            database: scratch.database(),
            health: Default::default(),
            claimant: common::claimant(),
        },
    )
    .await
    .unwrap();

    let t0 = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
    let clock = Arc::new(ManualClock::new(t0));
    let bus = Arc::new(InMemoryEventBus::new());
    let persistence = registry.persistence();
    persistence
        .apply(vec![
            common::schedule_at("acme", "past", 1, t0 - chrono::Duration::seconds(1)),
            common::schedule_at("acme", "future", 2, t0 + chrono::Duration::seconds(10)),
        ])
        .await
        .unwrap();

    let (poller, _) = Actor::spawn(
        None,
        Poller,
        PollerArgs {
            registry: registry.clone(),
            bus: bus.clone(),
            clock: clock.clone(),
            subjects: Subjects::default(),
            batch_size: 100,
            polling_interval: Duration::from_secs(3600),
        },
    )
    .await
    .unwrap();

    // On start it fires what is due by the clock, and only that.
    eventually(
        Duration::from_secs(5),
        "the past timer to be Reached",
        || async {
            let row = persistence.get("acme", "past").await.unwrap()?;
            (row.state == TimerState::Reached).then_some(())
        },
    )
    .await;
    let published = bus.published();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].subject, "timer.evt.due.acme");
    assert_eq!(
        persistence
            .get("acme", "future")
            .await
            .unwrap()
            .unwrap()
            .state,
        TimerState::Scheduled
    );

    // The broker refuses: the due timer stays Scheduled.
    bus.set_refusing(true);
    clock.advance(chrono::Duration::seconds(10));
    poller.cast(PollerMsg::Tick).unwrap();
    eventually(Duration::from_secs(5), "the refused publish", || async {
        (bus.offered() >= 2).then_some(())
    })
    .await;
    assert_eq!(bus.published().len(), 1);
    let still_due = persistence
        .claim_due(clock_now(&clock), None, 10)
        .await
        .unwrap();
    assert_eq!(still_due.timers.len(), 1, "a refused timer stays Scheduled");

    // The broker is back: the retry publishes it and marks it.
    bus.set_refusing(false);
    poller.cast(PollerMsg::Tick).unwrap();
    eventually(
        Duration::from_secs(5),
        "the future timer to be Reached",
        || async {
            let row = persistence.get("acme", "future").await.unwrap()?;
            (row.state == TimerState::Reached).then_some(row)
        },
    )
    .await;
    assert_eq!(bus.published().len(), 2);
    poller.stop(None);
    persistence_ref.stop(None);
}

fn clock_now(clock: &ManualClock) -> chrono::DateTime<Utc> {
    use timer_service::ports::Clock;
    clock.now()
}
