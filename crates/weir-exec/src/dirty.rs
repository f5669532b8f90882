//! Incremental checkpoints: the keys of an operator's keyed state that changed since its
//! state was last checkpointed.
//!
//! A checkpoint of a query is either its whole state ([`crate::Operator::save_state`]) or,
//! when every stateful operator of it can say what changed, only the changes since the
//! previous checkpoint ([`crate::Operator::save_changes`]); recovery restores the last whole
//! state and applies the changes written after it, in order. A keyed operator records the
//! keys it changes in a [`DirtyKeys`] and writes, for each, its current entry or that it is
//! gone: the changes are values, not increments, so applying them is idempotent.
//!
//! Recording starts only once the state has been checkpointed ([`DirtyKeys::start`]): an
//! engine that never checkpoints pays nothing. It stops, and the next checkpoint of the query
//! is whole, when more keys changed than half the state holds (a whole copy is then about as
//! small, and the set of keys never grows past half the state).

use std::collections::HashSet;
use std::hash::Hash;

use crate::heap::HeapSize;

/// Keys changed since the last checkpoint. See the module docs.
#[derive(Debug, Default)]
pub struct DirtyKeys<K> {
    /// Whether changes are being recorded (the state was checkpointed, and not too much has
    /// changed since).
    recording: bool,
    keys: HashSet<K>,
}

/// Below this many changed keys, recording goes on whatever the state's size.
const ALWAYS: usize = 1024;

impl<K: Hash + Eq + Clone> DirtyKeys<K> {
    /// Records that `key` changed, in a state of `len` entries (after the change). `key` may
    /// be a borrowed form of the kept key type (`[u8]` for `Vec<u8>`).
    #[inline]
    pub fn note<Q>(&mut self, key: &Q, len: usize)
    where
        K: std::borrow::Borrow<Q> + for<'a> From<&'a Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.recording && !self.keys.contains(key) {
            if self.keys.len() >= ALWAYS.max(len / 2) {
                self.recording = false;
                self.keys = HashSet::new();
            } else {
                self.keys.insert(K::from(key));
            }
        }
    }

    /// Whether changes are being recorded (a caller that builds the key to note can skip
    /// that when not).
    #[inline]
    pub fn recording(&self) -> bool {
        self.recording
    }

    /// Whether changes are recorded and none was since the last checkpoint.
    pub fn is_clean(&self) -> bool {
        self.recording && self.keys.is_empty()
    }

    /// The state was just checkpointed (whole, or its changes): record from now on.
    pub fn start(&mut self) {
        self.recording = true;
        self.keys.clear();
    }

    /// The keys changed since the last checkpoint, sorted, and recording starts again; None
    /// if changes were not recorded (never checkpointed, or too many changed): the state must
    /// then be checkpointed whole.
    pub fn take(&mut self) -> Option<Vec<K>>
    where
        K: Ord,
    {
        if !self.recording {
            return None;
        }
        let mut keys: Vec<K> = self.keys.drain().collect();
        keys.sort_unstable();
        Some(keys)
    }
}

impl<K: HeapSize> HeapSize for DirtyKeys<K> {
    fn heap_bytes(&self) -> usize {
        self.keys.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_after_a_checkpoint_and_until_half_the_state_changed() {
        let key = |k: usize| k.to_be_bytes().to_vec();
        let mut d: DirtyKeys<Vec<u8>> = DirtyKeys::default();
        d.note(&key(1)[..], 10);
        assert_eq!(d.take(), None, "nothing is recorded before the first checkpoint");
        assert!(!d.is_clean());
        d.start();
        assert!(d.is_clean());
        d.note(&key(3)[..], 10);
        d.note(&key(1)[..], 10);
        d.note(&key(3)[..], 10);
        assert!(!d.is_clean());
        assert_eq!(d.take(), Some(vec![key(1), key(3)]));
        assert_eq!(d.take(), Some(vec![]), "taking starts again");
        for k in 0..ALWAYS {
            d.note(&key(k)[..], 4 * ALWAYS);
        }
        assert_eq!(d.take().map(|k| k.len()), Some(ALWAYS));
        for k in 0..=2 * ALWAYS {
            d.note(&key(k)[..], 4 * ALWAYS);
        }
        assert_eq!(d.take(), None, "more than half the state changed: checkpoint it whole");
        d.start();
        assert_eq!(d.take(), Some(vec![]));
    }
}
