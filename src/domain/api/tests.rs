//! The API's requests and replies, unit by unit.

use super::*;
use crate::domain::data::TimerData;
use crate::domain::forecast::ForecastMinute;

#[test]
fn a_cursor_round_trips_and_a_bad_one_is_refused() {
    let dated = ListCursor {
        due_at: Some(parse_stored("2026-11-22T10:00:00.123Z").unwrap()),
        service_call_id: "sc|7".into(),
    };
    assert_eq!(ListCursor::decode(&dated.encode()).unwrap(), dated);
    let tombstone = ListCursor {
        due_at: None,
        service_call_id: "t".into(),
    };
    assert_eq!(tombstone.encode(), "|t");
    assert_eq!(ListCursor::decode("|t").unwrap(), tombstone);
    for bad in ["", "no-bar", "yesterday|x", "2026-11-22T10:00:00.000Z|"] {
        assert!(ListCursor::decode(bad).is_err(), "{bad}");
    }
}

#[test]
fn list_requests_are_validated_with_reasons() {
    let (filter, limit) = parse_list_request(b"").unwrap();
    assert_eq!((filter, limit), (ListFilter::default(), DEFAULT_LIST_LIMIT));
    let (filter, limit) = parse_list_request(
        br#"{"state":"Cancelled","dueFrom":"2026-01-01T00:00:00.0001Z","limit":1000}"#,
    )
    .unwrap();
    assert_eq!(filter.state, Some(TimerState::Cancelled));
    assert_eq!(
        filter.due_from.map(format_utc).as_deref(),
        Some("2026-01-01T00:00:00.001Z")
    );
    assert_eq!(limit, 1000);
    for (body, reason) in [
        (r#"{"limit":0}"#, "outside 1–1000"),
        (r#"{"limit":1001}"#, "outside 1–1000"),
        (r#"{"state":"Fired"}"#, "unknown timer state"),
        (r#"{"dueTo":"soon"}"#, "dueTo"),
        (r#"{"after":"nonsense"}"#, "not a cursor"),
        (r#"{"colour":"red"}"#, "unknown field"),
        ("[1,2]", "invalid list request"),
    ] {
        let error = parse_list_request(body.as_bytes()).unwrap_err();
        assert_eq!(error.code, 400);
        assert!(error.message.contains(reason), "{body}: {}", error.message);
    }
}

#[test]
fn key_requests_need_a_valid_service_call_id() {
    assert_eq!(
        parse_key_request(Verb::Get, br#"{"serviceCallId":"sc-7"}"#).unwrap(),
        "sc-7"
    );
    for body in [
        "{}",
        r#"{"serviceCallId":""}"#,
        "{not json",
        r#"{"serviceCallId":7}"#,
    ] {
        assert_eq!(
            parse_key_request(Verb::Get, body.as_bytes())
                .unwrap_err()
                .code,
            400
        );
    }
    assert!(parse_stats_request(b"{}").is_ok());
    assert!(parse_stats_request(br#"{"x":1}"#).is_err());
}

#[test]
fn a_stats_forecast_is_asked_for_in_whole_minutes_up_to_a_day() {
    assert_eq!(parse_stats_request(b"").unwrap(), None);
    assert_eq!(parse_stats_request(b"{}").unwrap(), None);
    assert_eq!(
        parse_stats_request(br#"{"forecastMinutes":null}"#).unwrap(),
        None
    );
    for (body, minutes) in [
        (r#"{"forecastMinutes":1}"#, 1),
        (r#"{"forecastMinutes":1440}"#, 1440),
    ] {
        assert_eq!(parse_stats_request(body.as_bytes()).unwrap(), Some(minutes));
    }
    for bad in [
        "0",
        "-1",
        "1441",
        "2.5",
        "3.0",
        "\"3\"",
        "true",
        "[3]",
        "1e3",
        "18446744073709551616",
    ] {
        let body = format!(r#"{{"forecastMinutes":{bad}}}"#);
        let error = parse_stats_request(body.as_bytes()).unwrap_err();
        assert_eq!(error.code, 400, "{body}");
        assert!(
            error
                .message
                .contains("forecastMinutes must be a whole number from 1 to 1440"),
            "{body}: {}",
            error.message
        );
    }
}

#[test]
fn a_stats_reply_carries_a_forecast_only_when_asked() {
    let stats = TenantStats {
        scheduled: 3,
        overdue: 1,
        next_due_at: None,
    };
    let plain: serde_json::Value =
        serde_json::from_slice(&stats_reply(&stats, None).unwrap()).unwrap();
    assert_eq!(
        plain,
        serde_json::json!({ "scheduled": 3, "overdue": 1, "nextDueAt": null })
    );
    let minute = ForecastMinute {
        minute: parse_stored("2026-11-24T10:05:00Z").unwrap(),
        due: 2,
    };
    let with: serde_json::Value =
        serde_json::from_slice(&stats_reply(&stats, Some(&[minute])).unwrap()).unwrap();
    assert_eq!(
        with["forecast"],
        serde_json::json!([{ "minute": "2026-11-24T10:05:00.000Z", "due": 2 }])
    );
    assert_eq!(with["scheduled"], 3);
}

fn timer_with_data(i: usize, data: Option<&str>) -> Timer {
    Timer {
        tenant_id: "acme".into(),
        service_call_id: format!("sc-{i:04}"),
        correlation_id: "c".into(),
        due_at: Some(parse_stored("2026-11-22T10:00:00Z").unwrap()),
        registered_at: parse_stored("2026-11-22T09:00:00Z").unwrap(),
        reached_at: None,
        cancelled_at: None,
        state: TimerState::Scheduled,
        command_seq: i as u64,
        cancelled_seq: None,
        data: data.map(|d| TimerData::from_stored(d.into()).unwrap()),
        expires_at: None,
        trace: None,
    }
}

#[test]
fn a_list_reply_shows_data_and_ends_early_rather_than_grow_past_its_limit() {
    let small = ListPage {
        timers: vec![timer_with_data(0, None), timer_with_data(1, Some("[1,2]"))],
        next: None,
    };
    let reply: serde_json::Value = serde_json::from_slice(&list_reply(&small).unwrap()).unwrap();
    assert!(reply["timers"][0].get("data").is_none(), "{reply}");
    assert_eq!(reply["timers"][1]["data"], serde_json::json!([1, 2]));
    assert!(reply.get("next").is_none());

    // 100 timers of 16 KiB each are 1.6 MB: the page stops before 512 KiB, and its cursor
    // resumes after the last timer it holds.
    let big = format!("\"{}\"", "x".repeat(16 * 1024 - 2));
    let page = ListPage {
        timers: (0..100).map(|i| timer_with_data(i, Some(&big))).collect(),
        next: Some(ListCursor {
            due_at: None,
            service_call_id: "sc-0099".into(),
        }),
    };
    let bytes = list_reply(&page).unwrap();
    assert!(bytes.len() <= MAX_LIST_REPLY_BYTES, "{}", bytes.len());
    let reply: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let held = reply["timers"].as_array().unwrap().len();
    assert!((20..32).contains(&held), "{held} timers");
    let next = ListCursor::decode(reply["next"].as_str().unwrap()).unwrap();
    assert_eq!(next.service_call_id, format!("sc-{:04}", held - 1));

    // One timer always goes out, however large.
    let one = ListPage {
        timers: vec![timer_with_data(
            0,
            Some(&format!("\"{}\"", "y".repeat(600 * 1024))),
        )],
        next: None,
    };
    let reply: serde_json::Value = serde_json::from_slice(&list_reply(&one).unwrap()).unwrap();
    assert_eq!(reply["timers"].as_array().unwrap().len(), 1);
    assert!(reply.get("next").is_none());
}

proptest::proptest! {
    /// No request body makes validation panic.
    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
        let _ = parse_list_request(&bytes);
        let _ = parse_key_request(Verb::Cancel, &bytes);
        let _ = parse_stats_request(&bytes);
    }
}
