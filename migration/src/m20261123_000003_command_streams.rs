//! `command_streams`: every incarnation of the command stream the service has met, and its
//! epoch. A command stream deleted and created again numbers its messages from 1; the epoch
//! (in the high bits of `command_seq`) keeps every command of a newer incarnation newer than
//! every command of an older one. No existing row changes: the first incarnation recorded is
//! epoch 0, whose orders are the plain sequences stored so far.

use sea_orm_migration::prelude::*;

const SQLITE_UP: &[&str] = &["CREATE TABLE command_streams (
        stream_name TEXT    NOT NULL,
        created_ns  INTEGER NOT NULL,
        epoch       INTEGER NOT NULL UNIQUE CHECK (epoch >= 0),
        seen_at     TEXT    NOT NULL,
        PRIMARY KEY (stream_name, created_ns)
    ) STRICT"];

const POSTGRES_UP: &[&str] = &[r#"CREATE TABLE command_streams (
        stream_name TEXT COLLATE "C" NOT NULL,
        created_ns  BIGINT NOT NULL,
        epoch       BIGINT NOT NULL UNIQUE CHECK (epoch >= 0),
        seen_at     TEXT COLLATE "C" NOT NULL,
        PRIMARY KEY (stream_name, created_ns)
    )"#];

const DOWN: &[&str] = &["DROP TABLE command_streams"];

statements_migration!("m20261123_000003_command_streams");
