use super::*;
use chrono::DateTime;
use proptest::prelude::*;

/// An instant on a slot boundary, in milliseconds of the wall clock.
const START: i64 = 1_700_000_000_000;

/// A ScheduleTimer of `tenant` for key `id` (also the batch tests').
pub(super) fn schedule(tenant: &str, id: &str, seq: u64) -> Command {
    Command {
        tenant_id: tenant.into(),
        service_call_id: id.into(),
        correlation_id: "c".into(),
        action: Action::Schedule {
            due_at: DateTime::UNIX_EPOCH,
            data: None,
            expires_at: None,
        },
        seq,
        received_at: DateTime::UNIX_EPOCH,
        trace: None,
        item: None,
    }
}

fn cancel(tenant: &str, id: &str, seq: u64) -> Command {
    Command {
        action: Action::Cancel,
        ..schedule(tenant, id, seq)
    }
}

fn rate(limit: u32) -> Limits {
    Limits {
        commands_per_second: Some(limit),
        ..Limits::default()
    }
}

fn pending_limit(limit: u64) -> Limits {
    Limits {
        max_pending: Some(limit),
        ..Limits::default()
    }
}

/// Decides `commands` (each with its offset in milliseconds from `start`) for tenant `acme`
/// under `limits`, and returns which were accepted.
fn decide_all(limits: Limits, start: i64, arrivals: &[i64]) -> Vec<bool> {
    let mut window = SlotWindow::default();
    arrivals
        .iter()
        .enumerate()
        .map(|(i, offset)| {
            let command = schedule("acme", &format!("sc-{i}"), i as u64 + 1);
            decide(limits, Some(&mut window), None, &command, start + offset).is_ok()
        })
        .collect()
}

#[test]
fn a_burst_within_a_second_has_all_past_the_limit_rejected() {
    // 200 commands over 900 ms, several at each instant as a batch has them.
    let arrivals: Vec<i64> = (0..200).map(|i| i / 10 * 45).collect();
    let accepted = decide_all(rate(50), START, &arrivals);
    assert_eq!(accepted.iter().filter(|a| **a).count(), 50);
    assert!(accepted[..50].iter().all(|a| *a), "the first 50 go in");
}

#[test]
fn room_comes_back_about_one_second_after_each_accepted_command() {
    let mut window = SlotWindow::default();
    let mut at = |offset: i64, seq: u64| {
        decide(
            rate(2),
            Some(&mut window),
            None,
            &schedule("acme", "k", seq),
            START + offset,
        )
    };
    assert!(at(0, 1).is_ok());
    assert!(at(405, 2).is_ok());
    let refused = at(999, 3).unwrap_err();
    assert_eq!(refused.quota, Quota::CommandsPerSecond);
    assert_eq!(refused.limit, 2);
    // The first one's slot has passed a second: its place is free again, the second's is not.
    assert!(at(1009, 4).is_err());
    assert!(at(1010, 5).is_ok());
    assert!(at(1409, 6).is_err());
    assert!(at(1410, 7).is_ok());
}

#[test]
fn refused_commands_take_no_place_in_the_window() {
    let mut window = SlotWindow::default();
    for seq in 0..100 {
        let _ = decide(
            rate(1),
            Some(&mut window),
            None,
            &schedule("acme", "k", seq),
            START + seq as i64 * 9,
        );
    }
    // Only the first was accepted, at 0 ms: refusals since did not push the window on.
    assert!(
        decide(
            rate(1),
            Some(&mut window),
            None,
            &schedule("acme", "k", 101),
            START + 1010
        )
        .is_ok()
    );
}

#[test]
fn cancels_are_never_refused_and_still_fill_the_window() {
    let now = START;
    let mut window = SlotWindow::default();
    for seq in 0..5 {
        assert!(
            decide(
                rate(2),
                Some(&mut window),
                None,
                &cancel("acme", "k", seq),
                now
            )
            .is_ok()
        );
    }
    assert!(
        decide(
            rate(2),
            Some(&mut window),
            None,
            &schedule("acme", "k", 9),
            now
        )
        .is_err()
    );
}

#[test]
fn the_pending_limit_counts_new_keys_only() {
    let now = START;
    let mut window = SlotWindow::default();
    let mut pending = TenantPending {
        pending: 2,
        keys: HashMap::from([
            (
                "pending".to_owned(),
                KeyState {
                    state: TimerState::Scheduled,
                    seq: 10,
                },
            ),
            (
                "fired".to_owned(),
                KeyState {
                    state: TimerState::Reached,
                    seq: 11,
                },
            ),
            (
                "cancelled".to_owned(),
                KeyState {
                    state: TimerState::Cancelled,
                    seq: 12,
                },
            ),
        ]),
    };
    let limits = pending_limit(3);
    let mut run =
        |command: Command| decide(limits, Some(&mut window), Some(&mut pending), &command, now);
    // One place left: a new key takes it.
    assert!(run(schedule("acme", "new-1", 20)).is_ok());
    let refused = run(schedule("acme", "new-2", 21)).unwrap_err();
    assert_eq!(
        refused.reason("acme"),
        "quota exceeded: max_pending 3 for tenant acme"
    );
    // At the limit: a reschedule, a schedule of a fired timer, a stale redelivery of a
    // cancelled key's schedule and any cancel are accepted.
    assert!(run(schedule("acme", "pending", 22)).is_ok());
    assert!(run(schedule("acme", "fired", 23)).is_ok());
    assert!(run(schedule("acme", "cancelled", 5)).is_ok());
    assert!(run(cancel("acme", "unknown", 24)).is_ok());
    // A newer schedule of the cancelled key would add one.
    assert!(run(schedule("acme", "cancelled", 25)).is_err());
    // Cancelling a pending timer frees its place for the next new key.
    assert!(run(cancel("acme", "pending", 26)).is_ok());
    assert!(run(schedule("acme", "cancelled", 27)).is_ok());
    assert!(run(schedule("acme", "new-3", 28)).is_err());
    assert_eq!(pending.pending, 3);
}

#[test]
fn a_key_scheduled_twice_in_one_batch_counts_once() {
    let mut window = SlotWindow::default();
    let mut pending = TenantPending::default();
    let now = START;
    for seq in 1..=3 {
        decide(
            pending_limit(1),
            Some(&mut window),
            Some(&mut pending),
            &schedule("acme", "same", seq),
            now,
        )
        .unwrap();
    }
    assert_eq!(pending.pending, 1);
}

#[test]
fn limits_come_from_the_override_else_the_default() {
    let quotas = Quotas::new(
        rate(10),
        HashMap::from([("acme".to_owned(), pending_limit(5))]),
    );
    assert_eq!(quotas.limits("acme"), pending_limit(5));
    assert_eq!(quotas.limits("globex"), rate(10));
    assert_eq!(quotas.metric_tenant("acme"), "acme");
    assert_eq!(quotas.metric_tenant("globex"), OTHER_TENANTS);
    assert!(!quotas.is_unlimited());
    assert!(Quotas::default().is_unlimited());
    assert_eq!(
        quotas.to_string(),
        "default: max_pending=unlimited commands_per_second=10; \
         acme: max_pending=5 commands_per_second=unlimited"
    );
}

proptest! {
    /// Whatever the arrivals, no one-second span holds more than the limit of accepted
    /// commands, and a command is refused only when the second before it is full.
    #[test]
    fn never_more_than_the_limit_in_any_second(
        limit in 1u32..20,
        gaps in proptest::collection::vec(0u64..300, 1..300),
    ) {
        let mut offset = 0;
        let arrivals: Vec<i64> = gaps.iter().map(|gap| { offset += *gap as i64; offset }).collect();
        let accepted = decide_all(rate(limit), START, &arrivals);
        let times: Vec<i64> = arrivals.iter().zip(&accepted).filter(|(_, a)| **a).map(|(t, _)| *t).collect();
        for (i, t) in times.iter().enumerate() {
            let within = times[i..].iter().take_while(|u| **u < *t + 1_000).count();
            prop_assert!(within <= limit as usize, "{within} accepted within a second of {t}");
        }
        // Refused only when the slots a command counts in are full.
        for (t, was_accepted) in arrivals.iter().zip(&accepted) {
            if !was_accepted {
                let before = times.iter().filter(|u| **u <= *t && *t / SLOT_MS - **u / SLOT_MS < SLOTS).count();
                prop_assert_eq!(before, limit as usize, "refused at {} with room", t);
            }
        }
    }

    /// A burst of `n` commands arriving within less than a second has exactly `n - limit`
    /// refused (none when `n <= limit`).
    #[test]
    fn a_burst_has_exactly_the_excess_refused(
        limit in 1u32..100,
        offsets in proptest::collection::vec(0u64..1000, 1..400),
    ) {
        let mut offsets = offsets;
        offsets.sort_unstable();
        let arrivals: Vec<i64> = offsets.into_iter().map(|o| o as i64).collect();
        let accepted = decide_all(rate(limit), START, &arrivals);
        let n = arrivals.len();
        prop_assert_eq!(accepted.iter().filter(|a| !**a).count(), n.saturating_sub(limit as usize));
    }
}
