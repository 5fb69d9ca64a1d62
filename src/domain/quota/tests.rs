use super::*;
use chrono::DateTime;
use proptest::prelude::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn schedule(tenant: &str, id: &str, seq: u64) -> Command {
    Command {
        tenant_id: tenant.into(),
        service_call_id: id.into(),
        correlation_id: "c".into(),
        action: Action::Schedule {
            due_at: DateTime::UNIX_EPOCH,
            data: None,
        },
        seq,
        received_at: DateTime::UNIX_EPOCH,
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

/// Decides `commands` (each with its offset from `start`) for tenant `acme` under `limits`, and
/// returns which were accepted.
fn decide_all(limits: Limits, start: Instant, arrivals: &[Duration]) -> Vec<bool> {
    let mut window = RateWindow::default();
    arrivals
        .iter()
        .enumerate()
        .map(|(i, offset)| {
            let command = schedule("acme", &format!("sc-{i}"), i as u64 + 1);
            decide(limits, Some(&mut window), None, &command, start + *offset).is_ok()
        })
        .collect()
}

#[test]
fn a_burst_within_a_second_has_all_past_the_limit_rejected() {
    let start = Instant::now();
    // 200 commands over 900 ms, several at each instant as a batch has them.
    let arrivals: Vec<Duration> = (0..200).map(|i| ms(i / 10 * 45)).collect();
    let accepted = decide_all(rate(50), start, &arrivals);
    assert_eq!(accepted.iter().filter(|a| **a).count(), 50);
    assert!(accepted[..50].iter().all(|a| *a), "the first 50 go in");
}

#[test]
fn room_comes_back_one_second_after_each_accepted_command() {
    let start = Instant::now();
    let mut window = RateWindow::default();
    let mut at = |offset: u64, seq: u64| {
        decide(
            rate(2),
            Some(&mut window),
            None,
            &schedule("acme", "k", seq),
            start + ms(offset),
        )
    };
    assert!(at(0, 1).is_ok());
    assert!(at(400, 2).is_ok());
    let refused = at(999, 3).unwrap_err();
    assert_eq!(refused.quota, Quota::CommandsPerSecond);
    assert_eq!(refused.limit, 2);
    // The first one is a full second old: its place is free again, the second's is not.
    assert!(at(1000, 4).is_ok());
    assert!(at(1399, 5).is_err());
    assert!(at(1400, 6).is_ok());
}

#[test]
fn refused_commands_take_no_place_in_the_window() {
    let start = Instant::now();
    let mut window = RateWindow::default();
    for seq in 0..100 {
        let _ = decide(
            rate(1),
            Some(&mut window),
            None,
            &schedule("acme", "k", seq),
            start + ms(seq * 9),
        );
    }
    // Only the first was accepted, at 0 ms: refusals since did not push the window on.
    assert!(
        decide(
            rate(1),
            Some(&mut window),
            None,
            &schedule("acme", "k", 101),
            start + ms(1000)
        )
        .is_ok()
    );
}

#[test]
fn tenants_are_counted_apart_and_forgotten_after_a_quiet_second() {
    let start = Instant::now();
    let mut window = RateWindow::default();
    for tenant in ["acme", "globex"] {
        for seq in 0..3 {
            assert!(
                decide(
                    rate(3),
                    Some(&mut window),
                    None,
                    &schedule(tenant, "k", seq),
                    start
                )
                .is_ok()
            );
        }
    }
    assert_eq!(window.tenants(), 2);
    window.forget_idle(start + ms(999));
    assert_eq!(window.tenants(), 2);
    window.record("acme", start + ms(999));
    window.forget_idle(start + ms(1000));
    assert_eq!(window.tenants(), 1, "globex was quiet for a second");
    window.forget_idle(start + ms(1999));
    assert_eq!(window.tenants(), 0);
}

#[test]
fn a_tenant_without_a_rate_limit_holds_no_state() {
    let mut window = RateWindow::default();
    let now = Instant::now();
    for seq in 0..10 {
        let mut pending = TenantPending::default();
        decide(
            pending_limit(100),
            Some(&mut window),
            Some(&mut pending),
            &schedule("acme", "k", seq),
            now,
        )
        .unwrap();
    }
    assert_eq!(window.tenants(), 0);
}

#[test]
fn cancels_are_never_refused_and_still_fill_the_window() {
    let now = Instant::now();
    let mut window = RateWindow::default();
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
    let now = Instant::now();
    let mut window = RateWindow::default();
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
    let mut window = RateWindow::default();
    let mut pending = TenantPending::default();
    let now = Instant::now();
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
        let start = Instant::now();
        let mut offset = 0;
        let arrivals: Vec<Duration> = gaps.iter().map(|gap| { offset += gap; ms(offset) }).collect();
        let accepted = decide_all(rate(limit), start, &arrivals);
        let times: Vec<Duration> = arrivals.iter().zip(&accepted).filter(|(_, a)| **a).map(|(t, _)| *t).collect();
        for (i, t) in times.iter().enumerate() {
            let within = times[i..].iter().take_while(|u| **u < *t + RATE_WINDOW).count();
            prop_assert!(within <= limit as usize, "{within} accepted within a second of {t:?}");
        }
        for (t, was_accepted) in arrivals.iter().zip(&accepted) {
            if !was_accepted {
                let before = times.iter().filter(|u| **u <= *t && *t - **u < RATE_WINDOW).count();
                prop_assert_eq!(before, limit as usize, "refused at {:?} with room", t);
            }
        }
    }

    /// A burst of `n` commands arriving within less than a second has exactly `n - limit`
    /// refused (none when `n <= limit`).
    #[test]
    fn a_burst_has_exactly_the_excess_refused(
        limit in 1u32..100,
        offsets in proptest::collection::vec(0u64..999, 1..400),
    ) {
        let mut offsets = offsets;
        offsets.sort_unstable();
        let arrivals: Vec<Duration> = offsets.into_iter().map(ms).collect();
        let accepted = decide_all(rate(limit), Instant::now(), &arrivals);
        let n = arrivals.len();
        prop_assert_eq!(accepted.iter().filter(|a| !**a).count(), n.saturating_sub(limit as usize));
    }
}

#[test]
fn a_redelivered_command_is_neither_counted_again_nor_refused_by_the_rate() {
    let now = Instant::now();
    let mut window = RateWindow::default();
    assert!(
        decide(
            rate(1),
            Some(&mut window),
            None,
            &schedule("acme", "a", 1),
            now
        )
        .is_ok()
    );
    // Handed back and delivered again within the second: accepted, and counted once.
    assert!(
        decide(
            rate(1),
            None,
            None,
            &schedule("acme", "a", 1),
            now + ms(100)
        )
        .is_ok()
    );
    assert!(
        decide(
            rate(1),
            Some(&mut window),
            None,
            &schedule("acme", "b", 2),
            now + ms(999)
        )
        .is_err()
    );
    assert!(
        decide(
            rate(1),
            Some(&mut window),
            None,
            &schedule("acme", "b", 2),
            now + ms(1000)
        )
        .is_ok()
    );
}
