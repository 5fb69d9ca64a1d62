use serde_json::{Value, json};

use super::MAX_TIMERS;
use crate::domain::command::{Arrival, CommandLimits, Parsed, parse_message};
use crate::domain::{Action, Command, Subjects};

const SUBJECT: &str = "timer.cmd.schedule-many.acme";

const LIMITS: CommandLimits = CommandLimits {
    max_bytes: 65_536,
    max_data_bytes: 16,
    max_data_depth: 64,
    max_data_number_chars: 100,
};

fn message(timers: Vec<Value>) -> Value {
    json!({
        "id": "01935c2e-7c1a-7b53-a8e2-4f0b9c1d2e3f",
        "type": "ScheduleTimers",
        "tenantId": "acme",
        "timestampMs": 1763798400000i64,
        "correlationId": "env-corr",
        "payload": { "tenantId": "acme", "timers": timers },
    })
}

fn timer(id: &str) -> Value {
    json!({ "serviceCallId": id, "dueAt": "2026-11-22T10:00:00.0001Z" })
}

fn parse(subject: &str, value: &Value) -> Result<Vec<Command>, String> {
    let bytes = serde_json::to_vec(value).unwrap();
    let mut n = 0;
    let arrival = Arrival {
        seq: 7,
        at: chrono::DateTime::UNIX_EPOCH,
    };
    let new_id = || {
        n += 1;
        format!("generated-{n}")
    };
    match parse_message(
        &Subjects::default(),
        subject,
        &bytes,
        LIMITS,
        arrival,
        new_id,
    ) {
        Ok(Parsed::Timers(commands)) => Ok(commands),
        Ok(other) => panic!("not a ScheduleTimers: {other:?}"),
        Err(rejection) => Err(rejection.reason),
    }
}

#[test]
fn each_timer_is_a_command_at_the_message_order_with_its_position() {
    let mut timers = vec![timer("a"), timer("b"), timer("c")];
    timers[1]["correlationId"] = json!("own");
    timers[2]["expireAfter"] = json!("PT15M");
    timers[2]["data"] = json!({"k": 1});
    let commands = parse(SUBJECT, &message(timers)).unwrap();
    let ids: Vec<&str> = commands
        .iter()
        .map(|c| c.service_call_id.as_str())
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(commands.iter().all(|c| c.seq == 7 && c.tenant_id == "acme"));
    let items: Vec<Option<u32>> = commands.iter().map(|c| c.item).collect();
    assert_eq!(items, [Some(0), Some(1), Some(2)]);
    let correlation: Vec<&str> = commands.iter().map(|c| c.correlation_id.as_str()).collect();
    assert_eq!(correlation, ["env-corr", "own", "env-corr"]);
    let Action::Schedule {
        due_at,
        data,
        expires_at,
    } = &commands[2].action
    else {
        panic!("a schedule");
    };
    assert_eq!(
        due_at.to_rfc3339(),
        "2026-11-22T10:00:00.001+00:00",
        "rounded up"
    );
    assert_eq!(data.as_ref().map(|d| d.len()), Some(7));
    assert!(expires_at.is_some());
}

#[test]
fn without_a_correlation_id_each_timer_gets_a_new_one() {
    let mut value = message(vec![timer("a"), timer("b")]);
    value["correlationId"] = Value::Null;
    let commands = parse(SUBJECT, &value).unwrap();
    assert_eq!(commands[0].correlation_id, "generated-1");
    assert_eq!(commands[1].correlation_id, "generated-2");
}

/// A change made to a message's timers.
type Change = Box<dyn Fn(&mut Vec<Value>)>;

#[test]
fn one_bad_timer_refuses_the_message_with_its_position() {
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|t| t[1]["dueAt"] = json!("soon")),
            "timers[1]: dueAt \"soon\"",
        ),
        (
            Box::new(|t| t[2]["serviceCallId"] = json!("")),
            "timers[2]: serviceCallId",
        ),
        (
            Box::new(|t| t[2]["serviceCallId"] = json!("a")),
            "timers[2]: serviceCallId \"a\" is named twice",
        ),
        (
            Box::new(|t| t[0]["data"] = json!("x".repeat(20))),
            "timers[0]: data is 22 bytes",
        ),
        (
            Box::new(|t| t[1]["expireAfter"] = json!("P1M")),
            "timers[1]: ",
        ),
        (
            Box::new(|t| t[1]["correlationId"] = json!("")),
            "timers[1]: payload correlationId",
        ),
        (Box::new(|t| t.clear()), "timers is empty"),
    ];
    for (change, reason) in cases {
        let mut timers = vec![timer("a"), timer("b"), timer("c")];
        change(&mut timers);
        let refused = parse(SUBJECT, &message(timers)).unwrap_err();
        assert!(
            refused.starts_with(reason),
            "{refused:?} does not start {reason:?}"
        );
    }
}

#[test]
fn the_message_is_held_to_its_limits_and_its_tenant() {
    let many: Vec<Value> = (0..=MAX_TIMERS).map(|i| timer(&i.to_string())).collect();
    let refused = parse(SUBJECT, &message(many)).unwrap_err();
    assert!(refused.contains("more than the 1000"), "{refused}");

    let mut other = message(vec![timer("a")]);
    other["payload"]["tenantId"] = json!("globex");
    let refused = parse(SUBJECT, &other).unwrap_err();
    assert!(refused.starts_with("tenant mismatch: payload"), "{refused}");

    let refused = parse("timer.cmd.schedule.acme", &message(vec![timer("a")])).unwrap_err();
    assert!(
        refused.starts_with("unknown message type \"ScheduleTimers\""),
        "{refused}"
    );
    let missing = json!({"tenantId": "acme"});
    let mut value = message(vec![]);
    value["payload"] = missing;
    let refused = parse(SUBJECT, &value).unwrap_err();
    assert!(
        refused.starts_with("invalid ScheduleTimers payload"),
        "{refused}"
    );
}
