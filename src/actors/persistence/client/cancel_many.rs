//! The calls of a `CancelTimers` (docs/CONTRACT.md §3): its steps, in turn with the command
//! commits, and the counts the API's `cancel-many` answers with, which are the tenant's reads.

use std::time::{Duration, Instant};

use super::{CallError, Class, Op, PersistenceClient};
use crate::domain::{CancelFilter, CancelMany};
use crate::storage::CancelStep;

impl PersistenceClient {
    /// One step of each of `cancels` (as far as `limit` timers in all go), in one transaction,
    /// in turn with the command commits (claims go first): what each did, and how long the
    /// steps held the writer.
    pub async fn cancel_steps(
        &self,
        cancels: Vec<CancelMany>,
        limit: usize,
    ) -> Result<(Vec<CancelStep>, Duration), CallError> {
        self.run(
            "cancel_steps",
            Class::Commands,
            Op::Write,
            limit,
            move |store, _| {
                Box::pin(async move {
                    let started = Instant::now();
                    let steps = store.cancel_steps(&cancels, limit).await?;
                    Ok((steps, started.elapsed()))
                })
            },
        )
        .await
    }

    /// How many timers `filter` would cancel now: a read of the tenant's.
    pub async fn count_cancellable(
        &self,
        tenant_id: &str,
        filter: CancelFilter,
    ) -> Result<u64, CallError> {
        let tenant_id = tenant_id.to_owned();
        self.run(
            "count_cancellable",
            Class::tenant_read(&tenant_id),
            Op::Read,
            1,
            move |store, _| {
                Box::pin(async move { store.count_cancellable(&tenant_id, &filter).await })
            },
        )
        .await
    }

    /// How many timers the `CancelTimers` at `seq` cancelled: a read of the tenant's.
    pub async fn count_cancelled_by(&self, tenant_id: &str, seq: u64) -> Result<u64, CallError> {
        let tenant_id = tenant_id.to_owned();
        self.run(
            "count_cancelled_by",
            Class::tenant_read(&tenant_id),
            Op::Read,
            1,
            move |store, _| {
                Box::pin(async move { store.count_cancelled_by(&tenant_id, seq).await })
            },
        )
        .await
    }
}
