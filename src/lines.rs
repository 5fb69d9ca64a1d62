//! `timer-service lines show` and `timer-service lines set N`: the command stream's lines,
//! read and changed over the broker with the daemon's configuration (its broker, credentials
//! and names). Changing them is `nats::relayout`; the rollback to a release without lines is
//! `lines set 1` (docs/operations.md, "Rollback").

use std::time::Duration;

use clap::Subcommand;

use crate::config::{Config, redact_url};
use crate::nats::connection::connect_options;
use crate::nats::partitions::MAX_COMMAND_PARTITIONS;
use crate::nats::relayout::{self, RelayoutError};

#[derive(Debug, Subcommand)]
pub enum LinesCommand {
    /// The lines the command stream records, its transform, and each consumer's backlog.
    Show,
    /// Give the command stream N lines (1 undoes lines, for a release without them); waits
    /// until the lines it no longer has are drained by the running daemons, then deletes them.
    Set {
        /// Lines, 1 to 256.
        #[arg(value_parser = clap::value_parser!(u16).range(1..=MAX_COMMAND_PARTITIONS as i64))]
        count: u16,
        /// How long to wait for the running daemons to drain the lines that go.
        #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
        wait: Duration,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum LinesError {
    #[error("cannot connect to {server}: {message}")]
    Connect { server: String, message: String },
    #[error(transparent)]
    Relayout(#[from] RelayoutError),
}

pub async fn run(config: &Config, command: LinesCommand) -> Result<(), LinesError> {
    let failed = |message: String| LinesError::Connect {
        server: redact_url(&config.broker_url),
        message,
    };
    let (servers, options) = connect_options(&config.broker_url, &config.nats)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let client = options
        .name("timer-service lines")
        .connection_timeout(Duration::from_secs(5))
        .connect(servers)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let js = async_nats::jetstream::new(client.clone());
    let names = config.broker_names();
    match command {
        LinesCommand::Show => {
            let shown = relayout::show(&js, &names).await?;
            match shown.recorded {
                Some(count) => println!("lines: {count}"),
                None => println!("lines: none recorded"),
            }
            println!(
                "transform: {}",
                shown.transform.as_deref().unwrap_or("none")
            );
            for c in shown.consumers {
                println!(
                    "{}\tfilters {}\tpending {}\theld {}",
                    c.name,
                    c.filters.join(" "),
                    c.pending,
                    c.held
                );
            }
        }
        LinesCommand::Set { count, wait } => {
            relayout::set(&js, &names, count, wait).await?;
            println!("lines: {count}");
        }
    }
    let _ = client.drain().await;
    Ok(())
}
