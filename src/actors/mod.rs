//! The actors of the daemon and how they find each other.
//!
//! ```text
//! Supervisor ──owns──> Persistence     the only reader and writer of the timers; one transaction per message
//!           ├─owns──> Checkpointer    copies the SQLite WAL into the file, off the firing path
//!           ├─owns──> Poller          exact wake-ups + safety tick → Persistence → EventBus → Persistence
//!           ├─owns──> CommandHandler  CommandSource → validate → Persistence → ack
//!           ├─owns──> ApiResponder    get / list / cancel / stats requests → Persistence
//!           ├─owns──> Janitor         deletes finished timers past retention, in small batches → Persistence
//!           ├─owns──> Gauges          counts pending timers on a read-only connection of its own
//!           └─owns──> Http            /metrics, /healthz, /readyz
//! ```
//!
//! | actor | messages | who sends them |
//! | --- | --- | --- |
//! | [`Supervisor`] | `Restart(name)`, `Shutdown`, `InjectFault(name)` | itself (after a backoff), the daemon |
//! | [`Persistence`] | `Apply`, `ClaimDue`, `MarkReached`, `Get`, `List`, `Stats`, `Cancel`, `CommandEpoch`, `DeleteFinished` (each one transaction, replied); `Probe`, `CatchUpWal` | everyone, through [`PersistenceClient`]; its own interval; the Checkpointer |
//! | [`Checkpointer`] | `Checkpoint` | its own interval |
//! | [`Poller`] | `Tick`, `Wake`, `WakeAt(instant)`, `BatchPublished` | its interval and wake-ups, the CommandHandler, its publishing tasks |
//! | [`CommandHandler`] | `Fetch` | itself (one pull after another) |
//! | [`ApiResponder`] | `Start`, `Ended` | itself; its serving task when the service stops (each request runs in a task of its own) |
//! | [`Janitor`] | `Sweep`, `Continue` | its interval (starts a sweep unless one is under way); itself while batches come back full |
//! | [`Gauges`] | `Refresh` | its interval |
//! | [`Http`] | none (its server task answers requests) | |
//!
//! Each actor is a [`NamedActor`]; the daemon hands the Supervisor one [`ChildSpec`] per actor
//! (in start order), so adding an actor is adding its module and one spec. Actors find each
//! other by name through the [`Registry`], at each use.

pub mod api_responder;
pub mod checkpointer;
pub mod command_handler;
pub mod gauges;
pub mod http;
pub mod janitor;
pub mod persistence;
pub mod poller;
pub mod registry;
pub mod supervisor;

pub use api_responder::ApiResponder;
pub use checkpointer::Checkpointer;
pub use command_handler::CommandHandler;
pub use gauges::Gauges;
pub use http::Http;
pub use janitor::Janitor;
pub use persistence::{CallError, Persistence, PersistenceClient};
pub use poller::Poller;
pub use registry::Registry;
pub use supervisor::{ChildSpec, NamedActor, Supervisor, SupervisorArgs, SupervisorMsg};
