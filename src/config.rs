//! Configuration: `config.toml` (every key optional), then the `TIMER_*` environment variables
//! of CONTRACT.md §2 on top. A missing file means defaults; an invalid value stops start-up
//! with an error naming the setting.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::domain::Subjects;
use crate::domain::command::check_tenant_id;
use crate::nats::BrokerNames;
use crate::persistence::{SqliteSettings, Synchronous};

pub const ENV_BROKER_URL: &str = "TIMER_BROKER_URL";
pub const ENV_DB_PATH: &str = "TIMER_DB_PATH";
pub const ENV_POLLING_INTERVAL: &str = "TIMER_POLLING_INTERVAL";
pub const ENV_BATCH_SIZE: &str = "TIMER_BATCH_SIZE";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("setting {setting}: {message}")]
    Invalid {
        setting: &'static str,
        message: String,
    },
}

/// Everything the daemon can be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub broker_url: String,
    pub db_path: PathBuf,
    /// Safety-net polling period. Firing precision comes from exact wake-ups, not from this.
    pub polling_interval: Duration,
    /// Most commands handled, and most timers fired, per transaction.
    pub batch_size: usize,
    /// Largest command accepted; bigger ones are rejected.
    pub max_command_bytes: usize,
    pub broker: BrokerNames,
    pub sqlite: SqliteSettings,
    pub supervisor: SupervisorSettings,
}

/// How the Supervisor restarts failed children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorSettings {
    /// More restarts than this within `restart_window` stop the daemon.
    pub max_restarts: usize,
    pub restart_window: Duration,
    /// First restart delay; doubled per recent restart, capped at `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for SupervisorSettings {
    fn default() -> Self {
        Self {
            max_restarts: 5,
            restart_window: Duration::from_secs(60),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            broker_url: "nats://127.0.0.1:4222".into(),
            db_path: PathBuf::from("./event_service.db"),
            polling_interval: Duration::from_millis(5000),
            batch_size: 100,
            max_command_bytes: 64 * 1024,
            broker: BrokerNames::default(),
            sqlite: SqliteSettings::default(),
            supervisor: SupervisorSettings::default(),
        }
    }
}

/// `config.toml` as written: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    broker_url: Option<String>,
    db_path: Option<PathBuf>,
    polling_interval: Option<u64>,
    batch_size: Option<u64>,
    max_command_bytes: Option<u64>,
    #[serde(default)]
    nats: FileNats,
    #[serde(default)]
    sqlite: FileSqlite,
    #[serde(default)]
    supervisor: FileSupervisor,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNats {
    command_stream: Option<String>,
    consumer: Option<String>,
    event_stream: Option<String>,
    command_subject_prefix: Option<String>,
    event_subject_prefix: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSqlite {
    synchronous: Option<Synchronous>,
    busy_timeout_ms: Option<u64>,
    cache_kib: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSupervisor {
    max_restarts: Option<usize>,
    restart_window_ms: Option<u64>,
    min_backoff_ms: Option<u64>,
    max_backoff_ms: Option<u64>,
}

impl Config {
    /// Reads `path` (defaults when it does not exist), then applies the process environment.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with_env(path, |name| std::env::var(name).ok())
    }

    /// [`Config::load`] with the environment given as a function, so tests need not touch the
    /// process environment.
    pub fn load_with_env(
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file = match std::fs::read_to_string(path) {
            Ok(text) => Self::parse_file(path, &text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileConfig::default(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let mut config = Self::from_file(file)?;
        config.apply_env(env)?;
        config.validate()?;
        Ok(config)
    }

    fn parse_file(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    fn from_file(file: FileConfig) -> Result<Self, ConfigError> {
        let d = Config::default();
        let ms = Duration::from_millis;
        let broker = BrokerNames {
            command_stream: file.nats.command_stream.unwrap_or(d.broker.command_stream),
            consumer: file.nats.consumer.unwrap_or(d.broker.consumer),
            event_stream: file.nats.event_stream.unwrap_or(d.broker.event_stream),
            subjects: Subjects::new(
                file.nats
                    .command_subject_prefix
                    .as_deref()
                    .unwrap_or(crate::domain::subjects::DEFAULT_COMMAND_PREFIX),
                file.nats
                    .event_subject_prefix
                    .as_deref()
                    .unwrap_or(crate::domain::subjects::DEFAULT_EVENT_PREFIX),
            ),
        };
        Ok(Config {
            broker_url: file.broker_url.unwrap_or(d.broker_url),
            db_path: file.db_path.unwrap_or(d.db_path),
            polling_interval: file.polling_interval.map(ms).unwrap_or(d.polling_interval),
            batch_size: match file.batch_size {
                Some(n) => usize::try_from(n).map_err(|e| invalid("batch_size", e))?,
                None => d.batch_size,
            },
            max_command_bytes: match file.max_command_bytes {
                Some(n) => usize::try_from(n).map_err(|e| invalid("max_command_bytes", e))?,
                None => d.max_command_bytes,
            },
            broker,
            sqlite: SqliteSettings {
                synchronous: file.sqlite.synchronous.unwrap_or(d.sqlite.synchronous),
                busy_timeout: file
                    .sqlite
                    .busy_timeout_ms
                    .map(ms)
                    .unwrap_or(d.sqlite.busy_timeout),
                cache_kib: file.sqlite.cache_kib.unwrap_or(d.sqlite.cache_kib),
            },
            supervisor: SupervisorSettings {
                max_restarts: file
                    .supervisor
                    .max_restarts
                    .unwrap_or(d.supervisor.max_restarts),
                restart_window: file
                    .supervisor
                    .restart_window_ms
                    .map(ms)
                    .unwrap_or(d.supervisor.restart_window),
                min_backoff: file
                    .supervisor
                    .min_backoff_ms
                    .map(ms)
                    .unwrap_or(d.supervisor.min_backoff),
                max_backoff: file
                    .supervisor
                    .max_backoff_ms
                    .map(ms)
                    .unwrap_or(d.supervisor.max_backoff),
            },
        })
    }

    fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(url) = env(ENV_BROKER_URL) {
            self.broker_url = url;
        }
        if let Some(path) = env(ENV_DB_PATH) {
            self.db_path = PathBuf::from(path);
        }
        if let Some(text) = env(ENV_POLLING_INTERVAL) {
            let millis: u64 = text.trim().parse().map_err(|e| {
                invalid(
                    ENV_POLLING_INTERVAL,
                    format!("{text:?} is not milliseconds: {e}"),
                )
            })?;
            self.polling_interval = Duration::from_millis(millis);
        }
        if let Some(text) = env(ENV_BATCH_SIZE) {
            self.batch_size = text
                .trim()
                .parse()
                .map_err(|e| invalid(ENV_BATCH_SIZE, format!("{text:?} is not a count: {e}")))?;
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.broker_url.trim().is_empty() {
            return Err(invalid("broker_url", "must not be empty"));
        }
        if self.db_path.as_os_str().is_empty() {
            return Err(invalid("db_path", "must not be empty"));
        }
        if self.polling_interval < Duration::from_millis(10) {
            return Err(invalid(
                "polling_interval",
                format!("{:?} is below the 10 ms minimum", self.polling_interval),
            ));
        }
        if !(1..=10_000).contains(&self.batch_size) {
            return Err(invalid(
                "batch_size",
                format!("{} is outside 1–10000", self.batch_size),
            ));
        }
        if self.max_command_bytes < 256 {
            return Err(invalid("max_command_bytes", "must be at least 256"));
        }
        for (setting, name) in [
            ("nats.command_stream", &self.broker.command_stream),
            ("nats.event_stream", &self.broker.event_stream),
            ("nats.consumer", &self.broker.consumer),
        ] {
            check_tenant_id(name).map_err(|_| {
                invalid(
                    setting,
                    format!("{name:?} must be letters, digits, '_' or '-'"),
                )
            })?;
        }
        if self.supervisor.min_backoff > self.supervisor.max_backoff {
            return Err(invalid(
                "supervisor.min_backoff_ms",
                "must not exceed supervisor.max_backoff_ms",
            ));
        }
        Ok(())
    }
}

fn invalid(setting: &'static str, message: impl ToString) -> ConfigError {
    ConfigError::Invalid {
        setting,
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(file: Option<&str>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        if let Some(text) = file {
            std::fs::write(&path, text).unwrap();
        }
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load_with_env(&path, |k| env.get(k).cloned())
    }

    #[test]
    fn missing_file_means_defaults() {
        assert_eq!(load(None, &[]).unwrap(), Config::default());
    }

    #[test]
    fn the_shipped_config_file_parses_to_the_defaults() {
        let text = include_str!("../config.toml");
        assert_eq!(load(Some(text), &[]).unwrap(), Config::default());
    }

    #[test]
    fn environment_overrides_the_file() {
        let config = load(
            Some("batch_size = 7\npolling_interval = 1000\n"),
            &[
                (ENV_BATCH_SIZE, "9"),
                (ENV_POLLING_INTERVAL, "250"),
                (ENV_DB_PATH, "/tmp/x.db"),
                (ENV_BROKER_URL, "nats://10.0.0.1:4222"),
            ],
        )
        .unwrap();
        assert_eq!(config.batch_size, 9);
        assert_eq!(config.polling_interval, Duration::from_millis(250));
        assert_eq!(config.db_path, PathBuf::from("/tmp/x.db"));
        assert_eq!(config.broker_url, "nats://10.0.0.1:4222");
    }

    #[test]
    fn invalid_values_name_the_setting() {
        let err = load(None, &[(ENV_BATCH_SIZE, "lots")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("TIMER_BATCH_SIZE"), "{err}");
        let err = load(Some("batch_size = 0"), &[]).unwrap_err().to_string();
        assert!(err.contains("batch_size"), "{err}");
        let err = load(Some("polling_interval = \"soon\""), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("polling_interval"), "{err}");
        let err = load(Some("[sqlite]\nsynchronous = \"SOMETIMES\""), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("synchronous"), "{err}");
        let err = load(Some("no_such_key = 1"), &[]).unwrap_err().to_string();
        assert!(err.contains("no_such_key"), "{err}");
    }
}
