//! The NATS JetStream adapter: the only code that speaks to the broker.
//!
//! - `connection`: connecting with endless retry and logging the connection's life.
//! - `event_bus`: [`NatsEventBus`], the `EventBus` port over JetStream publish + PubAck.
//! - `command_source`: [`JetStreamCommandSource`], the `CommandSource` port over the durable
//!   pull consumer.
//! - `streams`: the stream and consumer definitions created when absent.
//! - `api_service`: the query and cancel API as a NATS micro service, and the publisher that
//!   orders an API cancel in the command stream.

pub mod api_service;
pub mod command_source;
pub mod connection;
pub mod event_bus;
pub mod streams;

pub use api_service::{JetStreamCommandPublisher, NatsApiServer};
pub use command_source::{JetStreamCommandSource, JetStreamCommandSourceFactory};
pub use connection::{ConnectError, connect, jetstream_context, server_addrs};
pub use event_bus::NatsEventBus;
pub use streams::BrokerNames;
