//! The actors of the daemon and how they find each other.
//!
//! ```text
//! Supervisor ──owns──> Persistence     the only reader and writer of the timers; one transaction per message
//!           ├─owns──> Checkpointer    copies the SQLite WAL into the file, off the firing path
//!           ├─owns──> Poller          exact wake-ups + safety tick → Persistence → EventBus → Persistence
//!           └─owns──> CommandHandler  CommandSource → validate → Persistence → ack
//! ```

pub mod checkpointer;
pub mod command_handler;
pub mod persistence;
pub mod poller;
pub mod registry;
pub mod supervisor;

pub use registry::{ActorKind, PersistenceClient, Registry};
pub use supervisor::{Supervisor, SupervisorArgs, SupervisorMsg};
