//! A mark under way keeps its run open. Where a claim runs beside a mark (PostgreSQL's two
//! firing connections), a wake-up that comes while the mark is at the database starts a claim
//! of the same run: fenced, after the cursor, it does not take the timers under the mark again.
//! A run ended at that moment would claim from the first due timer, this daemon's own claims
//! included, and publish the marked timers a second time. On SQLite the claim waits for the
//! mark; each timer is published once there too. On either, a mark that fails is tried again,
//! and its timers are not published again.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use common::doubles::InMemoryEventBus;
use common::eventually;
use common::poller::wait_reached;
use ractor::ActorRef;
use timer_service::actors::Registry;
use timer_service::actors::persistence::{Operation, PersistenceMsg};
use timer_service::actors::poller::PollerMsg;
use timer_service::ports::SystemClock;
use timer_service::storage::StoreError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_beside_a_mark_under_way_does_not_take_its_timers_again() {
    let scene = Scene::mark_held_while_a_timer_comes_due("mark-beside-claim-test").await;
    // The mark goes on to the database; then the second one's.
    for operation in scene.take_held() {
        scene.real.cast(PersistenceMsg::Run(operation)).unwrap();
    }
    scene.each_published_once_and_reached().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_that_fails_beside_a_claim_is_tried_again_without_publishing_again() {
    let scene = Scene::mark_held_while_a_timer_comes_due("mark-fails-beside-claim-test").await;
    for operation in scene.take_held() {
        operation.fail(StoreError::Unavailable("the database went away".into()));
    }
    scene.each_published_once_and_reached().await;
}

/// A Poller whose first mark is held at the database's door (a stand-in Persistence) while a
/// second timer comes due and wakes it.
struct Scene {
    scratch: common::Scratch,
    real: ActorRef<PersistenceMsg>,
    stand_in: ActorRef<PersistenceMsg>,
    poller: ActorRef<PollerMsg>,
    bus: Arc<InMemoryEventBus>,
    /// The marks held while `Some`; once taken, marks go on to the database.
    held: Arc<Mutex<Option<Vec<Operation>>>>,
    registry: Registry,
}

impl Scene {
    async fn mark_held_while_a_timer_comes_due(name: &str) -> Self {
        let scratch = common::Scratch::new();
        let registry = Registry::new(name);
        let real = common::persistence::start(&scratch, &registry, false).await;
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
        persistence
            .apply(vec![common::schedule_at(
                "acme",
                "first",
                1,
                now - chrono::Duration::seconds(10),
            )])
            .await
            .unwrap();
        let bus = Arc::new(InMemoryEventBus::new());
        let poller =
            common::poller::start(&scratch, &registry, bus.clone(), Arc::new(SystemClock)).await;

        // The first timer is published; its mark is held.
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
        if scratch.database().claims_beside_marks() {
            eventually(
                Duration::from_secs(15),
                "the second timer claimed and published beside the mark",
                || async { (published(&bus, "second") == 1).then_some(()) },
            )
            .await;
        }
        Self {
            scratch,
            real,
            stand_in,
            poller,
            bus,
            held,
            registry,
        }
    }

    /// The marks held so far; from now on marks go on to the database.
    fn take_held(&self) -> Vec<Operation> {
        self.held.lock().unwrap().take().unwrap_or_default()
    }

    /// Both timers end `Reached`, each published once.
    async fn each_published_once_and_reached(self) {
        let persistence = self.registry.persistence();
        wait_reached(&persistence, "first").await;
        wait_reached(&persistence, "second").await;
        let side_by_side = self.scratch.database().claims_beside_marks();
        assert_eq!(
            (
                published(&self.bus, "first"),
                published(&self.bus, "second")
            ),
            (1, 1),
            "each timer published once (side by side: {side_by_side})"
        );
        self.poller.stop(None);
        self.stand_in.stop(None);
        self.real.stop(None);
    }
}

/// How many of the events the bus took are of `acme/<id>`.
fn published(bus: &InMemoryEventBus, id: &str) -> usize {
    let needle = format!("\"{id}\"");
    bus.published()
        .iter()
        .filter(|event| String::from_utf8_lossy(&event.payload).contains(&needle))
        .count()
}
