//! Persistence: the only code that touches SeaORM and SQLite.
//!
//! - `db`: opening the SQLite file with the durability settings, and running migrations.
//! - `entity`: the SeaORM model of `timer_schedules`; `daemons`: the health probe's table;
//!   `command_streams`: the incarnations of the command stream and their epochs.
//! - `store`: every query the service runs, batch-shaped, one transaction per call.

pub mod command_streams;
pub mod daemons;
pub mod db;
pub mod entity;
pub mod store;

pub use db::{SqliteSettings, Synchronous};
pub use store::{Claimant, DueBatch, Store, StoreError};
