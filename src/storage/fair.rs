//! Fair claims (docs/CONTRACT.md §9): when more timers are due than one claim takes, tenants
//! take turns. A fair claim walks the tenants that hold rows (one index step each), keeps those
//! with a timer due, and takes from each of them an equal share of the claim, each tenant's
//! own timers in `dueAt` order. A tenant's burst of a million timers due at one instant then
//! holds up its own timers only: another tenant's timer due a moment later is in the next fair
//! claim, not behind the million.
//!
//! The walk costs one step per tenant holding rows, so a claim serves at most
//! [`TENANTS_PER_CLAIM`] tenants and walks at most [`TENANTS_PER_WALK`]; the next claim goes on
//! after the last tenant reached, so with more tenants than that they are served in rotation.
//! The walk and the share claim are the backend's SQL (`sqlite/fair.rs`, `postgres/fair.rs`);
//! which tenants to serve and where the next walk goes on are decided here, once.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use super::backend::ClaimShares;
use super::{Claimant, DueBatch, Store, StoreError};

/// Most tenants one fair claim takes timers from (SQLite joins at most 500 selects in one
/// statement).
pub const TENANTS_PER_CLAIM: usize = 256;
/// Most tenants one fair claim looks at.
pub const TENANTS_PER_WALK: usize = 1024;

/// What a fair claim took, and where the next one goes on.
#[derive(Debug)]
pub struct FairBatch {
    pub batch: DueBatch,
    /// The last tenant this claim reached when it could not reach them all: the next fair
    /// claim starts after it. `None`: the next starts from the first tenant.
    pub resume_after: Option<String>,
}

/// See [`Store::claim_fair`].
pub(super) async fn claim_fair(
    store: &Store,
    now: DateTime<Utc>,
    skip: &BTreeSet<String>,
    resume_after: Option<&str>,
    limit: usize,
    fence: DateTime<Utc>,
    claimant: &Claimant,
) -> Result<FairBatch, StoreError> {
    let now = store.now(now);
    let walked = store.backend.walk_tenants(store, now, resume_after).await?;
    let (serve, resume_after) = choose(&walked, skip);
    if serve.is_empty() {
        return Ok(FairBatch {
            batch: DueBatch {
                timers: Vec::new(),
                next_due_at: None,
                server_now: None,
            },
            resume_after,
        });
    }
    let share = (limit / serve.len()).max(1);
    let shares = ClaimShares {
        now,
        tenants: &serve,
        share,
        fence,
        claimant,
    };
    let batch = store.backend.claim_shares(store, shares).await?;
    Ok(FairBatch {
        batch,
        resume_after,
    })
}

/// The tenants to serve (due, not in `skip`, at most [`TENANTS_PER_CLAIM`]) and where the next
/// walk goes on: after the last tenant served when the claim could take no more, after the last
/// walked when the walk stopped at its limit, else from the start.
fn choose(walked: &[(String, bool)], skip: &BTreeSet<String>) -> (Vec<String>, Option<String>) {
    let mut serve = Vec::new();
    for (tenant, due) in walked {
        if *due && !skip.contains(tenant) {
            serve.push(tenant.clone());
            if serve.len() == TENANTS_PER_CLAIM {
                return (serve, Some(tenant.clone()));
            }
        }
    }
    let resume_after = (walked.len() >= TENANTS_PER_WALK)
        .then(|| walked.last().map(|(tenant, _)| tenant.clone()))
        .flatten();
    (serve, resume_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(tenants: &[(&str, bool)]) -> Vec<(String, bool)> {
        tenants.iter().map(|(t, d)| (t.to_string(), *d)).collect()
    }

    #[test]
    fn due_tenants_outside_the_skip_list_are_served_and_the_walk_starts_over() {
        let skip = BTreeSet::from(["bulk".to_owned()]);
        let (serve, resume) = choose(
            &walk(&[("a", true), ("bulk", true), ("c", false), ("d", true)]),
            &skip,
        );
        assert_eq!(serve, ["a", "d"]);
        assert_eq!(resume, None);
    }

    #[test]
    fn past_the_limits_the_next_claim_goes_on_after_the_last_tenant_reached() {
        let many: Vec<(String, bool)> = (0..TENANTS_PER_CLAIM + 5)
            .map(|i| (format!("t{i:04}"), true))
            .collect();
        let (serve, resume) = choose(&many, &BTreeSet::new());
        assert_eq!(serve.len(), TENANTS_PER_CLAIM);
        assert_eq!(
            resume.as_deref(),
            Some(serve[TENANTS_PER_CLAIM - 1].as_str())
        );

        let idle: Vec<(String, bool)> = (0..TENANTS_PER_WALK)
            .map(|i| (format!("t{i:04}"), i == 3))
            .collect();
        let (serve, resume) = choose(&idle, &BTreeSet::new());
        assert_eq!(serve, ["t0003"]);
        assert_eq!(resume.as_deref(), Some("t1023"));
    }
}
