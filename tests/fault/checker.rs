//! The checker: pure functions from a recorded [`Run`] to the violations of the contract's
//! invariants (docs/CONTRACT.md §1, §3, §5, §6). Nothing here does I/O, so each rule is shown on
//! small hand-made histories in the tests at the bottom.
//!
//! The invariants:
//! - (a) every acknowledged ScheduleTimer that is its key's last command fires: an event for
//!   (tenant, key, dueAt) exists;
//! - (b) nothing fires early: `reachedAt ≥ dueAt` always, and the time an event was received (or
//!   stored) is not before its `dueAt` — except while the daemon's clock ran ahead, when only
//!   `reachedAt` is judged (on SQLite the contract judges by the daemon's own clock);
//! - (c) a cancel the API answered `cancelled`, or one that left the key's final row
//!   `Cancelled`, is never followed by an event for the `dueAt` it cancelled;
//! - (d) the last command per key wins: the final row agrees with the last acknowledged
//!   command. A command may lose to a firing only when the firing came first: the event was
//!   out before the command was acknowledged (plus a moment), or a fault held the command up
//!   (the command's acknowledgement and the firing are separated by a disturbed period);
//! - (e) isolation: every message on `timer.evt.due.<t>` is a DueTimeReached of tenant t for a
//!   (key, dueAt) tenant t scheduled; rejections appear only for tenants that sent invalid
//!   commands; every message on `timer.cmd.<verb>.<t>` is a command of that verb and tenant;
//!   nothing else appears on `timer.evt.>`;
//! - (f) liveness: after each fault heals, a probe timer (due about a second later) of every
//!   tenant fires within [`LIVENESS_BOUND`];
//! - (g) hostile input: every API request is answered, and an invalid command is rejected,
//!   never stored;
//! - (h) fairness: while one tenant loads the service (a burst fired with no fault on, a flood
//!   of heavy reads), the other tenants' timers due meanwhile fire within a second (in
//!   `fairness`).
//!
//! Duplicates (one firing stored more than once) are allowed and counted.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::Duration;
use serde_json::Value;

use super::fairness::check_fairness;
use super::history::{CancelAnswer, Command, Instant, Key, Op, Outcome, Row, Run, Seen, Window};

/// How long after a fault heals every tenant's probe timer must have fired.
pub const LIVENESS_BOUND: Duration = Duration::seconds(20);
/// A firing this soon after a command's PubAck may have won the race against it.
pub const RACE_SLACK: Duration = Duration::milliseconds(1500);
/// A fault disturbs from its start until its probes fired, plus this.
pub const DISTURBED_GRACE: Duration = Duration::seconds(2);
/// After the daemon's clock is set right again, events it published just before still arrive.
pub const CLOCK_GRACE: Duration = Duration::seconds(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    Fires,
    NotEarly,
    CancelHolds,
    LastWins,
    Isolation,
    Liveness,
    HostileInput,
    Fairness,
}

impl Invariant {
    pub const ALL: [Invariant; 8] = [
        Self::Fires,
        Self::NotEarly,
        Self::CancelHolds,
        Self::LastWins,
        Self::Isolation,
        Self::Liveness,
        Self::HostileInput,
        Self::Fairness,
    ];

    pub fn letter(self) -> &'static str {
        match self {
            Self::Fires => "a",
            Self::NotEarly => "b",
            Self::CancelHolds => "c",
            Self::LastWins => "d",
            Self::Isolation => "e",
            Self::Liveness => "f",
            Self::HostileInput => "g",
            Self::Fairness => "h",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Fires => "an acknowledged schedule (its key's last command) fires",
            Self::NotEarly => "no event before its dueAt",
            Self::CancelHolds => "a cancel that took effect is never followed by its event",
            Self::LastWins => "the last command per key wins",
            Self::Isolation => "a tenant's subjects carry only its own events",
            Self::Liveness => "after a fault heals, new timers fire within the bound",
            Self::HostileInput => "every API request is answered, invalid commands rejected",
            Self::Fairness => {
                "one tenant's burst or heavy reads do not hold up the others' timers (1 s bound)"
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub invariant: Invariant,
    /// When it happened (or was seen), to place it in the fault that was on then.
    pub at: Instant,
    pub key: Option<Key>,
    pub detail: String,
}

/// One firing: a (key, dueAt) as seen by the subscriber or stored in the stream.
#[derive(Clone, Debug)]
pub struct Firing {
    /// The earliest moment it was seen (received, or stored when no subscriber saw it).
    pub first: Instant,
    pub reached_at: Option<Instant>,
    /// Copies stored in the event stream (more than one is a duplicate).
    pub stored: usize,
}

#[derive(Debug, Default)]
pub struct Verdict {
    pub violations: Vec<Violation>,
    pub firings: BTreeMap<(Key, Instant), Firing>,
    /// Extra stored copies of one firing: (key, dueAt, when the copy was stored).
    pub duplicates: Vec<(Key, Instant, Instant)>,
    /// Early events (also among the violations): (key, dueAt, when seen).
    pub early: Vec<(Key, Instant, Instant)>,
    /// Per fault (in order): how long after the heal every probe had fired.
    pub refire: Vec<Option<Duration>>,
    /// Commands that lost a race against a firing the contract allows.
    pub lost_races: usize,
}

impl Verdict {
    pub(super) fn violate(
        &mut self,
        invariant: Invariant,
        at: Instant,
        key: Option<&Key>,
        detail: String,
    ) {
        self.violations.push(Violation {
            invariant,
            at,
            key: key.cloned(),
            detail,
        });
    }
}

/// Judges a whole run.
pub fn check(run: &Run) -> Verdict {
    let mut verdict = Verdict::default();
    let messages = distinct_messages(run);
    collect_firings(run, &messages, &mut verdict);
    check_not_early(run, &messages, &mut verdict);
    check_isolation(run, &messages, &mut verdict);
    verdict.refire = refire_times(run, &verdict.firings);
    check_liveness(run, &mut verdict);
    let disturbed = disturbed_windows(run, &verdict.refire);
    check_keys(run, &disturbed, &mut verdict);
    check_hostile(run, &messages, &disturbed, &mut verdict);
    check_fairness(run, &disturbed, &mut verdict);
    verdict.violations.sort_by_key(|v| v.at);
    verdict
}

/// A message seen on the wire or in the stream, once, with the earliest time it was seen and the
/// number of copies in the stream.
#[derive(Debug)]
pub struct Message {
    pub subject: String,
    pub payload: Vec<u8>,
    pub first: Instant,
    /// Every moment it was observed (subscriber receipts and stream stores).
    pub observed: Vec<Instant>,
    pub stored: usize,
}

pub fn distinct_messages(run: &Run) -> Vec<Message> {
    let mut by_content: HashMap<(&str, &[u8]), Message> = HashMap::new();
    let all = run
        .seen
        .iter()
        .map(|s| (s, false))
        .chain(run.stream.iter().map(|s| (s, true)));
    for (seen, stored) in all {
        let entry = by_content
            .entry((seen.subject.as_str(), seen.payload.as_slice()))
            .or_insert_with(|| Message {
                subject: seen.subject.clone(),
                payload: seen.payload.clone(),
                first: seen.at,
                observed: Vec::new(),
                stored: 0,
            });
        entry.first = entry.first.min(seen.at);
        entry.observed.push(seen.at);
        entry.stored += usize::from(stored);
    }
    let mut out: Vec<Message> = by_content.into_values().collect();
    out.sort_by_key(|m| m.first);
    out
}

/// A DueTimeReached read from `timer.evt.due.<tenant>`.
#[derive(Debug, Clone, PartialEq)]
pub struct DueEvent {
    pub key: Key,
    pub due_at: Instant,
    pub reached_at: Instant,
}

/// Parses a message on `timer.evt.due.<t>` as a DueTimeReached of tenant t, or says why it is
/// not one.
pub fn parse_due(subject: &str, payload: &[u8]) -> Result<DueEvent, String> {
    let tenant = subject
        .strip_prefix("timer.evt.due.")
        .filter(|t| !t.is_empty() && !t.contains('.'))
        .ok_or_else(|| format!("not a due subject: {subject}"))?;
    let envelope: Value = serde_json::from_slice(payload)
        .map_err(|e| format!("not JSON ({e}): {}", preview(payload)))?;
    if envelope["type"] != "DueTimeReached" {
        return Err(format!("not a DueTimeReached: {}", preview(payload)));
    }
    let body = &envelope["payload"];
    if envelope["tenantId"] != tenant || body["tenantId"] != tenant {
        return Err(format!(
            "an event of another tenant on {subject}: {}",
            preview(payload)
        ));
    }
    let instant = |field: &str| -> Result<Instant, String> {
        body[field]
            .as_str()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("no valid {field}: {}", preview(payload)))
    };
    let id = body["serviceCallId"]
        .as_str()
        .ok_or_else(|| format!("no serviceCallId: {}", preview(payload)))?;
    Ok(DueEvent {
        key: Key::new(tenant, id),
        due_at: instant("dueAt")?,
        reached_at: instant("reachedAt")?,
    })
}

pub fn preview(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let short: String = text.chars().take(120).collect();
    short.escape_debug().to_string()
}

fn collect_firings(run: &Run, messages: &[Message], verdict: &mut Verdict) {
    // The same firing can be published in two envelopes (a republish after a crash has a new
    // envelope id): group by (key, dueAt).
    let mut stored_at: BTreeMap<(Key, Instant), Vec<Instant>> = BTreeMap::new();
    for seen in &run.stream {
        if let Ok(event) = parse_due(&seen.subject, &seen.payload) {
            stored_at
                .entry((event.key, event.due_at))
                .or_default()
                .push(seen.at);
        }
    }
    for message in messages {
        let Ok(event) = parse_due(&message.subject, &message.payload) else {
            continue;
        };
        let firing = verdict
            .firings
            .entry((event.key.clone(), event.due_at))
            .or_insert(Firing {
                first: message.first,
                reached_at: Some(event.reached_at),
                stored: 0,
            });
        firing.first = firing.first.min(message.first);
        firing.reached_at = firing.reached_at.min(Some(event.reached_at));
    }
    for ((key, due_at), mut times) in stored_at {
        times.sort();
        if let Some(firing) = verdict.firings.get_mut(&(key.clone(), due_at)) {
            firing.stored = times.len();
        }
        for extra in times.iter().skip(1) {
            verdict.duplicates.push((key.clone(), due_at, *extra));
        }
    }
}

/// Whether `t` falls while the daemon's clock ran ahead (or just after, while its last events
/// were still on their way).
pub(super) fn clock_ahead(run: &Run, t: Instant) -> bool {
    run.clock_ahead.iter().any(|w| {
        Window {
            from: w.from,
            to: w.to + CLOCK_GRACE,
        }
        .contains(t)
    })
}

fn check_not_early(run: &Run, messages: &[Message], verdict: &mut Verdict) {
    let mut reported = BTreeSet::new();
    for message in messages {
        let Ok(event) = parse_due(&message.subject, &message.payload) else {
            continue;
        };
        let firing = (event.key.clone(), event.due_at);
        if event.reached_at < event.due_at && reported.insert(firing.clone()) {
            verdict
                .early
                .push((event.key.clone(), event.due_at, message.first));
            verdict.violate(
                Invariant::NotEarly,
                message.first,
                Some(&event.key),
                format!(
                    "reachedAt {} is before dueAt {}",
                    event.reached_at, event.due_at
                ),
            );
            continue;
        }
        for &at in &message.observed {
            if at < event.due_at && !clock_ahead(run, at) && reported.insert(firing.clone()) {
                verdict.early.push((event.key.clone(), event.due_at, at));
                verdict.violate(
                    Invariant::NotEarly,
                    at,
                    Some(&event.key),
                    format!(
                        "seen at {at}, {} ms before its dueAt {}",
                        (event.due_at - at).num_milliseconds(),
                        event.due_at
                    ),
                );
            }
        }
    }
}

fn check_isolation(run: &Run, messages: &[Message], verdict: &mut Verdict) {
    let scheduled: BTreeSet<(&Key, Instant)> = run
        .ops
        .iter()
        .filter_map(|op| op.due_at().map(|due| (&op.key, due)))
        .collect();
    let hostile: BTreeSet<&Key> = run.hostile.iter().map(|h| &h.key).collect();
    for message in messages {
        let subject = message.subject.as_str();
        let problem = if subject.starts_with("timer.evt.due.") {
            match parse_due(subject, &message.payload) {
                Ok(event)
                    if scheduled.contains(&(&event.key, event.due_at))
                        || hostile.contains(&event.key) =>
                {
                    None
                }
                Ok(event) => Some(format!(
                    "an event for {} due {} that tenant never scheduled",
                    event.key, event.due_at
                )),
                Err(why) => Some(why),
            }
        } else if let Some(tenant) = subject.strip_prefix("timer.evt.rejected.") {
            let envelope: Value = serde_json::from_slice(&message.payload).unwrap_or_default();
            if envelope["type"] != "TimerCommandRejected" {
                Some(format!("not a rejection: {}", preview(&message.payload)))
            } else if !run.hostile_tenants.contains(tenant) {
                Some(format!(
                    "a rejection for tenant {tenant}, which sent no invalid command: {}",
                    preview(&message.payload)
                ))
            } else {
                None
            }
        } else if let Some(rest) = subject.strip_prefix("timer.cmd.") {
            command_problem(rest, &message.payload)
        } else {
            Some(format!(
                "a message on {subject}: {}",
                preview(&message.payload)
            ))
        };
        if let Some(problem) = problem {
            verdict.violate(
                Invariant::Isolation,
                message.first,
                None,
                format!("{subject}: {problem}"),
            );
        }
    }
}

/// What is wrong with a message on `timer.cmd.<rest>`, if anything: it must be a command of the
/// subject's verb and tenant (what a client of that tenant sends).
fn command_problem(rest: &str, payload: &[u8]) -> Option<String> {
    let (verb, tenant) = rest.split_once('.')?;
    let expected = match verb {
        "schedule" => "ScheduleTimer",
        "cancel" => "CancelTimer",
        _ => return Some(format!("unknown command subject verb {verb}")),
    };
    let envelope: Value = serde_json::from_slice(payload).unwrap_or_default();
    (envelope["type"] != expected || envelope["tenantId"] != tenant)
        .then(|| format!("not a {expected} of tenant {tenant}: {}", preview(payload)))
}

/// Per fault: the time from its heal until every probe had fired (`None`: some never did, or
/// the fault was skipped).
pub fn refire_times(
    run: &Run,
    firings: &BTreeMap<(Key, Instant), Firing>,
) -> Vec<Option<Duration>> {
    let mut dues: HashMap<&Key, Vec<Instant>> = HashMap::new();
    for op in &run.ops {
        if let Some(due) = op.due_at() {
            dues.entry(&op.key).or_default().push(due);
        }
    }
    run.faults
        .iter()
        .map(|fault| {
            if fault.skipped.is_some() || fault.probes.is_empty() {
                return None;
            }
            let mut worst = Duration::zero();
            for probe in &fault.probes {
                let fired = dues
                    .get(probe)?
                    .iter()
                    .filter_map(|due| firings.get(&(probe.clone(), *due)))
                    .map(|f| f.first)
                    .min()?;
                worst = worst.max(fired - fault.healed);
            }
            Some(worst)
        })
        .collect()
}

fn check_liveness(run: &Run, verdict: &mut Verdict) {
    for (fault, refire) in run.faults.iter().zip(verdict.refire.clone()) {
        if fault.skipped.is_some() || fault.probes.is_empty() {
            continue;
        }
        match refire {
            Some(took) if took <= LIVENESS_BOUND => {}
            Some(took) => verdict.violate(
                Invariant::Liveness,
                fault.healed,
                fault.probes.first(),
                format!(
                    "after {}: the probes (and the fault's own timers) had all fired only {} s after the heal",
                    fault.name,
                    took.num_milliseconds() as f64 / 1000.0
                ),
            ),
            None => verdict.violate(
                Invariant::Liveness,
                fault.healed,
                fault.probes.first(),
                format!(
                    "after {}: a probe timer (or one of the fault's own) never fired (run ended {} s after the heal)",
                    fault.name,
                    run.ended
                        .map_or(0, |end| (end - fault.healed).num_seconds())
                ),
            ),
        }
    }
}

/// Periods in which a command may be held up: each fault that disturbs (not one tenant's heavy
/// reads, which the service must absorb) from its start until its probes fired (the whole rest
/// of the run if they never did), and at least until the commands the service held when it
/// broke are delivered again (the command consumer's ack wait after the heal), plus
/// [`DISTURBED_GRACE`].
pub fn disturbed_windows(run: &Run, refire: &[Option<Duration>]) -> Vec<Window> {
    let end = run
        .ended
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
    let held_back = Duration::from_std(timer_service::ports::COMMAND_ACK_WAIT)
        .unwrap_or_else(|_| Duration::seconds(5));
    run.faults
        .iter()
        .zip(refire)
        .filter(|(fault, _)| fault.skipped.is_none() && fault.disturbs)
        .map(|(fault, refire)| Window {
            from: fault.started,
            to: refire.map_or(end, |took| {
                fault.healed + took.max(held_back) + DISTURBED_GRACE
            }),
        })
        .collect()
}

/// Whether a fault (its disturbed window `w`) may have held up a command acknowledged at
/// `acked` until after a firing at `fired`: the command was acknowledged while the fault was on
/// (or a moment before it began, not yet applied), and the firing came before the service was
/// shown to be processing commands again.
pub fn held_up(w: &Window, acked: Instant, fired: Instant) -> bool {
    w.from - RACE_SLACK <= acked && acked <= w.to && fired <= w.to + RACE_SLACK
}

/// The dueAts a cancel at `index` cancelled: those of the schedules since the last
/// acknowledged one before it.
pub fn cancelled_dues(ops: &[&Op], index: usize) -> Vec<Instant> {
    let mut dues = Vec::new();
    for op in ops[..index].iter().rev() {
        if let Some(due) = op.due_at() {
            dues.push(due);
            if op.decisive() {
                break;
            }
        }
    }
    dues
}

fn check_keys(run: &Run, disturbed: &[Window], verdict: &mut Verdict) {
    // A command still unprocessed in the command stream when an operator deleted it went with
    // the stream: it counts as never acknowledged.
    let destroyed: Vec<Op> = run
        .ops
        .iter()
        .map(|op| {
            let mut op = op.clone();
            if op.outcome == Outcome::Acked
                && run.destroyed.iter().any(|w| w.contains(op.completed))
            {
                op.outcome = Outcome::Unknown("in the command stream when it was deleted".into());
            }
            op
        })
        .collect();
    let mut by_key: BTreeMap<&Key, Vec<&Op>> = BTreeMap::new();
    for op in &destroyed {
        by_key.entry(&op.key).or_default().push(op);
    }
    let rows: HashMap<&Key, &Row> = run.rows.iter().map(|r| (&r.key, r)).collect();
    for (key, ops) in by_key {
        let fired: BTreeMap<Instant, Instant> = verdict
            .firings
            .range((key.clone(), Instant::MIN_UTC)..=(key.clone(), Instant::MAX_UTC))
            .map(|((_, due), f)| (*due, f.first))
            .collect();
        let row = rows.get(key).copied();
        check_key(key, &ops, row, &fired, disturbed, verdict);
    }
}

fn describe_row(row: Option<&Row>) -> String {
    match row {
        None => "no row".into(),
        Some(row) => match row.due_at {
            Some(due) => format!("row {} due {due}", row.state),
            None => format!("row {} (tombstone)", row.state),
        },
    }
}

/// (a), (c) and (d) for one key: its operations in order, its final row, and its firings
/// (dueAt → first seen).
pub fn check_key(
    key: &Key,
    ops: &[&Op],
    row: Option<&Row>,
    fired: &BTreeMap<Instant, Instant>,
    disturbed: &[Window],
    verdict: &mut Verdict,
) {
    // (c) a cancel the API answered `cancelled` is never followed by the cancelled firing.
    let mut api_cancelled = BTreeSet::new();
    for (index, op) in ops.iter().enumerate() {
        if op.outcome == Outcome::Answered(CancelAnswer::Cancelled) {
            for due in cancelled_dues(ops, index) {
                api_cancelled.insert(due);
                if let Some(&at) = fired.get(&due) {
                    verdict.violate(
                        Invariant::CancelHolds,
                        op.completed,
                        Some(key),
                        format!(
                            "the API answered `cancelled` at {}, yet the timer due {due} fired at {at}",
                            op.completed
                        ),
                    );
                }
            }
        }
    }
    let Some(last) = ops.iter().rposition(|op| op.decisive()) else {
        return; // nothing known to have taken effect: any outcome is possible
    };
    let trailing = &ops[last + 1..];
    let row_state = row.map(|r| r.state.as_str());
    let row_due = row.and_then(|r| r.due_at);
    // The schedule that set the row's dueAt, if any.
    let setter = row_due.and_then(|due| ops.iter().rposition(|op| op.due_at() == Some(due)));
    let lost_race = |verdict: &mut Verdict, setter: usize| {
        let Some(&fired_at) = row_due.and_then(|due| fired.get(&due)) else {
            return false;
        };
        for op in ops[setter + 1..=last].iter().filter(|op| op.decisive()) {
            match op.outcome {
                Outcome::Answered(CancelAnswer::AlreadyReached) => continue,
                Outcome::Answered(CancelAnswer::Cancelled) => return true, // reported as (c)
                _ => {}
            }
            let excused = fired_at <= op.completed + RACE_SLACK
                || disturbed.iter().any(|w| held_up(w, op.completed, fired_at));
            if !excused {
                verdict.violate(
                    Invariant::LastWins,
                    op.completed,
                    Some(key),
                    format!(
                        "{:?} acknowledged at {} was ignored: the timer due {} fired at {}, \
                         {} ms after the acknowledgement, with no fault in between ({})",
                        op.command,
                        op.completed,
                        row_due.map_or_else(String::new, |d| d.to_string()),
                        fired_at,
                        (fired_at - op.completed).num_milliseconds(),
                        describe_row(row)
                    ),
                );
                return true;
            }
        }
        verdict.lost_races += 1;
        true
    };
    let op = ops[last];
    match (&op.command, &op.outcome) {
        (Command::Schedule { due_at }, _) => {
            if let Some(&fired_at) = fired.get(due_at) {
                if row_state != Some("Reached") || row_due != Some(*due_at) {
                    verdict.violate(
                        Invariant::LastWins,
                        fired_at,
                        Some(key),
                        format!(
                            "fired (due {due_at}) but the final row is not Reached with that dueAt: {}",
                            describe_row(row)
                        ),
                    );
                }
                return;
            }
            // A command that may have been stored after it explains the row.
            let trailing_explains = trailing.iter().any(|t| match t.command {
                Command::Schedule { due_at } => fired.contains_key(&due_at),
                Command::Cancel | Command::ApiCancel => row_state == Some("Cancelled"),
            });
            if trailing_explains {
                return;
            }
            if row_state == Some("Reached")
                && let Some(setter) = setter.filter(|&s| s < last)
                && lost_race(verdict, setter)
            {
                return;
            }
            verdict.violate(
                Invariant::Fires,
                op.completed,
                Some(key),
                format!(
                    "acknowledged at {} (its key's last command), due {due_at}, never fired; {}",
                    op.completed,
                    describe_row(row)
                ),
            );
        }
        (Command::Cancel | Command::ApiCancel, outcome) => {
            if *outcome == Outcome::Answered(CancelAnswer::AlreadyReached) && fired.is_empty() {
                verdict.violate(
                    Invariant::LastWins,
                    op.completed,
                    Some(key),
                    "the API answered `already_reached`, but no event of this key exists".into(),
                );
            }
            match row_state {
                Some("Cancelled") => {
                    for due in cancelled_dues(ops, last) {
                        if let Some(&at) = fired.get(&due)
                            && !api_cancelled.contains(&due)
                        {
                            verdict.violate(
                                Invariant::CancelHolds,
                                op.completed,
                                Some(key),
                                format!(
                                    "the final row is Cancelled (cancel acknowledged at {}), \
                                     yet the timer due {due} fired at {at}",
                                    op.completed
                                ),
                            );
                        }
                    }
                }
                Some("Reached") => {
                    let explained = match setter {
                        Some(s) if s > last => fired.contains_key(&row_due.unwrap_or_default()),
                        Some(s) => lost_race(verdict, s),
                        None => false,
                    };
                    if !explained {
                        verdict.violate(
                            Invariant::LastWins,
                            op.completed,
                            Some(key),
                            format!(
                                "{:?} acknowledged at {}: {} without an event to show for it",
                                op.command,
                                op.completed,
                                describe_row(row)
                            ),
                        );
                    }
                }
                _ => {
                    let explained = trailing.iter().any(|t| t.due_at().is_some())
                        && row_state == Some("Scheduled");
                    if !explained {
                        verdict.violate(
                            Invariant::LastWins,
                            op.completed,
                            Some(key),
                            format!(
                                "{:?} acknowledged at {} (its key's last command), but {}",
                                op.command,
                                op.completed,
                                describe_row(row)
                            ),
                        );
                    }
                }
            }
        }
    }
}

fn check_hostile(run: &Run, messages: &[Message], disturbed: &[Window], verdict: &mut Verdict) {
    for request in &run.api_requests {
        if !request.answered {
            verdict.violate(
                Invariant::HostileInput,
                request.at,
                None,
                format!("no reply to {} on {}", request.what, request.subject),
            );
        }
    }
    // A workload cancel through the API that got no answer while nothing was wrong.
    for op in &run.ops {
        if op.command == Command::ApiCancel
            && let Outcome::Unknown(why) = &op.outcome
            && !disturbed
                .iter()
                .any(|w| w.overlaps(op.invoked, op.completed))
        {
            verdict.violate(
                Invariant::HostileInput,
                op.invoked,
                Some(&op.key),
                format!("an API cancel got no answer with no fault on: {why}"),
            );
        }
    }
    let rows: HashMap<&Key, &Row> = run.rows.iter().map(|r| (&r.key, r)).collect();
    for command in run.hostile.iter().filter(|h| h.acked) {
        let rejected = messages.iter().any(|m| {
            m.subject == format!("timer.evt.rejected.{}", command.key.tenant)
                && String::from_utf8_lossy(&m.payload).contains(&command.key.id)
        });
        if let Some(row) = rows.get(&command.key) {
            verdict.violate(
                Invariant::HostileInput,
                command.at,
                Some(&command.key),
                format!(
                    "{} was stored ({}) instead of rejected",
                    command.what, row.state
                ),
            );
        } else if !rejected {
            verdict.violate(
                Invariant::HostileInput,
                command.at,
                Some(&command.key),
                format!("{} was neither stored nor rejected", command.what),
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::history::{ApiRequest, FaultRecord, HostileCommand};
    use super::*;

    pub(crate) fn t(ms: i64) -> Instant {
        Instant::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    pub(crate) fn key(id: &str) -> Key {
        Key::new("acme", id)
    }

    pub(crate) fn op(id: &str, command: Command, outcome: Outcome, completed: i64) -> Op {
        Op {
            key: key(id),
            command,
            outcome,
            invoked: t(completed - 5),
            completed: t(completed),
            attempts: 1,
        }
    }

    pub(crate) fn schedule(id: &str, due: i64, acked_at: i64) -> Op {
        op(
            id,
            Command::Schedule { due_at: t(due) },
            Outcome::Acked,
            acked_at,
        )
    }

    pub(crate) fn event(id: &str, due: i64, reached: i64, seen: i64) -> Seen {
        let payload = serde_json::json!({
            "id": "0",
            "type": "DueTimeReached",
            "tenantId": "acme",
            "timestampMs": 0,
            "aggregateId": id,
            "payload": {
                "tenantId": "acme",
                "serviceCallId": id,
                "dueAt": crate::common::rfc3339(t(due)),
                "reachedAt": crate::common::rfc3339(t(reached)),
            }
        });
        Seen {
            subject: "timer.evt.due.acme".into(),
            payload: serde_json::to_vec(&payload).unwrap(),
            at: t(seen),
        }
    }

    pub(crate) fn row(id: &str, state: &str, due: Option<i64>) -> Row {
        Row {
            key: key(id),
            state: state.into(),
            due_at: due.map(t),
        }
    }

    /// A run whose events were seen by the subscriber and stored in the stream alike.
    pub(crate) fn run(ops: Vec<Op>, events: Vec<Seen>, rows: Vec<Row>) -> Run {
        Run {
            ops,
            stream: events.clone(),
            seen: events,
            rows,
            ended: Some(t(100_000)),
            ..Run::default()
        }
    }

    pub(crate) fn broken(verdict: &Verdict) -> Vec<Invariant> {
        let mut found: Vec<Invariant> = verdict.violations.iter().map(|v| v.invariant).collect();
        found.dedup();
        found
    }

    #[test]
    fn a_history_that_keeps_every_promise_passes() {
        let verdict = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                schedule("k1", 8_000, 1_000), // a reschedule
                schedule("k2", 6_000, 20),
                op("k2", Command::Cancel, Outcome::Acked, 1_000),
                schedule("k3", 7_000, 30),
                op(
                    "k3",
                    Command::ApiCancel,
                    Outcome::Answered(CancelAnswer::Cancelled),
                    1_000,
                ),
            ],
            vec![event("k1", 8_000, 8_002, 8_004)],
            vec![
                row("k1", "Reached", Some(8_000)),
                row("k2", "Cancelled", Some(6_000)),
                row("k3", "Cancelled", Some(7_000)),
            ],
        ));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert_eq!(verdict.firings.len(), 1);
        assert!(verdict.duplicates.is_empty());
    }

    #[test]
    fn a_schedule_that_never_fires_breaks_a() {
        let verdict = check(&run(
            vec![schedule("k1", 5_000, 10)],
            vec![],
            vec![row("k1", "Scheduled", Some(5_000))],
        ));
        assert_eq!(broken(&verdict), [Invariant::Fires]);
    }

    #[test]
    fn a_lost_command_breaks_a_but_an_unacknowledged_one_does_not() {
        let lost = check(&run(vec![schedule("k1", 5_000, 10)], vec![], vec![]));
        assert_eq!(broken(&lost), [Invariant::Fires]);
        let unknown = check(&run(
            vec![op(
                "k1",
                Command::Schedule { due_at: t(5_000) },
                Outcome::Unknown("timeout".into()),
                4_000,
            )],
            vec![],
            vec![],
        ));
        assert!(unknown.violations.is_empty(), "{:?}", unknown.violations);
    }

    #[test]
    fn an_event_before_its_due_at_breaks_b() {
        let early_reached = check(&run(
            vec![schedule("k1", 5_000, 10)],
            vec![event("k1", 5_000, 4_990, 5_001)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&early_reached), [Invariant::NotEarly]);
        let early_seen = check(&run(
            vec![schedule("k1", 5_000, 10)],
            vec![event("k1", 5_000, 5_000, 4_000)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&early_seen), [Invariant::NotEarly]);
        assert_eq!(early_seen.early.len(), 1);
    }

    #[test]
    fn an_early_receipt_while_the_clock_ran_ahead_is_judged_by_reached_at_only() {
        let mut history = run(
            vec![schedule("k1", 5_000, 10)],
            vec![event("k1", 5_000, 5_000, 4_000)],
            vec![row("k1", "Reached", Some(5_000))],
        );
        history.clock_ahead.push(Window {
            from: t(3_000),
            to: t(4_500),
        });
        let verdict = check(&history);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    }

    #[test]
    fn an_event_after_an_api_cancelled_breaks_c() {
        let verdict = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                op(
                    "k1",
                    Command::ApiCancel,
                    Outcome::Answered(CancelAnswer::Cancelled),
                    1_000,
                ),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&verdict), [Invariant::CancelHolds]);
    }

    #[test]
    fn an_event_for_a_key_left_cancelled_breaks_c() {
        let verdict = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 1_000),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Cancelled", Some(5_000))],
        ));
        assert_eq!(broken(&verdict), [Invariant::CancelHolds]);
    }

    #[test]
    fn an_ignored_cancel_or_reschedule_breaks_d() {
        let cancel = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 1_000),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&cancel), [Invariant::LastWins]);
        let reschedule = check(&run(
            vec![schedule("k1", 5_000, 10), schedule("k1", 9_000, 1_000)],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert_eq!(broken(&reschedule), [Invariant::LastWins]);
    }

    #[test]
    fn a_command_that_lost_the_race_to_a_firing_is_allowed() {
        // The firing came (just) before the cancel was acknowledged.
        let raced = check(&run(
            vec![
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 5_100),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert!(raced.violations.is_empty(), "{:?}", raced.violations);
        assert_eq!(raced.lost_races, 1);
        // A fault held the command up until after the firing.
        let mut held_up = run(
            vec![
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 1_000),
            ],
            vec![event("k1", 5_000, 5_001, 5_002)],
            vec![row("k1", "Reached", Some(5_000))],
        );
        held_up.faults.push(FaultRecord {
            name: "daemon SIGSTOP".into(),
            started: t(500),
            healed: t(6_000),
            probes: vec![],
            skipped: None,
            notes: vec![],
            disturbs: true,
        });
        let verdict = check(&held_up);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    }

    #[test]
    fn a_fault_over_before_the_command_excuses_nothing() {
        let probe = key("probe-1");
        let mut history = run(
            vec![
                schedule("probe-1", 1_500, 600),
                schedule("k1", 12_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 9_000),
            ],
            vec![
                event("probe-1", 1_500, 1_501, 1_502),
                event("k1", 12_000, 12_001, 12_002),
            ],
            vec![
                row("probe-1", "Reached", Some(1_500)),
                row("k1", "Reached", Some(12_000)),
            ],
        );
        history.faults.push(FaultRecord {
            name: "daemon SIGKILL".into(),
            started: t(0),
            healed: t(500),
            probes: vec![probe],
            skipped: None,
            notes: vec![],
            disturbs: true,
        });
        // The fault's window ends 2 s after the commands it held are back (an ack wait, 5 s,
        // after the heal at 0.5 s): the cancel came later.
        let verdict = check(&history);
        assert_eq!(broken(&verdict), [Invariant::LastWins]);
    }

    #[test]
    fn a_command_held_by_a_killed_daemon_until_its_ack_wait_ran_out_is_excused() {
        let probe = key("probe-1");
        let mut history = run(
            vec![
                schedule("probe-1", 1_500, 600),
                schedule("k1", 5_000, 10),
                op("k1", Command::Cancel, Outcome::Acked, 100),
            ],
            vec![
                event("probe-1", 1_500, 1_501, 1_502),
                event("k1", 5_000, 5_001, 5_002),
            ],
            vec![
                row("probe-1", "Reached", Some(1_500)),
                row("k1", "Reached", Some(5_000)),
            ],
        );
        history.faults.push(FaultRecord {
            name: "daemon SIGKILL".into(),
            started: t(0),
            healed: t(500),
            probes: vec![probe],
            skipped: None,
            notes: vec![],
            disturbs: true,
        });
        // The cancel was delivered to the daemon killed at 0 and came back an ack wait later,
        // after the timer fired at 5 s.
        let verdict = check(&history);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    }

    #[test]
    fn a_command_destroyed_with_its_stream_is_not_held_against_the_service() {
        let mut history = run(vec![schedule("k1", 5_000, 1_000)], vec![], vec![]);
        assert_eq!(broken(&check(&history)), [Invariant::Fires]);
        history.destroyed.push(Window {
            from: t(900),
            to: t(1_200),
        });
        let verdict = check(&history);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
    }

    #[test]
    fn an_event_on_another_tenants_subject_breaks_e() {
        let mut foreign = event("k1", 5_000, 5_001, 5_002);
        foreign.subject = "timer.evt.due.globex".into();
        let history = run(
            vec![schedule("k1", 5_000, 10)],
            vec![event("k1", 5_000, 5_001, 5_002), foreign],
            vec![row("k1", "Reached", Some(5_000))],
        );
        assert_eq!(broken(&check(&history)), [Invariant::Isolation]);

        let api_reply = Seen {
            subject: "timer.evt.due.globex".into(),
            payload: br#"{"scheduled":0,"overdue":0,"nextDueAt":null}"#.to_vec(),
            at: t(100),
        };
        let on_command_subject = Seen {
            subject: "timer.cmd.cancel.globex".into(),
            payload: br#"{"scheduled":0,"overdue":0,"nextDueAt":null}"#.to_vec(),
            at: t(100),
        };
        let unscheduled = event("never", 5_000, 5_001, 5_002);
        let mut history = run(vec![], vec![], vec![]);
        history.seen = vec![api_reply, on_command_subject, unscheduled];
        let verdict = check(&history);
        assert_eq!(broken(&verdict), [Invariant::Isolation]);
        assert_eq!(verdict.violations.len(), 3);
    }

    #[test]
    fn a_fault_after_which_nothing_fires_breaks_f() {
        let probe = key("probe-1");
        let fault = |healed| FaultRecord {
            name: "broker SIGKILL".into(),
            started: t(0),
            healed: t(healed),
            probes: vec![probe.clone()],
            skipped: None,
            notes: vec![],
            disturbs: true,
        };
        let mut wedged = run(vec![schedule("probe-1", 2_000, 1_010)], vec![], vec![]);
        wedged.faults.push(fault(1_000));
        let verdict = check(&wedged);
        assert!(broken(&verdict).contains(&Invariant::Liveness));
        assert_eq!(verdict.refire, [None]);

        let mut live = run(
            vec![schedule("probe-1", 2_000, 1_010)],
            vec![event("probe-1", 2_000, 2_001, 2_003)],
            vec![row("probe-1", "Reached", Some(2_000))],
        );
        live.faults.push(fault(1_000));
        let verdict = check(&live);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert_eq!(verdict.refire, [Some(Duration::milliseconds(1_003))]);
    }

    #[test]
    fn an_unanswered_request_or_a_stored_invalid_command_breaks_g() {
        let mut history = run(vec![], vec![], vec![row("nul", "Scheduled", Some(0))]);
        history.api_requests = vec![
            ApiRequest {
                subject: "timer.api.get.acme".into(),
                what: "a key with a newline".into(),
                at: t(0),
                answered: false,
            },
            ApiRequest {
                subject: "timer.api.get.acme".into(),
                what: "invalid JSON".into(),
                at: t(0),
                answered: true,
            },
        ];
        history.hostile = vec![HostileCommand {
            key: key("nul"),
            what: "a NUL in correlationId".into(),
            at: t(0),
            acked: true,
        }];
        let verdict = check(&history);
        assert_eq!(broken(&verdict), [Invariant::HostileInput]);
        assert_eq!(verdict.violations.len(), 2);
    }

    #[test]
    fn duplicates_are_counted_not_condemned() {
        let verdict = check(&run(
            vec![schedule("k1", 5_000, 10)],
            vec![
                event("k1", 5_000, 5_001, 5_002),
                event("k1", 5_000, 5_900, 5_901), // republished after a crash
            ],
            vec![row("k1", "Reached", Some(5_000))],
        ));
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert_eq!(verdict.duplicates.len(), 1);
    }
}
