//! What the pending limit needs (docs/CONTRACT.md §9): each tenant's count of pending timers,
//! and the stored state of the keys a batch names. Both are index ranges: the count walks the
//! tenant's `Scheduled` entries of `idx_timer_schedules_tenant_state`, the keys are read by
//! primary key.

use std::collections::HashMap;

use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect, Select};

use super::entity::{Column, Entity};
use super::{ROWS_PER_STATEMENT, Store, StoreError};
use crate::domain::TimerState;
use crate::domain::quota::{KeyState, TenantPending};

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
    let mut out: HashMap<String, TenantPending> = asked
        .iter()
        .map(|(tenant, _)| (tenant.clone(), TenantPending::default()))
        .collect();
    let tenants: Vec<String> = out.keys().cloned().collect();
    for chunk in tenants.chunks(ROWS_PER_STATEMENT) {
        let counts: Vec<(String, i64)> = pending_counts_query(chunk)
            .into_tuple()
            .all(&store.db)
            .await?;
        for (tenant, n) in counts {
            if let Some(pending) = out.get_mut(&tenant) {
                pending.pending = u64::try_from(n).unwrap_or(0);
            }
        }
    }
    for (tenant, keys) in asked {
        let Some(pending) = out.get_mut(tenant) else {
            continue;
        };
        for chunk in keys.chunks(ROWS_PER_STATEMENT) {
            let rows: Vec<(String, String, i64)> = key_states_query(tenant, chunk)
                .into_tuple()
                .all(&store.db)
                .await?;
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
                pending
                    .keys
                    .insert(service_call_id, KeyState { state, seq });
            }
        }
    }
    Ok(out)
}
