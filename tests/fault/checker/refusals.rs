//! Invariant (l): a refusal is final (docs/CONTRACT.md §9). Of the schedules sent past a
//! tenant's quota while the daemon was frozen again and again (each key sent once, its copies
//! delivered again after every freeze), no key is both rejected for the quota and stored (fired,
//! or left with a row), whichever came first; and each one the broker acknowledged is one of the
//! two, never neither.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::super::history::{Instant, Key, Run};
use super::firings::Message;
use super::{Invariant, Verdict};

/// What (l) found for one flood.
#[derive(Clone, Debug, Default)]
pub struct FloodVerdict {
    pub acknowledged: usize,
    pub stored: usize,
    pub refused: usize,
    /// Rejected for the quota and stored as well.
    pub both: usize,
    /// Acknowledged, and neither stored nor rejected.
    pub neither: usize,
}

pub(super) fn check_refusals(run: &Run, messages: &[Message], verdict: &mut Verdict) {
    let rows: BTreeSet<&Key> = run.rows.iter().map(|r| &r.key).collect();
    for flood in &run.quota_floods {
        let subject = format!("timer.evt.rejected.{}", flood.tenant);
        let mut refused: BTreeMap<String, Instant> = BTreeMap::new();
        for message in messages.iter().filter(|m| m.subject == subject) {
            if let Some(id) = refused_for_quota(&message.payload) {
                let at = refused.entry(id).or_insert(message.first);
                *at = (*at).min(message.first);
            }
        }
        let mut found = FloodVerdict::default();
        for (id, acked) in &flood.sent {
            let key = Key::new(&flood.tenant, id);
            let fired = verdict
                .firings
                .get(&(key.clone(), flood.due_at))
                .map(|f| f.first);
            let stored = fired.is_some() || rows.contains(&key);
            let rejected = refused.get(id).copied();
            found.acknowledged += usize::from(*acked);
            found.stored += usize::from(stored);
            found.refused += usize::from(rejected.is_some());
            match (rejected, stored) {
                (Some(at), true) => {
                    found.both += 1;
                    verdict.violate(
                        Invariant::RefusalFinal,
                        at,
                        Some(&key),
                        format!(
                            "rejected for its quota at {at} and stored as well ({})",
                            fired.map_or("a row at the end".into(), |f| format!("fired at {f}"))
                        ),
                    );
                }
                (None, false) if *acked => {
                    found.neither += 1;
                    verdict.violate(
                        Invariant::RefusalFinal,
                        flood.due_at,
                        Some(&key),
                        "acknowledged by the broker, and neither stored nor rejected".into(),
                    );
                }
                _ => {}
            }
        }
        verdict.quota_floods.push(found);
    }
}

/// The service call id of a TimerCommandRejected whose reason is a quota, if it is one.
fn refused_for_quota(payload: &[u8]) -> Option<String> {
    let event: Value = serde_json::from_slice(payload).ok()?;
    let payload = &event["payload"];
    if !payload["reason"].as_str()?.starts_with("quota exceeded") {
        return None;
    }
    let original: Value = serde_json::from_str(payload["original"].as_str()?).ok()?;
    Some(original["payload"]["serviceCallId"].as_str()?.to_owned())
}

#[cfg(test)]
mod tests {
    use super::super::super::history::{QuotaFlood, Seen};
    use super::super::tests::*;
    use super::super::*;

    fn rejection(id: &str, reason: &str, at: i64) -> Seen {
        let original = serde_json::json!({
            "type": "ScheduleTimer",
            "tenantId": "acme",
            "payload": { "tenantId": "acme", "serviceCallId": id, "dueAt": "x" },
        });
        let event = serde_json::json!({
            "type": "TimerCommandRejected",
            "tenantId": "acme",
            "payload": { "reason": reason, "original": original.to_string() },
        });
        Seen {
            subject: "timer.evt.rejected.acme".into(),
            payload: serde_json::to_vec(&event).unwrap(),
            at: t(at),
        }
    }

    /// A flood of `ids` due at 5 s, with what the service made of them.
    fn flooded(sent: &[(&str, bool)], seen: Vec<Seen>, rows: Vec<Row>) -> Verdict {
        let mut run = run(Vec::new(), seen, rows);
        run.quota_floods.push(QuotaFlood {
            tenant: "acme".into(),
            due_at: t(5_000),
            sent: sent.iter().map(|(id, a)| (id.to_string(), *a)).collect(),
        });
        check(&run)
    }

    #[test]
    fn a_key_refused_and_stored_breaks_l_whichever_came_first() {
        let quota = "quota exceeded: commands_per_second 300 for tenant acme";
        let verdict = flooded(
            &[
                ("refused", true),
                ("stored", true),
                ("both", true),
                ("later", true),
            ],
            vec![
                rejection("refused", quota, 100),
                event("stored", 5_000, 5_001, 5_002),
                rejection("both", quota, 100),
                event("both", 5_000, 5_001, 5_002),
                rejection("later", quota, 4_000), // stored first, refused on a later copy
            ],
            vec![row("later", "Scheduled", Some(5_000))],
        );
        assert_eq!(
            verdict
                .violations
                .iter()
                .filter(|v| v.invariant == Invariant::RefusalFinal)
                .filter_map(|v| v.key.as_ref().map(|k| k.id.as_str()))
                .collect::<Vec<_>>(),
            ["both", "later"]
        );
        let found = &verdict.quota_floods[0];
        assert_eq!((found.stored, found.refused, found.both), (3, 3, 2));
    }

    #[test]
    fn an_acknowledged_key_neither_stored_nor_refused_breaks_l() {
        let verdict = flooded(
            &[
                ("lost", true),
                ("never-acknowledged", false),
                ("other", true),
            ],
            vec![rejection("other", "dueAt is not a timestamp", 100)],
            vec![],
        );
        let keys: Vec<&str> = verdict
            .violations
            .iter()
            .filter(|v| v.invariant == Invariant::RefusalFinal)
            .filter_map(|v| v.key.as_ref().map(|k| k.id.as_str()))
            .collect();
        // A rejection for another reason is not a quota's refusal.
        assert_eq!(keys, ["lost", "other"]);
        assert_eq!(verdict.quota_floods[0].neither, 2);
    }
}
