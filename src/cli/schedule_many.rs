//! `timers schedule-many`: a file of timers, one JSON object per line, cut into ScheduleTimers
//! messages the service accepts whole (docs/CONTRACT.md §3).

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::json;

use super::{CliError, print_json};
use crate::client::TimerClient;
use crate::domain::schedule_many::schedule_timers_command;
use crate::domain::{ScheduleTimersPayload, TimerSpec};

/// The fields of a timer; any other is a mistake (`due_at` for `dueAt`) the service would
/// ignore.
const FIELDS: [&str; 5] = [
    "serviceCallId",
    "dueAt",
    "correlationId",
    "data",
    "expireAfter",
];

/// The bytes a message of `max_bytes` leaves for its timers: what its envelope (with the
/// tenant and correlation id given, and no timers) does not take.
pub(super) fn room(tenant: &str, correlation_id: Option<&str>, max_bytes: usize) -> usize {
    let empty = ScheduleTimersPayload {
        tenant_id: tenant.to_owned(),
        timers: Vec::new(),
    };
    let envelope = schedule_timers_command(empty, correlation_id, chrono::Utc::now());
    let envelope = serde_json::to_vec(&envelope).map_or(max_bytes, |json| json.len());
    max_bytes.saturating_sub(envelope)
}

/// The timers of `file` (`-`: standard input), cut into messages as [`messages`] does.
pub(super) fn read(
    file: &Path,
    per_message: usize,
    room: usize,
) -> Result<Vec<Vec<TimerSpec>>, CliError> {
    let failed = |e: String| CliError::Usage(format!("{}: {e}", file.display()));
    let read = if file.as_os_str() == "-" {
        messages(std::io::stdin().lock(), per_message, room)
    } else {
        let opened = std::fs::File::open(file).map_err(|e| failed(e.to_string()))?;
        messages(BufReader::new(opened), per_message, room)
    };
    match read.map_err(failed)? {
        messages if messages.is_empty() => Err(failed("no timers".into())),
        messages => Ok(messages),
    }
}

/// Publishes the messages one after another, each once the broker stored the one before, and
/// says what went out: on a failure, how far it got (the rest can be sent again).
pub(super) async fn publish(
    client: &TimerClient,
    tenant: &str,
    messages: Vec<Vec<TimerSpec>>,
    correlation_id: Option<&str>,
    json: bool,
) -> Result<(), CliError> {
    let count = messages.len();
    let (mut timers, mut sent) = (0, Vec::new());
    for message in messages {
        let size = message.len();
        let sequence = client
            .schedule_timers(tenant, message, correlation_id)
            .await
            .map_err(|source| CliError::Partly {
                published: sent.len(),
                messages: count,
                timers,
                source,
            })?;
        timers += size;
        sent.push(json!({ "sequence": sequence, "timers": size }));
    }
    if json {
        print_json(&json!({ "tenantId": tenant, "count": timers, "messages": sent }));
    } else {
        let (first, last) = (&sent[0]["sequence"], &sent[count - 1]["sequence"]);
        println!(
            "scheduled {timers} timers of {tenant} in {count} messages \
             (command stream sequences {first} to {last})"
        );
    }
    Ok(())
}

/// Reads timers, one per line (blank lines skipped), and cuts them, in the file's order, into
/// messages of at most `per_message` timers and `room` bytes of timers (see [`room`]). A key
/// met again starts a new message: a message may name a key once, and the later line is the
/// newer command.
pub(super) fn messages(
    input: impl BufRead,
    per_message: usize,
    room: usize,
) -> Result<Vec<Vec<TimerSpec>>, String> {
    let mut messages = Vec::new();
    let mut current: Vec<TimerSpec> = Vec::new();
    let mut keys = HashSet::new();
    let mut bytes = 0;
    for (index, line) in input.lines().enumerate() {
        let number = index + 1;
        let line = line.map_err(|e| format!("line {number}: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let timer = timer(&line).map_err(|e| format!("line {number}: {e}"))?;
        // With the comma between two timers.
        let size = serde_json::to_vec(&timer).map_or(line.len(), |json| json.len()) + 1;
        if size > room {
            return Err(format!(
                "line {number}: the timer is {size} bytes; a message has room for {room} \
                 bytes of timers"
            ));
        }
        let full = current.len() >= per_message || bytes + size > room;
        if full || keys.contains(&timer.service_call_id) {
            messages.push(std::mem::take(&mut current));
            keys.clear();
            bytes = 0;
        }
        keys.insert(timer.service_call_id.clone());
        bytes += size;
        current.push(timer);
    }
    if !current.is_empty() {
        messages.push(current);
    }
    Ok(messages)
}

fn timer(line: &str) -> Result<TimerSpec, String> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Some(object) = value.as_object() else {
        return Err("not a JSON object".into());
    };
    if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "unknown field \"{unknown}\" (a timer has {})",
            FIELDS.join(", ")
        ));
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn ids(messages: &[Vec<TimerSpec>]) -> Vec<Vec<&str>> {
        messages
            .iter()
            .map(|m| m.iter().map(|t| t.service_call_id.as_str()).collect())
            .collect()
    }

    fn line(id: &str) -> String {
        format!(r#"{{"serviceCallId":"{id}","dueAt":"2030-01-01T00:00:00Z"}}"#)
    }

    #[test]
    fn timers_are_cut_into_messages_of_the_count_given_in_file_order() {
        let file = ["a", "b", "", "c"].map(|id| {
            if id.is_empty() {
                String::new()
            } else {
                line(id)
            }
        });
        let messages = messages(file.join("\n").as_bytes(), 2, 65_536).unwrap();
        assert_eq!(ids(&messages), [vec!["a", "b"], vec!["c"]]);
    }

    #[test]
    fn a_key_met_again_starts_a_new_message() {
        let file = ["a", "b", "a"].map(line).join("\n");
        let messages = messages(file.as_bytes(), 1000, 65_536).unwrap();
        assert_eq!(ids(&messages), [vec!["a", "b"], vec!["a"]]);
    }

    #[test]
    fn no_message_outgrows_the_bytes_given() {
        let data = "x".repeat(300);
        let file = (0..20)
            .map(|i| {
                format!(
                    r#"{{"serviceCallId":"t{i}","dueAt":"2030-01-01T00:00:00Z","data":"{data}"}}"#
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let max_bytes = 4096;
        let correlation_id = "é".repeat(256);
        let room = room("acme", Some(&correlation_id), max_bytes);
        let messages = messages(file.as_bytes(), 1000, room).unwrap();
        assert!(messages.len() > 1);
        for message in messages.iter().cloned() {
            let payload = ScheduleTimersPayload {
                tenant_id: "acme".into(),
                timers: message,
            };
            let command = schedule_timers_command(payload, Some(&correlation_id), Utc::now());
            let bytes = serde_json::to_vec(&command).unwrap().len();
            assert!(bytes <= max_bytes, "a message of {bytes} bytes");
        }
        assert_eq!(messages.iter().map(Vec::len).sum::<usize>(), 20);
    }

    #[test]
    fn a_bad_line_is_named_by_its_number() {
        let file = format!(
            "{}\n{{\"serviceCallId\":\"b\",\"due_at\":\"x\"}}",
            line("a")
        );
        let error = messages(file.as_bytes(), 1000, 65_536).unwrap_err();
        assert!(
            error.starts_with("line 2: unknown field \"due_at\""),
            "{error}"
        );
        let error = messages("[1]".as_bytes(), 1000, 65_536).unwrap_err();
        assert_eq!(error, "line 1: not a JSON object");
        let error = messages("{\"serviceCallId\":\"a\"}".as_bytes(), 1000, 65_536).unwrap_err();
        assert!(
            error.starts_with("line 1: missing field `dueAt`"),
            "{error}"
        );
    }
}
