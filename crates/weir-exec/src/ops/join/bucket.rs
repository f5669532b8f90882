//! The rows of one join key with their multiplicities: one row inline, several in a map.

use datafusion_common::HashMap;

use crate::heap::HeapSize;
use crate::row::RowBytes;

/// The rows of one key with their multiplicities (never zero). Most keys have one row, which
/// is kept inline instead of in a map of its own; the map of several is boxed, so that a
/// bucket takes no more room in its index's slot than its one row (24 bytes, not 40).
#[derive(Debug, Clone)]
pub(super) enum Bucket {
    One(RowBytes, i64),
    Many(Box<HashMap<RowBytes, i64>>),
}

impl HeapSize for Bucket {
    fn heap_bytes(&self) -> usize {
        match self {
            Bucket::One(row, _) => row.heap_bytes(),
            Bucket::Many(rows) => rows.heap_bytes(),
        }
    }
}

impl Bucket {
    pub(super) fn iter(&self) -> impl Iterator<Item = (&RowBytes, i64)> + '_ {
        let (one, many) = match self {
            Bucket::One(r, c) => (Some((r, *c)), None),
            Bucket::Many(m) => (None, Some(m.iter().map(|(r, c)| (r, *c)))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// Adds `diff` to `row`'s multiplicity (`diff` is not zero); returns whether the bucket is
    /// now empty.
    pub(super) fn add(&mut self, row: &[u8], diff: i64) -> bool {
        match self {
            Bucket::One(r, c) if &r[..] == row => {
                *c += diff;
                *c == 0
            }
            Bucket::One(r, c) => {
                let mut m = HashMap::with_capacity(2);
                m.insert(std::mem::take(r), *c);
                m.insert(RowBytes::from(row), diff);
                *self = Bucket::Many(Box::new(m));
                false
            }
            Bucket::Many(m) => {
                match m.get_mut(row) {
                    Some(c) => {
                        *c += diff;
                        if *c == 0 {
                            m.remove(row);
                        }
                    }
                    None => {
                        m.insert(RowBytes::from(row), diff);
                    }
                }
                let single = if m.len() == 1 { m.drain().next() } else { None };
                let empty = m.is_empty();
                if let Some((r, c)) = single {
                    *self = Bucket::One(r, c);
                    return false;
                }
                empty
            }
        }
    }

    /// The multiplicity of `row` (0 if absent).
    pub(super) fn count(&self, row: &[u8]) -> i64 {
        match self {
            Bucket::One(r, c) => {
                if &r[..] == row {
                    *c
                } else {
                    0
                }
            }
            Bucket::Many(m) => m.get(row).copied().unwrap_or(0),
        }
    }

    /// The sum of the multiplicities.
    pub(super) fn total(&self) -> i64 {
        self.iter().map(|(_, c)| c).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::Bucket;
    use crate::row::RowBytes;

    fn contents(b: &Bucket) -> Vec<(Vec<u8>, i64)> {
        let mut v: Vec<(Vec<u8>, i64)> = b.iter().map(|(r, c)| (r.to_vec(), c)).collect();
        v.sort();
        v
    }

    #[test]
    fn a_bucket_is_as_small_as_one_row() {
        // A row's encoding and its count; the boxed map fits in their room.
        assert_eq!(std::mem::size_of::<Bucket>(), std::mem::size_of::<(RowBytes, i64)>());
    }

    #[test]
    fn a_bucket_grows_from_one_row_and_empties_exactly() {
        let mut b = Bucket::One(b"a"[..].into(), 1);
        assert!(!b.add(b"a", 2));
        assert_eq!(contents(&b), [(b"a".to_vec(), 3)]);
        assert!(!b.add(b"b", 1));
        assert!(matches!(b, Bucket::Many(_)));
        assert_eq!(contents(&b), [(b"a".to_vec(), 3), (b"b".to_vec(), 1)]);
        assert_eq!(b.total(), 4);
        // Back to one row: kept inline again.
        assert!(!b.add(b"a", -3));
        assert!(matches!(b, Bucket::One(..)));
        assert_eq!(contents(&b), [(b"b".to_vec(), 1)]);
        assert!(b.add(b"b", -1));
    }
}
