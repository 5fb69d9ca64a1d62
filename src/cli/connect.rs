//! The connection of `timers …` to the deployment's NATS.

use std::time::Duration;

use super::{CliError, TimersArgs};
use crate::config::{NatsSettings, redact_url};
use crate::nats::connection::{ConnectError, connect_options};

/// Connects as the user the flags (or their environment variables, the daemon's names) name,
/// else as the one written in the server URL; fails at once when the server cannot be reached
/// (a person is waiting), unlike the daemon, which waits for its broker.
pub(super) async fn connect(args: &TimersArgs) -> Result<async_nats::Client, CliError> {
    let failed = |message: String| CliError::Connect {
        server: redact_url(&args.server),
        message,
    };
    let settings = NatsSettings {
        credentials: args.creds.clone(),
        nkey_seed: args.nkey_seed.clone(),
        user: args.user.clone(),
        password: args.password.clone(),
        token: args.token.clone(),
        tls_ca: args.tls_ca.clone(),
        tls_cert: args.tls_cert.clone(),
        tls_key: args.tls_key.clone(),
        ..NatsSettings::default()
    };
    let (servers, options) =
        connect_options(&args.server, &settings)
            .await
            .map_err(|e| match e {
                // A person reads this: "credentials <path>", as the flag is named.
                ConnectError::File { what, path, source } => {
                    let what = what.strip_suffix(" file").unwrap_or(what);
                    failed(format!("{what} {path}: {source}"))
                }
                other => failed(other.to_string()),
            })?;
    options
        .name("timer-service timers")
        .custom_inbox_prefix(&args.inbox_prefix)
        .connection_timeout(Duration::from_secs(5))
        .connect(servers)
        .await
        .map_err(|e| failed(e.to_string()))
}
