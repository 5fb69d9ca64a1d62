//! A freeze while quotas refuse: [`QUOTA_TENANT`] is limited to 300 commands a second; while
//! the daemon is frozen (SIGSTOP) it is sent [`QUOTA_FLOOD`] schedules, so the daemon meets them
//! at once and refuses most; while it works them off it is frozen again, each time past the
//! 4 s ack wait, so that the broker delivers again what it held. Invariant (l) judges that no
//! refused key is stored from a later copy, and no stored key refused (docs/CONTRACT.md §9, "A
//! refusal is final").

use std::time::Duration;

use chrono::Utc;

use super::super::history::{Outcome, QuotaFlood};
use super::Nemesis;

/// The tenant the run's daemon limits (`TIMER_QUOTAS_TENANTS`); the workload never uses it.
pub const QUOTA_TENANT: &str = "metered";
/// Its limit, as `TIMER_QUOTAS_TENANTS` gives it.
pub const QUOTA_SETTING: &str = "metered:commands_per_second=300";
const QUOTA_FLOOD: usize = 3_000;
/// Each freeze outlasts the 4 s ack wait: what the daemon held comes again.
const FROZEN_FOR: Duration = Duration::from_secs(5);
const FREEZES: usize = 2;

impl Nemesis {
    pub(super) async fn freeze_while_quotas_refuse(
        &mut self,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        let ids: Vec<String> = (0..QUOTA_FLOOD)
            .map(|i| format!("quota{}-{i:05}", self.cycle))
            .collect();
        let due_at = crate::common::millis(Utc::now() + chrono::Duration::seconds(8));
        self.world.signal_daemon(libc::SIGSTOP);
        let sent = self.client.send_schedules(QUOTA_TENANT, &ids, due_at).await;
        self.world.signal_daemon(libc::SIGCONT);
        let acked = sent.iter().filter(|s| s.outcome == Outcome::Acked).count();
        self.quota_floods.push(QuotaFlood {
            tenant: QUOTA_TENANT.to_owned(),
            due_at,
            sent: sent
                .into_iter()
                .map(|s| (s.id, s.outcome == Outcome::Acked))
                .collect(),
        });
        let mut frozen_with = Vec::new();
        for _ in 0..FREEZES {
            // Frozen once it has worked off some of the flood, with the rest still to come.
            let Some(before) = self.commands_waiting().await else {
                break;
            };
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let mut left = before;
            while left > 0 && left + 200 > before && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
                left = self.commands_waiting().await.unwrap_or(0);
            }
            if left == 0 {
                break;
            }
            self.world.signal_daemon(libc::SIGSTOP);
            frozen_with.push(left);
            tokio::time::sleep(FROZEN_FOR).await; // the fault's length
            self.world.signal_daemon(libc::SIGCONT);
        }
        notes.push(format!(
            "{acked} of {QUOTA_FLOOD} schedules of {QUOTA_TENANT} acknowledged while the daemon \
             was frozen; frozen {} time(s) more for {FROZEN_FOR:?} while working them off, with \
             {frozen_with:?} commands still in the stream",
            frozen_with.len()
        ));
        Ok(())
    }

    /// Commands the command stream still holds (unread or unacknowledged), if it answers.
    async fn commands_waiting(&self) -> Option<u64> {
        tokio::time::timeout(Duration::from_secs(3), self.admin.commands_outstanding())
            .await
            .ok()
    }
}
