//! The `timer-service` binary: parse arguments, set up logging, hand over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use timer_service::cli::{self, TimersArgs};
use timer_service::config::LogFormat;
use timer_service::lines as cli_lines;
use timer_service::{Config, DaemonError, telemetry};

/// The daemon allocates and frees many small buffers per batch (JSON, SQL values, broker
/// messages); mimalloc handles that churn markedly faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Durable timer daemon: ScheduleTimer in over NATS JetStream, DueTimeReached out at dueAt.",
    long_about = "Durable timer daemon: ScheduleTimer in over NATS JetStream, DueTimeReached out at \
dueAt.\n\nWithout a command it runs the daemon. `timers` talks to a running service as a client."
)]
struct Cli {
    /// Configuration file; a missing file means defaults. Environment variables override it.
    #[arg(long, global = true, default_value = "./config.toml")]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon (the default): store timers, fire them, answer the query API.
    Run,
    /// Create or update the database schema, then exit; with `--to`, undo the migrations
    /// after one instead (before starting an earlier release: docs/operations.md, "Rollback").
    Migrate {
        /// The last migration to keep (an earlier release's newest); every one applied after it
        /// is undone, newest first, and what it added is lost.
        #[arg(long)]
        to: Option<String>,
    },
    /// Schedule, look up, list, cancel and count timers of a running service (over NATS).
    Timers(Box<TimersArgs>),
    /// Copy the SQLite database to a new file, consistently, while the daemon runs (it reads
    /// the daemon's configuration to find the file). On PostgreSQL use pg_dump.
    Backup {
        /// The file to write; it must not exist.
        #[arg(long)]
        to: PathBuf,
    },
    /// Show or change the lines of the command stream (`lines set 1` before a rollback to a
    /// release without lines).
    #[command(subcommand)]
    Lines(cli_lines::LinesCommand),
    /// Write the JSON Schemas of every message and API request and reply, then exit.
    Schema {
        /// Directory to write them in (created if missing); the repository keeps them in schema/.
        #[arg(long, default_value = "schema")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(Command::Timers(args)) = cli.command {
        return match runtime.block_on(cli::run(*args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(Command::Schema { out }) = &cli.command {
        return match timer_service::schemas::write(out) {
            Ok(files) => {
                println!("wrote {} schemas to {}", files.len(), out.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot write the schemas to {}: {e}", out.display());
                ExitCode::FAILURE
            }
        };
    }
    let loaded = match Config::load(&cli.config) {
        Ok(loaded) => loaded,
        Err(e) => {
            // The log format is a setting too: this one error goes out as text.
            telemetry::init_logs(LogFormat::Text);
            tracing::error!(error = %e, "invalid configuration");
            return ExitCode::from(2);
        }
    };
    let config = loaded.config;
    telemetry::init_logs(config.log.format);
    for warning in &loaded.warnings {
        warning.log();
    }
    if let Some(Command::Backup { to }) = &cli.command {
        // A SIGINT or SIGTERM drops the backup, and with it its temporary file: an
        // interrupted backup leaves nothing behind.
        let finished = runtime.block_on(async {
            let interrupted = shutdown_signal();
            tokio::select! {
                result = backup(&config, to) => Some(result),
                () = interrupted => None,
            }
        });
        return match finished {
            Some(Ok(())) => ExitCode::SUCCESS,
            Some(Err(e)) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
            None => {
                eprintln!(
                    "error: the backup was interrupted: nothing was written to {}",
                    to.display()
                );
                ExitCode::from(130)
            }
        };
    }
    if let Some(Command::Lines(command)) = cli.command {
        return match runtime.block_on(cli_lines::run(&config, command)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let command = cli.command.unwrap_or(Command::Run);
    // The daemon's spans, exported when the standard OTLP variables ask for it (on threads of
    // the exporter's own).
    let exporter = match &command {
        Command::Run => match spans_exporter(&config) {
            Ok(exporter) => exporter,
            Err(code) => return code,
        },
        _ => None,
    };
    let result = runtime.block_on(async {
        match command {
            Command::Run => match timer_service::run(config, &cli.config, shutdown_signal()).await {
                // Another live daemon holds the name: a setting to change, like a bad one.
                Err(e @ DaemonError::NameHeld { .. }) => {
                    tracing::error!(error = %e, "timer-service cannot start");
                    return Err(ExitCode::from(2));
                }
                result => result.map_err(anyhow::Error::from),
            },
            Command::Migrate { to: None } => {
                let database = timer_service::storage::db::DatabaseTarget::of(&config);
                timer_service::storage::db::migrate_with(&database, &config.postgres)
                    .await
                    .map(|()| tracing::info!(database = %database.describe(), "database schema is up to date"))
                    .map_err(anyhow::Error::from)
            }
            Command::Migrate { to: Some(to) } => {
                let database = timer_service::storage::db::DatabaseTarget::of(&config);
                timer_service::storage::downgrade::migrate_down_to(&database, &to)
                    .await
                    .map(|undone| tracing::info!(database = %database.describe(), undone = ?undone,
                        keep = %to, "migrations after the one kept are undone"))
                    .map_err(anyhow::Error::from)
            }
            Command::Timers(_)
            | Command::Backup { .. }
            | Command::Schema { .. }
            | Command::Lines(_) => Ok(()),
        }
        .map_err(|e| {
            tracing::error!(error = %e, "timer-service failed");
            ExitCode::FAILURE
        })
    });
    if let Some(exporter) = exporter {
        exporter.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// The OTLP exporter of the daemon's spans, when `OTEL_EXPORTER_OTLP_ENDPOINT` asks for one; a
/// setting it cannot follow stops the start, as an invalid configuration does.
fn spans_exporter(config: &Config) -> Result<Option<telemetry::spans::Exporter>, ExitCode> {
    let database = timer_service::storage::db::DatabaseTarget::of(config).system_name();
    // The process's instance id, which the daemon logs with its name once it has taken it: the
    // name itself may be generated later, and several daemons on one host share the host name.
    let instance = timer_service::storage::daemons::instance();
    match telemetry::spans::install(instance, database) {
        Ok(Some(exporter)) => {
            tracing::info!(endpoint = exporter.endpoint(), "exporting spans over OTLP");
            Ok(Some(exporter))
        }
        Ok(None) => Ok(None),
        Err(e) => {
            tracing::error!(error = %e, "invalid tracing settings");
            Err(ExitCode::from(2))
        }
    }
}

/// `timer-service backup`: the copy, and one line saying what it holds.
async fn backup(
    config: &Config,
    to: &std::path::Path,
) -> Result<(), timer_service::storage::backup::BackupError> {
    let database = timer_service::storage::db::DatabaseTarget::of(config);
    let report = timer_service::storage::backup::backup(&database, to).await?;
    println!(
        "backed up {} to {}: {} timers ({} pending), {:.1} MB, copied in {:.2} s ({:.2} s in all)",
        database.describe(),
        report.to.display(),
        report.timers,
        report.pending,
        report.bytes as f64 / 1e6,
        report.copy.as_secs_f64(),
        report.total.as_secs_f64(),
    );
    Ok(())
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C). The handlers are installed when this is called, not
/// when the future is first polled (after start-up): a SIGTERM that comes while the daemon is
/// starting then stops it gracefully once it runs, instead of killing it with the signal's
/// default action.
fn shutdown_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!("cannot listen for signals; stop the daemon with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!(signal = "SIGTERM", "stop requested"),
            _ = int.recv() => tracing::info!(signal = "SIGINT", "stop requested"),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
