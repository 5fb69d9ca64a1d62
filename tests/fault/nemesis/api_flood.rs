//! Hostile API requests and invalid commands.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use super::super::history::{ApiRequest, HostileCommand, Key, Outcome};
use super::super::workload::TENANTS;
use super::Nemesis;

const FLOOD_FOR: Duration = Duration::from_secs(2);

impl Nemesis {
    /// Hostile API requests (bodies no parser expects; reply subjects of another tenant's
    /// events and commands) and invalid commands, for a couple of seconds.
    pub(super) async fn api_flood(&mut self, notes: &mut Vec<String>) {
        let mut garbage = vec![0u8; (1 << 20) - 4096];
        let mut rng = super::super::Rng::new(self.cycle as u64 + 7);
        for byte in &mut garbage {
            *byte = rng.between(0, 256) as u8;
        }
        let bodies: Vec<(&str, Vec<u8>)> = vec![
            ("invalid JSON", b"{\"serviceCallId\": ".to_vec()),
            ("a JSON key holding a newline", br#"{"a\nb":1}"#.to_vec()),
            ("a raw newline inside a JSON key", b"{\"a\nb\":1}".to_vec()),
            ("NUL bytes", b"\0\0{\0}\0".to_vec()),
            (
                "a NUL inside a value",
                br#"{"serviceCallId":"x\u0000y"}"#.to_vec(),
            ),
            ("1 MiB of garbage", garbage),
        ];
        let verbs = ["get", "list", "cancel", "stats"];
        let before = self.api_requests.len();
        let until = std::time::Instant::now() + FLOOD_FOR;
        let mut round = 0;
        while std::time::Instant::now() < until && round < 20 {
            round += 1;
            let mut requests = Vec::new();
            for verb in verbs {
                for (what, body) in &bodies {
                    let tenant = TENANTS[round % TENANTS.len()];
                    let subject = format!("timer.api.{verb}.{tenant}");
                    let nats = self.client.nats.clone();
                    let body = body.clone();
                    let what = what.to_string();
                    requests.push(async move {
                        let at = Utc::now();
                        let reply = tokio::time::timeout(
                            Duration::from_secs(5),
                            nats.request(subject.clone(), body.into()),
                        )
                        .await;
                        ApiRequest {
                            subject,
                            what,
                            at,
                            answered: matches!(reply, Ok(Ok(_))),
                        }
                    });
                }
            }
            self.api_requests
                .extend(futures::future::join_all(requests).await);
        }
        // Replies aimed at another tenant's subjects: the service must drop them.
        for (subject, reply) in [
            ("timer.api.stats.acme", "timer.evt.due.globex"),
            ("timer.api.stats.acme", "timer.cmd.cancel.globex"),
            ("timer.api.get.acme", "timer.evt.due.initech"),
        ] {
            let body = serde_json::to_vec(&json!({ "serviceCallId": "anything" })).expect("json");
            let body = if subject.contains("stats") {
                b"{}".to_vec()
            } else {
                body
            };
            let _ = self
                .client
                .nats
                .publish_with_reply(subject, reply, body.into())
                .await;
        }
        let _ = self.client.nats.flush().await;
        // Invalid commands: a NUL in correlationId (refused by the contract's validation).
        for n in 0..3 {
            let key = Key::new("acme", &format!("hostile-{}-{n}", self.cycle));
            let mut command = crate::common::schedule_command(
                &key.tenant,
                &key.id,
                &crate::common::rfc3339(Utc::now()),
                Some("corr\u{0}elation"),
            );
            command["correlationId"] = json!("env\u{0}corr");
            let bytes = serde_json::to_vec(&command).expect("json");
            let at = Utc::now();
            let (outcome, _) = self
                .client
                .publish(&format!("timer.cmd.schedule.{}", key.tenant), &bytes)
                .await;
            self.hostile.push(HostileCommand {
                key,
                what: "a ScheduleTimer with a NUL in its correlationId".into(),
                at,
                acked: outcome == Outcome::Acked,
            });
        }
        let sent = &self.api_requests[before..];
        let answered = sent.iter().filter(|r| r.answered).count();
        notes.push(format!(
            "{} hostile API requests ({answered} answered), 3 foreign reply subjects, 3 invalid commands",
            sent.len()
        ));
    }
}
