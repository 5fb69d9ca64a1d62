//! A mark under way keeps its run open. Where a claim runs beside a mark (PostgreSQL's two
//! firing connections), a wake-up that comes while the mark is at the database starts a claim
//! of the same run: fenced, after the cursor, it does not take the timers under the mark again.
//! A run ended at that moment would claim from the first due timer, this daemon's own claims
//! included, and publish the marked timers a second time. On SQLite the claim waits for the
//! mark; each timer is published once there too. On either, a mark that fails is tried again,
//! and its timers are not published again. A graceful stop with a claim and a mark both under
//! way waits for the mark and not for the claim, whose timer fires after a restart.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use common::doubles::InMemoryEventBus;
use common::eventually;
use common::poller::wait_reached;
use ractor::{ActorRef, ActorStatus};
use timer_service::actors::Registry;
use timer_service::actors::persistence::{Operation, PersistenceMsg};
use timer_service::actors::poller::PollerMsg;
use timer_service::domain::TimerState;
use timer_service::ports::SystemClock;
use timer_service::storage::StoreError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_beside_a_mark_under_way_does_not_take_its_timers_again() {
    let scene = Scene::mark_held_while_a_timer_comes_due("mark-beside-claim-test", false).await;
    // The mark goes on to the database; then the second one's.
    for operation in scene.take_held() {
        scene.real.cast(PersistenceMsg::Run(operation)).unwrap();
    }
    scene.each_published_once_and_reached().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_that_fails_beside_a_claim_is_tried_again_without_publishing_again() {
    let scene =
        Scene::mark_held_while_a_timer_comes_due("mark-fails-beside-claim-test", false).await;
    for operation in scene.take_held() {
        operation.fail(StoreError::Unavailable("the database went away".into()));
    }
    scene.each_published_once_and_reached().await;
}

/// A graceful stop's wait is for the batches at the broker and the mark under way, within its
/// budget (`crate::stop`); a claim under way beside the mark is not waited for. Here the claim
/// never answers before the stop ends, and the mark fails once the stop began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_waits_for_the_mark_under_way_and_not_for_the_claim_beside_it() {
    let scene = Scene::mark_held_while_a_timer_comes_due("stop-beside-claim-test", true).await;
    scene.registry.stop().begin(Duration::from_secs(120));
    let poller = scene.poller.clone();
    let stopping = tokio::spawn(async move { poller.stop_and_wait(None, None).await });
    eventually(
        Duration::from_secs(15),
        "the Poller's stop begun",
        || async {
            let status = scene.poller.get_status();
            matches!(status, ActorStatus::Stopping | ActorStatus::Stopped).then_some(())
        },
    )
    .await;
    // The mark fails: only a stop that waits for its answer knows to mark its timer again.
    for operation in scene.take_held() {
        operation.fail(StoreError::Unavailable("the database went away".into()));
    }
    // Far less than the budget: a stop that waited for the claim would run to its end.
    tokio::time::timeout(Duration::from_secs(60), stopping)
        .await
        .expect("the stop waited for the claim under way")
        .unwrap()
        .unwrap();
    let persistence = scene.registry.persistence();
    let first = persistence.get("acme", "first").await.unwrap().unwrap();
    assert_eq!(
        first.state,
        TimerState::Reached,
        "the stop waited for the mark under way, and marked its timer again when it failed"
    );
    let claims = scene.take_held_claims();
    let side_by_side = scene.scratch.database().claims_beside_marks();
    assert_eq!(
        claims.len(),
        usize::from(side_by_side),
        "side by side, the second timer's claim was under way, unanswered, as the stop ended"
    );
    // The claim reaches the database after the stop, as a statement still running would. A
    // Poller started again under the same name takes its own claims again and fires it.
    if !claims.is_empty() {
        for operation in claims {
            scene.real.cast(PersistenceMsg::Run(operation)).unwrap();
        }
        // Committed before the restart: a claim still running would lock the row, and the
        // new Poller's first claim skip it until the tick (an hour here).
        let database = scene.scratch.database();
        eventually(
            Duration::from_secs(15),
            "the late claim committed",
            || async {
                let sql = "SELECT claimed_by FROM timer_schedules WHERE service_call_id = 'second'";
                let rows = common::query_rows(&database, sql, |row| {
                    row.try_get_by_index::<Option<String>>(0).unwrap()
                })
                .await;
                (rows == [Some("test".to_owned())]).then_some(())
            },
        )
        .await;
    }
    let again = common::poller::start(
        &scene.scratch,
        &scene.registry,
        scene.bus.clone(),
        Arc::new(SystemClock),
    )
    .await;
    wait_reached(&persistence, "second").await;
    assert_eq!(
        (
            published(&scene.bus, "first"),
            published(&scene.bus, "second")
        ),
        (1, 1),
        "each timer published once (side by side: {side_by_side})"
    );
    again.stop(None);
    scene.stand_in.stop(None);
    scene.real.stop(None);
}

/// A Poller whose first mark is held at the database's door (a stand-in Persistence) while a
/// second timer comes due and wakes it; with `hold_claim`, that timer's claim is held too.
struct Scene {
    scratch: common::Scratch,
    real: ActorRef<PersistenceMsg>,
    stand_in: ActorRef<PersistenceMsg>,
    poller: ActorRef<PollerMsg>,
    bus: Arc<InMemoryEventBus>,
    /// The marks held while `Some`; once taken, marks go on to the database.
    held: Held,
    /// The claims held while `Some`.
    held_claims: Held,
    registry: Registry,
}

impl Scene {
    async fn mark_held_while_a_timer_comes_due(name: &str, hold_claim: bool) -> Self {
        let scratch = common::Scratch::new();
        let registry = Registry::new(name);
        let real = common::persistence::start(&scratch, &registry, false).await;
        let held: Held = Arc::new(Mutex::new(Some(Vec::new())));
        let held_claims: Held = Arc::new(Mutex::new(None));
        let stand_in = {
            let (held, held_claims) = (held.clone(), held_claims.clone());
            common::persistence::stand_in(&registry, &real, move |message| match message {
                PersistenceMsg::Run(operation) => {
                    let hold = match operation.name {
                        "mark_reached" => &held,
                        "claim_due" => &held_claims,
                        _ => return Some(PersistenceMsg::Run(operation)),
                    };
                    match hold.lock().unwrap().as_mut() {
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
        one_held(&held, "the first timer's mark").await;
        assert_eq!(published(&bus, "first"), 1);

        // A timer stored due meanwhile wakes the Poller while the mark is under way.
        if hold_claim {
            *held_claims.lock().unwrap() = Some(Vec::new());
        }
        let second_due = now - chrono::Duration::seconds(5);
        persistence
            .apply(vec![common::schedule_at("acme", "second", 2, second_due)])
            .await
            .unwrap();
        poller.cast(PollerMsg::WakeAt(second_due)).unwrap();
        if scratch.database().claims_beside_marks() && hold_claim {
            one_held(&held_claims, "the second timer's claim beside the mark").await;
        } else if scratch.database().claims_beside_marks() {
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
            held_claims,
            registry,
        }
    }

    /// The claims held so far; from now on claims go on to the database.
    fn take_held_claims(&self) -> Vec<Operation> {
        self.held_claims.lock().unwrap().take().unwrap_or_default()
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

/// Operations held at the stand-in while `Some`.
type Held = Arc<Mutex<Option<Vec<Operation>>>>;

/// Waits until `hold` holds one operation (`what`).
async fn one_held(hold: &Held, what: &str) {
    eventually(Duration::from_secs(15), what, || async {
        let waiting = hold.lock().unwrap().as_ref().map_or(0, Vec::len);
        (waiting == 1).then_some(())
    })
    .await;
}

/// How many of the events the bus took are of `acme/<id>`.
fn published(bus: &InMemoryEventBus, id: &str) -> usize {
    let needle = format!("\"{id}\"");
    bus.published()
        .iter()
        .filter(|event| String::from_utf8_lossy(&event.payload).contains(&needle))
        .count()
}
