//! Quotas inside the transaction that stores the commands (docs/CONTRACT.md §9), so that every
//! daemon on the database decides against the same state: `admit` locks the `tenant_quotas`
//! row of each limited tenant of the batch (in tenant order, so two transactions cannot
//! deadlock), counts pending timers where the stored bound does not settle the pending limit,
//! reads the keys of tenants whose rate window may fill (to find the commands their keys have
//! already applied, never refused) and the refusals recorded for the batch's commands (a copy
//! of a refused command is refused again), decides the commands
//! (`domain::quota::decide_batch`), writes the rows back and records the new refusals. A
//! tenant's transactions thus run one after the other, whichever daemon runs them; those of
//! tenants without limits take no lock.
//!
//! The rate window's clock is the backend's quota clock (`Backend::quota_clock_ms`), returned
//! by the statement that locks the rows: the server's on PostgreSQL, as for firing
//! (docs/CONTRACT.md §8), so daemons whose clocks disagree still count in one window; on
//! SQLite, which one daemon owns, that daemon's.
//!
//! The count walks the tenant's `Scheduled` entries of `idx_timer_schedules_tenant_state`; the
//! keys a batch names are read by primary key.

use std::collections::HashMap;

use sea_orm::sea_query::{Alias, Expr, OnConflict, Query, SimpleExpr};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Select};

use super::backend::{Backend, Now};
use super::entity::{Column, Entity};
use super::{ROWS_PER_STATEMENT, Store, StoreError, refusals};
use crate::domain::quota::{
    Exceeded, KeyState, Quotas, SlotWindow, TenantPending, TenantQuota, crowded_keys, decide_batch,
    keys_by_tenant, settled, to_count,
};
use crate::domain::{Command, TimerState};

/// Decides `commands` against the quotas of their tenants as the database holds them, inside
/// the transaction `db` that then stores the accepted ones: returns the refused ones by
/// position, recorded (`refusals`) so that a copy delivered again is refused again. `tenants`
/// are the batch's limited tenants, in order (`limited_tenants`); nothing is read or locked
/// when no quota is configured at all. The windows are kept by `backend`'s quota clock, at
/// `now` where that is the caller's: the latest instant the locking statements return.
pub(super) async fn admit(
    db: &impl ConnectionTrait,
    backend: &dyn Backend,
    quotas: &Quotas,
    tenants: &[String],
    commands: &[Command],
    now: Now,
) -> Result<Vec<(usize, Exceeded)>, StoreError> {
    if quotas.is_unlimited() {
        return Ok(Vec::new());
    }
    let mut stored = HashMap::with_capacity(tenants.len());
    // Every locked row returns the clock (never the caller's where it is the server's).
    let mut now_ms = i64::MIN;
    for chunk in tenants.chunks(ROWS_PER_STATEMENT) {
        let (rows, clock_ms) = lock(db, backend.quota_clock_ms(now), chunk).await?;
        stored.extend(rows);
        now_ms = now_ms.max(clock_ms);
    }
    // Read once the tenants' rows are locked: a daemon refusing one of their commands holds
    // them until its record commits. Those of tenants without a limit (lifted by a reload)
    // are read too.
    let recorded = refusals::recorded(db, commands).await?;
    if tenants.is_empty() && recorded.is_empty() {
        return Ok(Vec::new());
    }
    let to_count = to_count(quotas, &stored, commands, now_ms);
    let counted = if to_count.is_empty() {
        HashMap::new()
    } else {
        tracing::debug!(tenants = ?to_count, "pending timers counted for the pending limit");
        let asked = keys_by_tenant(commands.iter().filter(|c| to_count.contains(&c.tenant_id)));
        pending_in(db, &asked).await?
    };
    // Commands their keys have already applied (a redelivery after a lost acknowledgement)
    // are never refused: the keys of counted tenants came with the count, those of tenants
    // whose window may fill are read here.
    let crowded = crowded_keys(quotas, &stored, &counted, commands, now_ms);
    let read = key_states_in(db, &crowded).await?;
    let settled = settled(commands, &counted, &read);
    if !settled.is_empty() {
        tracing::debug!(
            commands = settled.len(),
            "commands already applied are not refused"
        );
    }
    let refused = decide_batch(
        quotas,
        &mut stored,
        counted,
        commands,
        &settled,
        &recorded,
        now_ms,
    );
    let rows: Vec<(&String, &TenantQuota)> = stored.iter().collect();
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        save(db, chunk).await?;
    }
    refusals::record(db, commands, &refused, &recorded, now_ms).await?;
    Ok(refused)
}

const TABLE: &str = "tenant_quotas";

/// Locks the rows of `tenants` (made when missing) until the transaction ends, and reads them,
/// with the latest instant `clock_ms` gave as the rows were returned (one row per tenant).
async fn lock(
    db: &impl ConnectionTrait,
    clock_ms: SimpleExpr,
    tenants: &[String],
) -> Result<(HashMap<String, TenantQuota>, i64), StoreError> {
    let mut returning: Vec<SimpleExpr> =
        ["tenant_id", "rate_window", "pending_most", "counted_at_ms"]
            .into_iter()
            .map(|column| Expr::col(Alias::new(column)))
            .collect();
    // The fifth column, read by position.
    returning.push(clock_ms);
    let mut insert = Query::insert();
    insert
        .into_table(Alias::new(TABLE))
        .columns([Alias::new("tenant_id")])
        .on_conflict(
            // An update of nothing, so that the row is locked and returned whether or not it
            // was there.
            OnConflict::column(Alias::new("tenant_id"))
                .update_column(Alias::new("tenant_id"))
                .to_owned(),
        )
        .returning(Query::returning().exprs(returning));
    for tenant in tenants {
        insert.values_panic([tenant.as_str().into()]);
    }
    let rows = db.query_all(&insert).await?;
    let mut out = HashMap::with_capacity(rows.len());
    let mut latest_ms = i64::MIN;
    for row in rows {
        latest_ms = latest_ms.max(row.try_get_by_index::<i64>(4)?);
        let tenant: String = row.try_get("", "tenant_id")?;
        let window: String = row.try_get("", "rate_window")?;
        let pending_most: Option<i64> = row.try_get("", "pending_most")?;
        let counted_at_ms: Option<i64> = row.try_get("", "counted_at_ms")?;
        let window = SlotWindow::decode(&window).unwrap_or_else(|reason| {
            // Refusing the tenant's commands for ever would be worse than a second of rate
            // counted afresh.
            tracing::warn!(tenant_id = %tenant, %reason, "unreadable rate window, started afresh");
            SlotWindow::default()
        });
        let quota = TenantQuota {
            window,
            pending_most: pending_most.map(|n| u64::try_from(n).unwrap_or(0)),
            counted_at_ms,
        };
        out.insert(tenant, quota);
    }
    Ok((out, latest_ms))
}

/// Writes the rows of `tenants` back.
async fn save(
    db: &impl ConnectionTrait,
    tenants: &[(&String, &TenantQuota)],
) -> Result<(), StoreError> {
    let mut insert = Query::insert();
    insert
        .into_table(Alias::new(TABLE))
        .columns([
            Alias::new("tenant_id"),
            Alias::new("rate_window"),
            Alias::new("pending_most"),
            Alias::new("counted_at_ms"),
        ])
        .on_conflict(
            OnConflict::column(Alias::new("tenant_id"))
                .update_columns([
                    Alias::new("rate_window"),
                    Alias::new("pending_most"),
                    Alias::new("counted_at_ms"),
                ])
                .to_owned(),
        );
    for (tenant, quota) in tenants {
        let pending_most = quota
            .pending_most
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        insert.values_panic([
            tenant.as_str().into(),
            quota.window.encode().into(),
            pending_most.into(),
            quota.counted_at_ms.into(),
        ]);
    }
    db.execute(&insert).await?;
    Ok(())
}

/// Pending timers of each of `tenants` (those with none are left out), in one statement.
pub fn pending_counts_query(tenants: &[String]) -> Select<Entity> {
    Entity::find()
        .select_only()
        .column(Column::TenantId)
        .column_as(Expr::cust("COUNT(*)"), "n")
        .filter(Column::TenantId.is_in(tenants.iter().map(String::as_str)))
        .filter(Column::State.eq(TimerState::Scheduled.as_str()))
        .group_by(Column::TenantId)
}

/// State and last applied command of the keys `service_call_ids` of `tenant` that have a row.
pub fn key_states_query(tenant: &str, service_call_ids: &[String]) -> Select<Entity> {
    Entity::find()
        .select_only()
        .column(Column::ServiceCallId)
        .column(Column::State)
        .column(Column::CommandSeq)
        .filter(Column::TenantId.eq(tenant))
        .filter(Column::ServiceCallId.is_in(service_call_ids.iter().map(String::as_str)))
}

/// See [`Store::pending_of`].
pub(super) async fn pending_of(
    store: &Store,
    asked: &[(String, Vec<String>)],
) -> Result<HashMap<String, TenantPending>, StoreError> {
    pending_in(&store.db, asked).await
}

/// Pending timers of each tenant in `asked` and the stored state of the keys asked about, read
/// on `db` (a transaction, for `admit`).
async fn pending_in(
    db: &impl ConnectionTrait,
    asked: &[(String, Vec<String>)],
) -> Result<HashMap<String, TenantPending>, StoreError> {
    let mut out: HashMap<String, TenantPending> = asked
        .iter()
        .map(|(tenant, _)| (tenant.clone(), TenantPending::default()))
        .collect();
    let tenants: Vec<String> = out.keys().cloned().collect();
    for chunk in tenants.chunks(ROWS_PER_STATEMENT) {
        let counts: Vec<(String, i64)> = pending_counts_query(chunk).into_tuple().all(db).await?;
        for (tenant, n) in counts {
            if let Some(pending) = out.get_mut(&tenant) {
                pending.pending = u64::try_from(n).unwrap_or(0);
            }
        }
    }
    for (tenant, keys) in key_states_in(db, asked).await? {
        if let Some(pending) = out.get_mut(&tenant) {
            pending.keys = keys;
        }
    }
    Ok(out)
}

/// The stored state of the keys asked about, by tenant (keys without a row are left out).
async fn key_states_in(
    db: &impl ConnectionTrait,
    asked: &[(String, Vec<String>)],
) -> Result<HashMap<String, HashMap<String, KeyState>>, StoreError> {
    let mut out: HashMap<String, HashMap<String, KeyState>> = HashMap::new();
    for (tenant, keys) in asked {
        let states = out.entry(tenant.clone()).or_default();
        for chunk in keys.chunks(ROWS_PER_STATEMENT) {
            let rows: Vec<(String, String, i64)> =
                key_states_query(tenant, chunk).into_tuple().all(db).await?;
            for (service_call_id, state, seq) in rows {
                let state =
                    state
                        .parse::<TimerState>()
                        .map_err(|reason| StoreError::CorruptRow {
                            tenant_id: tenant.clone(),
                            service_call_id: service_call_id.clone(),
                            reason,
                        })?;
                let seq = u64::try_from(seq).unwrap_or(0);
                states.insert(service_call_id, KeyState { state, seq });
            }
        }
    }
    Ok(out)
}
