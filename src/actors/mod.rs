//! The actors of the daemon and how they find each other.
//!
//! The actor tree, what each actor does and the messages each one takes are described once, in
//! `docs/design.md` ("The actor tree").
//!
//! Each actor is a [`NamedActor`]; the daemon hands the [`Supervisor`] one [`ChildSpec`] per
//! actor (in start order), so adding an actor is adding its module and one spec. Actors find
//! each other by name through the [`Registry`], at each use; calls to [`Persistence`] go
//! through [`PersistenceClient`]. The actors that work on a schedule (Janitor, Gauges,
//! Checkpointer, Sweeper) are each one [`periodic::Periodic`] run by one base actor. The
//! Canceller runs the `CancelTimers` commands a step at a time.

pub mod api_responder;
pub mod canceller;
pub mod checkpointer;
pub mod command_handler;
pub mod gauges;
pub mod http;
pub mod janitor;
pub mod periodic;
pub mod persistence;
pub mod poller;
pub mod registry;
pub mod steps;
pub mod supervisor;
pub mod sweeper;

pub use api_responder::ApiResponder;
pub use canceller::Canceller;
pub use checkpointer::Checkpointer;
pub use command_handler::CommandHandler;
pub use gauges::Gauges;
pub use http::Http;
pub use janitor::Janitor;
pub use persistence::{CallError, Persistence, PersistenceClient};
pub use poller::Poller;
pub use registry::Registry;
pub use supervisor::{ChildSpec, NamedActor, Supervisor, SupervisorArgs, SupervisorMsg};
pub use sweeper::Sweeper;
