//! Assembling and running the daemon: migrate the database, connect to the broker, start the
//! Supervisor, and stop everything gracefully when asked.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorRef};

use crate::actors::command_handler::CommandHandlerArgs;
use crate::actors::persistence::PersistenceArgs;
use crate::actors::poller::PollerArgs;
use crate::actors::{
    ActorKind, PersistenceClient, Registry, Supervisor, SupervisorArgs, SupervisorMsg,
};
use crate::config::Config;
use crate::nats::{self, JetStreamCommandSourceFactory, NatsEventBus};
use crate::persistence;
use crate::ports::{Clock, SystemClock};

/// How long a graceful shutdown may take before the daemon gives up waiting.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("database {path}: {source}")]
    Database {
        path: String,
        source: sea_orm::DbErr,
    },
    #[error("broker URL {url:?} is unusable: {source}")]
    BrokerUrl {
        url: String,
        source: async_nats::ConnectError,
    },
    #[error("cannot start the actors: {0}")]
    Start(String),
    #[error("stopped: {0}")]
    RestartLimit(String),
    #[error("the supervisor stopped unexpectedly")]
    SupervisorLost,
    #[error("graceful shutdown did not finish within {0:?}")]
    ShutdownTimeout(Duration),
}

/// A running daemon.
pub struct Daemon {
    supervisor: ActorRef<SupervisorMsg>,
    supervisor_done: JoinHandle<()>,
    exit: Arc<Mutex<Option<String>>>,
    client: async_nats::Client,
    registry: Registry,
}

impl Daemon {
    /// Migrates the database, starts connecting to the broker (in the background: the daemon
    /// starts, and catches up, while the broker is away) and starts the actors.
    pub async fn start(config: Config) -> Result<Daemon, DaemonError> {
        Self::start_with_clock(config, Arc::new(SystemClock)).await
    }

    pub async fn start_with_clock(
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Daemon, DaemonError> {
        tracing::info!(db_path = %config.db_path.display(), broker_url = %config.broker_url,
            "timer-service starting");
        persistence::db::migrate(&config.db_path, &config.sqlite)
            .await
            .map_err(|source| DaemonError::Database {
                path: config.db_path.display().to_string(),
                source,
            })?;
        let client =
            nats::connect(&config.broker_url)
                .await
                .map_err(|source| DaemonError::BrokerUrl {
                    url: config.broker_url.clone(),
                    source,
                })?;
        let js = nats::jetstream_context(client.clone());
        let bus = Arc::new(NatsEventBus::new(js.clone(), config.broker.clone()));
        let registry = Registry::new();
        let exit = Arc::new(Mutex::new(None));
        let args = SupervisorArgs {
            registry: registry.clone(),
            settings: config.supervisor.clone(),
            persistence: PersistenceArgs {
                db_path: config.db_path.clone(),
                sqlite: config.sqlite.clone(),
            },
            poller: PollerArgs {
                registry: registry.clone(),
                bus: bus.clone(),
                clock: clock.clone(),
                subjects: config.broker.subjects.clone(),
                batch_size: config.batch_size,
                polling_interval: config.polling_interval,
            },
            command_handler: CommandHandlerArgs {
                registry: registry.clone(),
                source: Arc::new(JetStreamCommandSourceFactory::new(
                    js,
                    config.broker.clone(),
                )),
                bus,
                clock,
                subjects: config.broker.subjects.clone(),
                batch_size: config.batch_size,
                max_command_bytes: config.max_command_bytes,
            },
            exit: exit.clone(),
        };
        let (supervisor, supervisor_done) =
            Actor::spawn(Some(registry.supervisor_name()), Supervisor, args)
                .await
                .map_err(|e| DaemonError::Start(e.to_string()))?;
        tracing::info!("timer-service running");
        Ok(Daemon {
            supervisor,
            supervisor_done,
            exit,
            client,
            registry,
        })
    }

    /// Resolves when the daemon stops on its own: the Supervisor gave up restarting a child.
    pub async fn stopped(&mut self) -> DaemonError {
        let _ = (&mut self.supervisor_done).await;
        match self.exit.lock().ok().and_then(|mut e| e.take()) {
            Some(reason) => DaemonError::RestartLimit(reason),
            None => DaemonError::SupervisorLost,
        }
    }

    /// Graceful stop: no new commands are pulled, the batch in flight finishes, the actors stop
    /// in order, and buffered broker traffic (acks) is flushed.
    pub async fn shutdown(self) -> Result<(), DaemonError> {
        tracing::info!("timer-service shutting down");
        let stopped = tokio::time::timeout(SHUTDOWN_TIMEOUT, async {
            let _ = self
                .supervisor
                .call(SupervisorMsg::Shutdown, Some(SHUTDOWN_TIMEOUT))
                .await;
            let _ = self.supervisor_done.await;
        })
        .await;
        // Draining flushes what is buffered (the last acks and events) before closing.
        if let Err(e) = self.client.drain().await {
            tracing::warn!(error = %e, "could not drain the broker connection");
        }
        match stopped {
            Ok(()) => {
                tracing::info!("timer-service stopped");
                Ok(())
            }
            Err(_) => Err(DaemonError::ShutdownTimeout(SHUTDOWN_TIMEOUT)),
        }
    }

    /// Makes one actor fail as a crash would. For drills and tests of supervision.
    pub fn inject_fault(&self, kind: ActorKind) {
        let _ = self.supervisor.cast(SupervisorMsg::InjectFault(
            kind,
            format!("fault injected into {kind}"),
        ));
    }

    /// The id of the running `kind` actor, if one is running: a new id after a restart.
    pub fn actor_id(&self, kind: ActorKind) -> Option<ractor::ActorId> {
        ractor::registry::where_is(self.registry.name(kind)).map(|cell| cell.get_id())
    }

    /// Read access to the stored timers through the Persistence actor.
    pub fn persistence(&self) -> PersistenceClient {
        self.registry.persistence()
    }
}

/// Runs the daemon until `shutdown` resolves (then stops gracefully) or until it stops on its
/// own with an error.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), DaemonError> {
    let mut daemon = Daemon::start(config).await?;
    tokio::select! {
        () = shutdown => {}
        error = daemon.stopped() => {
            tracing::error!(error = %error, "timer-service stopped on its own");
            return Err(error);
        }
    }
    daemon.shutdown().await
}
