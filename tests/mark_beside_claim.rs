//! A mark under way keeps its run open. Where a claim runs beside a mark (PostgreSQL's two
//! firing connections), a wake-up that comes while the mark is at the database starts a claim
//! of the same run: fenced, after the cursor, it does not take the timers under the mark again.
//! A run ended at that moment would claim from the first due timer, this daemon's own claims
//! included, and publish the marked timers a second time. On SQLite the claim waits for the
//! mark; each timer is published once there too.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use common::doubles::InMemoryEventBus;
use common::eventually;
use common::poller::wait_reached;
use timer_service::actors::Registry;
use timer_service::actors::persistence::PersistenceMsg;
use timer_service::actors::poller::PollerMsg;
use timer_service::ports::SystemClock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_beside_a_mark_under_way_does_not_take_its_timers_again() {
    let scratch = common::Scratch::new();
    let registry = Registry::new("mark-beside-claim-test");
    let real = common::persistence::start(&scratch, &registry, false).await;
    // The marks held at the database's door while `Some`.
    let held = Arc::new(Mutex::new(Some(Vec::new())));
    let stand_in = {
        let held = held.clone();
        common::persistence::stand_in(&registry, &real, move |message| match message {
            PersistenceMsg::Run(operation) if operation.name == "mark_reached" => {
                match held.lock().unwrap().as_mut() {
                    Some(waiting) => {
                        waiting.push(operation);
                        None
                    }
                    None => Some(PersistenceMsg::Run(operation)),
                }
            }
            message => Some(message),
        })
        .await
    };
    let persistence = registry.persistence();
    let now = Utc::now();
    let first_due = now - chrono::Duration::seconds(10);
    persistence
        .apply(vec![common::schedule_at("acme", "first", 1, first_due)])
        .await
        .unwrap();
    let bus = Arc::new(InMemoryEventBus::new());
    let poller =
        common::poller::start(&scratch, &registry, bus.clone(), Arc::new(SystemClock)).await;

    // The first timer is published; its mark is held at the database's door.
    eventually(
        Duration::from_secs(15),
        "the first timer's mark",
        || async {
            let waiting = held.lock().unwrap().as_ref().map_or(0, Vec::len);
            (waiting == 1).then_some(())
        },
    )
    .await;
    assert_eq!(published(&bus, "first"), 1);

    // A timer stored due meanwhile wakes the Poller while the mark is under way.
    let second_due = now - chrono::Duration::seconds(5);
    persistence
        .apply(vec![common::schedule_at("acme", "second", 2, second_due)])
        .await
        .unwrap();
    poller.cast(PollerMsg::WakeAt(second_due)).unwrap();
    let side_by_side = scratch.database().firing_connections() > 1;
    if side_by_side {
        eventually(
            Duration::from_secs(15),
            "the second timer claimed and published beside the mark",
            || async { (published(&bus, "second") == 1).then_some(()) },
        )
        .await;
    }

    // The mark goes on to the database; then the second one's.
    let waiting = held.lock().unwrap().take().unwrap_or_default();
    for operation in waiting {
        real.cast(PersistenceMsg::Run(operation)).unwrap();
    }
    wait_reached(&persistence, "first").await;
    wait_reached(&persistence, "second").await;
    assert_eq!(
        (published(&bus, "first"), published(&bus, "second")),
        (1, 1),
        "each timer published once (side by side: {side_by_side})"
    );
    poller.stop(None);
    stand_in.stop(None);
    real.stop(None);
}

/// How many of the events the bus took are of `acme/<id>`.
fn published(bus: &InMemoryEventBus, id: &str) -> usize {
    let needle = format!("\"{id}\"");
    bus.published()
        .iter()
        .filter(|event| String::from_utf8_lossy(&event.payload).contains(&needle))
        .count()
}
