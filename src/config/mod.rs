//! Configuration: defaults, then `config.toml`, then the environment (docs/CONTRACT.md §2, §7).
//!
//! Every key can be set by environment: `TIMER_<KEY>` for a top-level key, `TIMER_<SECTION>_<KEY>`
//! for a key in a section (`[http] listen` → `TIMER_HTTP_LISTEN`); the four seed names
//! (`TIMER_BROKER_URL`, `TIMER_DB_PATH`, `TIMER_POLLING_INTERVAL`, `TIMER_BATCH_SIZE`) are
//! such top-level keys. Durations are text (`500ms`, `30s`, `15m`, `7d`); a bare number is read
//! as milliseconds, as the seed's `polling_interval = 5000` always was. An unknown key or a bad
//! value stops start-up with an error naming the key and where it came from.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize};

use crate::domain::Subjects;
use crate::nats::BrokerNames;

mod api;
mod changes;
mod console;
pub mod duration;
mod env;
mod metrics;
mod name;
mod nats;
mod postgres;
mod quotas;
pub mod redact;
mod service_links;
mod sqlite;
mod validate;

pub use api::{ApiSettings, MAX_READ_CONNECTIONS};
pub use console::ConsoleSettings;
use env::{EnvText, describe, env_key, env_variable, is_text_setting, unknown_env_key};
pub use metrics::{MAX_LABELLED_TENANTS, MetricsSettings};
use name::generated_name;
pub use name::{DaemonName, host_name};
pub use nats::NatsSettings;
pub use postgres::PostgresSettings;
pub use quotas::{QuotaSettings, TenantQuotaSettings, parse_tenants};
pub use redact::{Secret, redact_url};
pub use sqlite::{SqliteSettings, Synchronous};

/// Prefix of every environment variable the service reads.
pub const ENV_PREFIX: &str = "TIMER_";

/// Something in the configuration worth an operator's attention that does not stop start-up.
/// Loading happens before logging is set up, so these are handed back to be logged after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigWarning {
    /// An environment variable that starts with `TIMER_` but names no setting: ignored, since
    /// the environment is not only ours. Only its name is kept, never its value. Kubernetes'
    /// service links (`TIMER_SERVICE_HOST`, `TIMER_PORT`… for a Service named `timer`) are
    /// ignored without a warning (see `service_links`).
    UnknownVariable(String),
}

impl ConfigWarning {
    /// Logs the warning (once logging is set up).
    pub fn log(&self) {
        match self {
            Self::UnknownVariable(variable) => tracing::warn!(
                variable = %variable,
                "environment variable names no setting; ignored"
            ),
        }
    }
}

/// A configuration and what was noticed while loading it.
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<ConfigWarning>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Load(String),
    #[error("setting {setting} ({origin}): {message}")]
    Invalid {
        setting: String,
        /// Where the value came from: the file, an environment variable, or the default.
        origin: String,
        message: String,
    },
}

/// Everything the daemon can be told. Its `Debug` shows the URLs redacted and no password or
/// token (see [`redact`]), so a `Config` logged with `{:?}` gives no secret away.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub broker_url: String,
    pub db_path: PathBuf,
    /// `postgres://…` to keep timers in PostgreSQL instead of the SQLite file.
    pub database_url: Option<String>,
    /// Safety-net polling period. Firing precision comes from exact wake-ups, not from this.
    #[serde(with = "duration")]
    pub polling_interval: Duration,
    /// Most commands pulled per request, and most timers claimed per firing round.
    pub batch_size: usize,
    /// Largest command accepted; bigger ones are rejected.
    pub max_command_bytes: usize,
    /// Largest `data` a ScheduleTimer may carry (bytes of its JSON text); a larger one is
    /// rejected, 0 accepts none. The whole command is held to `max_command_bytes` besides.
    pub max_data_bytes: usize,
    /// Arrays and objects open at once in `data`; deeper is rejected (serde_json, for one,
    /// stops at 128), so one tenant's data cannot break a consumer of every tenant's events.
    pub max_data_depth: usize,
    /// Characters of the longest number in `data`; longer is rejected (Python's `json` raises
    /// on a 5,000-digit integer).
    pub max_data_number_chars: usize,
    /// This daemon's name: in its logs and metrics, and on the timers it claims for firing.
    /// Keep it stable across restarts (a restarted daemon resumes its own claims at once) and
    /// unique among daemons sharing a database. When unset, see [`Config::daemon_name`].
    pub name: Option<String>,
    /// How long a claim on a due timer holds: after a daemon dies, others fire its claimed
    /// timers once this has passed.
    #[serde(with = "duration")]
    pub claim_lease: Duration,
    pub nats: NatsSettings,
    pub sqlite: SqliteSettings,
    pub postgres: PostgresSettings,
    pub supervisor: SupervisorSettings,
    pub http: HttpSettings,
    pub log: LogSettings,
    pub retention: RetentionSettings,
    /// Per-tenant limits; the only settings a running daemon reloads (on SIGHUP).
    pub quotas: QuotaSettings,
    pub metrics: MetricsSettings,
    pub api: ApiSettings,
    /// The web console; off unless a token is set.
    pub console: ConsoleSettings,
}

/// How the Supervisor restarts failed children, and how long it may take to stop them all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorSettings {
    /// More restarts than this within `restart_window` stop the daemon.
    pub max_restarts: usize,
    #[serde(with = "duration", alias = "restart_window_ms")]
    pub restart_window: Duration,
    /// First restart delay; doubled per recent restart, capped at `max_backoff`.
    #[serde(with = "duration", alias = "min_backoff_ms")]
    pub min_backoff: Duration,
    #[serde(with = "duration", alias = "max_backoff_ms")]
    pub max_backoff: Duration,
    /// The whole budget of a graceful stop, from SIGTERM to exit (`crate::stop`): keep it
    /// under the process manager's grace period less 5 s (the spans' flush comes after it).
    #[serde(with = "duration")]
    pub shutdown_timeout: Duration,
}

/// `[http]`: metrics, health and readiness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// Address to listen on; empty to serve no HTTP at all.
    pub listen: String,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `[retention]`: how long finished timers are kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    /// `Reached` and `Cancelled` rows older than this are deleted; zero keeps them forever.
    #[serde(with = "duration")]
    pub keep_finished: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            broker_url: "nats://127.0.0.1:4222".into(),
            db_path: PathBuf::from("./event_service.db"),
            database_url: None,
            polling_interval: Duration::from_millis(5000),
            batch_size: 100,
            max_command_bytes: 64 * 1024,
            max_data_bytes: 16 * 1024,
            max_data_depth: 64,
            max_data_number_chars: 100,
            name: None,
            claim_lease: Duration::from_secs(30),
            nats: NatsSettings::default(),
            sqlite: SqliteSettings::default(),
            postgres: PostgresSettings::default(),
            supervisor: SupervisorSettings::default(),
            http: HttpSettings::default(),
            log: LogSettings::default(),
            retention: RetentionSettings::default(),
            quotas: QuotaSettings::default(),
            metrics: MetricsSettings::default(),
            api: ApiSettings::default(),
            console: ConsoleSettings::default(),
        }
    }
}

impl Config {
    /// The sizes commands are held to.
    pub fn command_limits(&self) -> crate::domain::CommandLimits {
        crate::domain::CommandLimits {
            max_bytes: self.max_command_bytes,
            max_data_bytes: self.max_data_bytes,
            max_data_depth: self.max_data_depth,
            max_data_number_chars: self.max_data_number_chars,
        }
    }
}

impl Default for SupervisorSettings {
    fn default() -> Self {
        Self {
            max_restarts: 5,
            restart_window: Duration::from_secs(60),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            shutdown_timeout: crate::stop::DEFAULT_BUDGET,
        }
    }
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9464".into(),
        }
    }
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
        }
    }
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            keep_finished: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

impl Config {
    /// Reads `path` (defaults when it does not exist), then the process environment. An
    /// environment variable that names no setting is left out and reported as a warning,
    /// unless it is one of Kubernetes' service links.
    pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
        // serde stops at the first unknown field, so each unknown variable found is left out
        // and the rest read again: at most one pass per `TIMER_*` variable.
        let mut ignored: Vec<String> = Vec::new();
        let (figment, config) = loop {
            let skip = ignored.clone();
            // Keys left out take their serde defaults (`Config::default()`), so an old key name
            // (`busy_timeout_ms`) in a file never meets a default of its new name.
            let env = Env::prefixed(ENV_PREFIX)
                .map(env_key)
                .filter(move |key| !skip.iter().any(|k| key == k.as_str()));
            let figment = Figment::new()
                .merge(Toml::file(path))
                .merge(env.clone().filter(|key| !is_text_setting(key)))
                .merge(EnvText(env.filter(is_text_setting)));
            match figment.extract::<Config>() {
                Ok(config) => break (figment, config),
                Err(e) => match unknown_env_key(&e) {
                    Some(key) if !ignored.contains(&key) => ignored.push(key),
                    _ => return Err(ConfigError::Load(describe(e))),
                },
            }
        };
        config.validate().map_err(|(setting, message)| {
            let source = match figment.find_metadata(setting) {
                Some(m) if m.name.contains("environment") => format!(
                    "{ENV_PREFIX}{}",
                    setting.replace('.', "_").to_ascii_uppercase()
                ),
                Some(m) => m
                    .source
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| m.name.to_string()),
                None => "default".into(),
            };
            ConfigError::Invalid {
                setting: setting.to_owned(),
                origin: source,
                message,
            }
        })?;
        let warnings = ignored
            .iter()
            .map(|key| env_variable(key))
            .filter(|name| {
                let value = std::env::var(name).unwrap_or_default();
                !service_links::is_service_link(name, &value)
            })
            .map(ConfigWarning::UnknownVariable)
            .collect();
        Ok(Loaded { config, warnings })
    }

    /// The daemon's name: the configured one, or else the host name, made unique by a random
    /// suffix when the database is shared (`shared`: PostgreSQL), where another daemon may run
    /// on a host of the same name (containers of one image, say). A SQLite file has one daemon,
    /// and a stable name lets it resume its own claims at once after a restart.
    pub fn daemon_name(&self, shared: bool) -> DaemonName {
        match &self.name {
            Some(name) => DaemonName::Configured(name.clone()),
            None if shared => DaemonName::Generated(generated_name(&host_name())),
            None => DaemonName::HostName(host_name()),
        }
    }

    /// The subjects of this deployment.
    pub fn subjects(&self) -> Subjects {
        Subjects::new(
            &self.nats.command_subject_prefix,
            &self.nats.event_subject_prefix,
            &self.nats.api_subject_prefix,
        )
    }

    /// The broker objects of this deployment, as the NATS adapter needs them.
    pub fn broker_names(&self) -> BrokerNames {
        BrokerNames {
            command_stream: self.nats.command_stream.clone(),
            consumer: self.nats.consumer.clone(),
            event_stream: self.nats.event_stream.clone(),
            subjects: self.subjects(),
            event_max_age: self.nats.event_max_age,
            replicas: self.nats.replicas,
            command_partitions: self.nats.command_partitions,
        }
    }

    /// The HTTP address, or `None` when HTTP is turned off.
    pub fn http_listen(&self) -> Option<SocketAddr> {
        self.http.listen.trim().parse().ok()
    }
}

#[cfg(test)]
// figment's `Jail` closures return its own (large) error type.
#[allow(clippy::result_large_err)]
mod tests;
