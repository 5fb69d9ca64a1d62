//! A real Persistence actor on a test's own database, for the tests of one actor at a time
//! (the Poller, the Canceller, the Janitor) beside it.

use std::time::Duration;

use ractor::{Actor, ActorRef};
use timer_service::actors::persistence::{PersistenceArgs, PersistenceMsg};
use timer_service::actors::{NamedActor, Persistence, Registry};
use timer_service::storage::db::migrate;

use super::Scratch;

/// Migrates the scratch database and starts Persistence on it; registered as `registry`'s
/// when `named` (else a stand-in registered there hands it messages).
pub async fn start(
    scratch: &Scratch,
    registry: &Registry,
    named: bool,
) -> ActorRef<PersistenceMsg> {
    migrate(&scratch.database()).await.unwrap();
    let (persistence, _) = Actor::spawn(
        named.then(|| registry.name(Persistence::NAME)),
        Persistence,
        PersistenceArgs {
            database: scratch.database(),
            health: Default::default(),
            claimant: super::claimant(),
            postgres: Default::default(),
            read_connections: 1,
            read_timeout: Duration::from_secs(5),
            stop: registry.stop().clone(),
        },
    )
    .await
    .unwrap();
    persistence
}
