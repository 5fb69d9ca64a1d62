//! Keeping secrets out of logs, metrics and error messages (docs/CONTRACT.md §7): one function that
//! masks the credentials a URL may carry, used wherever a broker or database URL is shown, and a
//! string type for passwords and tokens whose `Debug` never shows the value.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// `url` as it may be shown: the password of `scheme://user:password@host`, a NATS token
/// (`nats://token@host`) and the value of a query parameter naming a secret
/// (`?password=…`, `sslpassword=…`, `token=…`) become `***`. Several comma-separated URLs (a
/// NATS cluster) are masked one by one. Text that does not parse as a URL is masked where it
/// looks like one rather than shown: a doubt costs a few characters of a log line, never a
/// password.
pub fn redact_url(url: &str) -> String {
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    // The last `@` ends the credentials: a password may hold an unencoded `@`, `/` or `?`, and
    // taking too much as credentials only hides more.
    let (userinfo, host_and_more) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    if let Some(userinfo) = userinfo {
        match userinfo.split_once(':') {
            Some((user, _password)) => {
                out.push_str(user);
                out.push(':');
                out.push_str(MASK);
            }
            // A lone user name is no secret to PostgreSQL; NATS reads it as a token.
            None if scheme.to_ascii_lowercase().starts_with("postgres") => out.push_str(userinfo),
            None => out.push_str(MASK),
        }
        out.push('@');
    }
    match host_and_more.split_once('?') {
        None => out.push_str(host_and_more),
        Some((before, query)) => {
            out.push_str(before);
            out.push('?');
            let (query, fragment) = match query.split_once('#') {
                Some((query, fragment)) => (query, Some(fragment)),
                None => (query, None),
            };
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if is_secret_key(key) => format!("{key}={MASK}"),
                    _ => param.to_owned(),
                })
                .collect();
            out.push_str(&params.join("&"));
            if let Some(fragment) = fragment {
                out.push('#');
                out.push_str(fragment);
            }
        }
    }
    out
}

/// Query parameters whose value is (or may be) a secret.
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "pwd", "token", "secret", "key", "credential"]
        .iter()
        .any(|word| key.contains(word))
}

/// A password or token from the configuration: read and compared like a string, but its
/// `Debug` (a `Config` logged with `{:?}`) shows `***`, and it has no `Display`, so it reaches a
/// log line only through [`Secret::expose`].
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl<'de> Deserialize<'de> for Secret {
    /// A string; anything else is refused without quoting it (serde's own message would show
    /// the value).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Secret;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Secret, E> {
                Ok(Secret(value.to_owned()))
            }

            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Secret, E> {
                Err(E::custom(NOT_TEXT))
            }

            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Secret, E> {
                Err(E::custom(NOT_TEXT))
            }

            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Secret, E> {
                Err(E::custom(NOT_TEXT))
            }

            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Secret, E> {
                Err(E::custom(NOT_TEXT))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

const NOT_TEXT: &str = "must be a string (in quotes); the value is not shown";

impl Secret {
    /// The value itself, for the one place that needs it: authenticating.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

/// The configuration as logged at the start: every URL masked ([`redact_url`]), every secret a
/// [`Secret`].
impl fmt::Debug for super::Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Taken apart field by field, so that a new field cannot be left out unnoticed.
        let Self {
            broker_url,
            db_path,
            database_url,
            polling_interval,
            batch_size,
            max_command_bytes,
            max_data_bytes,
            max_data_depth,
            max_data_number_chars,
            name,
            claim_lease,
            nats,
            sqlite,
            postgres,
            supervisor,
            http,
            log,
            retention,
            quotas,
            metrics,
            api,
            console,
        } = self;
        f.debug_struct("Config")
            .field("broker_url", &redact_url(broker_url))
            .field("db_path", db_path)
            .field("database_url", &database_url.as_deref().map(redact_url))
            .field("polling_interval", polling_interval)
            .field("batch_size", batch_size)
            .field("max_command_bytes", max_command_bytes)
            .field("max_data_bytes", max_data_bytes)
            .field("max_data_depth", max_data_depth)
            .field("max_data_number_chars", max_data_number_chars)
            .field("name", name)
            .field("claim_lease", claim_lease)
            .field("nats", nats)
            .field("sqlite", sqlite)
            .field("postgres", postgres)
            .field("supervisor", supervisor)
            .field("http", http)
            .field("log", log)
            .field("retention", retention)
            .field("quotas", quotas)
            .field("metrics", metrics)
            .field("api", api)
            .field("console", console)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_are_masked() {
        let cases = [
            ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
            ("nats://svc:s3cret@nats:4222", "nats://svc:***@nats:4222"),
            ("nats://t0ken@nats:4222", "nats://***@nats:4222"),
            ("svc:s3cret@nats:4222", "svc:***@nats:4222"),
            (
                "nats://a:x@n1:4222, nats://a:x@n2:4222",
                "nats://a:***@n1:4222, nats://a:***@n2:4222",
            ),
            (
                "postgres://app:s3cret@db:5432/timers",
                "postgres://app:***@db:5432/timers",
            ),
            (
                "postgres://app@db/timers?password=s3cret&sslmode=require",
                "postgres://app@db/timers?password=***&sslmode=require",
            ),
            (
                "postgresql://db/timers?sslmode=require&sslpassword=s3cret#x",
                "postgresql://db/timers?sslmode=require&sslpassword=***#x",
            ),
            // Unencoded `@`, `/` and `?` in a password: hidden with it, never shown.
            (
                "postgres://app:s3@c/r?t@db/timers",
                "postgres://app:***@db/timers",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("s3"), "{url}");
        }
    }

    #[test]
    fn a_secret_debugs_as_a_mask() {
        let secret = Secret::from("s3cret");
        assert_eq!(format!("{secret:?}"), MASK);
        assert_eq!(format!("{:?}", Some(secret.clone())), "Some(***)");
        assert_eq!(secret.expose(), "s3cret");
    }
}
