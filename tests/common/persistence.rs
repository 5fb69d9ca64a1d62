//! A real Persistence actor on a test's own database, for the tests of one actor at a time
//! (the Poller, the Canceller, the Janitor) beside it.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
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

/// What a stand-in does with each message: `Some` hands it (or another) on to the real
/// Persistence, `None` keeps it.
pub type Intercept = Box<dyn FnMut(PersistenceMsg) -> Option<PersistenceMsg> + Send>;

/// Starts Persistence's stand-in, registered as `registry`'s in front of `real` (started with
/// `named` false): every message goes through `intercept` first, so a test can fail, count or
/// hold one kind of operation.
pub async fn stand_in(
    registry: &Registry,
    real: &ActorRef<PersistenceMsg>,
    intercept: impl FnMut(PersistenceMsg) -> Option<PersistenceMsg> + Send + 'static,
) -> ActorRef<PersistenceMsg> {
    let (stand_in, _) = Actor::spawn(
        Some(registry.name(Persistence::NAME)),
        StandIn { real: real.clone() },
        Box::new(intercept) as Intercept,
    )
    .await
    .unwrap();
    stand_in
}

struct StandIn {
    real: ActorRef<PersistenceMsg>,
}

impl Actor for StandIn {
    type Msg = PersistenceMsg;
    type State = Intercept;
    type Arguments = Intercept;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        intercept: Intercept,
    ) -> Result<Intercept, ActorProcessingErr> {
        Ok(intercept)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: PersistenceMsg,
        intercept: &mut Intercept,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(message) = intercept(message) {
            self.real.cast(message)?;
        }
        Ok(())
    }
}
