//! Ports: the edges of the core. Actors depend on these traits, never on a broker or a clock.

pub mod api;
pub mod clock;
pub mod command_source;
pub mod event_bus;

pub use api::{ApiReply, ApiRequest, ApiServer, CommandPublisher, PublishError};
pub use clock::{Clock, SystemClock};
pub use command_source::{
    COMMAND_ACK_WAIT, CommandSource, CommandSourceFactory, Delivery, InboundCommand, UnreadCommands,
};
pub use event_bus::{BusError, EventBus, OutgoingEvent, Published, Stored};
