//! Invariants (e), isolation: a tenant's subjects carry only its own events and commands; and
//! (g), hostile input: every API request is answered, an invalid command rejected.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::super::history::{Command, Instant, Key, Outcome, Row, Run, Window};

use super::firings::{Message, is_firing_subject, parse_due, preview};
use super::{Invariant, Verdict};

pub(super) fn check_isolation(run: &Run, messages: &[Message], verdict: &mut Verdict) {
    let flooded: Vec<(Key, Instant)> = run
        .quota_floods
        .iter()
        .flat_map(|f| {
            f.sent
                .iter()
                .map(|(id, _)| (Key::new(&f.tenant, id), f.due_at))
        })
        .collect();
    let scheduled: BTreeSet<(&Key, Instant)> = run
        .ops
        .iter()
        .filter_map(|op| op.due_at().map(|due| (&op.key, due)))
        .chain(flooded.iter().map(|(key, due)| (key, *due)))
        .collect();
    let hostile: BTreeSet<&Key> = run.hostile.iter().map(|h| &h.key).collect();
    // The previous release rejects a CancelTimers it does not know.
    let rollbacks = super::rollback_windows(run);
    let rejected_by_the_previous_release = |envelope: &Value, at: Instant| {
        envelope["payload"]["original"]
            .as_str()
            .is_some_and(|o| o.contains("\"CancelTimers\""))
            && rollbacks.iter().any(|w| w.contains(at))
    };
    for message in messages {
        let subject = message.subject.as_str();
        let problem = if is_firing_subject(subject) {
            match parse_due(subject, &message.payload) {
                Ok(event)
                    if scheduled.contains(&(&event.key, event.due_at))
                        || hostile.contains(&event.key) =>
                {
                    None
                }
                Ok(event) => Some(format!(
                    "an event for {} due {} that tenant never scheduled",
                    event.key, event.due_at
                )),
                Err(why) => Some(why),
            }
        } else if let Some(tenant) = subject.strip_prefix("timer.evt.rejected.") {
            let envelope: Value = serde_json::from_slice(&message.payload).unwrap_or_default();
            if envelope["type"] != "TimerCommandRejected" {
                Some(format!("not a rejection: {}", preview(&message.payload)))
            } else if !run.hostile_tenants.contains(tenant)
                && !run.quota_floods.iter().any(|f| f.tenant == tenant)
                && !rejected_by_the_previous_release(&envelope, message.first)
            {
                Some(format!(
                    "a rejection for tenant {tenant}, which sent no invalid command and no \
                     command past its quota: {}",
                    preview(&message.payload)
                ))
            } else {
                None
            }
        } else if let Some(rest) = subject.strip_prefix("timer.cmd.") {
            command_problem(rest, &message.payload)
        } else {
            Some(format!(
                "a message on {subject}: {}",
                preview(&message.payload)
            ))
        };
        if let Some(problem) = problem {
            verdict.violate(
                Invariant::Isolation,
                message.first,
                None,
                format!("{subject}: {problem}"),
            );
        }
    }
}

/// What is wrong with a message on `timer.cmd.<rest>`, if anything: it must be a command of the
/// subject's verb and tenant (what a client of that tenant sends).
fn command_problem(rest: &str, payload: &[u8]) -> Option<String> {
    let (verb, tenant) = rest.split_once('.')?;
    let expected = match verb {
        "schedule" => "ScheduleTimer",
        "schedule-many" => "ScheduleTimers",
        "cancel" => "CancelTimer",
        "cancel-many" => "CancelTimers",
        _ => return Some(format!("unknown command subject verb {verb}")),
    };
    let envelope: Value = serde_json::from_slice(payload).unwrap_or_default();
    (envelope["type"] != expected || envelope["tenantId"] != tenant)
        .then(|| format!("not a {expected} of tenant {tenant}: {}", preview(payload)))
}

pub(super) fn check_hostile(
    run: &Run,
    messages: &[Message],
    disturbed: &[Window],
    verdict: &mut Verdict,
) {
    for request in &run.api_requests {
        if !request.answered {
            verdict.violate(
                Invariant::HostileInput,
                request.at,
                None,
                format!("no reply to {} on {}", request.what, request.subject),
            );
        }
    }
    // A workload cancel through the API that got no answer while nothing was wrong.
    for op in &run.ops {
        if op.command == Command::ApiCancel
            && let Outcome::Unknown(why) = &op.outcome
            && !disturbed
                .iter()
                .any(|w| w.overlaps(op.invoked, op.completed))
        {
            verdict.violate(
                Invariant::HostileInput,
                op.invoked,
                Some(&op.key),
                format!("an API cancel got no answer with no fault on: {why}"),
            );
        }
    }
    let rows: HashMap<&Key, &Row> = run.rows.iter().map(|r| (&r.key, r)).collect();
    for command in run.hostile.iter().filter(|h| h.acked) {
        let rejected = messages.iter().any(|m| {
            m.subject == format!("timer.evt.rejected.{}", command.key.tenant)
                && String::from_utf8_lossy(&m.payload).contains(&command.key.id)
        });
        if let Some(row) = rows.get(&command.key) {
            verdict.violate(
                Invariant::HostileInput,
                command.at,
                Some(&command.key),
                format!(
                    "{} was stored ({}) instead of rejected",
                    command.what, row.state
                ),
            );
        } else if !rejected {
            verdict.violate(
                Invariant::HostileInput,
                command.at,
                Some(&command.key),
                format!("{} was neither stored nor rejected", command.what),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::history::{ApiRequest, HostileCommand};
    use super::super::tests::*;
    use super::super::*;

    #[test]
    fn an_event_on_another_tenants_subject_breaks_e() {
        let mut foreign = event("k1", 5_000, 5_001, 5_002);
        foreign.subject = "timer.evt.due.globex".into();
        let history = run(
            vec![schedule("k1", 5_000, 10)],
            vec![event("k1", 5_000, 5_001, 5_002), foreign],
            vec![row("k1", "Reached", Some(5_000))],
        );
        assert_eq!(broken(&check(&history)), [Invariant::Isolation]);

        let api_reply = Seen {
            subject: "timer.evt.due.globex".into(),
            payload: br#"{"scheduled":0,"overdue":0,"nextDueAt":null}"#.to_vec(),
            at: t(100),
        };
        let on_command_subject = Seen {
            subject: "timer.cmd.cancel.globex".into(),
            payload: br#"{"scheduled":0,"overdue":0,"nextDueAt":null}"#.to_vec(),
            at: t(100),
        };
        let unscheduled = event("never", 5_000, 5_001, 5_002);
        let mut history = run(vec![], vec![], vec![]);
        history.seen = vec![api_reply, on_command_subject, unscheduled];
        let verdict = check(&history);
        assert_eq!(broken(&verdict), [Invariant::Isolation]);
        assert_eq!(verdict.violations.len(), 3);
    }

    #[test]
    fn an_unanswered_request_or_a_stored_invalid_command_breaks_g() {
        let mut history = run(vec![], vec![], vec![row("nul", "Scheduled", Some(0))]);
        history.api_requests = vec![
            ApiRequest {
                subject: "timer.api.get.acme".into(),
                what: "a key with a newline".into(),
                at: t(0),
                answered: false,
            },
            ApiRequest {
                subject: "timer.api.get.acme".into(),
                what: "invalid JSON".into(),
                at: t(0),
                answered: true,
            },
        ];
        history.hostile = vec![HostileCommand {
            key: key("nul"),
            what: "a NUL in correlationId".into(),
            at: t(0),
            acked: true,
        }];
        let verdict = check(&history);
        assert_eq!(broken(&verdict), [Invariant::HostileInput]);
        assert_eq!(verdict.violations.len(), 2);
    }
}
