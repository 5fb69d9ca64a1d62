//! The output schemas (API replies, rejections) against what the service writes.

use super::*;

/// A row as the service stores it, made from a command as the service reads one.
fn timer(id: &str, state: TimerState) -> Timer {
    let body = command(
        SCHEDULE_TIMER,
        json!({ "tenantId": "acme", "serviceCallId": id, "dueAt": "2026-11-22T10:00:00.5Z" }),
    );
    let mut timer = accepted("timer.cmd.schedule.acme", &body)
        .expect("accepted")
        .new_row();
    let at = parse_stored("2026-11-22T10:00:00.504Z").ok();
    match state {
        TimerState::Scheduled => {}
        TimerState::Reached => timer.reached_at = at,
        TimerState::Expired => {
            timer.reached_at = at;
            timer.expires_at = timer.due_at;
        }
        TimerState::Cancelled => timer.cancelled_at = at,
    }
    timer.state = state;
    timer
}

fn tombstone(id: &str) -> Timer {
    let body = command(
        CANCEL_TIMER,
        json!({ "tenantId": "acme", "serviceCallId": id }),
    );
    accepted("timer.cmd.cancel.acme", &body)
        .expect("accepted")
        .new_row()
}

#[test]
fn the_reply_schemas_hold_every_reply_the_api_builds() {
    for state in TimerState::ALL {
        assert_valid(
            "api-get-reply",
            &api::get_reply(&timer("sc-7", state)).unwrap(),
        );
    }
    assert_valid("api-get-reply", &api::get_reply(&tombstone("t")).unwrap());

    let page = ListPage {
        timers: vec![tombstone("t"), timer("sc-7", TimerState::Scheduled)],
        next: Some(ListCursor {
            due_at: None,
            service_call_id: "t".into(),
        }),
    };
    assert_valid("api-list-reply", &api::list_reply(&page).unwrap());
    let empty = ListPage {
        timers: Vec::new(),
        next: None,
    };
    assert_valid("api-list-reply", &api::list_reply(&empty).unwrap());

    let outcomes = [
        (CancelOutcome::Cancelled, TimerState::Cancelled),
        (CancelOutcome::AlreadyCancelled, TimerState::Cancelled),
        (CancelOutcome::AlreadyReached, TimerState::Reached),
        (CancelOutcome::NotFound, TimerState::Cancelled),
    ];
    for (outcome, state) in outcomes {
        let reply = api::cancel_reply(outcome, Some(&timer("sc-7", state))).unwrap();
        assert_valid("api-cancel-reply", &reply);
    }
    let mut misnamed: Value =
        serde_json::from_slice(&api::cancel_reply(CancelOutcome::NotFound, None).unwrap()).unwrap();
    misnamed["outcome"] = json!("NotFound");
    assert!(verdict("api-cancel-reply", &misnamed).is_err());

    let now = parse_stored("2026-11-24T10:05:02.250Z").unwrap();
    let stats = TenantStats {
        scheduled: 14,
        overdue: 0,
        next_due_at: Some(now),
    };
    let forecast = ForecastWindow::new(now, 3).fill([(0, 12)]);
    assert_valid(
        "api-stats-reply",
        &api::stats_reply(&stats, Some(&forecast)).unwrap(),
    );
    let idle = TenantStats {
        scheduled: 0,
        overdue: 0,
        next_due_at: None,
    };
    assert_valid("api-stats-reply", &api::stats_reply(&idle, None).unwrap());

    for error in [
        ApiError::bad_request("invalid get request: missing field `serviceCallId`"),
        ApiError::not_found("no timer sc-7"),
        ApiError::unavailable("too many requests", std::time::Duration::from_millis(250)),
    ] {
        assert_valid(API_ERROR_REPLY, &error.body());
    }
}

#[test]
fn the_rejection_schema_holds_a_cut_quote_and_an_unknown_tenant() {
    let at = parse_stored("2026-11-22T10:00:00.000Z").unwrap();
    let large = vec![b'x'; 70_000];
    for (tenant, original) in [("acme", &large[..]), ("_", &b"\xff{"[..])] {
        let event = crate::domain::events::timer_command_rejected(
            tenant,
            "bad",
            "timer.cmd.x",
            original,
            at,
        );
        assert_valid(
            "timer-command-rejected",
            &serde_json::to_vec(&event).unwrap(),
        );
    }
}
