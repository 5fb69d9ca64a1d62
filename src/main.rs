//! The `timer-service` binary: parse arguments, set up logging, hand over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use timer_service::Config;
use tracing_subscriber::EnvFilter;

/// The daemon allocates and frees many small buffers per batch (JSON, SQL values, broker
/// messages); mimalloc handles that churn markedly faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Durable timer daemon: ScheduleTimer in over NATS JetStream, DueTimeReached out at dueAt."
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
    /// Run the daemon (the default).
    Run,
    /// Create or update the database schema, then exit.
    Migrate,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_target(false)
        .init();
    let config = match Config::load(&cli.config) {
        Ok(config) => config,
        Err(e) => {
            tracing::error!(error = %e, "invalid configuration");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command.unwrap_or(Command::Run) {
            Command::Run => timer_service::run(config, shutdown_signal())
                .await
                .map_err(anyhow::Error::from),
            Command::Migrate => timer_service::persistence::db::migrate(&config.db_path, &config.sqlite)
                .await
                .map(|()| tracing::info!(db_path = %config.db_path.display(), "database schema is up to date"))
                .map_err(anyhow::Error::from),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "timer-service failed");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for signals; stop the daemon with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!(signal = "SIGTERM", "stop requested"),
        _ = int.recv() => tracing::info!(signal = "SIGINT", "stop requested"),
    }
}
