//! The wire contract as JSON Schema (2020-12), generated from the message types: one file per
//! message under `schema/` in the repository, each with its `$id`, and named by the AsyncAPI
//! document `schema/asyncapi.yaml` and by the API endpoints' metadata.
//!
//! `timer-service schema --out schema/` writes them. They are checked in so that clients can take
//! them without building anything; a test fails when they differ from what the types give.
//! Commands and API requests are described as the service reads them, events and replies as it
//! writes them (a field it always writes is required, even when it may be null).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use schemars::generate::SchemaSettings;
use schemars::transform::RestrictFormats;
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

use crate::domain::api::{
    CancelManyReply, CancelManyRequest, CancelReply, ErrorReply, GetReply, KeyRequest, ListReply,
    ListRequest, StatsReply, StatsRequest, Verb,
};
use crate::domain::cancel_many::CANCEL_TIMERS;
use crate::domain::command::{CANCEL_TIMER, SCHEDULE_TIMER};
use crate::domain::events::{DUE_TIME_REACHED, TIMER_COMMAND_REJECTED, TIMER_EXPIRED};
use crate::domain::schedule_many::SCHEDULE_TIMERS;
use crate::domain::{
    CancelTimerPayload, CancelTimersPayload, DueTimeReached, MessageEnvelope, ScheduleTimerPayload,
    ScheduleTimersPayload, TimerCommandRejected, TimerExpired,
};

/// What every `$id` starts with; the rest is the file's name without `.json`. A URN, not a URL:
/// the files are in the repository (and wherever a deployment copies them), at no fixed address.
pub const ID_PREFIX: &str = "urn:timer-service:schema:";

/// The name, without `.json`, of the schema of the error reply every endpoint may send.
pub const API_ERROR_REPLY: &str = "api-error-reply";

/// One schema file: `<name>.json` holding `schema`.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaFile {
    pub name: String,
    pub schema: Value,
}

impl SchemaFile {
    pub fn file_name(&self) -> String {
        format!("{}.json", self.name)
    }

    /// The file as it is checked in: pretty JSON, keys in order, one newline at the end.
    pub fn text(&self) -> String {
        let mut text = serde_json::to_string_pretty(&sorted(&self.schema)).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// The `$id` of the schema `name`.
pub fn id(name: &str) -> String {
    format!("{ID_PREFIX}{name}")
}

/// The names of the request and reply schemas of an API endpoint.
pub fn api_names(verb: Verb) -> (String, String) {
    (
        format!("api-{}-request", verb.as_str()),
        format!("api-{}-reply", verb.as_str()),
    )
}

/// The metadata of an API endpoint in `$SRV.INFO`: the `$id`s of its request's schema, of its
/// reply's, and of the error reply's.
pub fn endpoint_metadata(verb: Verb) -> HashMap<String, String> {
    let (request, reply) = api_names(verb);
    HashMap::from([
        ("request_schema".to_owned(), id(&request)),
        ("response_schema".to_owned(), id(&reply)),
        ("error_schema".to_owned(), id(API_ERROR_REPLY)),
    ])
}

/// Whether a message goes into the service (read, with defaults for what may be left out) or
/// comes out of it (written as it always is).
#[derive(Clone, Copy)]
enum Direction {
    In,
    Out,
}

/// Every schema of the contract, in a fixed order.
pub fn all() -> Vec<SchemaFile> {
    let mut files = vec![
        envelope::<ScheduleTimerPayload>(
            "schedule-timer",
            SCHEDULE_TIMER,
            Direction::In,
            "Asks for a timer: published by a client to timer.cmd.schedule.<tenantId> \
             (docs/CONTRACT.md §3). tenantId must be the same in the subject, the envelope and \
             the payload.",
        ),
        envelope::<ScheduleTimersPayload>(
            "schedule-timers",
            SCHEDULE_TIMERS,
            Direction::In,
            "Asks for many timers of one tenant at once: published by a client to \
             timer.cmd.schedule-many.<tenantId> (docs/CONTRACT.md §3), 1 to 1000 timers, each \
             key at most once. Each timer follows ScheduleTimer's rules; one bad timer rejects \
             the whole message. tenantId must be the same in the subject, the envelope and the \
             payload.",
        ),
        envelope::<CancelTimerPayload>(
            "cancel-timer",
            CANCEL_TIMER,
            Direction::In,
            "Cancels a timer: published by a client to timer.cmd.cancel.<tenantId> \
             (docs/CONTRACT.md §3). tenantId must be the same in the subject, the envelope and \
             the payload.",
        ),
        envelope::<CancelTimersPayload>(
            "cancel-timers",
            CANCEL_TIMERS,
            Direction::In,
            "Cancels many of a tenant's pending timers: published by a client to \
             timer.cmd.cancel-many.<tenantId> (docs/CONTRACT.md §3), with a filter \
             (correlationId, dueFrom, dueTo) or all: true. tenantId must be the same in the \
             subject, the envelope and the payload.",
        ),
        envelope::<DueTimeReached>(
            "due-time-reached",
            DUE_TIME_REACHED,
            Direction::Out,
            "A timer fired: published by the service to timer.evt.due.<tenantId> on the \
             TIMER_EVENTS stream once dueAt has passed, at least once per firing \
             (docs/CONTRACT.md §3). The envelope's aggregateId is the serviceCallId.",
        ),
        envelope::<TimerExpired>(
            "timer-expired",
            TIMER_EXPIRED,
            Direction::Out,
            "A timer fired past its expireAfter deadline: published by the service to \
             timer.evt.expired.<tenantId> on the TIMER_EVENTS stream instead of its \
             DueTimeReached, with the same envelope, data and Nats-Msg-Id \
             (docs/CONTRACT.md §5). The envelope's aggregateId is the serviceCallId.",
        ),
        envelope::<TimerCommandRejected>(
            "timer-command-rejected",
            TIMER_COMMAND_REJECTED,
            Direction::Out,
            "A command was refused: published by the service to timer.evt.rejected.<tenantId>, \
             or timer.evt.rejected._ when the subject names no readable tenant \
             (docs/CONTRACT.md §3).",
        ),
    ];
    for verb in Verb::ALL {
        let (request, reply) = api_names(verb);
        let on = format!(
            "timer.api.{}.<tenantId> (docs/CONTRACT.md §6)",
            verb.as_str()
        );
        files.push(match verb {
            Verb::Get | Verb::Cancel => plain::<KeyRequest>(
                &request,
                Direction::In,
                &format!("The request on {on}: the timer's key in the tenant of the subject."),
            ),
            Verb::List => plain::<ListRequest>(
                &request,
                Direction::In,
                &format!("The request on {on}; an empty body counts as {{}}."),
            ),
            Verb::Stats => plain::<StatsRequest>(
                &request,
                Direction::In,
                &format!("The request on {on}; an empty body counts as {{}}."),
            ),
            Verb::CancelMany => plain::<CancelManyRequest>(
                &request,
                Direction::In,
                &format!(
                    "The request on {on}: which pending timers of the tenant to cancel (a \
                     filter, or all: true), and dryRun to only count them."
                ),
            ),
        });
        let description = format!("The reply to a request on {on}, when it succeeds.");
        files.push(match verb {
            Verb::Get => plain::<GetReply>(&reply, Direction::Out, &description),
            Verb::List => plain::<ListReply>(&reply, Direction::Out, &description),
            Verb::Cancel => plain::<CancelReply>(&reply, Direction::Out, &description),
            Verb::Stats => plain::<StatsReply<'static>>(&reply, Direction::Out, &description),
            Verb::CancelMany => plain::<CancelManyReply>(&reply, Direction::Out, &description),
        });
    }
    files.push(plain::<ErrorReply<'static>>(
        API_ERROR_REPLY,
        Direction::Out,
        "The reply to an API request that was refused or failed (docs/CONTRACT.md §6): its \
         headers Nats-Service-Error-Code (400, 404, 500 or 503) and Nats-Service-Error say the \
         same as this body.",
    ));
    files
}

/// Writes every schema into `dir` (created if missing); returns the files written.
pub fn write(dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    all()
        .into_iter()
        .map(|file| {
            let path = dir.join(file.file_name());
            std::fs::write(&path, file.text()).map(|()| path)
        })
        .collect()
}

/// The files of `dir` that are missing or differ from what the types give, each with why.
pub fn drift(dir: &Path) -> Vec<String> {
    all()
        .into_iter()
        .filter_map(|file| {
            let path = dir.join(file.file_name());
            match std::fs::read_to_string(&path) {
                Ok(text) if text == file.text() => None,
                Ok(_) => Some(format!("{} differs from the types", path.display())),
                Err(e) => Some(format!("{} cannot be read: {e}", path.display())),
            }
        })
        .collect()
}

fn generate<T: JsonSchema + ?Sized>(direction: Direction) -> Schema {
    let settings = SchemaSettings::draft2020_12().with_transform(RestrictFormats::default());
    let settings = match direction {
        Direction::In => settings.for_deserialize(),
        Direction::Out => settings.for_serialize(),
    };
    settings.into_generator().into_root_schema_for::<T>()
}

/// The schema of a message not in an envelope (an API request or reply).
fn plain<T: JsonSchema + ?Sized>(name: &str, direction: Direction, about: &str) -> SchemaFile {
    finish(name, about, generate::<T>(direction))
}

/// The schema of an envelope of `message_type` carrying a `P`.
fn envelope<P: JsonSchema>(
    name: &str,
    message_type: &str,
    direction: Direction,
    about: &str,
) -> SchemaFile {
    let mut schema = generate::<MessageEnvelope<P>>(direction);
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert(
            "type".into(),
            json!({ "description": "The message type.", "const": message_type }),
        );
    }
    finish(name, about, schema)
}

/// Names the schema: `$id`, a title from its name, what it is for.
fn finish(name: &str, about: &str, schema: Schema) -> SchemaFile {
    let mut schema = schema.to_value();
    unwrap_descriptions(&mut schema);
    if let Value::Object(object) = &mut schema {
        object.insert("$id".into(), id(name).into());
        object.insert("title".into(), title(name).into());
        object.insert("description".into(), about.into());
    }
    SchemaFile {
        name: name.to_owned(),
        schema,
    }
}

/// Descriptions come from doc comments, wrapped at 100 columns: each becomes one line.
fn unwrap_descriptions(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for (key, value) in object.iter_mut() {
                match value {
                    Value::String(text) if key == "description" => {
                        *text = text.replace('\n', " ");
                    }
                    value => unwrap_descriptions(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

/// `api-get-reply` → `ApiGetReply`.
fn title(name: &str) -> String {
    name.split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_uppercase().chain(chars).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

/// `value` with the keys of every object in order, so the files do not depend on how
/// `serde_json` keeps maps in a given build.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|key| (key.clone(), sorted(&object[key])))
                    .collect::<Map<_, _>>(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests;
