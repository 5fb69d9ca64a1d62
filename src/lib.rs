//! timer-service: a durable timer daemon.
//!
//! Clients send `ScheduleTimer` over NATS JetStream; the service stores each timer in SQLite and,
//! when its `dueAt` arrives, publishes `DueTimeReached` — at least once, one timer per
//! `(tenantId, serviceCallId)`, never early. `CONTRACT.md` of the project is the wire contract.
//!
//! # Layout
//!
//! - [`domain`]: messages, validation, upsert rules, subjects and timestamps. No I/O.
//! - [`ports`]: the traits the core depends on: [`ports::EventBus`], [`ports::CommandSource`],
//!   [`ports::Clock`] (their test doubles are in `tests/common/doubles.rs`).
//! - [`nats`]: the JetStream adapter, the only code that speaks to the broker.
//! - [`storage`]: the store (SeaORM, SQLite or PostgreSQL), the only code that touches the database.
//! - [`actors`]: Supervisor, Persistence, Checkpointer, CommandHandler and Poller (ractor).
//! - [`backoff`]: the retry delays.
//! - [`health`]: what the daemon knows of its own health (broker, database, actors).
//! - [`telemetry`]: metric names, the Prometheus recorder, and log formats.
//! - [`config`]: `config.toml` + `TIMER_*` environment overrides.
//! - [`client`]: a client of the public contract; [`cli`]: the `timer-service timers` commands.
//! - [`daemon`]: wiring it all together; [`run`] is what `main` calls.

pub mod actors;
pub mod backoff;
pub mod cli;
pub mod client;
pub mod config;
pub mod daemon;
pub mod domain;
pub mod health;
pub mod nats;
pub mod ports;
pub mod storage;
pub mod telemetry;

pub use actors::NamedActor;
pub use config::Config;
pub use daemon::{Daemon, DaemonError, run};
