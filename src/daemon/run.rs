//! What `main` runs: the daemon until a stop is asked, the quotas reloaded on SIGHUP.

use std::future::Future;
use std::path::Path;

use super::{Daemon, DaemonError};
use crate::config::Config;

/// Runs the daemon until `shutdown` resolves (then stops gracefully) or until it stops on its
/// own with an error. On SIGHUP it reads `config_path` and the environment again and puts the
/// new quotas in force ([`Daemon::reload`]).
pub async fn run(
    config: Config,
    config_path: &Path,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    // Listened for from here on: SIGHUP's default action ends the process, so one sent while
    // the daemon starts must find the handler in place. It is acted on once the daemon runs.
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGHUP; quotas reload only at a restart");
            None
        }
    };
    let mut running = config.clone();
    let mut shutdown = std::pin::pin!(shutdown);
    // Start-up waits for a database that does not answer yet: a stop asked meanwhile ends it.
    let mut daemon = tokio::select! {
        daemon = Daemon::start(config) => daemon?,
        () = &mut shutdown => {
            tracing::info!("stopped during start-up");
            return Ok(());
        }
    };
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            error = daemon.stopped() => {
                tracing::error!(error = %error, "timer-service stopped on its own");
                return Err(error);
            }
            () = next_hangup(&mut hangup) => {
                tracing::info!(signal = "SIGHUP", "configuration reload requested");
                daemon.reload(config_path, &mut running);
            }
        }
    }
    daemon.shutdown().await
}

/// The next SIGHUP; never, when it cannot be listened for.
async fn next_hangup(hangup: &mut Option<tokio::signal::unix::Signal>) {
    if let Some(signal) = hangup
        && signal.recv().await.is_some()
    {
        return;
    }
    std::future::pending().await
}
