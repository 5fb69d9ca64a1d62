//! The claimed timers waiting to be published, by tenant: batches are filled taking one timer
//! from each tenant in turn, so a tenant with thousands waiting holds up another's one timer by
//! a single turn, not by its thousands (docs/CONTRACT.md §9). Each tenant's timers leave in the
//! order they were claimed, which is its `dueAt` order.

use std::collections::{HashMap, VecDeque};

use chrono::{DateTime, Utc};

use crate::domain::DueTimer;

/// A claimed timer, with the instant its claim found it due (its `reachedAt`) and when that
/// claim's round began.
pub struct Waiting {
    pub timer: DueTimer,
    pub reached_at: DateTime<Utc>,
    pub started: std::time::Instant,
}

#[derive(Default)]
pub struct Queue {
    by_tenant: HashMap<String, VecDeque<Waiting>>,
    /// Tenants with timers waiting, in the order they take their next turn.
    turns: VecDeque<String>,
    len: usize,
}

impl Queue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, waiting: Waiting) {
        let tenant = &waiting.timer.tenant_id;
        let timers = match self.by_tenant.get_mut(tenant) {
            Some(timers) => timers,
            None => self.by_tenant.entry(tenant.clone()).or_default(),
        };
        if timers.is_empty() {
            self.turns.push_back(tenant.clone());
        }
        timers.push_back(waiting);
        self.len += 1;
    }

    /// Up to `size` timers, one from each tenant in turn.
    pub fn next_batch(&mut self, size: usize) -> Vec<Waiting> {
        let mut batch = Vec::with_capacity(size.min(self.len));
        while batch.len() < size {
            let Some(tenant) = self.turns.pop_front() else {
                break;
            };
            let Some(timers) = self.by_tenant.get_mut(&tenant) else {
                continue;
            };
            if let Some(waiting) = timers.pop_front() {
                batch.push(waiting);
                self.len -= 1;
            }
            if timers.is_empty() {
                self.by_tenant.remove(&tenant);
            } else {
                self.turns.push_back(tenant);
            }
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(tenant: &str, call: usize) -> Waiting {
        Waiting {
            timer: DueTimer {
                tenant_id: tenant.into(),
                service_call_id: format!("{call}"),
                correlation_id: String::new(),
                due_at: DateTime::UNIX_EPOCH,
            },
            reached_at: DateTime::UNIX_EPOCH,
            started: std::time::Instant::now(),
        }
    }

    fn keys(batch: &[Waiting]) -> Vec<String> {
        batch
            .iter()
            .map(|w| format!("{}/{}", w.timer.tenant_id, w.timer.service_call_id))
            .collect()
    }

    #[test]
    fn tenants_take_turns_and_each_keeps_its_order() {
        let mut queue = Queue::default();
        for call in 0..1000 {
            queue.push(waiting("bulk", call));
        }
        queue.push(waiting("small", 0));
        queue.push(waiting("small", 1));
        let batch = queue.next_batch(5);
        assert_eq!(
            keys(&batch),
            ["bulk/0", "small/0", "bulk/1", "small/1", "bulk/2"]
        );
        assert_eq!(queue.len(), 997);
        assert_eq!(queue.turns, ["bulk"], "only bulk has timers waiting");
        let rest = queue.next_batch(2000);
        assert_eq!(rest.len(), 997);
        assert_eq!(rest[0].timer.service_call_id, "3");
        assert!(queue.is_empty() && queue.turns.is_empty());
    }

    #[test]
    fn a_tenant_that_comes_back_waits_for_its_turn() {
        let mut queue = Queue::default();
        queue.push(waiting("a", 0));
        queue.push(waiting("b", 0));
        assert_eq!(keys(&queue.next_batch(1)), ["a/0"]);
        queue.push(waiting("a", 1));
        assert_eq!(keys(&queue.next_batch(2)), ["b/0", "a/1"]);
    }
}
