//! The NATS JetStream adapter: the only code that speaks to the broker.
//!
//! - `connection`: connecting with endless retry and logging the connection's life.
//! - `event_bus`: [`NatsEventBus`], the `EventBus` port over JetStream publish + PubAck.
//! - `command_source`: [`JetStreamCommandSource`], the `CommandSource` port over the durable
//!   pull consumer.
//! - `streams`: the stream and consumer definitions created when absent.

pub mod command_source;
pub mod connection;
pub mod event_bus;
pub mod streams;

pub use command_source::{JetStreamCommandSource, JetStreamCommandSourceFactory};
pub use connection::{connect, jetstream_context};
pub use event_bus::NatsEventBus;
pub use streams::BrokerNames;
