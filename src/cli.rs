//! `timer-service timers …`: schedule, look up, list, cancel and count timers of a running
//! service, over NATS and the public contract only (it works against any deployment). Tables
//! for people by default, the API's JSON with `--json`.

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::client::{ClientError, TimerClient};
use crate::config::Secret;
use crate::domain::subjects::{DEFAULT_API_PREFIX, DEFAULT_COMMAND_PREFIX, DEFAULT_EVENT_PREFIX};
use crate::domain::timestamp::format_utc;
use crate::domain::{ScheduleTimerPayload, Subjects, TimerData};

mod connect;
mod print;
mod schedule_many;

use connect::connect;
use print::{print_json, print_table, print_timer};

#[derive(Debug, Args)]
pub struct TimersArgs {
    /// NATS server(s) of the deployment (several: comma-separated).
    #[arg(
        long,
        env = "TIMER_BROKER_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub server: String,
    /// Print the service's JSON replies instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// NATS credentials file (JWT + nkey) of the user to act as.
    #[arg(long, env = "TIMER_NATS_CREDENTIALS")]
    pub creds: Option<PathBuf>,
    /// File holding the nkey seed (`SU…`) of the user to act as.
    #[arg(long, env = "TIMER_NATS_NKEY_SEED")]
    pub nkey_seed: Option<PathBuf>,
    /// NATS user (with --password).
    #[arg(long, env = "TIMER_NATS_USER", requires = "password")]
    pub user: Option<String>,
    /// NATS password. Prefer the environment variable: any user on the machine can read a
    /// command line.
    #[arg(
        long,
        env = "TIMER_NATS_PASSWORD",
        hide_env_values = true,
        requires = "user"
    )]
    pub password: Option<Secret>,
    /// NATS token. Prefer the environment variable: any user on the machine can read a command
    /// line.
    #[arg(long, env = "TIMER_NATS_TOKEN", hide_env_values = true)]
    pub token: Option<Secret>,
    /// CA certificate to trust the server with (PEM); turns TLS on.
    #[arg(long, env = "TIMER_NATS_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key for mutual TLS (PEM).
    #[arg(long, env = "TIMER_NATS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, env = "TIMER_NATS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Inbox prefix for replies; a tenant's user is often only allowed its own
    /// (`_INBOX.acme`), so that no tenant can read another's replies.
    #[arg(long, default_value = "_INBOX")]
    pub inbox_prefix: String,
    /// Subject prefix of the commands (`[nats] command_subject_prefix`).
    #[arg(long, default_value = DEFAULT_COMMAND_PREFIX)]
    pub command_prefix: String,
    /// Subject prefix of the API (`[nats] api_subject_prefix`).
    #[arg(long, default_value = DEFAULT_API_PREFIX)]
    pub api_prefix: String,
    #[command(subcommand)]
    pub command: TimersCommand,
}

#[derive(Debug, Subcommand)]
pub enum TimersCommand {
    /// Schedule a timer (publishes a ScheduleTimer command; it fires DueTimeReached at dueAt).
    Schedule {
        /// The tenant (tenantId) the timer belongs to.
        #[arg(long)]
        tenant: String,
        /// The timer's serviceCallId: one timer per (tenant, id); scheduling again reschedules.
        #[arg(long)]
        id: String,
        /// When it fires, RFC 3339 with a zone (2026-11-22T10:00:00Z).
        #[arg(long, conflicts_with = "delay", required_unless_present = "delay")]
        at: Option<String>,
        /// When it fires, from now (30s, 15m, 2h, 7d).
        #[arg(long = "in", value_name = "DURATION", value_parser = humantime::parse_duration)]
        delay: Option<Duration>,
        /// Correlation id the timer carries (generated when left out).
        #[arg(long)]
        correlation_id: Option<String>,
        /// JSON the timer carries and its DueTimeReached echoes (`'{"order":42}'`).
        #[arg(long, value_parser = parse_data)]
        data: Option<TimerData>,
        /// How late it may still fire, as an ISO 8601 duration (PT15M, P1D): later, it
        /// publishes TimerExpired instead of DueTimeReached.
        #[arg(long, value_name = "DURATION")]
        expire_after: Option<String>,
    },
    /// Schedule many timers of one tenant from a file of JSON lines, one timer each
    /// (`{"serviceCallId":"sc-7","dueAt":"2026-11-22T10:00:00Z"}`, with `correlationId`,
    /// `data`, `expireAfter` as in ScheduleTimer), published as ScheduleTimers messages in the
    /// file's order. The service checks each message whole: one it rejects is reported on
    /// `timer.evt.rejected.<tenant>`, not here.
    ScheduleMany {
        /// The tenant (tenantId) the timers belong to.
        #[arg(long)]
        tenant: String,
        /// The file of timers; `-` reads standard input.
        #[arg(long)]
        file: PathBuf,
        /// Correlation id of the messages: the timers without their own carry it.
        #[arg(long)]
        correlation_id: Option<String>,
        /// Most timers in one message, 1–1000.
        #[arg(long, default_value_t = 1000,
              value_parser = clap::value_parser!(u16).range(1..=1000))]
        per_message: u16,
        /// Most bytes in one message: the service's `max_command_bytes`.
        #[arg(long, default_value_t = 64 * 1024)]
        max_bytes: usize,
    },
    /// Show one timer.
    Get {
        /// The tenant (tenantId) the timer belongs to.
        #[arg(long)]
        tenant: String,
        /// The timer's serviceCallId.
        #[arg(long)]
        id: String,
    },
    /// List timers in (dueAt, id) order, a page at a time (or --all).
    List {
        /// The tenant (tenantId) the timer belongs to.
        #[arg(long)]
        tenant: String,
        /// Scheduled, Reached, Cancelled or Expired.
        #[arg(long)]
        state: Option<String>,
        /// The timers of one request trace.
        #[arg(long)]
        correlation_id: Option<String>,
        /// Due at or after this instant (RFC 3339).
        #[arg(long)]
        due_from: Option<String>,
        /// Due before this instant (RFC 3339).
        #[arg(long)]
        due_to: Option<String>,
        /// Timers per page, 1–1000.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Continue after this cursor (printed as "next" by the previous page).
        #[arg(long)]
        after: Option<String>,
        /// Follow the cursor to the last page.
        #[arg(long)]
        all: bool,
    },
    /// Cancel a pending timer, or with --all every pending timer matching the filters given
    /// (of a correlation id, due in a range; none: all of the tenant's); answers once applied.
    Cancel {
        /// The tenant (tenantId) the timer belongs to.
        #[arg(long)]
        tenant: String,
        /// The timer's serviceCallId.
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Cancel many: every pending timer matching the filters (a CancelTimers).
        #[arg(long)]
        all: bool,
        /// With --all: the timers of this correlation id.
        #[arg(long, requires = "all")]
        correlation_id: Option<String>,
        /// With --all: the timers due at or after this instant (RFC 3339).
        #[arg(long, requires = "all")]
        due_from: Option<String>,
        /// With --all: the timers due before this instant (RFC 3339).
        #[arg(long, requires = "all")]
        due_to: Option<String>,
        /// With --all: count the timers it would cancel, and cancel none.
        #[arg(long, requires = "all")]
        dry_run: bool,
    },
    /// Count a tenant's pending and overdue timers, and show the next dueAt.
    Stats {
        /// The tenant (tenantId) the timer belongs to.
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot connect to {server}: {message}")]
    Connect { server: String, message: String },
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{0}")]
    Usage(String),
    /// A `schedule-many` cut short: what went out stays published.
    #[error(
        "{published} of {messages} messages published (the file's first {timers} timers) \
         before: {source}"
    )]
    Partly {
        published: usize,
        messages: usize,
        timers: usize,
        source: ClientError,
    },
}

/// Runs one `timers` command, printing its result to stdout.
pub async fn run(args: TimersArgs) -> Result<(), CliError> {
    let client = TimerClient::new(
        connect(&args).await?,
        Subjects::new(&args.command_prefix, DEFAULT_EVENT_PREFIX, &args.api_prefix),
    );
    let json = args.json;
    match args.command {
        TimersCommand::Schedule {
            tenant,
            id,
            at,
            delay,
            correlation_id,
            data,
            expire_after,
        } => {
            let due_at = match (at, delay) {
                (Some(at), _) => at,
                (None, Some(delay)) => format_utc(
                    Utc::now()
                        + chrono::Duration::from_std(delay)
                            .map_err(|e| CliError::Usage(e.to_string()))?,
                ),
                (None, None) => return Err(CliError::Usage("give --at or --in".into())),
            };
            let mut payload = ScheduleTimerPayload::new(&tenant, &id, &due_at);
            payload.correlation_id = correlation_id;
            payload.data = data;
            payload.expire_after = expire_after;
            let seq = client.schedule_timer(payload).await?;
            if json {
                print_json(
                    &json!({ "tenantId": tenant, "serviceCallId": id, "dueAt": due_at, "sequence": seq }),
                );
            } else {
                println!("scheduled {tenant}/{id} at {due_at} (command stream sequence {seq})");
            }
        }
        TimersCommand::ScheduleMany {
            tenant,
            file,
            correlation_id,
            per_message,
            max_bytes,
        } => {
            let room = schedule_many::room(&tenant, correlation_id.as_deref(), max_bytes);
            let messages = schedule_many::read(&file, per_message.into(), room)?;
            schedule_many::publish(&client, &tenant, messages, correlation_id.as_deref(), json)
                .await?;
        }
        TimersCommand::Get { tenant, id } => {
            let timer = client.get(&tenant, &id).await?;
            if json {
                print_json(&json!({ "timer": timer }));
            } else {
                print_timer(&timer);
            }
        }
        TimersCommand::List {
            tenant,
            state,
            correlation_id,
            due_from,
            due_to,
            limit,
            mut after,
            all,
        } => {
            let mut rows = Vec::new();
            loop {
                let mut query = json!({ "limit": limit });
                for (key, value) in [
                    ("state", &state),
                    ("correlationId", &correlation_id),
                    ("dueFrom", &due_from),
                    ("dueTo", &due_to),
                    ("after", &after),
                ] {
                    if let Some(value) = value {
                        query[key] = json!(value);
                    }
                }
                let page = client.list(&tenant, query).await?;
                rows.extend(page.timers);
                after = page.next;
                if !all || after.is_none() {
                    break;
                }
            }
            if json {
                let mut reply = json!({ "timers": rows });
                if let Some(next) = &after {
                    reply["next"] = json!(next);
                }
                print_json(&reply);
            } else {
                print_table(&rows);
                if let Some(next) = after {
                    println!("more: --after '{next}'");
                }
            }
        }
        TimersCommand::Cancel {
            tenant,
            id: None,
            correlation_id,
            due_from,
            due_to,
            dry_run,
            ..
        } => {
            let mut request = json!({ "dryRun": dry_run });
            for (key, value) in [
                ("correlationId", &correlation_id),
                ("dueFrom", &due_from),
                ("dueTo", &due_to),
            ] {
                if let Some(value) = value {
                    request[key] = json!(value);
                }
            }
            if correlation_id.is_none() && due_from.is_none() && due_to.is_none() {
                request["all"] = json!(true);
            }
            let reply = client.cancel_many(&tenant, request).await?;
            if json {
                print_json(&json!({ "count": reply.count, "dryRun": reply.dry_run }));
            } else if reply.dry_run {
                println!(
                    "{tenant}: {} pending timers would be cancelled",
                    reply.count
                );
            } else {
                println!("{tenant}: {} timers cancelled", reply.count);
            }
        }
        TimersCommand::Cancel {
            tenant,
            id: Some(id),
            ..
        } => {
            let reply = client.cancel(&tenant, &id).await?;
            if json {
                print_json(&json!({ "outcome": reply.outcome, "timer": reply.timer }));
            } else {
                println!("{tenant}/{id}: {}", reply.outcome.replace('_', " "));
                if let Some(timer) = &reply.timer {
                    print_timer(timer);
                }
            }
        }
        TimersCommand::Stats { tenant } => {
            let stats = client.stats(&tenant).await?;
            if json {
                print_json(
                    &json!({ "scheduled": stats.scheduled, "overdue": stats.overdue, "nextDueAt": stats.next_due_at }),
                );
            } else {
                println!("tenant     {tenant}");
                println!("scheduled  {}", stats.scheduled);
                println!("overdue    {}", stats.overdue);
                println!("next due   {}", stats.next_due_at.as_deref().unwrap_or("-"));
            }
        }
    }
    Ok(())
}

/// `--data`: any JSON value.
fn parse_data(text: &str) -> Result<TimerData, String> {
    serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))
}
