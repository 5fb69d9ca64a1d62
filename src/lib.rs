//! timer-service: a durable timer daemon.
//!
//! Clients send `ScheduleTimer` over NATS JetStream; the service stores each timer (SQLite, or
//! PostgreSQL for several daemons) and, when its `dueAt` arrives, publishes `DueTimeReached` (or
//! `TimerExpired`, past a deadline the client set) — at least once, one timer per `(tenantId, serviceCallId)`, never early. `docs/CONTRACT.md`
//! is the public contract (cited as "docs/CONTRACT.md §n" in the code); `docs/design.md` draws the
//! actor tree.
//!
//! # Layout
//!
//! - [`domain`]: the rules, no I/O. `command` (parsing and validating commands), `tenant`
//!   (tenant id rules), `ids` (service call and correlation id rules), `timer` (rows, the
//!   rules table as a reference model), `order` (command order across stream incarnations),
//!   `quota` (per-tenant limits and the decision for one command), `events` (the envelopes
//!   published), `expiry` (`expireAfter`, and whether a firing comes too late), `data` (a timer's JSON data, kept as the text the client wrote), `trace` (a
//!   command's W3C trace context), `api` (API requests and replies), `subjects`, `envelope`,
//!   `census` (the console's overview), `timestamp`, `schema_types` (field rules named in the JSON Schemas).
//! - [`ports`]: the traits the core depends on: [`ports::EventBus`], [`ports::CommandSource`],
//!   [`ports::Clock`], the API's server and publisher (test doubles: `tests/common/doubles.rs`).
//! - [`nats`]: the JetStream adapter, the only code that speaks to the broker: `connection`,
//!   `streams`, `partitions` and `layout` (the command stream's lines, kept on the stream),
//!   `relayout` (changing them), `command_source` (with `pull`, `delivery` and the `keepalive`
//!   of everything delivered and not settled), `event_bus`, `api_service`, `strays` (commands
//!   no consumer reads).
//! - [`storage`]: the only code that touches the database. `mod.rs` is the store's face,
//!   `error` its errors; `backend` (the trait where SQLite and PostgreSQL differ), implemented
//!   by `sqlite/` and `postgres/`, each with its `firing` (claim, mark) and `fair` SQL and its
//!   clock (`postgres/names` too); one shared module per family of queries: `commands`,
//!   `firing`, `fair` (claims by tenant in turn), `queries`, `quotas`, `retention`, `probe`, `census`;
//!   `rows` (rows ↔ domain), the entities, `db` (connecting, migrating, checkpoints), `profile`
//!   (what the rest of the daemon asks of a database instead of matching on it),
//!   `reader` (reader connections and the time limit of their reads), `backup` (a consistent
//!   copy of a live SQLite file, for `timer-service backup`).
//! - [`actors`]: the Supervisor and its children — Persistence (its `lanes`, the `worker` of each
//!   connection, the `operation`s and their client), Checkpointer, CommandHandler (`intake`,
//!   `pipeline`, `storing`, `split`, `quota`), Poller (`phase`, `firing`, `calls`, `run`, `marks`,
//!   `fairness`, `publisher` with its queue by tenant and the broker's window, `wake`),
//!   ApiResponder (`admission` of each tenant's requests), Janitor, Gauges, Http, Sweeper
//!   (commands the stream holds that no consumer reads) — and the
//!   Registry.
//! - [`config`]: `config.toml` + `TIMER_*` environment overrides (`env`, `validate`,
//!   `duration`, `redact`, `sqlite`, `postgres`, `quotas`, `metrics`, `api`, `console`,
//!   `changes`, `service_links`: Kubernetes' variables under our prefix, ignored).
//! - [`console`]: the web console on the HTTP listener: its routes, `auth` (tokens), `api`
//!   (the query API's requests handed to the ApiResponder, the overview) and `assets` (the
//!   page and its files from `console/`, inside the binary).
//! - [`backoff`]: the retry delays. [`stop`]: the one budget of a graceful stop, and what each
//!   step keeps of it. [`health`]: what the daemon knows of its own health.
//!   [`turns`]: a queue whose keys (tenants) take turns.
//! - [`telemetry`]: metric names, the Prometheus recorder, and log formats; `recent` (each
//!   tenant's last five minutes) and `lanes` (each lane's depth and recent waits) for the
//!   console.
//! - [`schemas`]: the JSON Schemas of every message and API request and reply, generated from
//!   the domain's types (`timer-service schema` writes them to `schema/`).
//! - [`client`]: a client of the public contract; [`cli`]: the `timer-service timers` commands;
//!   [`lines`]: `timer-service lines show|set` (the command stream's lines).
//! - [`daemon`]: wiring it all together and the graceful stop; `daemon/run` is [`run`], what
//!   `main` calls (and the quota reload on SIGHUP); `daemon/name` takes and gives up the
//!   daemon's name on a shared database.

pub mod actors;
pub mod backoff;
pub mod cli;
pub mod client;
pub mod config;
pub mod console;
pub mod daemon;
pub mod domain;
pub mod health;
pub mod lines;
pub mod nats;
pub mod ports;
pub mod schemas;
pub mod stop;
pub mod storage;
pub mod telemetry;
pub mod turns;

pub use actors::NamedActor;
pub use config::Config;
pub use daemon::{Daemon, DaemonError, run};
