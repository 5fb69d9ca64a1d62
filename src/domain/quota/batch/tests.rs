//! Unit tests of one transaction's decisions.

use super::*;
use crate::domain::quota::tests::schedule;
use crate::domain::quota::{Limits, Quota, Refusal};

const NOW: i64 = 1_700_000_000_000;

fn quotas(limits: Limits) -> Quotas {
    Quotas::new(
        Limits::default(),
        HashMap::from([("acme".to_owned(), limits)]),
    )
}

fn none() -> BTreeSet<usize> {
    BTreeSet::new()
}

fn no_record() -> Recorded {
    Recorded::new()
}

fn batch(tenant: &str, from: u64, n: u64) -> Vec<Command> {
    (from..from + n)
        .map(|i| schedule(tenant, &format!("k-{i}"), i))
        .collect()
}

#[test]
fn transactions_of_several_daemons_share_one_window() {
    let quotas = quotas(Limits {
        commands_per_second: Some(50),
        ..Limits::default()
    });
    let mut stored = HashMap::new();
    // Three daemons' transactions within the same second, each with 30 of acme's commands
    // and 10 of a tenant without limits.
    let mut refused = 0;
    for daemon in 0..3 {
        let mut commands = batch("acme", daemon * 30, 30);
        commands.extend(batch("globex", daemon * 10, 10));
        let out = decide_batch(
            &quotas,
            &mut stored,
            HashMap::new(),
            &commands,
            &none(),
            &no_record(),
            NOW + daemon as i64,
        );
        assert!(
            out.iter()
                .all(|(i, e)| *i < 30 && e.quota == Quota::CommandsPerSecond)
        );
        refused += out.len();
    }
    assert_eq!(refused, 40, "50 of 90 accepted");
    assert_eq!(stored.len(), 1, "only limited tenants hold a state");
}

#[test]
fn the_pending_bound_spares_counts_until_the_limit_may_be_near() {
    let quotas = quotas(Limits {
        max_pending: Some(100),
        ..Limits::default()
    });
    let mut stored = HashMap::new();
    let first = batch("acme", 0, 40);
    assert_eq!(
        to_count(&quotas, &stored, &first, NOW),
        ["acme"],
        "nothing known"
    );
    let counted = HashMap::from([("acme".to_owned(), TenantPending::default())]);
    assert!(
        decide_batch(
            &quotas,
            &mut stored,
            counted,
            &first,
            &none(),
            &no_record(),
            NOW
        )
        .is_empty()
    );
    assert_eq!(stored["acme"].pending_most, Some(40));

    // Another daemon's 50: within the bound, no count.
    let second = batch("acme", 40, 50);
    assert!(to_count(&quotas, &stored, &second, NOW + 10).is_empty());
    assert!(
        decide_batch(
            &quotas,
            &mut stored,
            HashMap::new(),
            &second,
            &none(),
            &no_record(),
            NOW + 10
        )
        .is_empty()
    );
    assert_eq!(stored["acme"].pending_most, Some(90));

    // 20 more might pass the limit: counted, and exactly the excess refused.
    let third = batch("acme", 90, 20);
    assert_eq!(to_count(&quotas, &stored, &third, NOW + 20), ["acme"]);
    let counted = HashMap::from([(
        "acme".to_owned(),
        TenantPending {
            pending: 90,
            ..TenantPending::default()
        },
    )]);
    let refused = decide_batch(
        &quotas,
        &mut stored,
        counted,
        &third,
        &none(),
        &no_record(),
        NOW + 20,
    );
    assert_eq!(refused.len(), 10);
    assert!(
        refused
            .iter()
            .all(|(i, e)| *i >= 10 && e.quota == Quota::MaxPending)
    );
    assert_eq!(stored["acme"].pending_most, Some(100));

    // A bound older than a second is counted again.
    let quiet = HashMap::from([(
        "acme".to_owned(),
        TenantQuota {
            pending_most: Some(0),
            counted_at_ms: Some(NOW),
            ..TenantQuota::default()
        },
    )]);
    assert!(to_count(&quotas, &quiet, &batch("acme", 0, 1), NOW + 999).is_empty());
    assert_eq!(
        to_count(&quotas, &quiet, &batch("acme", 0, 1), NOW + 1_000),
        ["acme"]
    );
}

#[test]
fn a_command_its_key_already_applied_is_never_refused_and_takes_no_place() {
    let quotas = quotas(Limits {
        commands_per_second: Some(3),
        ..Limits::default()
    });
    // k-0..k-4, then k-9 again: its first delivery committed (seq 9) and its
    // acknowledgement was lost. k-1 (seq 1) was stored by a newer command (seq 20); k-4's
    // stored command (seq 3) is older than the one here.
    let mut commands = batch("acme", 0, 5);
    commands.push(schedule("acme", "k-9", 9));
    let mut stored = HashMap::new();
    let none_counted = HashMap::new();
    let crowded = crowded_keys(&quotas, &stored, &none_counted, &commands, NOW);
    assert_eq!(
        crowded,
        [(
            "acme".to_owned(),
            ["k-0", "k-1", "k-2", "k-3", "k-4", "k-9"]
                .map(String::from)
                .to_vec()
        )],
        "six commands cannot all fit a window of three: every key is read"
    );
    let read = HashMap::from([(
        "acme".to_owned(),
        HashMap::from([
            ("k-9".to_owned(), key(9)),
            ("k-4".to_owned(), key(3)),
            ("k-1".to_owned(), key(20)),
        ]),
    )]);
    let settled = settled(&commands, &none_counted, &read);
    assert_eq!(settled, BTreeSet::from([1, 5]));

    let refused = decide_batch(
        &quotas,
        &mut stored,
        HashMap::new(),
        &commands,
        &settled,
        &no_record(),
        NOW,
    );
    assert_eq!(
        positions(&refused),
        [4],
        "k-1 and k-9 neither refused nor counted"
    );
    assert_eq!(stored["acme"].window.clone().counted(NOW), 3);

    // A window that holds the whole batch reads nothing.
    let fits = batch("globex", 0, 3);
    assert!(crowded_keys(&quotas, &HashMap::new(), &none_counted, &fits, NOW).is_empty());
}

#[test]
fn the_keys_read_with_a_count_settle_without_another_read() {
    let quotas = quotas(Limits {
        commands_per_second: Some(1),
        max_pending: Some(10),
    });
    let commands = vec![schedule("acme", "k-0", 0), schedule("acme", "k-1", 1)];
    let counted = HashMap::from([(
        "acme".to_owned(),
        TenantPending {
            pending: 1,
            keys: HashMap::from([("k-1".to_owned(), key(1))]),
        },
    )]);
    assert!(crowded_keys(&quotas, &HashMap::new(), &counted, &commands, NOW).is_empty());
    let settled = settled(&commands, &counted, &HashMap::new());
    assert_eq!(settled, BTreeSet::from([1]));
    let mut stored = HashMap::new();
    let refused = decide_batch(
        &quotas,
        &mut stored,
        counted,
        &commands,
        &settled,
        &no_record(),
        NOW,
    );
    assert!(refused.is_empty(), "k-1 takes no place, so k-0 fits");
}

fn positions(refused: &[(usize, Exceeded)]) -> Vec<usize> {
    refused.iter().map(|(i, _)| *i).collect()
}

fn key(seq: u64) -> KeyState {
    KeyState {
        state: crate::domain::TimerState::Scheduled,
        seq,
    }
}

#[test]
fn limited_tenants_come_sorted_once_each() {
    let quotas = Quotas::new(
        Limits {
            commands_per_second: Some(1),
            ..Limits::default()
        },
        HashMap::from([("free".to_owned(), Limits::default())]),
    );
    let mut commands = batch("zeta", 0, 2);
    commands.extend(batch("free", 0, 2));
    commands.extend(batch("acme", 0, 2));
    assert_eq!(limited_tenants(&quotas, &commands), ["acme", "zeta"]);
}

#[test]
fn two_copies_of_one_command_in_a_transaction_count_once() {
    let quotas = quotas(Limits {
        commands_per_second: Some(3),
        max_pending: Some(10),
    });
    // k-0..k-3, each delivered twice (a redelivery met its first copy in one pull): the first
    // three fit the window, the fourth does not, and each copy shares its first's outcome.
    let mut commands = Vec::new();
    for command in batch("acme", 0, 4) {
        commands.push(command.clone());
        commands.push(command);
    }
    let counted = HashMap::from([("acme".to_owned(), TenantPending::default())]);
    let mut stored = HashMap::new();
    let refused = decide_batch(
        &quotas,
        &mut stored,
        counted,
        &commands,
        &none(),
        &no_record(),
        NOW,
    );
    assert_eq!(
        positions(&refused),
        [6, 7],
        "both copies of k-3, and only those"
    );
    assert_eq!(
        stored["acme"].window.clone().counted(NOW),
        3,
        "three places taken"
    );
    assert_eq!(stored["acme"].pending_most, Some(3), "three timers pending");
}

#[test]
fn a_copy_of_a_command_refused_before_is_refused_again_and_takes_no_place() {
    let quotas = quotas(Limits {
        commands_per_second: Some(3),
        ..Limits::default()
    });
    let commands = batch("acme", 0, 3);
    // k-1 was refused in an earlier transaction, under another limit; another command of the
    // same order but another key is no copy of it.
    let recorded = Recorded::from([
        (
            1,
            Refusal {
                tenant_id: "acme".into(),
                service_call_id: "k-1".into(),
                exceeded: Exceeded {
                    quota: Quota::CommandsPerSecond,
                    limit: 2,
                },
            },
        ),
        (
            2,
            Refusal {
                tenant_id: "acme".into(),
                service_call_id: "elsewhere".into(),
                exceeded: Exceeded {
                    quota: Quota::MaxPending,
                    limit: 1,
                },
            },
        ),
    ]);
    let mut stored = HashMap::new();
    let refused = decide_batch(
        &quotas,
        &mut stored,
        HashMap::new(),
        &commands,
        &none(),
        &recorded,
        NOW,
    );
    assert_eq!(
        refused,
        [(
            1,
            Exceeded {
                quota: Quota::CommandsPerSecond,
                limit: 2
            }
        )],
        "refused again with the recorded reason"
    );
    assert_eq!(
        stored["acme"].window.clone().counted(NOW),
        2,
        "k-0 and k-2 only"
    );
    // A tenant whose limits a reload lifted has the copy refused all the same.
    let lifted = Quotas::new(
        Limits::default(),
        HashMap::from([(
            "globex".to_owned(),
            Limits {
                max_pending: Some(1),
                ..Limits::default()
            },
        )]),
    );
    let refused = decide_batch(
        &lifted,
        &mut HashMap::new(),
        HashMap::new(),
        &commands,
        &none(),
        &recorded,
        NOW,
    );
    assert_eq!(positions(&refused), [1]);
}

/// The timers of one ScheduleTimers at `seq`: keys `m-0`…, positions 0….
fn message(tenant: &str, seq: u64, n: u32) -> Vec<Command> {
    (0..n)
        .map(|i| Command {
            item: Some(i),
            ..schedule(tenant, &format!("m-{seq}-{i}"), seq)
        })
        .collect()
}

#[test]
fn a_schedule_timers_past_a_quota_is_refused_whole_and_takes_no_place() {
    let quotas = quotas(Limits {
        commands_per_second: Some(10),
        ..Limits::default()
    });
    // 4 single commands, a message of 8 (only 6 would fit), then a message of 3 and a single
    // command, which fit in the room the refused message left.
    let mut commands = batch("acme", 0, 4);
    commands.extend(message("acme", 10, 8));
    commands.extend(message("acme", 11, 3));
    commands.extend(batch("acme", 20, 1));
    let mut stored = HashMap::new();
    let refused = decide_batch(
        &quotas,
        &mut stored,
        HashMap::new(),
        &commands,
        &none(),
        &no_record(),
        NOW,
    );
    assert_eq!(positions(&refused), (4..12).collect::<Vec<_>>());
    assert!(
        refused
            .iter()
            .all(|(_, e)| e.quota == Quota::CommandsPerSecond)
    );
}

#[test]
fn a_copy_of_a_refused_schedule_timers_is_refused_again_whole() {
    let quotas = quotas(Limits {
        commands_per_second: Some(100),
        ..Limits::default()
    });
    // The record names the message's first timer; every timer of a copy matches it.
    let recorded = Recorded::from([(
        10,
        Refusal {
            tenant_id: "acme".into(),
            service_call_id: "m-10-0".into(),
            exceeded: Exceeded {
                quota: Quota::MaxPending,
                limit: 5,
            },
        },
    )]);
    let commands = message("acme", 10, 4);
    let refused = decide_batch(
        &quotas,
        &mut HashMap::new(),
        HashMap::new(),
        &commands,
        &none(),
        &recorded,
        NOW,
    );
    assert_eq!(positions(&refused), vec![0, 1, 2, 3]);
    assert!(refused.iter().all(|(_, e)| e.quota == Quota::MaxPending));
}
