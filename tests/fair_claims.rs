//! Fair claims beside the Poller's other calls (docs/CONTRACT.md §9): the Poller on its own,
//! with the in-memory EventBus, beside a real Persistence behind a stand-in that holds the
//! burst's large writes back. (The contract-level fairness test runs against real NATS in
//! `fairness.rs`.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use common::doubles::InMemoryEventBus;
use common::eventually;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use timer_service::actors::persistence::{Class, PersistenceMsg};
use timer_service::actors::{NamedActor, Persistence, Registry};
use timer_service::ports::SystemClock;

/// A fair claim goes to Persistence beside the claim in `dueAt` order under way
/// (docs/CONTRACT.md §9). Every claim or mark of 2,000 timers or more is held back 2 s on its
/// way to Persistence, so each of a burst's large claims holds the Poller's turn that long; a
/// quiet tenant's timer due in the middle of such a hold is fired within a fraction of it. A
/// fair claim made only between the Poller's other calls waits out the hold (late by a second
/// or more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_tenants_timer_is_claimed_beside_a_held_claim_of_a_burst() {
    let scratch = common::Scratch::new();
    let registry = Registry::new("poller-fair-beside-test");
    let real = common::persistence::start(&scratch, &registry, false).await;
    let (stand_in, _) = Actor::spawn(
        Some(registry.name(Persistence::NAME)),
        HoldsLongWrites { real: real.clone() },
        (),
    )
    .await
    .unwrap();
    let persistence = registry.persistence();
    let due = Utc::now() - chrono::Duration::seconds(1);
    let burst = (0..10_000u64)
        .map(|i| common::schedule_at("bulk", &format!("b-{i:05}"), i + 1, due))
        .collect();
    persistence.apply(burst).await.unwrap();
    // The first claim answers after its hold (2 s), the second is held from then on: the quiet
    // timer comes due a second into the second hold.
    let quiet_due = Utc::now() + chrono::Duration::seconds(3);
    persistence
        .apply(vec![common::schedule_at(
            "small", "quiet", 20_000, quiet_due,
        )])
        .await
        .unwrap();

    let bus = Arc::new(InMemoryEventBus::new());
    let poller = common::poller::start(&registry, bus.clone(), Arc::new(SystemClock)).await;
    let fired_at = eventually(
        Duration::from_secs(30),
        "the quiet tenant's timer published",
        || async {
            bus.published()
                .iter()
                .any(|e| String::from_utf8_lossy(&e.payload).contains("\"quiet\""))
                .then(Utc::now)
        },
    )
    .await;
    let late = (fired_at - quiet_due).num_milliseconds();
    assert!(
        late < 700,
        "the quiet timer was published {late} ms after its dueAt: its fair claim waited for \
         the Poller's held claim"
    );
    poller.stop(None);
    stand_in.stop(None);
    real.stop(None);
}

/// How long [`HoldsLongWrites`] holds a large firing write back.
const HOLD: Duration = Duration::from_secs(2);

/// Stands in for Persistence: hands every firing write of 2,000 rows or more (the claims in
/// `dueAt` order of a backlog, large marks) to the real one after [`HOLD`], and every other
/// operation at once.
struct HoldsLongWrites {
    real: ActorRef<PersistenceMsg>,
}

impl Actor for HoldsLongWrites {
    type Msg = PersistenceMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: PersistenceMsg,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PersistenceMsg::Run(operation)
                if operation.class == Class::Firing && operation.rows >= 2_000 =>
            {
                let real = self.real.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(HOLD).await;
                    let _ = real.cast(PersistenceMsg::Run(operation));
                });
            }
            message => self.real.cast(message)?,
        }
        Ok(())
    }
}
