//! Assembling and running the daemon: migrate the database, connect to the broker, start the
//! Supervisor, reload the quotas on SIGHUP, and stop everything gracefully when asked.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorRef};

use crate::actors::api_responder::ApiResponderArgs;
use crate::actors::canceller::CancellerArgs;
use crate::actors::checkpointer::CheckpointerArgs;
use crate::actors::command_handler::CommandHandlerArgs;
use crate::actors::gauges::GaugesArgs;
use crate::actors::http::HttpArgs;
use crate::actors::janitor::JanitorArgs;
use crate::actors::persistence::PersistenceArgs;
use crate::actors::poller::PollerArgs;
use crate::actors::sweeper::SweeperArgs;
use crate::actors::{
    ApiResponder, Canceller, Checkpointer, ChildSpec, CommandHandler, Gauges, Http, Janitor,
    Persistence, PersistenceClient, Poller, Registry, Supervisor, SupervisorArgs, SupervisorMsg,
    Sweeper,
};
use crate::config::Config;
use crate::domain::quota::Quotas;
use crate::health::{Health, Status};
use crate::nats::{
    self, JetStreamCommandPublisher, JetStreamCommandSourceFactory, JetStreamStrays, NatsApiServer,
    NatsEventBus,
};
use crate::ports::{Clock, CommandPublisher, SystemClock};
use crate::stop::Reserve;

mod name;
mod run;

use crate::storage::db::DatabaseTarget;
use crate::storage::{self, Claimant, StoreError};
pub use name::NAME_WATCH;
use name::{release_name, take_name};
pub use run::run;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("database {path}: {source}")]
    Database {
        path: String,
        source: sea_orm::DbErr,
    },
    #[error("database {path}: cannot take the daemon name: {source}")]
    Name { path: String, source: StoreError },
    #[error(
        "daemon name {name:?} is held by a live daemon on this database (instance {holder}): \
         two daemons under one name would treat each other's claimed timers as their own; \
         give each daemon its own name"
    )]
    NameHeld { name: String, holder: String },
    #[error(transparent)]
    Broker(#[from] nats::ConnectError),
    #[error("cannot start the actors: {0}")]
    Start(String),
    #[error("stopped: {0}")]
    RestartLimit(String),
    #[error("the supervisor stopped unexpectedly")]
    SupervisorLost,
    #[error("graceful shutdown did not finish within its budget of {0:?}")]
    ShutdownTimeout(Duration),
}

/// A running daemon.
pub struct Daemon {
    supervisor: ActorRef<SupervisorMsg>,
    supervisor_done: JoinHandle<()>,
    exit: Arc<Mutex<Option<String>>>,
    client: async_nats::Client,
    registry: Registry,
    health: Health,
    actor_names: Vec<&'static str>,
    /// The name this daemon holds on `database`, given up at a graceful stop.
    name: String,
    database: DatabaseTarget,
    /// The quotas in force, read by the CommandHandler at each batch.
    quotas: tokio::sync::watch::Sender<Arc<Quotas>>,
    /// The budget of a graceful stop (`crate::stop`).
    shutdown_timeout: Duration,
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
        let database = DatabaseTarget::of(&config);
        let name = config.daemon_name(database.shared());
        tracing::info!(name = name.as_str(), name_from = name.origin(),
            database = %database.describe(),
            broker_url = %crate::config::redact_url(&config.broker_url), "timer-service starting");
        storage::db::migrate_with(&database, &config.postgres)
            .await
            .map_err(|source| DaemonError::Database {
                path: database.describe(),
                source,
            })?;
        let name = take_name(&config, &database, name).await?;
        let config = Config {
            name: Some(name.clone()),
            ..config
        };
        let name = name.as_str();
        // Without `/metrics` nobody reads them: no recorder, and recording costs nothing. With
        // it, the recorder comes first: a gauge set before it (the broker connected) is lost.
        let metrics = config.http_listen().map(|listen| {
            (
                listen,
                crate::telemetry::install(name, &config.metrics.tenants),
            )
        });
        let health = Health::new();
        let link = nats::LinkWatch::new(health.clone(), config.nats.link_timeout);
        let client = nats::connect(&config.broker_url, &config.nats, name, &link).await?;
        let js = nats::jetstream_context(client.clone());
        let names = config.broker_names();
        let subjects = config.subjects();
        let watch = link.downgrade();
        let bus = Arc::new(NatsEventBus::new(js.clone(), names.clone(), link));
        let registry = Registry::new(name);
        let exit = Arc::new(Mutex::new(None));
        let in_force = config.quotas.quotas();
        if !in_force.is_unlimited() {
            tracing::info!(quotas = %in_force, "quotas in force");
        }
        let (quotas, quotas_in_force) = tokio::sync::watch::channel(Arc::new(in_force));
        // Orders the API's commands, and tells when the commands before one are handled.
        let publisher: Arc<dyn CommandPublisher> =
            Arc::new(JetStreamCommandPublisher::new(js.clone(), names.clone()));
        // The children, in start order: Persistence first, since the others call it.
        let mut children = vec![
            ChildSpec::of::<Persistence>(PersistenceArgs {
                database: database.clone(),
                health: health.clone(),
                claimant: Claimant {
                    name: name.to_owned(),
                    lease: config.claim_lease,
                },
                postgres: config.postgres.clone(),
                read_connections: config.api.read_connections,
                read_timeout: config.api.read_timeout,
                stop: registry.stop().clone(),
            })
            .stopped_last(),
            ChildSpec::of::<Poller>(PollerArgs {
                registry: registry.clone(),
                bus: bus.clone(),
                clock: clock.clone(),
                subjects: subjects.clone(),
                batch_size: config.batch_size,
                polling_interval: config.polling_interval,
                lease: config.claim_lease,
                short_writes: database.short_writes_while_sharing(),
                claims_beside_marks: database.claims_beside_marks(),
            }),
            // Before the CommandHandler, which hands it the CancelTimers it meets.
            ChildSpec::of::<Canceller>(CancellerArgs {
                registry: registry.clone(),
                publisher: publisher.clone(),
            }),
            ChildSpec::of::<CommandHandler>(CommandHandlerArgs {
                registry: registry.clone(),
                source: Arc::new(JetStreamCommandSourceFactory::new(
                    js.clone(),
                    names.clone(),
                    health.clone(),
                    watch,
                )),
                bus,
                clock: clock.clone(),
                subjects: subjects.clone(),
                batch_size: config.batch_size,
                limits: config.command_limits(),
                quotas: quotas_in_force,
                commits_in_flight: database.command_connections(),
            }),
            // After the CommandHandler, so it stops first.
            ChildSpec::of::<Sweeper>(SweeperArgs {
                registry: registry.clone(),
                strays: Arc::new(JetStreamStrays::new(js.clone(), names.clone())),
            }),
            ChildSpec::of::<ApiResponder>(ApiResponderArgs {
                registry: registry.clone(),
                server: Arc::new(NatsApiServer::new(
                    client.clone(),
                    subjects.clone(),
                    name.to_owned(),
                    &config.nats.inbox_prefix,
                    config.nats.inbox_per_tenant,
                )),
                publisher,
                clock: clock.clone(),
                subjects: subjects.clone(),
                max_in_flight_per_tenant: config.api.max_in_flight_per_tenant,
            }),
            ChildSpec::of::<Janitor>(JanitorArgs {
                registry: registry.clone(),
                clock: clock.clone(),
                keep_finished: config.retention.keep_finished,
            }),
            ChildSpec::of::<Gauges>(GaugesArgs {
                registry: registry.clone(),
                clock,
            }),
        ];
        // WAL checkpoints are SQLite's; second in start order, after Persistence.
        if let Some((path, settings)) = database.wal_file() {
            children.insert(
                1,
                ChildSpec::of::<Checkpointer>(CheckpointerArgs {
                    registry: registry.clone(),
                    db_path: path.to_owned(),
                    sqlite: settings.clone(),
                }),
            );
        }
        if let Some((listen, metrics)) = metrics {
            let console = config
                .console
                .enabled()
                .then(|| crate::console::ConsoleArgs {
                    settings: config.console.clone(),
                    registry: registry.clone(),
                    health: health.clone(),
                    subjects: subjects.clone(),
                    daemon: name.to_owned(),
                    quotas: quotas.subscribe(),
                });
            children.push(ChildSpec::of::<Http>(HttpArgs {
                listen,
                metrics,
                health: health.clone(),
                console,
            }));
        }
        let actor_names = children.iter().map(|c| c.name).collect();
        let args = SupervisorArgs {
            registry: registry.clone(),
            settings: config.supervisor.clone(),
            health: health.clone(),
            children,
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
            health,
            actor_names,
            name: name.to_owned(),
            database,
            quotas,
            shutdown_timeout: config.supervisor.shutdown_timeout,
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

    /// Graceful stop, within `[supervisor] shutdown_timeout` in all (`crate::stop`): no new
    /// commands are pulled, those delivered are committed and the Poller's batches finish, the
    /// actors stop (Persistence last), buffered broker traffic (acks, events) is flushed, and
    /// the name is given up. What a step could not finish in its share is left as a crash would
    /// leave it, for the next start: never a loss.
    pub async fn shutdown(self) -> Result<(), DaemonError> {
        tracing::info!(budget = ?self.shutdown_timeout, "timer-service shutting down");
        let stop = self.registry.stop().clone();
        stop.begin(self.shutdown_timeout);
        let stopped = tokio::time::timeout_at(stop.until(Reserve::ForName), async {
            let _ = self
                .supervisor
                .call(SupervisorMsg::Shutdown, Some(stop.left(Reserve::ForName)))
                .await;
            let _ = self.supervisor_done.await;
        })
        .await;
        // Draining flushes what is buffered (the last acks and events) before closing.
        match tokio::time::timeout_at(stop.until(Reserve::ForName), self.client.drain()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not drain the broker connection"),
            Err(_) => tracing::warn!("the broker connection was not drained within the budget"),
        }
        match stopped {
            Ok(()) => {
                release_name(&self.database, &self.name, stop.until(Reserve::Nothing)).await;
                tracing::info!("timer-service stopped");
                Ok(())
            }
            Err(_) => Err(DaemonError::ShutdownTimeout(self.shutdown_timeout)),
        }
    }

    /// Puts `quotas` in force: the commands handled from now on are held to them.
    pub fn set_quotas(&self, quotas: Quotas) {
        self.quotas.send_replace(Arc::new(quotas));
    }

    /// The quotas in force.
    pub fn quotas(&self) -> Arc<Quotas> {
        self.quotas.borrow().clone()
    }

    /// Reads the configuration at `path` again (the file, then the environment) and puts its
    /// quotas in force. `running` is the configuration the daemon runs with: other settings
    /// that differ from it are only logged, since they take effect at the next start. A
    /// configuration that does not load keeps the quotas in force.
    pub fn reload(&self, path: &Path, running: &mut Config) {
        let config = match Config::load(path) {
            Ok(loaded) => loaded.config,
            Err(e) => {
                tracing::error!(error = %e, config = %path.display(),
                    "configuration not reloaded: it is invalid; the quotas in force are kept");
                return;
            }
        };
        let quotas = config.quotas.quotas();
        let changed = *self.quotas() != quotas;
        tracing::info!(config = %path.display(), changed, quotas = %quotas, "quotas reloaded");
        self.set_quotas(quotas);
        running.quotas = config.quotas.clone();
        let others = running.changed_settings(&config);
        if !others.is_empty() {
            tracing::warn!(settings = ?others,
                "settings changed in the configuration take effect at the next start; only [quotas] is reloaded");
        }
    }

    /// Kills one actor as a crash would. For drills and tests of supervision.
    pub fn inject_fault(&self, actor: &str) {
        let _ = self
            .supervisor
            .cast(SupervisorMsg::InjectFault(actor.to_owned()));
    }

    /// The id of the running `actor`, if it runs: a new id after a restart.
    pub fn actor_id(&self, actor: &str) -> Option<ractor::ActorId> {
        ractor::registry::where_is(self.registry.name(actor)).map(|cell| cell.get_id())
    }

    /// The names of the Supervisor's children, in start order.
    pub fn actor_names(&self) -> &[&'static str] {
        &self.actor_names
    }

    /// The daemon's health as it sees it: broker, database, actors.
    pub fn health(&self) -> Status {
        self.health.status()
    }

    /// Read access to the stored timers through the Persistence actor.
    pub fn persistence(&self) -> PersistenceClient {
        self.registry.persistence()
    }
}
