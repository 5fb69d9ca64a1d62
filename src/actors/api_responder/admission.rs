//! Which requests the ApiResponder takes on, per tenant: at most `running` of one tenant are
//! handled at once and the others wait their turn, so a tenant's flood of requests occupies
//! its own turns, not the others'. Past [`MAX_QUEUED_PER_TENANT`] waiting and running, a
//! tenant's next request is refused for now (503 with a retry hint), so a flood cannot grow
//! the daemon's memory without bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::domain::api::ApiError;

/// Requests of one tenant handled or waiting, at most.
pub const MAX_QUEUED_PER_TENANT: usize = 1_024;

/// How long a client refused for having too many requests waiting is asked to wait.
const BUSY_RETRY: Duration = Duration::from_millis(100);

#[derive(Clone)]
pub struct Admission {
    tenants: Arc<Mutex<HashMap<String, Tenant>>>,
    running: usize,
}

struct Tenant {
    turns: Arc<Semaphore>,
    /// Requests admitted and not yet answered.
    admitted: usize,
}

/// An admitted request of a tenant; counted until dropped.
pub struct Ticket {
    admission: Admission,
    tenant: String,
    turns: Arc<Semaphore>,
}

impl Admission {
    /// At most `running` requests of one tenant handled at once.
    pub fn new(running: usize) -> Self {
        Self {
            tenants: Arc::default(),
            running: running.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Tenant>> {
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a request of `tenant`, or refuses it when the tenant already has
    /// [`MAX_QUEUED_PER_TENANT`] waiting and running.
    pub fn admit(&self, tenant: &str) -> Result<Ticket, ApiError> {
        let mut tenants = self.lock();
        let entry = tenants.entry(tenant.to_owned()).or_insert_with(|| Tenant {
            turns: Arc::new(Semaphore::new(self.running)),
            admitted: 0,
        });
        if entry.admitted >= MAX_QUEUED_PER_TENANT {
            return Err(ApiError::unavailable(
                format!(
                    "tenant {tenant:?} has {MAX_QUEUED_PER_TENANT} requests waiting or in \
                     flight, the most allowed; retry when some are answered"
                ),
                BUSY_RETRY,
            ));
        }
        entry.admitted += 1;
        Ok(Ticket {
            admission: self.clone(),
            tenant: tenant.to_owned(),
            turns: entry.turns.clone(),
        })
    }
}

impl Ticket {
    /// Waits until fewer than `running` requests of the tenant are handled; handled until the
    /// permit is dropped.
    pub async fn turn(&self) -> Option<OwnedSemaphorePermit> {
        self.turns.clone().acquire_owned().await.ok()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut tenants = self.admission.lock();
        if let Some(entry) = tenants.get_mut(&self.tenant) {
            entry.admitted -= 1;
            if entry.admitted == 0 {
                tenants.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tenant_waits_behind_its_own_requests_only() {
        let admission = Admission::new(2);
        let whale: Vec<Ticket> = (0..3).map(|_| admission.admit("whale").unwrap()).collect();
        let first = whale[0].turn().await.unwrap();
        let _second = whale[1].turn().await.unwrap();
        let third = whale[2].turn();
        tokio::pin!(third);
        assert!(
            futures::poll!(third.as_mut()).is_pending(),
            "the whale's third waits"
        );
        let small = admission.admit("small").unwrap();
        assert!(small.turn().await.is_some(), "another tenant does not wait");
        drop(first);
        assert!(third.await.is_some(), "the whale's next turn comes");
    }

    #[test]
    fn past_the_queue_a_tenant_is_refused_for_now_and_the_count_is_given_back() {
        let admission = Admission::new(1);
        let tickets: Vec<Ticket> = (0..MAX_QUEUED_PER_TENANT)
            .map(|_| admission.admit("whale").unwrap())
            .collect();
        let refused = admission.admit("whale").err().expect("refused");
        assert_eq!(refused.code, 503);
        assert_eq!(refused.retry_after, Some(BUSY_RETRY));
        assert!(admission.admit("small").is_ok());
        drop(tickets);
        assert!(admission.admit("whale").is_ok());
        assert!(admission.lock().is_empty(), "nothing left behind");
    }
}
