//! The upsert of a round of commands (`commands::apply_in`): the rules table of docs/CONTRACT.md
//! §3 as one conflict clause ([`CONFLICT`]), with the rows handed over as each database takes
//! many rows best.
//! - SQLite: a multi-row `VALUES` list, one bound value per column of each row.
//! - PostgreSQL: one array per column, read back as rows by `unnest`. The statement's text and
//!   its 12 parameters are the same whatever the number of rows: a `VALUES` list of 1,000 rows
//!   is 12,000 parameters that the client encodes one by one and the server parses, binds and
//!   plans on every statement.

use std::sync::LazyLock;

use sea_orm::{DbBackend, Statement, Value};

use crate::domain::timestamp::format_utc;
use crate::domain::{Action, Command, TraceContext};

/// The columns an upsert writes, in the order of its values. `reached_at`, `claimed_by` and
/// `claim_until` are left to their default (NULL) on insert; the conflict clause decides them
/// on update.
const COLUMNS: &str = "tenant_id, service_call_id, correlation_id, due_at, registered_at, \
     cancelled_at, state, command_seq, cancelled_seq, data, trace_context, expires_at";

/// Values per row, one per name of [`COLUMNS`].
const PER_ROW: usize = 12;

/// A cancel meeting a timer claimed for firing, in [`CONFLICT`].
const REFUSED_CANCEL: &str = "(excluded.state = 'Cancelled' \
     AND timer_schedules.state = 'Scheduled' AND timer_schedules.claimed_by IS NOT NULL)";

/// The conflict clause, written once.
static CONFLICT: LazyLock<String> = LazyLock::new(conflict);

/// The conflict clause: the rules table of docs/CONTRACT.md §3 in SQL, for a stored row
/// `timer_schedules` and an incoming command `excluded`:
/// - nothing changes for a `Reached` row, or a command not newer than the last one applied;
/// - a cancel meeting a timer claimed for firing (lapsed or not: a claimed timer fires) is
///   refused, but its sequence is remembered, so an older command arriving later changes
///   nothing;
/// - otherwise the state is the command's, the sequence is remembered, a schedule brings its
///   `dueAt`, correlation id, data and deadline (none clears them) and releases any claim, a
///   cancel keeps the timer's own `dueAt`, correlation id, data and deadline and the time of
///   the first cancel.
fn conflict() -> String {
    let scheduled = |column: &str| {
        format!(
            "{column} = CASE WHEN excluded.state = 'Scheduled' THEN excluded.{column} \
             ELSE timer_schedules.{column} END"
        )
    };
    let first_cancel = |column: &str| {
        format!(
            "{column} = CASE WHEN excluded.state = 'Cancelled' AND NOT {REFUSED_CANCEL} \
             THEN COALESCE(timer_schedules.{column}, excluded.{column}) END"
        )
    };
    let kept_by_cancel = |column: &str| {
        format!(
            "{column} = CASE WHEN excluded.state = 'Cancelled' THEN timer_schedules.{column} END"
        )
    };
    [
        format!(
            "ON CONFLICT (tenant_id, service_call_id) DO UPDATE SET \
             state = CASE WHEN {REFUSED_CANCEL} THEN timer_schedules.state ELSE excluded.state END"
        ),
        "due_at = COALESCE(excluded.due_at, timer_schedules.due_at)".to_owned(),
        scheduled("correlation_id"),
        scheduled("data"),
        scheduled("trace_context"),
        scheduled("expires_at"),
        first_cancel("cancelled_at"),
        first_cancel("cancelled_seq"),
        kept_by_cancel("claimed_by"),
        kept_by_cancel("claim_until"),
        "command_seq = excluded.command_seq \
         WHERE timer_schedules.state <> 'Reached' \
         AND timer_schedules.command_seq < excluded.command_seq"
            .to_owned(),
    ]
    .join(", ")
}

/// One row as the upsert writes it, in the order of [`COLUMNS`].
struct UpsertRow {
    tenant_id: String,
    service_call_id: String,
    correlation_id: String,
    due_at: Option<String>,
    registered_at: String,
    cancelled_at: Option<String>,
    state: &'static str,
    command_seq: i64,
    cancelled_seq: Option<i64>,
    data: Option<String>,
    trace_context: Option<String>,
    expires_at: Option<String>,
}

impl UpsertRow {
    fn of(command: &Command) -> Self {
        let row = command.new_row();
        let (due_at, trace_context) = match command.action {
            Action::Schedule { due_at, .. } => (
                Some(format_utc(due_at)),
                command.trace.as_ref().map(TraceContext::encode),
            ),
            Action::Cancel => (None, None),
        };
        Self {
            tenant_id: row.tenant_id,
            service_call_id: row.service_call_id,
            correlation_id: row.correlation_id,
            due_at,
            registered_at: format_utc(row.registered_at),
            cancelled_at: row.cancelled_at.map(format_utc),
            state: row.state.as_str(),
            command_seq: command.seq as i64,
            cancelled_seq: row.cancelled_seq.map(|seq| seq as i64),
            data: row.data.map(|data| data.as_str().to_owned()),
            trace_context,
            expires_at: row.expires_at.map(format_utc),
        }
    }
}

/// The upsert of `round` (at most one command per key, in the order their rows are locked) on
/// `backend`.
pub(super) fn statement(backend: DbBackend, round: &[&Command]) -> Statement {
    let rows = round.iter().copied().map(UpsertRow::of);
    match backend {
        DbBackend::Postgres => unnest(rows),
        _ => values(backend, rows, round.len()),
    }
}

/// A multi-row `VALUES` list.
fn values(backend: DbBackend, rows: impl Iterator<Item = UpsertRow>, n: usize) -> Statement {
    let one = format!("({})", ["?"; PER_ROW].join(", "));
    let list = vec![one.as_str(); n].join(", ");
    let sql = format!(
        "INSERT INTO timer_schedules ({COLUMNS}) VALUES {list} {}",
        *CONFLICT
    );
    let mut values: Vec<Value> = Vec::with_capacity(n * PER_ROW);
    for row in rows {
        values.extend([
            row.tenant_id.into(),
            row.service_call_id.into(),
            row.correlation_id.into(),
            row.due_at.into(),
            row.registered_at.into(),
            row.cancelled_at.into(),
            row.state.into(),
            row.command_seq.into(),
            row.cancelled_seq.into(),
            row.data.into(),
            row.trace_context.into(),
            row.expires_at.into(),
        ]);
    }
    Statement::from_sql_and_values(backend, sql, values)
}

/// What stands for NULL in the arrays of [`unnest`], where every element is bound as a value:
/// the empty text (never a timestamp, a JSON text or an encoded trace context) and -1 (never a
/// sequence).
const NULL_TEXT: &str = "";
const NULL_SEQ: i64 = -1;

/// One array per column, `unnest`ed into rows in their order.
fn unnest(rows: impl Iterator<Item = UpsertRow>) -> Statement {
    let sql = format!(
        "INSERT INTO timer_schedules ({COLUMNS}) \
         SELECT tenant_id, service_call_id, correlation_id, NULLIF(due_at, ''), registered_at, \
           NULLIF(cancelled_at, ''), state, command_seq, NULLIF(cancelled_seq, {NULL_SEQ}), \
           NULLIF(data, ''), NULLIF(trace_context, ''), NULLIF(expires_at, '') \
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
           $7::text[], $8::bigint[], $9::bigint[], $10::text[], $11::text[], $12::text[]) \
           AS k({COLUMNS}) {}",
        *CONFLICT
    );
    let text = |value: Option<String>| value.unwrap_or_else(|| NULL_TEXT.to_owned());
    let mut texts: [Vec<String>; 10] = Default::default();
    let mut seqs: [Vec<i64>; 2] = Default::default();
    for row in rows {
        texts[0].push(row.tenant_id);
        texts[1].push(row.service_call_id);
        texts[2].push(row.correlation_id);
        texts[3].push(text(row.due_at));
        texts[4].push(row.registered_at);
        texts[5].push(text(row.cancelled_at));
        texts[6].push(row.state.to_owned());
        seqs[0].push(row.command_seq);
        seqs[1].push(row.cancelled_seq.unwrap_or(NULL_SEQ));
        texts[7].push(text(row.data));
        texts[8].push(text(row.trace_context));
        texts[9].push(text(row.expires_at));
    }
    let [t0, t1, t2, t3, t4, t5, t6, t7, t8, t9] = texts;
    let [s0, s1] = seqs;
    let values: Vec<Value> = vec![
        t0.into(),
        t1.into(),
        t2.into(),
        t3.into(),
        t4.into(),
        t5.into(),
        t6.into(),
        s0.into(),
        s1.into(),
        t7.into(),
        t8.into(),
        t9.into(),
    ];
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}
