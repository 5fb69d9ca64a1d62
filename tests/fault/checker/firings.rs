//! What fired: each message once (`distinct_messages`), the DueTimeReached events parsed, the
//! firings grouped by (key, dueAt) with their duplicates; and invariant (b), nothing early.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use super::super::history::{Instant, Key, Run, Window};
use super::{CLOCK_GRACE, Firing, Invariant, Verdict};

/// A message seen on the wire or in the stream, once, with the earliest time it was seen and the
/// number of copies in the stream.
#[derive(Debug)]
pub struct Message {
    pub subject: String,
    pub payload: Vec<u8>,
    pub first: Instant,
    /// Every moment it was observed (subscriber receipts and stream stores).
    pub observed: Vec<Instant>,
    pub stored: usize,
}

pub fn distinct_messages(run: &Run) -> Vec<Message> {
    let mut by_content: HashMap<(&str, &[u8]), Message> = HashMap::new();
    let all = run
        .seen
        .iter()
        .map(|s| (s, false))
        .chain(run.stream.iter().map(|s| (s, true)));
    for (seen, stored) in all {
        let entry = by_content
            .entry((seen.subject.as_str(), seen.payload.as_slice()))
            .or_insert_with(|| Message {
                subject: seen.subject.clone(),
                payload: seen.payload.clone(),
                first: seen.at,
                observed: Vec::new(),
                stored: 0,
            });
        entry.first = entry.first.min(seen.at);
        entry.observed.push(seen.at);
        entry.stored += usize::from(stored);
    }
    let mut out: Vec<Message> = by_content.into_values().collect();
    out.sort_by_key(|m| m.first);
    out
}

/// A firing's event: a DueTimeReached read from `timer.evt.due.<tenant>`, or a TimerExpired
/// from `timer.evt.expired.<tenant>` (with its `expiresAt`).
#[derive(Debug, Clone, PartialEq)]
pub struct DueEvent {
    pub key: Key,
    pub due_at: Instant,
    pub reached_at: Instant,
    /// `Some` for a TimerExpired.
    pub expires_at: Option<Instant>,
}

/// Whether `subject` is one a firing's event goes to.
pub fn is_firing_subject(subject: &str) -> bool {
    subject.starts_with("timer.evt.due.") || subject.starts_with("timer.evt.expired.")
}

/// Parses a message on `timer.evt.due.<t>` as a DueTimeReached of tenant t, or one on
/// `timer.evt.expired.<t>` as a TimerExpired, or says why it is not one.
pub fn parse_due(subject: &str, payload: &[u8]) -> Result<DueEvent, String> {
    let (kind, tenant) = [
        ("DueTimeReached", "timer.evt.due."),
        ("TimerExpired", "timer.evt.expired."),
    ]
    .into_iter()
    .find_map(|(kind, prefix)| subject.strip_prefix(prefix).map(|tenant| (kind, tenant)))
    .filter(|(_, t)| !t.is_empty() && !t.contains('.'))
    .ok_or_else(|| format!("not a firing's subject: {subject}"))?;
    let envelope: Value = serde_json::from_slice(payload)
        .map_err(|e| format!("not JSON ({e}): {}", preview(payload)))?;
    if envelope["type"] != kind {
        return Err(format!("not a {kind}: {}", preview(payload)));
    }
    let body = &envelope["payload"];
    if envelope["tenantId"] != tenant || body["tenantId"] != tenant {
        return Err(format!(
            "an event of another tenant on {subject}: {}",
            preview(payload)
        ));
    }
    let instant = |field: &str| -> Result<Instant, String> {
        body[field]
            .as_str()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("no valid {field}: {}", preview(payload)))
    };
    let id = body["serviceCallId"]
        .as_str()
        .ok_or_else(|| format!("no serviceCallId: {}", preview(payload)))?;
    Ok(DueEvent {
        key: Key::new(tenant, id),
        due_at: instant("dueAt")?,
        reached_at: instant("reachedAt")?,
        expires_at: match kind {
            "TimerExpired" => Some(instant("expiresAt")?),
            _ => None,
        },
    })
}

pub fn preview(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let short: String = text.chars().take(120).collect();
    short.escape_debug().to_string()
}

pub(super) fn collect_firings(run: &Run, messages: &[Message], verdict: &mut Verdict) {
    // The same firing can be published in two envelopes (a republish after a crash has a new
    // envelope id): group by (key, dueAt).
    let mut stored_at: BTreeMap<(Key, Instant), Vec<Instant>> = BTreeMap::new();
    for seen in &run.stream {
        if let Ok(event) = parse_due(&seen.subject, &seen.payload) {
            stored_at
                .entry((event.key, event.due_at))
                .or_default()
                .push(seen.at);
        }
    }
    for message in messages {
        let Ok(event) = parse_due(&message.subject, &message.payload) else {
            continue;
        };
        let firing = verdict
            .firings
            .entry((event.key.clone(), event.due_at))
            .or_insert(Firing {
                first: message.first,
                reached_at: Some(event.reached_at),
                stored: 0,
            });
        firing.first = firing.first.min(message.first);
        firing.reached_at = firing.reached_at.min(Some(event.reached_at));
    }
    for ((key, due_at), mut times) in stored_at {
        times.sort();
        if let Some(firing) = verdict.firings.get_mut(&(key.clone(), due_at)) {
            firing.stored = times.len();
        }
        for extra in times.iter().skip(1) {
            verdict.duplicates.push((key.clone(), due_at, *extra));
        }
    }
}

/// Whether `t` falls while the daemon's clock ran ahead (or just after, while its last events
/// were still on their way).
pub fn clock_ahead(run: &Run, t: Instant) -> bool {
    run.clock_ahead.iter().any(|w| {
        Window {
            from: w.from,
            to: w.to + CLOCK_GRACE,
        }
        .contains(t)
    })
}

pub(super) fn check_not_early(run: &Run, messages: &[Message], verdict: &mut Verdict) {
    let mut reported = BTreeSet::new();
    for message in messages {
        let Ok(event) = parse_due(&message.subject, &message.payload) else {
            continue;
        };
        let firing = (event.key.clone(), event.due_at);
        if event.reached_at < event.due_at && reported.insert(firing.clone()) {
            verdict
                .early
                .push((event.key.clone(), event.due_at, message.first));
            verdict.violate(
                Invariant::NotEarly,
                message.first,
                Some(&event.key),
                format!(
                    "reachedAt {} is before dueAt {}",
                    event.reached_at, event.due_at
                ),
            );
            continue;
        }
        for &at in &message.observed {
            if at < event.due_at && !clock_ahead(run, at) && reported.insert(firing.clone()) {
                verdict.early.push((event.key.clone(), event.due_at, at));
                verdict.violate(
                    Invariant::NotEarly,
                    at,
                    Some(&event.key),
                    format!(
                        "seen at {at}, {} ms before its dueAt {}",
                        (event.due_at - at).num_milliseconds(),
                        event.due_at
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;

    #[test]
    fn an_event_before_its_due_at_breaks_b() {
        let early_reached = check(&run(
            vec![schedule("k1", 5_000, 10)],
            vec![event("k1", 5_000, 4_990, 5_001)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&early_reached), [Invariant::NotEarly]);
        let early_seen = check(&run(
            vec![schedule("k1", 5_000, 10)],
            vec![event("k1", 5_000, 5_000, 4_000)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&early_seen), [Invariant::NotEarly]);
        assert_eq!(early_seen.early.len(), 1);
    }

    #[test]
    fn an_early_receipt_while_the_clock_ran_ahead_is_judged_by_reached_at_only() {
        let mut history = run(
            vec![schedule("k1", 5_000, 10)],
            vec![event("k1", 5_000, 5_000, 4_000)],
            vec![row("k1", "Reached", Some(5_000))],
        );
        history.clock_ahead.push(Window {
            from: t(3_000),
            to: t(4_500),
        });
        let verdict = check(&history);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    }
}
