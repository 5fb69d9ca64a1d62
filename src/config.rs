//! Configuration: defaults, then `config.toml`, then the environment (CONTRACT.md §2, §7).
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

use figment::providers::{Env, Format, Toml};
use figment::value::{Dict, Map, UncasedStr, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};

use crate::domain::Subjects;
use crate::domain::subjects::{DEFAULT_API_PREFIX, DEFAULT_COMMAND_PREFIX, DEFAULT_EVENT_PREFIX};
use crate::domain::tenant::check_tenant_id;
use crate::nats::BrokerNames;
use crate::persistence::SqliteSettings;

pub mod redact;
pub use redact::{Secret, redact_url};

/// Prefix of every environment variable the service reads.
pub const ENV_PREFIX: &str = "TIMER_";
/// The sections of `config.toml`; an environment variable `TIMER_<SECTION>_<KEY>` sets `<KEY>`
/// in `[<section>]`, anything else a top-level key.
const SECTIONS: &[&str] = &["nats", "sqlite", "supervisor", "http", "log", "retention"];

/// Something in the configuration worth an operator's attention that does not stop start-up.
/// Loading happens before logging is set up, so these are handed back to be logged after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigWarning {
    /// An environment variable that starts with `TIMER_` but names no setting: ignored, since
    /// the environment is not only ours (Kubernetes injects `TIMER_SERVICE_HOST`, `TIMER_PORT`…
    /// for a Service named `timer`). Only its name is kept, never its value.
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
    /// This daemon's name: in its logs and metrics, and on the timers it claims for firing.
    /// Keep it stable across restarts (a restarted daemon resumes its own claims at once) and
    /// unique among daemons sharing a database.
    pub name: String,
    /// How long a claim on a due timer holds: after a daemon dies, others fire its claimed
    /// timers once this has passed.
    #[serde(with = "duration")]
    pub claim_lease: Duration,
    pub nats: NatsSettings,
    pub sqlite: SqliteSettings,
    pub supervisor: SupervisorSettings,
    pub http: HttpSettings,
    pub log: LogSettings,
    pub retention: RetentionSettings,
}

/// `[nats]`: names of the broker objects and subjects, stream settings, authentication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsSettings {
    pub command_stream: String,
    pub consumer: String,
    pub event_stream: String,
    pub command_subject_prefix: String,
    pub event_subject_prefix: String,
    pub api_subject_prefix: String,
    /// API replies go only to subjects under this prefix (clients' inboxes), so a request cannot
    /// make the service publish on a subject its sender may not publish on.
    pub inbox_prefix: String,
    /// `max_age` of the event stream when the service creates it; zero keeps events forever.
    #[serde(with = "duration")]
    pub event_max_age: Duration,
    /// Replicas of the streams the service creates (3 on a NATS cluster).
    pub replicas: usize,
    /// A `.creds` file (JWT and nkey seed), for a server with decentralised auth.
    pub credentials: Option<PathBuf>,
    /// A file holding an nkey seed (`SU…`).
    pub nkey_seed: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<Secret>,
    pub token: Option<Secret>,
    /// CA certificate(s) to trust the server's certificate with (PEM); implies TLS.
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

impl NatsSettings {
    /// One way to authenticate at most, and files that exist.
    fn validate_auth(&self) -> Result<(), (&'static str, String)> {
        let ways = [
            self.credentials.is_some(),
            self.nkey_seed.is_some(),
            self.user.is_some() || self.password.is_some(),
            self.token.is_some(),
        ];
        if ways.iter().filter(|w| **w).count() > 1 {
            return Err((
                "nats",
                "set one of credentials, nkey_seed, user/password or token".into(),
            ));
        }
        if self.user.is_some() != self.password.is_some() {
            return Err(("nats.user", "user and password go together".into()));
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(("nats.tls_cert", "tls_cert and tls_key go together".into()));
        }
        for (setting, path) in [
            ("nats.credentials", &self.credentials),
            ("nats.nkey_seed", &self.nkey_seed),
            ("nats.tls_ca", &self.tls_ca),
            ("nats.tls_cert", &self.tls_cert),
            ("nats.tls_key", &self.tls_key),
        ] {
            if let Some(path) = path
                && !path.is_file()
            {
                return Err((
                    setting,
                    format!("{} is not a readable file", path.display()),
                ));
            }
        }
        Ok(())
    }
}

/// How the Supervisor restarts failed children.
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

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Taken apart field by field, so that a new field cannot be left out unnoticed.
        let Self {
            broker_url,
            db_path,
            database_url,
            polling_interval,
            batch_size,
            max_command_bytes,
            name,
            claim_lease,
            nats,
            sqlite,
            supervisor,
            http,
            log,
            retention,
        } = self;
        f.debug_struct("Config")
            .field("broker_url", &redact_url(broker_url))
            .field("db_path", db_path)
            .field("database_url", &database_url.as_deref().map(redact_url))
            .field("polling_interval", polling_interval)
            .field("batch_size", batch_size)
            .field("max_command_bytes", max_command_bytes)
            .field("name", name)
            .field("claim_lease", claim_lease)
            .field("nats", nats)
            .field("sqlite", sqlite)
            .field("supervisor", supervisor)
            .field("http", http)
            .field("log", log)
            .field("retention", retention)
            .finish()
    }
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
            name: host_name(),
            claim_lease: Duration::from_secs(30),
            nats: NatsSettings::default(),
            sqlite: SqliteSettings::default(),
            supervisor: SupervisorSettings::default(),
            http: HttpSettings::default(),
            log: LogSettings::default(),
            retention: RetentionSettings::default(),
        }
    }
}

impl Default for NatsSettings {
    fn default() -> Self {
        let names = BrokerNames::default();
        Self {
            command_stream: names.command_stream,
            consumer: names.consumer,
            event_stream: names.event_stream,
            command_subject_prefix: DEFAULT_COMMAND_PREFIX.into(),
            event_subject_prefix: DEFAULT_EVENT_PREFIX.into(),
            api_subject_prefix: DEFAULT_API_PREFIX.into(),
            inbox_prefix: crate::nats::api_service::DEFAULT_INBOX_PREFIX.into(),
            event_max_age: Duration::from_secs(7 * 24 * 3600),
            replicas: 1,
            credentials: None,
            nkey_seed: None,
            user: None,
            password: None,
            token: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
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

/// The machine's host name, the default daemon name; `timer-service` when it cannot be read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| check_name(name).is_ok())
        .unwrap_or_else(|| "timer-service".into())
}

/// A daemon name: 1–64 characters of `[A-Za-z0-9_.-]`.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    ok.then_some(()).ok_or_else(|| {
        format!("{name:?} must be 1–64 characters of A-Z, a-z, 0-9, '_', '-' or '.'")
    })
}

/// One line per problem, each naming the key and where its value came from: the file, or the
/// environment variable by its full name.
fn describe(error: figment::Error) -> String {
    error
        .into_iter()
        .map(|e| {
            let key = e.path.join(".").to_ascii_lowercase();
            let origin = match &e.metadata {
                Some(m) if m.name.contains("environment") => {
                    format!("{ENV_PREFIX}{}", key.replace('.', "_").to_ascii_uppercase())
                }
                Some(m) => match &m.source {
                    Some(source) => source.to_string(),
                    None => m.name.to_string(),
                },
                None => "configuration".into(),
            };
            match key.as_str() {
                "" => format!("{origin}: {}", e.kind),
                key => format!("setting {key} ({origin}): {}", e.kind),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The key path an environment variable sets: `NATS_COMMAND_STREAM` → `nats.command_stream`.
fn env_key(key: &UncasedStr) -> figment::value::Uncased<'_> {
    let lower = key.as_str().to_ascii_lowercase();
    for section in SECTIONS {
        if let Some(rest) = lower.strip_prefix(&format!("{section}_")) {
            return format!("{section}.{rest}").into();
        }
    }
    lower.into()
}

/// The key path of an unknown field, when the field came from an environment variable (an
/// unknown key in the file is an error; in the environment it is someone else's variable).
fn unknown_env_key(error: &figment::Error) -> Option<String> {
    let from_env = error
        .metadata
        .as_ref()
        .is_some_and(|m| m.name.contains("environment"));
    match &error.kind {
        figment::error::Kind::UnknownField(..) if from_env => {
            Some(error.path.join(".").to_ascii_lowercase())
        }
        _ => None,
    }
}

/// Settings whose environment variable is taken as the text it is: the environment provider
/// reads `007` as the number 7 and `true` as a boolean, which a user name or password is not.
const TEXT_SETTINGS: &[&str] = &["nats.user", "nats.password", "nats.token"];

fn is_text_setting(key: &UncasedStr) -> bool {
    TEXT_SETTINGS.iter().any(|text| key == *text)
}

/// The `TIMER_*` variables of [`TEXT_SETTINGS`], as text.
struct EnvText(Env);

impl Provider for EnvText {
    fn metadata(&self) -> Metadata {
        self.0.metadata()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        fn insert(dict: &mut Dict, path: &[&str], value: Value) {
            match path {
                [] => {}
                [last] => {
                    dict.insert((*last).to_owned(), value);
                }
                [first, rest @ ..] => {
                    let entry = dict
                        .entry((*first).to_owned())
                        .or_insert_with(|| Value::from(Dict::new()));
                    if let Value::Dict(_, inner) = entry {
                        insert(inner, rest, value);
                    }
                }
            }
        }
        let mut dict = Dict::new();
        for (key, value) in self.0.iter() {
            let path: Vec<&str> = key.as_str().split('.').collect();
            insert(&mut dict, &path, Value::from(value));
        }
        Ok(Profile::Default.collect(dict))
    }
}

/// The environment variable that sets the key path `key` (the inverse of [`env_key`]).
fn env_variable(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.replace('.', "_").to_ascii_uppercase())
}

impl Config {
    /// Reads `path` (defaults when it does not exist), then the process environment. An
    /// environment variable that names no setting is left out and reported as a warning.
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
            .map(|key| ConfigWarning::UnknownVariable(env_variable(key)))
            .collect();
        Ok(Loaded { config, warnings })
    }

    /// Where the timers are kept: PostgreSQL when `database_url` is set, else the SQLite file.
    pub fn database(&self) -> crate::persistence::db::DatabaseTarget {
        use crate::persistence::db::DatabaseTarget;
        match &self.database_url {
            Some(url) => DatabaseTarget::Postgres { url: url.clone() },
            None => DatabaseTarget::Sqlite {
                path: self.db_path.clone(),
                settings: self.sqlite.clone(),
            },
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
        }
    }

    /// The HTTP address, or `None` when HTTP is turned off.
    pub fn http_listen(&self) -> Option<SocketAddr> {
        self.http.listen.trim().parse().ok()
    }

    /// Checks what types alone cannot; the error names the setting's key path.
    fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.broker_url.trim().is_empty() {
            return Err(("broker_url", "must not be empty".into()));
        }
        if self.db_path.as_os_str().is_empty() {
            return Err(("db_path", "must not be empty".into()));
        }
        if let Some(url) = &self.database_url
            && !url.starts_with("postgres://")
            && !url.starts_with("postgresql://")
        {
            return Err((
                "database_url",
                "must be a postgres:// URL (leave it out to use the SQLite file)".into(),
            ));
        }
        if self.polling_interval < Duration::from_millis(10) {
            return Err((
                "polling_interval",
                format!("{:?} is below the 10 ms minimum", self.polling_interval),
            ));
        }
        if !(1..=10_000).contains(&self.batch_size) {
            return Err((
                "batch_size",
                format!("{} is outside 1–10000", self.batch_size),
            ));
        }
        if self.max_command_bytes < 256 {
            return Err(("max_command_bytes", "must be at least 256".into()));
        }
        check_name(&self.name).map_err(|e| ("name", e))?;
        if self.claim_lease < Duration::from_secs(1) {
            return Err(("claim_lease", "must be at least 1s".into()));
        }
        for (setting, name) in [
            ("nats.command_stream", &self.nats.command_stream),
            ("nats.event_stream", &self.nats.event_stream),
            ("nats.consumer", &self.nats.consumer),
        ] {
            check_tenant_id(name).map_err(|_| {
                (
                    setting,
                    format!("{name:?} must be letters, digits, '_' or '-'"),
                )
            })?;
        }
        for (setting, prefix) in [
            (
                "nats.command_subject_prefix",
                &self.nats.command_subject_prefix,
            ),
            ("nats.event_subject_prefix", &self.nats.event_subject_prefix),
            ("nats.api_subject_prefix", &self.nats.api_subject_prefix),
        ] {
            let ok = !prefix.is_empty()
                && prefix
                    .split('.')
                    .all(|token| !token.is_empty() && !token.contains(['*', '>', ' ']));
            if !ok {
                return Err((setting, format!("{prefix:?} is not a subject prefix")));
            }
        }
        if !(1..=5).contains(&self.nats.replicas) {
            return Err((
                "nats.replicas",
                format!("{} is outside 1–5", self.nats.replicas),
            ));
        }
        if self.supervisor.min_backoff > self.supervisor.max_backoff {
            return Err((
                "supervisor.min_backoff",
                "must not exceed supervisor.max_backoff".into(),
            ));
        }
        if !self.http.listen.trim().is_empty() && self.http_listen().is_none() {
            return Err((
                "http.listen",
                format!(
                    "{:?} is not an address like 127.0.0.1:9464",
                    self.http.listen
                ),
            ));
        }
        self.nats.validate_auth()?;
        Ok(())
    }
}

/// Durations as text (`500ms`, `30s`, `15m`, `7d`, `0`), or a bare number of milliseconds.
pub mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&humantime::format_duration(*value).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Text {
            Millis(u64),
            Text(String),
        }
        match Text::deserialize(deserializer)? {
            Text::Millis(ms) => Ok(Duration::from_millis(ms)),
            Text::Text(text) => humantime::parse_duration(text.trim()).map_err(|e| {
                D::Error::custom(format!(
                    "{text:?} is not a duration like 500ms, 30s, 15m or 7d ({e})"
                ))
            }),
        }
    }
}

#[cfg(test)]
// figment's `Jail` closures return its own (large) error type.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use figment::Jail;

    /// A config file (if any), environment variables, and words the error must contain.
    type Case<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)], &'a [&'a str]);

    fn load_in(jail: &Jail) -> Result<Config, String> {
        Config::load(&jail.directory().join("config.toml"))
            .map(|loaded| loaded.config)
            .map_err(|e| e.to_string())
    }

    /// What Kubernetes puts in the environment of every pod next to a Service named `timer`.
    const KUBERNETES_SERVICE_VARIABLES: &[(&str, &str)] = &[
        ("TIMER_SERVICE_HOST", "10.96.0.12"),
        ("TIMER_SERVICE_PORT", "4222"),
        ("TIMER_PORT", "tcp://10.96.0.12:4222"),
        ("TIMER_PORT_4222_TCP", "tcp://10.96.0.12:4222"),
        ("TIMER_PORT_4222_TCP_PROTO", "tcp"),
        ("TIMER_PORT_4222_TCP_PORT", "4222"),
        ("TIMER_PORT_4222_TCP_ADDR", "10.96.0.12"),
    ];

    #[test]
    fn unknown_environment_variables_are_ignored_and_reported_by_name() {
        Jail::expect_with(|jail| {
            for (key, value) in KUBERNETES_SERVICE_VARIABLES {
                jail.set_env(key, value);
            }
            jail.set_env("TIMER_NATS_COLOUR", "blue");
            jail.set_env("TIMER_BATCH_SIZE", "9");
            let loaded = Config::load(&jail.directory().join("config.toml")).unwrap();
            assert_eq!(loaded.config.batch_size, 9);
            let mut names: Vec<String> = loaded
                .warnings
                .iter()
                .map(|w| match w {
                    ConfigWarning::UnknownVariable(name) => name.clone(),
                })
                .collect();
            names.sort();
            let mut expected: Vec<String> = KUBERNETES_SERVICE_VARIABLES
                .iter()
                .map(|(key, _)| key.to_string())
                .chain(["TIMER_NATS_COLOUR".to_string()])
                .collect();
            expected.sort();
            assert_eq!(names, expected);
            Ok(())
        });
    }

    #[test]
    fn unknown_variables_beside_an_unknown_file_key_or_a_bad_value_still_fail() {
        let cases: &[Case] = &[
            (
                Some("[nats]\ncolour = \"blue\""),
                KUBERNETES_SERVICE_VARIABLES,
                &["nats.colour", "config.toml"],
            ),
            (
                None,
                &[
                    ("TIMER_SERVICE_HOST", "10.96.0.12"),
                    ("TIMER_BATCH_SIZE", "lots"),
                ],
                &["batch_size", "TIMER_BATCH_SIZE"],
            ),
        ];
        for (file, env, expected) in cases {
            Jail::expect_with(|jail| {
                if let Some(text) = file {
                    jail.create_file("config.toml", text)?;
                }
                for (key, value) in *env {
                    jail.set_env(key, value);
                }
                let error = load_in(jail).unwrap_err();
                for word in *expected {
                    assert!(error.contains(word), "{word:?} missing in: {error}");
                }
                Ok(())
            });
        }
    }

    #[test]
    fn missing_file_means_defaults() {
        Jail::expect_with(|jail| {
            assert_eq!(load_in(jail).unwrap(), Config::default());
            Ok(())
        });
    }

    #[test]
    fn the_shipped_config_file_parses_to_the_defaults() {
        Jail::expect_with(|jail| {
            jail.create_file("config.toml", include_str!("../config.toml"))?;
            let expected = Config {
                name: Config::default().name, // the host name
                ..Config::default()
            };
            assert_eq!(load_in(jail).unwrap(), expected);
            Ok(())
        });
    }

    #[test]
    fn every_key_can_be_set_by_environment_over_the_file() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "config.toml",
                "batch_size = 7\npolling_interval = 1000\n[http]\nlisten = \"0.0.0.0:1\"\n",
            )?;
            jail.set_env("TIMER_BATCH_SIZE", "9");
            jail.set_env("TIMER_POLLING_INTERVAL", "250");
            jail.set_env("TIMER_DB_PATH", "/tmp/x.db");
            jail.set_env("TIMER_BROKER_URL", "nats://10.0.0.1:4222");
            jail.set_env("TIMER_HTTP_LISTEN", "127.0.0.1:9999");
            jail.set_env("TIMER_NATS_COMMAND_STREAM", "CMDS");
            jail.set_env("TIMER_RETENTION_KEEP_FINISHED", "2d");
            jail.set_env("TIMER_SUPERVISOR_MAX_BACKOFF", "7s");
            jail.set_env("TIMER_CLAIM_LEASE", "45s");
            let config = load_in(jail).unwrap();
            assert_eq!(config.batch_size, 9);
            assert_eq!(config.polling_interval, Duration::from_millis(250));
            assert_eq!(config.db_path, PathBuf::from("/tmp/x.db"));
            assert_eq!(config.broker_url, "nats://10.0.0.1:4222");
            assert_eq!(config.http.listen, "127.0.0.1:9999");
            assert_eq!(config.nats.command_stream, "CMDS");
            assert_eq!(
                config.retention.keep_finished,
                Duration::from_secs(2 * 86400)
            );
            assert_eq!(config.supervisor.max_backoff, Duration::from_secs(7));
            assert_eq!(config.claim_lease, Duration::from_secs(45));
            Ok(())
        });
    }

    #[test]
    fn a_logged_config_shows_no_secret() {
        Jail::expect_with(|jail| {
            jail.set_env("TIMER_BROKER_URL", "nats://svc:url-secret@nats:4222");
            jail.set_env(
                "TIMER_DATABASE_URL",
                "postgres://app:pg-secret@db/timers?password=pg-query-secret",
            );
            jail.set_env("TIMER_NATS_USER", "svc");
            // All digits, a leading zero: read as the text it is, not as a number.
            jail.set_env("TIMER_NATS_PASSWORD", "0123456789");
            let config = load_in(jail).unwrap();
            assert_eq!(
                config.nats.password.as_ref().map(Secret::expose),
                Some("0123456789")
            );
            let shown = format!("{config:?}");
            for secret in ["url-secret", "pg-secret", "pg-query-secret", "0123456789"] {
                assert!(!shown.contains(secret), "{secret} in {shown}");
            }
            assert!(shown.contains("nats://svc:***@nats:4222"), "{shown}");
            Ok(())
        });
        Jail::expect_with(|jail| {
            jail.set_env("TIMER_NATS_TOKEN", "token-secret");
            let shown = format!("{:?}", load_in(jail).unwrap());
            assert!(!shown.contains("token-secret"), "{shown}");
            Ok(())
        });
    }

    #[test]
    fn a_password_that_is_no_string_is_refused_without_being_shown() {
        Jail::expect_with(|jail| {
            jail.create_file("config.toml", "[nats]\nuser = \"svc\"\npassword = 80211\n")?;
            let error = load_in(jail).unwrap_err();
            assert!(error.contains("nats.password"), "{error}");
            assert!(!error.contains("80211"), "{error}");
            Ok(())
        });
    }

    #[test]
    fn durations_read_as_text_or_milliseconds_and_the_old_ms_keys_still_work() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "config.toml",
                "polling_interval = \"2s\"\n[supervisor]\nrestart_window_ms = 1500\n[retention]\nkeep_finished = \"0\"\n[sqlite]\nbusy_timeout_ms = 250\n",
            )?;
            let config = load_in(jail).unwrap();
            assert_eq!(config.polling_interval, Duration::from_secs(2));
            assert_eq!(
                config.supervisor.restart_window,
                Duration::from_millis(1500)
            );
            assert_eq!(config.retention.keep_finished, Duration::ZERO);
            assert_eq!(config.sqlite.busy_timeout, Duration::from_millis(250));
            Ok(())
        });
    }

    #[test]
    fn a_bad_value_or_unknown_key_names_the_key_and_its_source() {
        let cases: &[Case] = &[
            (
                None,
                &[("TIMER_BATCH_SIZE", "lots")],
                &["batch_size", "TIMER_BATCH_SIZE"],
            ),
            (Some("batch_size = 0"), &[], &["batch_size", "config.toml"]),
            (
                None,
                &[("TIMER_BATCH_SIZE", "0")],
                &["batch_size", "TIMER_BATCH_SIZE"],
            ),
            (
                Some("polling_interval = \"soon\""),
                &[],
                &["polling_interval", "config.toml"],
            ),
            (
                Some("[sqlite]\nsynchronous = \"SOMETIMES\""),
                &[],
                &["synchronous"],
            ),
            (
                Some("no_such_key = 1"),
                &[],
                &["no_such_key", "config.toml"],
            ),
            (
                None,
                &[("TIMER_HTTP_LISTEN", "here")],
                &["http.listen", "TIMER_HTTP_LISTEN"],
            ),
            (
                None,
                &[("TIMER_LOG_FORMAT", "xml")],
                &["format", "TIMER_LOG_FORMAT"],
            ),
        ];
        for (file, env, expected) in cases {
            Jail::expect_with(|jail| {
                if let Some(text) = file {
                    jail.create_file("config.toml", text)?;
                }
                for (key, value) in *env {
                    jail.set_env(key, value);
                }
                let error = load_in(jail).unwrap_err();
                for word in *expected {
                    assert!(error.contains(word), "{word:?} missing in: {error}");
                }
                Ok(())
            });
        }
    }
}
