//! `command_refusals`: the commands refused for a quota, recorded in the transaction that
//! refused them, so that a copy delivered again is refused again (docs/CONTRACT.md §9,
//! `domain::quota::refusal`). Read and written inside `quotas::admit`, after the tenants' rows
//! are locked: every daemon deciding a tenant's commands sees what the others recorded. Records
//! older than the retention of finished timers are deleted with them (`retention`).

use sea_orm::sea_query::{Alias, Expr, ExprTrait, OnConflict, Query, SimpleExpr};
use sea_orm::{ConnectionTrait, DbErr, Order};

use super::{ROWS_PER_STATEMENT, StoreError};
use crate::domain::Command;
use crate::domain::quota::{Exceeded, Quota, Recorded, Refusal};

const TABLE: &str = "command_refusals";

fn col(name: &str) -> Alias {
    Alias::new(name)
}

/// A command's order as the signed column holds it (`domain::order` keeps it below 2^63).
fn seq(command: &Command) -> i64 {
    i64::try_from(command.seq).unwrap_or(i64::MAX)
}

/// The refusals recorded for any of `commands`, by order: one primary key lookup per
/// [`ROWS_PER_STATEMENT`] commands.
pub(super) async fn recorded(
    db: &impl ConnectionTrait,
    commands: &[Command],
) -> Result<Recorded, StoreError> {
    let mut out = Recorded::new();
    for chunk in commands.chunks(ROWS_PER_STATEMENT) {
        let mut select = Query::select();
        select
            .columns([
                col("command_seq"),
                col("tenant_id"),
                col("service_call_id"),
                col("quota"),
                col("quota_limit"),
            ])
            .from(col(TABLE))
            .and_where(Expr::col(col("command_seq")).is_in(chunk.iter().map(seq)));
        for row in db.query_all(&select).await? {
            let order: i64 = row.try_get("", "command_seq")?;
            let tenant_id: String = row.try_get("", "tenant_id")?;
            let service_call_id: String = row.try_get("", "service_call_id")?;
            let quota: String = row.try_get("", "quota")?;
            let limit: i64 = row.try_get("", "quota_limit")?;
            let Some(quota) = Quota::from_name(&quota) else {
                tracing::warn!(tenant_id = %tenant_id, service_call_id = %service_call_id,
                    quota = %quota, "a refusal of an unknown quota is not read");
                continue;
            };
            let exceeded = Exceeded {
                quota,
                limit: u64::try_from(limit).unwrap_or(0),
            };
            out.insert(
                u64::try_from(order).unwrap_or(0),
                Refusal {
                    tenant_id,
                    service_call_id,
                    exceeded,
                },
            );
        }
    }
    Ok(out)
}

/// Records the commands of `refused` (positions in `commands`) not already `recorded`, at
/// `now_ms` by the quota clock. A copy of one command refused twice in the batch is recorded
/// once.
pub(super) async fn record(
    db: &impl ConnectionTrait,
    commands: &[Command],
    refused: &[(usize, Exceeded)],
    recorded: &Recorded,
    now_ms: i64,
) -> Result<(), StoreError> {
    let mut new: Vec<(&Command, Exceeded)> = refused
        .iter()
        .map(|(i, exceeded)| (&commands[*i], *exceeded))
        .filter(|(command, _)| !recorded.contains_key(&command.seq))
        .collect();
    new.sort_by_key(|(command, _)| command.seq);
    new.dedup_by_key(|(command, _)| command.seq);
    for chunk in new.chunks(ROWS_PER_STATEMENT) {
        let mut insert = Query::insert();
        insert
            .into_table(col(TABLE))
            .columns([
                col("command_seq"),
                col("tenant_id"),
                col("service_call_id"),
                col("quota"),
                col("quota_limit"),
                col("refused_at_ms"),
            ])
            // Where another daemon recorded it first, its record stands.
            .on_conflict(
                OnConflict::column(col("command_seq"))
                    .do_nothing()
                    .to_owned(),
            );
        for (command, exceeded) in chunk {
            insert.values_panic([
                seq(command).into(),
                command.tenant_id.as_str().into(),
                command.service_call_id.as_str().into(),
                exceeded.quota.as_str().into(),
                i64::try_from(exceeded.limit).unwrap_or(i64::MAX).into(),
                now_ms.into(),
            ]);
        }
        db.execute(&insert).await?;
    }
    Ok(())
}

/// Deletes up to `limit` records refused before `cutoff_ms` (an expression of the quota
/// clock, which stamped them), oldest first; returns how many.
pub(super) async fn delete_before(
    db: &impl ConnectionTrait,
    cutoff_ms: SimpleExpr,
    limit: u64,
) -> Result<u64, DbErr> {
    let mut oldest = Query::select();
    oldest
        .column(col("command_seq"))
        .from(col(TABLE))
        .and_where(Expr::col(col("refused_at_ms")).lt(cutoff_ms))
        .order_by(col("refused_at_ms"), Order::Asc)
        .limit(limit);
    let mut delete = Query::delete();
    delete
        .from_table(col(TABLE))
        .and_where(Expr::col(col("command_seq")).in_subquery(oldest));
    Ok(db.execute(&delete).await?.rows_affected())
}
