//! The rules table of docs/CONTRACT.md §3, row by row, and the outcome of a cancel.

use super::*;
use chrono::TimeZone;

pub(crate) fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).unwrap()
}

pub(crate) fn schedule(scid: &str, seq: u64, due_ms: i64) -> Command {
    Command {
        tenant_id: "acme".into(),
        service_call_id: scid.into(),
        correlation_id: format!("c{seq}"),
        action: Action::Schedule {
            due_at: at(due_ms),
            data: None,
            expires_at: None,
        },
        seq,
        received_at: at(seq as i64),
        trace: None,
        item: None,
    }
}

pub(crate) fn cancel(scid: &str, seq: u64) -> Command {
    Command {
        action: Action::Cancel,
        ..schedule(scid, seq, 0)
    }
}

fn with_data(mut command: Command, json: &str) -> Command {
    if let Action::Schedule { data, .. } = &mut command.action {
        *data = Some(TimerData::from_stored(json.into()).unwrap());
    }
    command
}

fn apply(row: Option<Timer>, command: &Command) -> Option<Timer> {
    apply_command(row.as_ref(), command, false).or(row)
}

#[test]
fn rounds_keep_each_keys_commands_in_order_one_per_round() {
    let commands = [
        schedule("a", 3, 30),
        schedule("a", 1, 10),
        schedule("b", 2, 20),
        cancel("a", 5),
    ];
    let out = rounds(&commands);
    let seqs: Vec<Vec<u64>> = out
        .iter()
        .map(|r| r.iter().map(|c| c.seq).collect())
        .collect();
    assert_eq!(seqs, [vec![1, 2], vec![3], vec![5]]);
}

#[test]
fn data_follows_the_last_schedule_and_survives_a_cancel() {
    let data = |row: &Option<Timer>| row.as_ref().and_then(|r| r.data.clone());
    let text = |json: &str| Some(TimerData::from_stored(json.into()).unwrap());
    let row = apply(None, &with_data(schedule("a", 1, 10), "{\"v\":1}"));
    assert_eq!(data(&row), text("{\"v\":1}"));
    let cancelled = apply(row.clone(), &cancel("a", 2));
    assert_eq!(data(&cancelled), text("{\"v\":1}"), "a cancel keeps it");
    let replaced = apply(cancelled, &with_data(schedule("a", 3, 20), "[2]"));
    assert_eq!(data(&replaced), text("[2]"), "a reschedule replaces it");
    let cleared = apply(replaced.clone(), &schedule("a", 4, 30));
    assert_eq!(data(&cleared), None, "a reschedule without data clears it");
    let stale = apply(cleared.clone(), &with_data(schedule("a", 3, 20), "[9]"));
    assert_eq!(data(&stale), None, "an older command changes nothing");
    assert_eq!(
        data(&apply(None, &cancel("t", 1))),
        None,
        "a tombstone has none"
    );
}

#[test]
fn every_row_of_the_rules_table() {
    // none + ScheduleTimer → Scheduled
    let row = apply(None, &schedule("a", 5, 100)).unwrap();
    assert_eq!(
        (row.state, row.due_at),
        (TimerState::Scheduled, Some(at(100)))
    );
    // none + CancelTimer → a tombstone
    let tomb = apply(None, &cancel("t", 5)).unwrap();
    assert_eq!((tomb.state, tomb.due_at), (TimerState::Cancelled, None));
    assert_eq!(tomb.cancelled_at, Some(at(5)));
    // a tombstone keeps an older ScheduleTimer out
    assert_eq!(
        apply(Some(tomb.clone()), &schedule("t", 4, 50)),
        Some(tomb.clone())
    );
    // Scheduled + newer ScheduleTimer → rescheduled
    let moved = apply(Some(row.clone()), &schedule("a", 6, 200)).unwrap();
    assert_eq!(
        (moved.due_at, moved.correlation_id.as_str()),
        (Some(at(200)), "c6")
    );
    assert_eq!(moved.registered_at, row.registered_at);
    // Scheduled + newer CancelTimer → Cancelled, keeping its dueAt and correlation id
    let cancelled = apply(Some(row.clone()), &cancel("a", 7)).unwrap();
    assert_eq!(cancelled.state, TimerState::Cancelled);
    assert_eq!(
        (cancelled.due_at, cancelled.correlation_id.as_str()),
        (Some(at(100)), "c5")
    );
    assert_eq!(cancelled.cancelled_at, Some(at(7)));
    // Cancelled + newer ScheduleTimer → Scheduled again with the new dueAt
    let again = apply(Some(cancelled.clone()), &schedule("a", 8, 300)).unwrap();
    assert_eq!(
        (again.state, again.due_at, again.cancelled_at),
        (TimerState::Scheduled, Some(at(300)), None)
    );
    // Cancelled + newer CancelTimer: still cancelled, first cancel time kept, newer seq
    let twice = apply(Some(cancelled.clone()), &cancel("a", 9)).unwrap();
    assert_eq!(
        (twice.state, twice.cancelled_at, twice.command_seq),
        (TimerState::Cancelled, Some(at(7)), 9)
    );
    // anything older than the last command applied is ignored
    assert_eq!(
        apply_command(Some(&cancelled), &schedule("a", 6, 999), false),
        None
    );
    assert_eq!(apply_command(Some(&row), &cancel("a", 4), false), None);
    // Reached + anything → ignored
    let reached = Timer {
        state: TimerState::Reached,
        reached_at: Some(at(101)),
        ..row.clone()
    };
    assert_eq!(
        apply_command(Some(&reached), &schedule("a", 20, 500), false),
        None
    );
    assert_eq!(apply_command(Some(&reached), &cancel("a", 21), false), None);
    // a cancel meeting a timer picked for firing comes too late, but still orders: an
    // older reschedule arriving after it changes nothing
    let refused = apply_command(Some(&row), &cancel("a", 22), true).unwrap();
    assert_eq!(
        (refused.state, refused.due_at, refused.cancelled_at),
        (TimerState::Scheduled, row.due_at, None)
    );
    assert_eq!(refused.command_seq, 22);
    assert_eq!(
        apply_command(Some(&refused), &schedule("a", 21, 999), false),
        None
    );
}

/// The outcome, read from the row after the cancel with sequence `seq` was applied.
fn outcome(before: Option<Timer>, seq: u64, being_fired: bool) -> CancelOutcome {
    let cancel = cancel("a", seq);
    let after = apply_command(before.as_ref(), &cancel, being_fired).or(before);
    CancelOutcome::of(after.as_ref(), seq)
}

#[test]
fn cancel_outcomes() {
    let row = schedule("a", 1, 10).new_row();
    assert_eq!(outcome(None, 5, false), CancelOutcome::NotFound);
    assert_eq!(
        outcome(Some(row.clone()), 5, false),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        outcome(Some(row.clone()), 5, true),
        CancelOutcome::AlreadyReached
    );
    let cancelled = apply(Some(row.clone()), &cancel("a", 3));
    assert_eq!(
        outcome(cancelled.clone(), 5, false),
        CancelOutcome::AlreadyCancelled
    );
    let tombstone = Some(cancel("a", 2).new_row());
    assert_eq!(
        outcome(tombstone, 5, false),
        CancelOutcome::AlreadyCancelled
    );
    let reached = Timer {
        state: TimerState::Reached,
        ..row.clone()
    };
    assert_eq!(
        outcome(Some(reached), 5, false),
        CancelOutcome::AlreadyReached
    );
    // Applied twice (by the API and by the CommandHandler meeting the same command): the
    // second application changes nothing and reads the same outcome.
    let once = apply(Some(row.clone()), &cancel("a", 5));
    assert_eq!(outcome(once, 5, false), CancelOutcome::Cancelled);
    let tomb_once = apply(None, &cancel("a", 5));
    assert_eq!(outcome(tomb_once, 5, false), CancelOutcome::NotFound);
    // A newer ScheduleTimer applied before the API read its outcome.
    let superseded = apply(apply(Some(row), &cancel("a", 5)), &schedule("a", 6, 99));
    assert_eq!(
        CancelOutcome::of(superseded.as_ref(), 5),
        CancelOutcome::Cancelled
    );
}

#[test]
fn state_text_round_trips() {
    for s in TimerState::ALL {
        assert_eq!(s.as_str().parse::<TimerState>().unwrap(), s);
    }
    assert!("Fired".parse::<TimerState>().is_err());
}

#[test]
fn the_deadline_follows_the_last_schedule_and_a_fired_timer_past_it_is_final() {
    let expiring = |seq: u64, due: i64, deadline: i64| {
        let mut command = schedule("k", seq, due);
        if let Action::Schedule { expires_at, .. } = &mut command.action {
            *expires_at = Some(at(deadline));
        }
        command
    };
    let first = apply(None, &expiring(1, 100, 200));
    assert_eq!(first.as_ref().unwrap().expires_at, Some(at(200)));
    let cancelled = apply(first, &cancel("k", 2));
    assert_eq!(cancelled.as_ref().unwrap().expires_at, Some(at(200)));
    let plain = apply(cancelled, &schedule("k", 3, 300));
    assert_eq!(
        plain.as_ref().unwrap().expires_at,
        None,
        "cleared by a schedule without"
    );
    let mut fired = apply(plain, &expiring(4, 400, 500)).unwrap();
    assert_eq!(fired.expires_at, Some(at(500)));
    fired.state = TimerState::Expired;
    assert_eq!(
        apply_command(Some(&fired), &schedule("k", 5, 600), false),
        None
    );
    assert_eq!(apply_command(Some(&fired), &cancel("k", 6), false), None);
    assert_eq!(
        CancelOutcome::of(Some(&fired), 6),
        CancelOutcome::AlreadyReached
    );
}
