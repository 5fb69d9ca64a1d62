//! Finding the commands the database refuses in a batch it refused as a whole.
//!
//! A batch is one transaction: one row the database cannot store fails all of them. Retried
//! whole, such a batch would fail for ever and stall intake for every tenant. So the batch is
//! split in halves, applied one after the other, recursing into a half that is refused, until
//! the refused commands stand alone with the database's reason; everything else is stored. One
//! bad command in `n` costs about `log2 n` to `2 log2 n` more applies.

use std::future::Future;
use std::ops::Range;

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Failure {
    /// The database refused a row of it (the database's reason).
    Refused(String),
    /// The database failed as a whole (an outage): nothing tells which commands are at fault.
    Outage(String),
}

/// What became of a batch the database refused.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Split {
    /// Positions (in the batch) of the commands stored, each by a committed apply.
    pub stored: Vec<usize>,
    /// Commands the database refused alone, with its reason.
    pub refused: Vec<(usize, String)>,
    /// Commands neither stored nor refused because an outage stopped the split, with its cause.
    pub unsettled: Vec<usize>,
    pub outage: Option<String>,
    /// Applies made by the split.
    pub applies: usize,
}

/// Splits a batch of `len` commands that was refused with `reason`, applying parts of it with
/// `apply` (a range of the batch's positions), until each refused command stands alone. An
/// outage met meanwhile stops the split: what was stored stays stored, and the rest is left
/// to be retried.
pub(super) async fn split<F, Fut>(len: usize, reason: String, mut apply: F) -> Split
where
    F: FnMut(Range<usize>) -> Fut,
    Fut: Future<Output = Result<(), Failure>>,
{
    let mut outcome = Split::default();
    // Parts still to settle, with the reason when known to be refused. Last in, first out:
    // the left half before the right, so commands are stored roughly in their order.
    let mut parts: Vec<(Range<usize>, Option<String>)> = vec![(0..len, Some(reason))];
    while let Some((part, refused)) = parts.pop() {
        let Some(reason) = refused else {
            outcome.applies += 1;
            match apply(part.clone()).await {
                Ok(()) => outcome.stored.extend(part),
                Err(Failure::Refused(reason)) => parts.push((part, Some(reason))),
                Err(Failure::Outage(cause)) => {
                    outcome.unsettled.extend(part);
                    return stop(outcome, parts, cause);
                }
            }
            continue;
        };
        if part.len() == 1 {
            outcome.refused.push((part.start, reason));
            continue;
        }
        let middle = part.start + part.len() / 2;
        let (left, right) = (part.start..middle, middle..part.end);
        outcome.applies += 1;
        match apply(left.clone()).await {
            Ok(()) => {
                outcome.stored.extend(left);
                // The whole was refused and this half was not: the other half holds a refused
                // command, so it is split without applying it whole, unless it is a single
                // command, which is applied alone for its own reason.
                if right.len() == 1 {
                    parts.push((right, None));
                } else {
                    parts.push((right, Some(reason)));
                }
            }
            Err(Failure::Refused(reason)) => {
                parts.push((right, None));
                parts.push((left, Some(reason)));
            }
            Err(Failure::Outage(cause)) => {
                outcome.unsettled.extend(part);
                return stop(outcome, parts, cause);
            }
        }
    }
    outcome
}

/// Ends a split at an outage: every part not yet settled stays unsettled.
fn stop(mut outcome: Split, parts: Vec<(Range<usize>, Option<String>)>, cause: String) -> Split {
    for (part, _) in parts {
        outcome.unsettled.extend(part);
    }
    outcome.unsettled.sort_unstable();
    outcome.outage = Some(cause);
    outcome
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    use super::*;

    /// A stand-in store: refuses any apply holding a bad position, fails with an outage at
    /// the `outage_at`-th apply (from 1), and records what it stored.
    struct Store {
        bad: BTreeSet<usize>,
        outage_at: Option<usize>,
        applies: usize,
        stored: Vec<usize>,
    }

    impl Store {
        fn new(bad: &[usize]) -> RefCell<Self> {
            RefCell::new(Self {
                bad: bad.iter().copied().collect(),
                outage_at: None,
                applies: 0,
                stored: Vec::new(),
            })
        }

        fn apply(&mut self, part: Range<usize>) -> Result<(), Failure> {
            self.applies += 1;
            if self.outage_at == Some(self.applies) {
                return Err(Failure::Outage("connection refused".into()));
            }
            if let Some(bad) = part.clone().find(|i| self.bad.contains(i)) {
                return Err(Failure::Refused(format!("row {bad} refused")));
            }
            self.stored.extend(part);
            Ok(())
        }
    }

    async fn run(store: &RefCell<Store>, len: usize) -> Split {
        split(len, "refused".into(), |part| {
            let result = store.borrow_mut().apply(part);
            async move { result }
        })
        .await
    }

    fn all_but(len: usize, bad: &[usize]) -> Vec<usize> {
        (0..len).filter(|i| !bad.contains(i)).collect()
    }

    #[tokio::test]
    async fn one_bad_command_in_fifty_is_found_in_a_few_applies() {
        for bad in 0..50 {
            let store = Store::new(&[bad]);
            let outcome = run(&store, 50).await;
            assert_eq!(outcome.refused, vec![(bad, format!("row {bad} refused"))]);
            let mut stored = store.borrow().stored.clone();
            stored.sort_unstable();
            assert_eq!(stored, all_but(50, &[bad]));
            assert!(outcome.unsettled.is_empty() && outcome.outage.is_none());
            // log2(50) is under 6: at most two applies per level.
            assert!(
                outcome.applies <= 12,
                "bad {bad}: {} applies",
                outcome.applies
            );
        }
    }

    #[tokio::test]
    async fn several_bad_commands_are_each_refused_and_the_rest_stored() {
        let bad = [0, 7, 8, 33, 99];
        let store = Store::new(&bad);
        let outcome = run(&store, 100).await;
        let refused: Vec<usize> = outcome.refused.iter().map(|(i, _)| *i).collect();
        let mut refused_sorted = refused.clone();
        refused_sorted.sort_unstable();
        assert_eq!(refused_sorted, bad);
        for (i, reason) in &outcome.refused {
            assert_eq!(reason, &format!("row {i} refused"), "its own reason");
        }
        let mut stored = store.borrow().stored.clone();
        stored.sort_unstable();
        assert_eq!(stored, all_but(100, &bad));
    }

    #[tokio::test]
    async fn a_batch_of_one_is_refused_with_its_reason_without_another_apply() {
        let store = Store::new(&[0]);
        let outcome = split(1, "row 0 refused".into(), |part| {
            let result = store.borrow_mut().apply(part);
            async move { result }
        })
        .await;
        assert_eq!(outcome.refused, vec![(0, "row 0 refused".into())]);
        assert_eq!(outcome.applies, 0);
    }

    #[tokio::test]
    async fn a_refusal_no_part_repeats_stores_everything() {
        // Refused whole (a batch-wide limit, say) but every half goes in.
        let store = Store::new(&[]);
        let outcome = run(&store, 10).await;
        assert!(outcome.refused.is_empty());
        let mut stored = store.borrow().stored.clone();
        stored.sort_unstable();
        assert_eq!(stored, all_but(10, &[]));
    }

    #[tokio::test]
    async fn an_outage_during_the_split_stops_it_and_keeps_the_rest_unsettled() {
        for outage_at in 1..=6 {
            let store = Store::new(&[41]);
            store.borrow_mut().outage_at = Some(outage_at);
            let outcome = run(&store, 50).await;
            assert_eq!(outcome.outage.as_deref(), Some("connection refused"));
            assert_eq!(outcome.applies, outage_at, "no apply after the outage");
            assert!(outcome.refused.is_empty(), "the bad one is not reached yet");
            let stored = store.borrow().stored.clone();
            assert_eq!(outcome.stored, stored);
            // Every command is either stored or left for the retry, never both, never lost.
            let mut all: Vec<usize> = stored.iter().chain(&outcome.unsettled).copied().collect();
            all.sort_unstable();
            assert_eq!(all, (0..50).collect::<Vec<_>>());
            assert!(outcome.unsettled.contains(&41));
        }
    }
}
