//! Bad input: every kind of invalid command is rejected with a reason on
//! `timer.evt.rejected.<tenantId>`, terminated on the broker (never redelivered), and a valid
//! command sent right after still fires on time.

mod common;

use std::time::Duration;

use chrono::Utc;
use common::{eventually, schedule_command};
use serde_json::json;
use timer_service::actors::{CommandHandler, NamedActor};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_bad_input_is_rejected_and_valid_commands_still_fire() {
    let (_server, _scratch, daemon, client) = common::started().await;

    let good = || schedule_command("acme", "bad", "2030-01-01T00:00:00Z", None);
    let with = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut command = good();
        change(&mut command);
        serde_json::to_vec(&command).unwrap()
    };
    let acme = "timer.cmd.schedule.acme";
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            acme,
            b"{not json".to_vec(),
            "acme",
            "not a valid MessageEnvelope",
        ),
        (
            acme,
            vec![0xff, 0x00, 0xfe],
            "acme",
            "not a valid MessageEnvelope",
        ),
        (
            acme,
            with(&|c| c["type"] = json!("CancelTimer")),
            "acme",
            "unknown message type",
        ),
        (
            acme,
            with(&|c| {
                c.as_object_mut().unwrap().remove("tenantId");
            }),
            "acme",
            "missing field `tenantId`",
        ),
        (
            acme,
            with(&|c| c["tenantId"] = json!("globex")),
            "acme",
            "tenant mismatch: envelope",
        ),
        (
            acme,
            with(&|c| c["payload"]["tenantId"] = json!("globex")),
            "acme",
            "tenant mismatch: payload",
        ),
        (
            acme,
            with(&|c| {
                c["payload"]
                    .as_object_mut()
                    .unwrap()
                    .remove("serviceCallId");
            }),
            "acme",
            "missing field `serviceCallId`",
        ),
        (
            acme,
            with(&|c| c["payload"]["serviceCallId"] = json!("")),
            "acme",
            "serviceCallId",
        ),
        (
            acme,
            with(&|c| c["payload"]["serviceCallId"] = json!("x".repeat(129))),
            "acme",
            "serviceCallId",
        ),
        (
            acme,
            with(&|c| c["payload"]["serviceCallId"] = json!("tab\there")),
            "acme",
            "control character",
        ),
        (
            acme,
            with(&|c| c["payload"]["dueAt"] = json!("next tuesday")),
            "acme",
            "RFC 3339",
        ),
        (
            acme,
            with(&|c| c["payload"]["dueAt"] = json!("2030-01-01T00:00:00")),
            "acme",
            "zone",
        ),
        (
            acme,
            with(&|c| c["payload"]["dueAt"] = json!(1_900_000_000)),
            "acme",
            "invalid ScheduleTimer payload",
        ),
        (
            acme,
            with(&|c| c["payload"]["extra"] = json!("x".repeat(70_000))),
            "acme",
            "byte limit",
        ),
        (
            "timer.cmd.cancel.acme",
            with(&|_| {}),
            "acme",
            "expected \"CancelTimer\"",
        ),
        (
            "timer.cmd.cancel.acme",
            with(&|c| {
                c["type"] = json!("CancelTimer");
                c["payload"] = json!({"tenantId": "acme"});
            }),
            "acme",
            "invalid CancelTimer payload",
        ),
        (
            "timer.cmd.pause.acme",
            with(&|_| {}),
            "acme",
            "unknown command subject",
        ),
        (
            // Six tokens: read by the first consumer (five-token ones are the Sweeper's:
            // tests/strays.rs).
            "timer.cmd.schedule.acme.extra.more",
            with(&|_| {}),
            "_",
            "unknown command subject",
        ),
        (
            // `_` receives the rejections of commands that name no valid tenant: reserved.
            "timer.cmd.schedule._",
            with(&|c| {
                c["tenantId"] = json!("_");
                c["payload"]["tenantId"] = json!("_");
            }),
            "_",
            "tenantId \"_\" is reserved",
        ),
        (
            // Data a common consumer cannot read (serde_json stops at 128 deep).
            acme,
            with(&|c| {
                let mut deep = json!(1);
                for _ in 0..65 {
                    deep = json!([deep]);
                }
                c["payload"]["data"] = deep;
            }),
            "acme",
            "data nests 65 arrays or objects deep, more than the 64 allowed (max_data_depth)",
        ),
        (
            acme,
            // A number is text here: as a `Value` it would be read as a float.
            String::from_utf8(with(&|c| c["payload"]["data"] = json!({"n": "NUMBER"})))
                .unwrap()
                .replace("\"NUMBER\"", &"7".repeat(101))
                .into_bytes(),
            "acme",
            "data has a number of 101 characters, more than the 100 allowed (max_data_number_chars)",
        ),
        (
            "timer.cmd.schedule.bad~tenant",
            with(&|_| {}),
            "_",
            "tenantId",
        ),
    ];
    for (subject, bytes, _, _) in &cases {
        client.publish_raw(subject, bytes.clone()).await;
    }
    // A valid command right behind them.
    let due_at = Utc::now() + chrono::Duration::milliseconds(800);
    client.schedule("acme", "good", due_at, None).await;

    let event = client
        .await_due("acme", "good", Duration::from_secs(10))
        .await;
    assert!(event.stored_at >= due_at - chrono::Duration::milliseconds(1));
    // Not held behind them: a restarted actor or a stalled batch would hold it seconds. (On a
    // machine busy with the rest of the suite it came 1 s late once: 2 s leaves that room.)
    assert!(
        event.stored_at - due_at < chrono::Duration::milliseconds(2000),
        "valid command delayed"
    );

    let rejections = client
        .await_events("timer.evt.rejected.>", cases.len(), Duration::from_secs(10))
        .await;
    assert_eq!(
        rejections.len(),
        cases.len(),
        "one rejection per bad command"
    );
    // Each case's rejection, found by its subject and the command quoted: commands of
    // different tenants are taken in turns, so the rejections need not come in sending order.
    let mut rejections = rejections;
    for (subject, bytes, tenant, reason) in &cases {
        let original = String::from_utf8_lossy(bytes);
        let quoted = &original[..original.len().min(4096)];
        let found = rejections
            .iter()
            .position(|r| {
                r.envelope["payload"]["subject"] == *subject
                    && r.envelope["payload"]["original"] == quoted
            })
            .unwrap_or_else(|| panic!("no rejection of {subject} {quoted:.60}"));
        let rejection = rejections.remove(found);
        let e = &rejection.envelope;
        assert_eq!(rejection.subject, format!("timer.evt.rejected.{tenant}"));
        assert_eq!(e["type"], "TimerCommandRejected");
        assert_eq!(e["tenantId"], *tenant);
        let text = e["payload"]["reason"].as_str().unwrap();
        assert!(text.contains(reason), "expected {reason:?} in {text:?}");
        assert_eq!(e["payload"]["subject"], *subject);
        // Quoted whole up to 4 KiB; the start of it, flagged, past that.
        if original.len() <= 4096 {
            assert_eq!(e["payload"]["original"], original.as_ref());
            assert!(e["payload"].get("truncated").is_none());
        } else {
            assert_eq!(e["payload"]["original"], &original[..4096]);
            assert_eq!(e["payload"]["truncated"], true);
        }
    }
    assert_eq!(
        client.count_due("acme", "bad").await,
        0,
        "no rejected command was stored"
    );

    // Terminated on the broker: nothing left to redeliver.
    eventually(
        Duration::from_secs(5),
        "no outstanding commands",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;
    assert!(daemon.actor_id(CommandHandler::NAME).is_some());
    daemon.shutdown().await.unwrap();
}

/// A correlation id the database would refuse (a NUL, 3,000 characters) is rejected by
/// validation, alone: the timers sent right after it are stored and fire. A command naming
/// another tenant in its envelope or payload is reported to the tenant of its subject only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlation_ids_the_database_would_refuse_are_rejected_alone() {
    let (_server, _scratch, daemon, client) = common::started().await;
    let later = "2030-01-01T00:00:00Z";
    let long = "c".repeat(3000);
    let mut in_envelope = schedule_command("acme", "long-env", later, None);
    in_envelope["correlationId"] = json!(long);
    let mut as_globex = schedule_command("globex", "steer", later, None);
    as_globex["tenantId"] = json!("globex");
    let bad: Vec<(serde_json::Value, &str)> = vec![
        (
            schedule_command("acme", "nul", later, Some("req\u{0}42")),
            "contains a control character",
        ),
        (
            schedule_command("acme", "long", later, Some(&long)),
            "got 3000",
        ),
        (in_envelope, "envelope correlationId"),
        (as_globex, "tenant mismatch"),
    ];
    for (command, _) in &bad {
        client
            .publish_raw(
                "timer.cmd.schedule.acme",
                serde_json::to_vec(command).unwrap(),
            )
            .await;
    }
    let due_at = Utc::now() + chrono::Duration::milliseconds(500);
    let ids: Vec<String> = (0..20).map(|i| format!("after-{i}")).collect();
    for id in &ids {
        client
            .schedule("acme", id, due_at, Some(&format!("trace-{id}")))
            .await;
    }
    client
        .await_all_fired("acme", &ids, Duration::from_secs(15))
        .await;

    let rejections = client
        .await_events("timer.evt.rejected.>", bad.len(), Duration::from_secs(10))
        .await;
    assert_eq!(rejections.len(), bad.len(), "one rejection per bad command");
    for (rejection, (_, reason)) in rejections.iter().zip(&bad) {
        assert_eq!(rejection.subject, "timer.evt.rejected.acme");
        assert_eq!(rejection.envelope["tenantId"], "acme");
        let text = rejection.envelope["payload"]["reason"].as_str().unwrap();
        assert!(text.contains(reason), "expected {reason:?} in {text:?}");
    }
    for id in ["nul", "long", "long-env", "steer"] {
        assert_eq!(client.count_due("acme", id).await, 0, "{id} was stored");
    }
    assert!(
        client
            .events("timer.evt.>")
            .await
            .iter()
            .all(|e| !e.subject.ends_with(".globex"))
    );
    eventually(
        Duration::from_secs(5),
        "no outstanding commands",
        || async { (client.commands_outstanding().await == 0).then_some(()) },
    )
    .await;
    daemon.shutdown().await.unwrap();
}
