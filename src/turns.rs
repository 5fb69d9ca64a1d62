//! A queue whose items wait by key (a tenant) and leave one key at a time in turn: a key with
//! thousands waiting holds up another key's one item by a single turn, not by its thousands.
//! Each key's items leave in the order they came. Used wherever one tenant's flood must not
//! stand in front of another tenant's work (docs/CONTRACT.md §9).

use std::collections::{HashMap, VecDeque};

#[derive(Debug)]
pub struct Turns<T> {
    by_key: HashMap<String, VecDeque<T>>,
    /// Keys with items waiting, in the order they take their next turn.
    turns: VecDeque<String>,
    len: usize,
    /// The largest queue of a key that emptied, kept for the next key: one tenant's burst
    /// empties and refills its queue again and again, and growing it anew from nothing each
    /// time copied it at every doubling and faulted in fresh pages for the large ones.
    spare: VecDeque<T>,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            turns: VecDeque::new(),
            len: 0,
            spare: VecDeque::new(),
        }
    }
}

impl<T> Turns<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many items of `key` wait.
    pub fn len_of(&self, key: &str) -> usize {
        self.by_key.get(key).map_or(0, VecDeque::len)
    }

    /// Queues `item` behind the other items of `key`; a key that had none takes its turn after
    /// every key already waiting.
    pub fn push(&mut self, key: &str, item: T) {
        let items = match self.by_key.get_mut(key) {
            Some(items) => items,
            None => {
                let spare = std::mem::take(&mut self.spare);
                self.by_key.entry(key.to_owned()).or_insert(spare)
            }
        };
        if items.is_empty() {
            self.turns.push_back(key.to_owned());
        }
        items.push_back(item);
        self.len += 1;
    }

    /// The next item: the oldest of the key whose turn it is.
    pub fn pop(&mut self) -> Option<T> {
        while let Some(key) = self.turns.pop_front() {
            let Some(items) = self.by_key.get_mut(&key) else {
                continue;
            };
            let item = items.pop_front();
            if items.is_empty() {
                self.retire(&key);
            } else {
                self.turns.push_back(key);
            }
            if item.is_some() {
                self.len -= 1;
                return item;
            }
        }
        None
    }

    /// The next item of a key for which `eligible` holds, keys taking turns as in [`Self::pop`]:
    /// a key passed over keeps its place in the turns. With its key.
    pub fn pop_eligible(&mut self, eligible: impl Fn(&str) -> bool) -> Option<(String, T)> {
        let at = self.turns.iter().position(|key| eligible(key))?;
        let key = self.turns.remove(at)?;
        let items = self.by_key.get_mut(&key)?;
        let item = items.pop_front()?;
        if items.is_empty() {
            self.retire(&key);
        } else {
            self.turns.push_back(key.clone());
        }
        self.len -= 1;
        Some((key, item))
    }

    /// Up to `size` items, one from each key in turn.
    pub fn pop_many(&mut self, size: usize) -> Vec<T> {
        let mut batch = Vec::with_capacity(size.min(self.len));
        while batch.len() < size {
            let Some(item) = self.pop() else { break };
            batch.push(item);
        }
        batch
    }

    /// Takes every item out, whatever its key.
    /// Forgets `key`, whose queue is empty, keeping the queue if it is the largest yet.
    fn retire(&mut self, key: &str) {
        if let Some(emptied) = self.by_key.remove(key)
            && emptied.capacity() > self.spare.capacity()
        {
            self.spare = emptied;
        }
    }

    pub fn drain(&mut self) -> Vec<T> {
        self.turns.clear();
        self.len = 0;
        self.by_key.drain().flat_map(|(_, items)| items).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_take_turns_and_each_keeps_its_order() {
        let mut turns = Turns::default();
        for n in 0..1000 {
            turns.push("bulk", format!("bulk/{n}"));
        }
        turns.push("small", "small/0".to_owned());
        turns.push("small", "small/1".to_owned());
        assert_eq!(
            turns.pop_many(5),
            ["bulk/0", "small/0", "bulk/1", "small/1", "bulk/2"]
        );
        assert_eq!(turns.len(), 997);
        assert_eq!(turns.len_of("small"), 0);
        assert_eq!(turns.turns, ["bulk"], "only bulk has items waiting");
        let rest = turns.pop_many(2000);
        assert_eq!(rest.len(), 997);
        assert_eq!(rest[0], "bulk/3");
        assert!(turns.is_empty() && turns.turns.is_empty() && turns.pop().is_none());
    }

    #[test]
    fn a_key_that_comes_back_waits_for_its_turn() {
        let mut turns = Turns::default();
        turns.push("a", 0);
        turns.push("b", 0);
        assert_eq!(turns.pop(), Some(0));
        turns.push("a", 1);
        assert_eq!(turns.pop_many(2), [0, 1], "b's turn first, then a's");
        assert_eq!(turns.len(), 0);
    }

    #[test]
    fn a_key_passed_over_keeps_its_turn() {
        let mut turns = Turns::default();
        turns.push("busy", 1);
        turns.push("busy", 2);
        turns.push("idle", 3);
        assert_eq!(
            turns.pop_eligible(|key| key != "busy"),
            Some(("idle".to_owned(), 3))
        );
        assert_eq!(turns.pop_eligible(|key| key != "busy"), None);
        assert_eq!(turns.pop_eligible(|_| true), Some(("busy".to_owned(), 1)));
        assert_eq!(turns.len(), 1);
    }

    #[test]
    fn a_queue_that_emptied_is_kept_for_the_next_key() {
        let mut turns = Turns::default();
        for n in 0..1000 {
            turns.push("burst", n);
        }
        assert_eq!(turns.pop_many(1000).len(), 1000);
        turns.push("next", 0);
        assert!(
            turns.by_key["next"].capacity() >= 1000,
            "grown once, not again"
        );
        assert_eq!(turns.pop(), Some(0));
        assert!(turns.is_empty() && turns.by_key.is_empty());
    }

    #[test]
    fn drain_takes_everything() {
        let mut turns = Turns::default();
        turns.push("a", 1);
        turns.push("b", 2);
        let mut all = turns.drain();
        all.sort();
        assert_eq!(all, [1, 2]);
        assert!(turns.is_empty() && turns.pop().is_none());
    }
}
