//! The web console (docs/CONTRACT.md §7): a real daemon, a real broker and timers of three
//! tenants, the console driven in Debian's headless Chromium (`scripts/browser/console.cjs`,
//! made ready by `scripts/browser-for-tests.sh`). The figures the browser shows are compared
//! with the query API's, its actions with the store; a tenant's token is refused on another
//! tenant's page and action, and a hostile id and `data` are shown as text (the browser says
//! no script of theirs ran). The HTTP refusals, and what holds without a browser, are in `tests/console_http.rs`.

mod common;

use std::process::Command;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};

use common::console::{ACME, OPERATOR, await_pending, console, state_of, stats, timer_of};

const HOSTILE_ID: &str = "<img src=x onerror=alert(1)>";
const HOSTILE_DATA: &str = "</script><script>window.__pwned=1</script>";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_apis_figures_acts_on_the_store_and_keeps_tenants_and_scripts_out() {
    let Some((chromium, node_path)) = common::browser::ready() else {
        return;
    };
    let c = console().await;
    // Due within the hour, so that the charts of the next hour show them.
    let later = Utc::now() + chrono::Duration::minutes(20);
    // acme: a batch of five under one correlation id, one to cancel alone, one hostile.
    for i in 0..5 {
        let due = later + chrono::Duration::minutes(i);
        c.client
            .schedule("acme", &format!("order-{i}"), due, Some("batch-1"))
            .await;
    }
    c.client.schedule("acme", "lonely", later, None).await;
    let mut hostile = common::schedule_command("acme", HOSTILE_ID, &common::rfc3339(later), None);
    hostile["payload"]["data"] = json!({ "note": HOSTILE_DATA });
    c.client
        .publish_traced("timer.cmd.schedule.acme", &hostile, Some(TRACEPARENT))
        .await;
    // globex: three.
    for i in 0..3 {
        c.client
            .schedule("globex", &format!("g-{i}"), later, None)
            .await;
    }
    // initech: two timers that fire before the page is opened, so it has none pending and
    // shows by what it fired.
    let soon = Utc::now() + chrono::Duration::milliseconds(300);
    for i in 0..2 {
        c.client
            .schedule("initech", &format!("i-{i}"), soon, None)
            .await;
    }
    c.client
        .await_all_fired(
            "initech",
            &["i-0".to_owned(), "i-1".to_owned()],
            Duration::from_secs(10),
        )
        .await;
    await_pending(&c.client, "acme", 7).await;
    await_pending(&c.client, "globex", 3).await;
    await_pending(&c.client, "initech", 0).await;

    let input = json!({
        "url": format!("http://{}", c.addr),
        "chromium": chromium,
        "operatorToken": OPERATOR,
        "tenantToken": ACME,
        "tenant": "acme",
        "otherTenant": "globex",
        "hostileId": HOSTILE_ID,
        "cancelId": "lonely",
        "correlationId": "batch-1",
        "screenshots": common::browser::screenshots(),
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/browser/console.cjs");
    let run = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .arg(input.to_string())
            .env("NODE_PATH", node_path)
            .output()
            .expect("node runs")
    })
    .await
    .unwrap();
    assert!(
        run.status.success(),
        "the browser run failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let seen: Value = serde_json::from_slice(&run.stdout).expect("the browser's JSON");

    // The overview shows each tenant's figures as the API gives them: the one whose timers
    // fired (it has a lateness) first, then the most pending.
    let overview = seen["overview"].as_array().unwrap();
    let tenants: Vec<&str> = overview
        .iter()
        .map(|row| row["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(tenants, ["initech", "acme", "globex"], "{seen}");
    let initech = &overview[0];
    assert_eq!(initech["firedLastMinute"], 2, "{initech}");
    assert!(
        initech["p99"].as_str().unwrap().starts_with("≤ "),
        "{initech}"
    );
    assert_eq!(overview[1]["pendingOfQuota"], "7 of 100", "{seen}");
    assert_eq!(overview[2]["pendingOfQuota"], "3 (no limit)", "{seen}");
    for row in overview {
        let api = stats(&c.client, row["tenant"].as_str().unwrap()).await;
        // Read before the browser's cancels: acme's count then was 7.
        if row["tenant"] != "acme" {
            assert_eq!(row["scheduled"], api["scheduled"], "{row}");
        }
        assert_eq!(row["overdue"], api["overdue"], "{row}");
    }
    assert_eq!(overview[1]["scheduled"], 7, "{seen}");
    let actors: Vec<&str> = seen["actors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for actor in [
        "persistence",
        "poller",
        "command_handler",
        "api_responder",
        "http",
    ] {
        assert!(actors.contains(&actor), "{actor} in {actors:?}");
    }
    // Persistence's lanes, as its metrics name them: the writer and the readers at least.
    let lanes = seen["lanes"].as_array().unwrap();
    for lane in ["writer", "reader"] {
        assert!(lanes.contains(&json!(lane)), "{lane} in {lanes:?}");
    }
    assert_eq!(seen["tenantScheduled"], 7);
    assert_eq!(seen["tenantAccepted"], 7, "acme's commands stored: {seen}");
    assert_eq!(seen["tenantQuota"], "7 of 100");
    assert_eq!(seen["timers"].as_array().unwrap().len(), 7, "{seen}");

    // The hostile id and data are text on the page; nothing of theirs ran.
    let hostile = &seen["hostile"];
    assert_eq!(hostile["idShown"], HOSTILE_ID);
    assert!(
        hostile["dataShown"]
            .as_str()
            .unwrap()
            .contains(HOSTILE_DATA),
        "{hostile}"
    );
    assert_eq!(hostile["pwned"], false);
    // Its page shows the trace id its ScheduleTimer carried, and its history as stored.
    assert_eq!(hostile["traceShown"], TRACE_ID, "{hostile}");
    let history = hostile["history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{hostile}");
    assert!(
        history[0].as_str().unwrap().contains("scheduled for"),
        "{hostile}"
    );
    assert_eq!(hostile["images"], 0, "the id became an <img>");
    assert_eq!(seen["dialogs"], 0, "a dialog opened");
    // The policy holds: an inline script added later did not run, and it is the only
    // violation the browser saw (the console's own files keep to the policy).
    assert_eq!(seen["inlineRan"], false);
    assert_eq!(seen["violations"], json!(["script-src-elem"]), "{seen}");

    // The actions reached the store: one cancelled alone, the batch by its filter.
    assert_eq!(seen["cancelOne"], "Cancel: cancelled.");
    let lonely = timer_of(&c.client, "acme", "lonely").await;
    assert_eq!(
        lonely["state"], "Cancelled",
        "the timer the page cancelled, as the API shows it now: {lonely}; the page showed it \
         after the cancel as {}",
        seen["cancelOneState"]
    );
    assert_eq!(seen["dryRun"], "5 pending timer(s) would be cancelled.");
    assert_eq!(seen["cancelMany"], "5 timer(s) cancelled.");
    for i in 0..5 {
        assert_eq!(
            state_of(&c.client, "acme", &format!("order-{i}")).await,
            "Cancelled"
        );
    }
    assert_eq!(state_of(&c.client, "acme", HOSTILE_ID).await, "Scheduled");
    assert_eq!(stats(&c.client, "acme").await["scheduled"], 1);

    // A tenant's token: its own tenant, no other's page, action or row; no daemon internals.
    assert_eq!(seen["tenantWho"], "tenant acme");
    assert!(
        seen["otherTenantPage"]
            .as_str()
            .unwrap()
            .contains("does not give access"),
        "{seen}"
    );
    assert_eq!(seen["otherTenantAction"], 403);
    assert_eq!(stats(&c.client, "globex").await["scheduled"], 3);
    assert_eq!(
        seen["tenantOverview"],
        json!({ "daemon": false, "tenants": ["acme"] })
    );
    assert_eq!(seen["tokenInUrl"], false);
    c.daemon.shutdown().await.unwrap();
}
