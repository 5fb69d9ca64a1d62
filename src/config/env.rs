//! How the environment maps onto the configuration: `TIMER_<SECTION>_<KEY>` to a key path,
//! settings read as text, the names of unknown variables, and errors that name their source.

use figment::providers::Env;
use figment::value::{Dict, Map, UncasedStr, Value};
use figment::{Metadata, Profile, Provider};

use super::ENV_PREFIX;

/// The sections of `config.toml`; an environment variable `TIMER_<SECTION>_<KEY>` sets `<KEY>`
/// in `[<section>]`, anything else a top-level key.
const SECTIONS: &[&str] = &[
    "nats",
    "sqlite",
    "postgres",
    "supervisor",
    "http",
    "log",
    "retention",
    "quotas",
    "metrics",
    "api",
    "console",
];

/// One line per problem, each naming the key and where its value came from: the file, or the
/// environment variable by its full name.
pub(super) fn describe(error: figment::Error) -> String {
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
pub(super) fn env_key(key: &UncasedStr) -> figment::value::Uncased<'_> {
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
pub(super) fn unknown_env_key(error: &figment::Error) -> Option<String> {
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
/// reads `007` as the number 7 and `true` as a boolean, which a user name or password is not,
/// nor a tenant id; `quotas.tenants` is text its setting parses itself.
const TEXT_SETTINGS: &[&str] = &[
    "nats.user",
    "nats.password",
    "nats.token",
    "quotas.tenants",
    "metrics.tenants",
    "console.operator_token",
    "console.tenant_tokens",
];

pub(super) fn is_text_setting(key: &UncasedStr) -> bool {
    TEXT_SETTINGS.iter().any(|text| key == *text)
}

/// The `TIMER_*` variables of [`TEXT_SETTINGS`], as text.
pub(super) struct EnvText(pub(super) Env);

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
pub(super) fn env_variable(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.replace('.', "_").to_ascii_uppercase())
}
