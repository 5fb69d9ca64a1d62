//! `Clock` port: where "now" comes from. The system clock in production; a clock a test can set
//! lives with the tests (`tests/common/doubles.rs`).

use chrono::{DateTime, Utc};

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// Wall-clock time. `dueAt` is wall-clock time, so firing decisions use it too.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}
