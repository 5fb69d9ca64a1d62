//! A Poller on its own, for the tests of the Poller beside a real Persistence.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use timer_service::actors::Registry;
use timer_service::actors::poller::{Poller, PollerArgs, PollerMsg};
use timer_service::domain::Subjects;
use timer_service::ports::{Clock, EventBus};

/// A Poller whose safety-net tick (an hour) never comes during a test.
pub async fn start(
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
        },
    )
    .await
    .unwrap();
    poller
}
