//! The NATS JetStream adapter: the only code that speaks to the broker.
//!
//! - `connection`: connecting with endless retry and logging the connection's life; `link`:
//!   the link watched, so that a path gone silent is noticed within `link_timeout`.
//! - `event_bus`: [`NatsEventBus`], the `EventBus` port over JetStream publish + PubAck.
//! - `command_source`: [`JetStreamCommandSource`], the `CommandSource` port over the durable
//!   pull consumers, read in turns; `pull`: one consumer and its open pull request, read as
//!   it arrives; `delivery`: one delivered message, the command it becomes (with its trace
//!   context) and its settlement; `keepalive`: every delivery reported in progress until it is
//!   settled.
//! - `streams`: the stream and consumer definitions created when absent; `partitions`: the
//!   command stream in lines by tenant; `layout`: how many, kept on the stream and followed
//!   while running (`follow`); `relayout`: changing them (`timer-service lines set`).
//! - `api_service`: the query and cancel API as a NATS micro service; `command_publisher`:
//!   the publisher that orders an API cancel in the command stream.

pub mod api_service;
pub mod command_publisher;
pub mod command_source;
pub mod connection;
mod delivery;
pub mod event_bus;
mod follow;
mod keepalive;
pub mod layout;
pub mod link;
pub mod partitions;
mod pull;
pub mod relayout;
pub mod strays;
pub mod streams;

pub use api_service::NatsApiServer;
pub use command_publisher::JetStreamCommandPublisher;
pub use command_source::{JetStreamCommandSource, JetStreamCommandSourceFactory};
pub use connection::{ConnectError, connect, jetstream_context, server_addrs};
pub use event_bus::NatsEventBus;
pub use link::LinkWatch;
pub use strays::JetStreamStrays;
pub use streams::BrokerNames;
