//! Applying commands: batches of `ScheduleTimer` and `CancelTimer` by the rules of docs/CONTRACT.md
//! §3 in one upsert per round, a cancel answered with its outcome, and the epochs of the
//! command stream's incarnations. Every commit here is durable: a command is acknowledged to
//! the broker once it returns.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect,
    TransactionTrait,
};

use super::command_streams;
use super::queries::find_one;
use super::quotas;
use super::rows::from_model;
use super::upsert;
use super::{ROWS_PER_STATEMENT, Store, StoreError};
use crate::domain::quota::{Exceeded, Quotas, limited_tenants};
use crate::domain::timer::rounds;
use crate::domain::timestamp::format_utc;
use crate::domain::{CancelOutcome, Command, StreamIncarnation, Timer};

/// What an apply did: the rows it wrote, and the commands it refused past their tenants'
/// quotas (by position in the batch), which it did not store.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    pub written: u64,
    pub refused: Vec<(usize, Exceeded)>,
}

/// See [`Store::apply`].
pub(super) async fn apply(
    store: &Store,
    commands: &[Command],
    quotas: &Quotas,
    now_ms: i64,
) -> Result<Applied, StoreError> {
    if commands.is_empty() {
        return Ok(Applied::default());
    }
    let limited = limited_tenants(quotas, commands);
    store
        .durable(async {
            // With no quota configured, nothing can be refused: the rounds are split once,
            // before the transaction. With one, every batch reads the refusals recorded for
            // its commands (`quotas::admit`), even one of tenants without limits.
            let unrefused = quotas.is_unlimited().then(|| rounds(commands));
            let unrefused = match unrefused {
                Some(rounds)
                    if store.backend.statement_is_transaction()
                        && rounds.len() == 1
                        && rounds[0].len() <= ROWS_PER_STATEMENT =>
                {
                    // No BEGIN and COMMIT round trips for the few commands of a commit at a
                    // steady rate.
                    let written = apply_in(&store.db, rounds).await?;
                    return Ok(Applied {
                        written,
                        refused: Vec::new(),
                    });
                }
                other => other,
            };
            let txn = store.db.begin().await?;
            let now = store.now(DateTime::from_timestamp_millis(now_ms).unwrap_or_default());
            let refused = quotas::admit(
                &txn,
                store.backend.as_ref(),
                quotas,
                &limited,
                commands,
                now,
            )
            .await?;
            let rounds = match unrefused {
                Some(rounds) if refused.is_empty() => rounds,
                _ => {
                    let mut refused_at = refused.iter().map(|(i, _)| *i).peekable();
                    rounds(
                        commands
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| refused_at.next_if_eq(i).is_none())
                            .map(|(_, c)| c),
                    )
                }
            };
            let written = apply_in(&txn, rounds).await?;
            txn.commit().await?;
            Ok(Applied { written, refused })
        })
        .await
}

/// See [`Store::command_epoch`].
pub(super) async fn command_epoch(
    store: &Store,
    stream: &StreamIncarnation,
    now: DateTime<Utc>,
) -> Result<u32, StoreError> {
    use command_streams::{Column as C, Entity as Streams};
    let epoch: i64 = store
        .durable(async {
            let txn = store.db.begin().await?;
            let known = Streams::find_by_id((stream.name.clone(), stream.created_ns))
                .one(&txn)
                .await?;
            if let Some(known) = known {
                txn.commit().await?;
                return Ok(known.epoch);
            }
            let newest: Option<Option<i64>> = Streams::find()
                .select_only()
                .column_as(C::CreatedNs.max(), "newest")
                .filter(C::StreamName.eq(stream.name.as_str()))
                .into_tuple()
                .one(&txn)
                .await?;
            if newest.flatten().is_some_and(|newest| newest > stream.created_ns) {
                txn.rollback().await?;
                return Err(StoreError::StaleStream(stream.clone()));
            }
            let next: Option<Option<i64>> = Streams::find()
                .select_only()
                .column_as(C::Epoch.max(), "latest")
                .into_tuple()
                .one(&txn)
                .await?;
            let epoch = next.flatten().map_or(0, |latest| latest + 1);
            // Another daemon may record the same incarnation at the same moment: its row wins,
            // and this one reads it.
            let inserted = Streams::insert(command_streams::ActiveModel {
                stream_name: Set(stream.name.clone()),
                created_ns: Set(stream.created_ns),
                epoch: Set(epoch),
                seen_at: Set(format_utc(now)),
            })
            .on_conflict(
                OnConflict::columns([C::StreamName, C::CreatedNs])
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(&txn)
            .await?;
            let recorded = Streams::find_by_id((stream.name.clone(), stream.created_ns))
                .one(&txn)
                .await?
                .map_or(epoch, |row| row.epoch);
            txn.commit().await?;
            if inserted > 0 {
                tracing::info!(stream = %stream, epoch, "a new incarnation of the command stream: its commands order after every earlier one");
            }
            Ok(recorded)
        })
        .await?;
    u32::try_from(epoch).map_err(|e| StoreError::Unavailable(format!("epoch {epoch}: {e}")))
}

/// See [`Store::cancel`].
pub(super) async fn cancel(
    store: &Store,
    command: &Command,
) -> Result<(CancelOutcome, Option<Timer>), StoreError> {
    let after = store
        .durable(async {
            let txn = store.db.begin().await?;
            // Locks the row on backends that can, so the outcome read is the cancel's own.
            find_one(&txn, &command.tenant_id, &command.service_call_id, true).await?;
            apply_in(&txn, rounds([command])).await?;
            let after = find_one(&txn, &command.tenant_id, &command.service_call_id, false)
                .await?
                .map(from_model)
                .transpose()?;
            txn.commit().await?;
            Ok(after)
        })
        .await?;
    Ok((CancelOutcome::of(after.as_ref(), command.seq), after))
}
/// Applies commands in their rounds (see [`rounds`]: at most one command per key in a round,
/// rounds in stream order), one multi-row upsert per round and per [`ROWS_PER_STATEMENT`]
/// (`upsert`: its conflict clause is the rules table of docs/CONTRACT.md §3), inside a
/// transaction or, when that is one statement, on its own.
async fn apply_in(db: &impl ConnectionTrait, rounds: Vec<Vec<&Command>>) -> Result<u64, DbErr> {
    let backend = db.get_database_backend();
    let mut written = 0;
    for mut round in rounds {
        // In key order: daemons writing the same rows at once then lock them in the same order
        // and cannot deadlock (a round holds one command per key, so its order means nothing).
        round.sort_by(|a, b| {
            (&a.tenant_id, &a.service_call_id).cmp(&(&b.tenant_id, &b.service_call_id))
        });
        for chunk in round.chunks(ROWS_PER_STATEMENT) {
            written += db
                .execute_raw(upsert::statement(backend, chunk))
                .await?
                .rows_affected();
        }
    }
    Ok(written)
}
