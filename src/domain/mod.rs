//! The timer domain: messages, validation and the rules of the contract. No I/O lives here.

pub mod command;
pub mod envelope;
pub mod events;
pub mod subjects;
pub mod timer;
pub mod timestamp;

pub use command::{Rejection, ScheduleTimer, ScheduleTimerPayload, parse_schedule_timer};
pub use envelope::MessageEnvelope;
pub use events::{DueTimeReached, TimerCommandRejected};
pub use subjects::Subjects;
pub use timer::{DuePosition, TimerEntry, TimerKey, TimerState};
