//! A Poller on its own, beside a Persistence actor of the test's (`persistence::start`), for
//! the tests of the Poller alone.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use timer_service::actors::Registry;
use timer_service::actors::persistence::PersistenceClient;
use timer_service::actors::poller::{Poller, PollerArgs, PollerMsg};
use timer_service::domain::{Subjects, TimerState};
use timer_service::ports::{Clock, EventBus};

use super::{Scratch, eventually};

/// A Poller whose safety-net tick (an hour) never comes during a test; claims beside marks
/// where the scratch database serves them so, as the daemon does.
pub async fn start(
    scratch: &Scratch,
    registry: &Registry,
    bus: Arc<dyn EventBus>,
    clock: Arc<dyn Clock>,
) -> ActorRef<PollerMsg> {
    let (poller, _) = Actor::spawn(
        None,
        Poller,
        PollerArgs {
            registry: registry.clone(),
            bus,
            clock,
            subjects: Subjects::default(),
            batch_size: 100,
            polling_interval: Duration::from_secs(3600),
            lease: Duration::from_secs(30),
            short_writes: false,
            claims_beside_marks: scratch.database().claims_beside_marks(),
        },
    )
    .await
    .unwrap();
    poller
}

/// Waits until the timer `acme/<id>` is `Reached`.
/// Within 15 s: far below the tick these tests give the Poller (an hour), and room for a
/// machine busy with other tests (5 s ran out there now and then).
pub async fn wait_reached(persistence: &PersistenceClient, id: &str) {
    eventually(
        Duration::from_secs(15),
        &format!("timer {id} to be Reached"),
        || async {
            let row = persistence.get("acme", id).await.unwrap()?;
            (row.state == TimerState::Reached).then_some(())
        },
    )
    .await;
}
