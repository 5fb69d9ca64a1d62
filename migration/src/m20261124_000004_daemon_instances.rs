//! `daemons.instance`: which process holds each daemon name (a UUID per process). Two live
//! daemons on one database must not share a name (it is `claimed_by` on the timers a daemon
//! claims): a daemon takes its name at start-up only when no other live instance holds it, and
//! its health probe writes the row only while the instance there is its own. Rows of daemons
//! from before have no instance.

use sea_orm_migration::prelude::*;

const SQLITE_UP: &[&str] = &["ALTER TABLE daemons ADD COLUMN instance TEXT"];

const POSTGRES_UP: &[&str] = &[r#"ALTER TABLE daemons ADD COLUMN instance TEXT COLLATE "C""#];

const DOWN: &[&str] = &["ALTER TABLE daemons DROP COLUMN instance"];

statements_migration!("m20261124_000004_daemon_instances");
