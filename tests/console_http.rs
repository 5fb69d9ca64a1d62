//! The web console over plain HTTP (docs/CONTRACT.md §7): what it refuses (no token, another
//! site, a bad path), that it reads while the broker is away, and how fresh its counts are.
//! The browser tests are in `tests/console.rs`.

mod common;

use std::time::Duration;

use chrono::Utc;
use serde_json::Value;

use common::console::{ACME, Console, OPERATOR, await_pending, console, get, post, stats};
use common::{eventually, http_request};

/// The console, and one timer of globex pending, due in an hour.
async fn console_with_one_timer() -> Console {
    let c = console().await;
    let due = Utc::now() + chrono::Duration::hours(1);
    c.client.schedule("globex", "g-1", due, None).await;
    await_pending(&c.client, "globex", 1).await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_refuses_what_has_no_token_another_site_or_a_bad_path() {
    let c = console_with_one_timer().await;
    let addr = c.addr.as_str();

    // The page itself is public and carries the policy; the data are not.
    let (code, page) = common::http_get(addr, "/console").await.unwrap();
    assert_eq!(code, 200);
    assert!(page.contains("/console/assets/main.js"));
    for path in ["/console/api/overview", "/console/api/session"] {
        let (code, body) = common::http_get(addr, path).await.unwrap();
        assert_eq!(code, 401, "{path}: {body}");
    }
    let (code, _) = http_request(
        addr,
        "GET",
        "/console/api/overview",
        &[("Authorization", "Bearer not-a-token-of-anyone")],
        "",
    )
    .await
    .unwrap();
    assert_eq!(code, 401);

    // Another tenant's action by a tenant's token; the operator's from another site, or not as
    // JSON: each refused, and nothing cancelled.
    let cancel_all = "/console/api/tenants/globex/cancel-many";
    let all = r#"{"all":true}"#;
    for (token, extra) in [
        (ACME, vec![]),
        (OPERATOR, vec![("Origin", "http://evil.example")]),
        (OPERATOR, vec![("Sec-Fetch-Site", "cross-site")]),
        (OPERATOR, vec![("Content-Type", "text/plain")]),
    ] {
        let (code, body) = post(addr, cancel_all, token, &extra, all).await;
        assert_eq!(code, 403, "{extra:?}: {body}");
    }
    assert_eq!(stats(&c.client, "globex").await["scheduled"], 1);

    // A bad tenant in the path, an unknown verb, a bad body: each refused with its reason.
    for (path, body, expected) in [
        ("/console/api/tenants/%3Cscript%3E/stats", "{}", 400),
        ("/console/api/tenants/globex/drop-table", "{}", 404),
        (
            "/console/api/tenants/globex/list",
            r#"{"limit":"many"}"#,
            400,
        ),
    ] {
        let (code, answer) = post(addr, path, OPERATOR, &[], body).await;
        assert_eq!(code, expected, "{path}: {answer}");
        assert!(answer.contains("\"error\""), "{answer}");
    }

    // The operator's request goes through.
    let (code, body) = post(
        addr,
        "/console/api/tenants/globex/stats",
        OPERATOR,
        &[],
        "{}",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["scheduled"],
        1
    );
    c.daemon.shutdown().await.unwrap();
}

/// With the broker gone, the console still reads (docs/CONTRACT.md §7: its reads need only the
/// database): a tenant's list and page, and the overview, which says the broker is not
/// connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reads_while_the_broker_is_away() {
    let mut c = console_with_one_timer().await;
    tokio::task::block_in_place(|| c.server.kill());
    let addr = c.addr.clone();
    let bearer = format!("Bearer {OPERATOR}");
    let overview = eventually(
        Duration::from_secs(15),
        "the overview to say the broker is not connected",
        || async {
            let (code, body) = http_request(
                &addr,
                "GET",
                "/console/api/overview",
                &[("Authorization", &bearer)],
                "",
            )
            .await?;
            let body: Value = serde_json::from_str(&body).ok()?;
            (code == 200 && body["daemon"]["brokerConnected"] == false).then_some(body)
        },
    )
    .await;
    assert_eq!(overview["tenants"][0]["scheduled"], 1, "{overview}");
    let (code, body) = post(
        &addr,
        "/console/api/tenants/globex/list",
        OPERATOR,
        &[],
        "{}",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("g-1"), "{body}");
    let (code, body) = http_request(
        &addr,
        "GET",
        "/console/api/tenants/globex/activity",
        &[("Authorization", &bearer)],
        "",
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{body}");
    tokio::task::block_in_place(|| c.server.restart());
    c.daemon.shutdown().await.unwrap();
}

/// The counts the console shows follow the store (docs/CONTRACT.md §7): a count is served for
/// 5 s, and the request that finds it older starts the next. Asked every 250 ms, the overview's
/// count is never older than 5 s plus a count's time (milliseconds here; 3 s of slack for a
/// busy machine), and timers committed show within as long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_counts_follow_the_store_within_seconds() {
    const BOUND: Duration = Duration::from_secs(8);
    let c = console().await;
    let overview = || async {
        let (code, body) = get(&c.addr, "/console/api/overview", OPERATOR).await;
        assert_eq!(code, 200, "{body}");
        let body: Value = serde_json::from_str(&body).expect("json");
        // None until the first count is in.
        let counted_at: chrono::DateTime<Utc> = body["countedAt"].as_str()?.parse().ok()?;
        let age = (Utc::now() - counted_at).to_std().unwrap_or_default();
        assert!(age <= BOUND, "a count {age:?} old: {body}");
        let globex = body["tenants"]
            .as_array()
            .and_then(|rows| rows.iter().find(|row| row["tenantId"] == "globex"))
            .map(|row| row["scheduled"].as_u64().unwrap_or(0));
        Some(globex.unwrap_or(0))
    };
    eventually(Duration::from_secs(5), "a first count", || async {
        (overview().await == Some(0)).then_some(())
    })
    .await;
    let due = Utc::now() + chrono::Duration::hours(1);
    for id in ["g-1", "g-2", "g-3"] {
        c.client.schedule("globex", id, due, None).await;
    }
    await_pending(&c.client, "globex", 3).await;
    let committed = tokio::time::Instant::now();
    loop {
        if overview().await == Some(3) {
            break;
        }
        assert!(
            committed.elapsed() <= BOUND,
            "three timers committed {:?} ago are not counted yet",
            committed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "three timers counted {:?} after their commit",
        committed.elapsed()
    );
    // Asked on, for as long again: every answer's count stays within the bound.
    let until = tokio::time::Instant::now() + Duration::from_secs(6);
    while tokio::time::Instant::now() < until {
        assert_eq!(overview().await, Some(3));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    c.daemon.shutdown().await.unwrap();
}

/// A tenant's forecasts are read once for every page that shows them (docs/CONTRACT.md §7):
/// pages asking at once get the same read of the week (kept a minute), and the next hour's
/// read is made again after a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_forecasts_are_read_once_for_every_page() {
    let c = console_with_one_timer().await;
    let page = || async {
        let path = "/console/api/tenants/globex/activity?week";
        let (code, body) = get(&c.addr, path, OPERATOR).await;
        assert_eq!(code, 200, "{body}");
        let body: Value = serde_json::from_str(&body).expect("json");
        // None while a read is under way (the week's first page waits only 0.3 s for it).
        let read_at = |span: &str| {
            let read = &body[span];
            read["due"].as_array()?;
            read["readAt"].as_str().map(str::to_owned)
        };
        Some((read_at("nextHour")?, read_at("nextWeek")?))
    };
    let (hour, week) = eventually(Duration::from_secs(10), "both forecasts read", page).await;
    let pages = futures::future::join_all((0..5).map(|_| page())).await;
    for other in &pages {
        let (_, other) = other.as_ref().expect("read once, then kept");
        assert_eq!(other, &week, "one read of the week for every page");
    }
    eventually(
        Duration::from_secs(10),
        "the next hour read again",
        || async {
            let later = page().await.map(|(hour, _)| hour);
            tokio::time::sleep(Duration::from_millis(250)).await;
            later.is_some_and(|later| later != hour).then_some(())
        },
    )
    .await;
    c.daemon.shutdown().await.unwrap();
}
