//! The timer domain: messages, validation and the rules of the contract. No I/O lives here.

pub mod api;
pub mod cancel_many;
pub mod census;
pub mod command;
pub mod data;
pub mod envelope;
pub mod events;
pub mod expiry;
pub mod forecast;
pub mod ids;
pub mod order;
pub mod quota;
pub mod schedule_many;
pub mod schema_types;
pub mod subjects;
pub mod tenant;
pub mod timer;
pub mod timestamp;
pub mod trace;

pub use cancel_many::{CancelFilter, CancelMany, CancelTimersPayload};
pub use command::{
    Arrival, CancelTimerPayload, CommandLimits, Parsed, Rejection, RejectionKind,
    ScheduleTimerPayload, parse_command, parse_message,
};
pub use data::TimerData;
pub use envelope::MessageEnvelope;
pub use events::{DueTimeReached, TimerCommandRejected, TimerExpired};
pub use order::{StreamIncarnation, command_order};
pub use schedule_many::{ScheduleTimersPayload, TimerSpec};
pub use subjects::{CommandKind, Subjects};
pub use timer::{Action, CancelOutcome, Command, DuePosition, DueTimer, Timer, TimerState};
pub use trace::TraceContext;
