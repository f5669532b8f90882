//! Checkpointing a [`Join`]'s state.
//!
//! Sections, each sorted by key then row:
//! - `join.left_index`, `join.right_index`: every input row with its key (`key`, `row` Binary,
//!   `count` Int64);
//! - `join.left_rows`, `join.right_rows`: the tracked rows of outer, semi, anti and mark joins
//!   (`row` Binary, `count`, `matches` Int64, `null_key` Boolean);
//! - `join.totals`: one row, `right_total` and `right_null` (the null-aware anti join's counts);
//! - for a join that holds windows (see [`super::held`]), `join.held`: per held side (`side`
//!   0 or 1), its current window's rows and then its next window's (`next`), each window's
//!   keys in order of first arrival (`key`, `row`, `count`); and `join.held_ticks`, a row per
//!   held side: `side`, `pending_at` and `until` (NULL when none). A held side's rows are not
//!   in its index section, and are written whole in every checkpoint, as a window's are.
//!
//! The changes since the last checkpoint (see [`crate::dirty`]), in a fixed order:
//! `join.left_index.changes` and `join.right_index.changes`, each (key, row) whose count
//! changed since, with its count now (0: gone; columns as the index sections);
//! `join.left_rows.changes` and `join.right_rows.changes`, the tracked rows changed since
//! (count 0: no longer tracked); `join.totals`; the held windows' sections, whole.

use datafusion_common::HashMap;

use weir_common::Result;

use super::held::HeldRow;
use super::{Bucket, Held, Index, Join, Key, Tracked};
use crate::row::RowBytes;
use crate::state::{
    binary_col, bool_col, i64_col, invalid, nonzero, opt_i64_col, runs, signature, StateReader,
    StateWriter,
};

/// A (key, row) pair of a join index as one byte string: the key's length (4 bytes,
/// little-endian), the key, the row.
pub(super) fn entry(key: &[u8], row: &[u8]) -> Vec<u8> {
    let mut e = Vec::with_capacity(4 + key.len() + row.len());
    e.extend_from_slice(&(key.len() as u32).to_le_bytes());
    e.extend_from_slice(key);
    e.extend_from_slice(row);
    e
}

/// The key and row of an [`entry`].
fn split_entry(e: &[u8]) -> Result<(&[u8], &[u8])> {
    let bad = || weir_common::WeirError::internal("a join entry too short for its key");
    let len = e.get(..4).ok_or_else(bad)?;
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    let rest = &e[4..];
    if rest.len() < len {
        return Err(bad());
    }
    Ok(rest.split_at(len))
}

/// An index section: (key, row, count) rows, in the order given.
fn put_index_rows(
    w: &mut StateWriter,
    name: &str,
    sig: &str,
    rows: &[(&[u8], &[u8], i64)],
) -> Result<()> {
    w.put(
        name,
        sig,
        rows.len(),
        vec![
            ("key", binary_col(rows.iter().map(|r| r.0))),
            ("row", binary_col(rows.iter().map(|r| r.1))),
            ("count", i64_col(rows.iter().map(|r| r.2))),
        ],
    )
}

/// A tracked rows section: each row with its count, matches and whether its key is NULL.
fn put_tracked(
    w: &mut StateWriter,
    name: &str,
    sig: &str,
    rows: &[(&[u8], Tracked)],
) -> Result<()> {
    w.put(
        name,
        sig,
        rows.len(),
        vec![
            ("row", binary_col(rows.iter().map(|r| r.0))),
            ("count", i64_col(rows.iter().map(|r| r.1.count))),
            ("matches", i64_col(rows.iter().map(|r| r.1.matches))),
            ("null_key", bool_col(rows.iter().map(|r| r.1.null_key))),
        ],
    )
}

impl Join {
    fn signature(&self) -> String {
        let params = (
            self.kind,
            self.nulls_equal,
            self.key_codec_types(),
            self.left.schema.fields().len(),
            self.right.schema.fields().len(),
        );
        if !self.holds() {
            return signature("join", &self.schema, params);
        }
        let held = self.held.each_ref().map(|h| h.as_ref().map(Held::params));
        signature("join", &self.schema, (params, held))
    }

    /// Sections `join.held` and `join.held_ticks`, if the join holds a window.
    fn put_held(&self, w: &mut StateWriter, sig: &str) -> Result<()> {
        if !self.holds() {
            return Ok(());
        }
        let mut rows: Vec<(i64, HeldRow<'_>)> = Vec::new();
        for side in 0..2 {
            rows.extend(self.held_rows(side).into_iter().map(|r| (side as i64, r)));
        }
        w.put(
            "join.held",
            sig,
            rows.len(),
            vec![
                ("side", i64_col(rows.iter().map(|r| r.0))),
                ("next", bool_col(rows.iter().map(|r| r.1 .3))),
                ("key", binary_col(rows.iter().map(|r| r.1 .0))),
                ("row", binary_col(rows.iter().map(|r| r.1 .1))),
                ("count", i64_col(rows.iter().map(|r| r.1 .2))),
            ],
        )?;
        let ticks: Vec<(i64, &Held)> =
            (0..2).filter_map(|side| self.held[side].as_ref().map(|h| (side as i64, h))).collect();
        w.put(
            "join.held_ticks",
            sig,
            ticks.len(),
            vec![
                ("side", i64_col(ticks.iter().map(|t| t.0))),
                ("pending_at", opt_i64_col(ticks.iter().map(|t| t.1.pending_at))),
                ("until", opt_i64_col(ticks.iter().map(|t| t.1.until))),
            ],
        )
    }

    /// Reads what [`Join::put_held`] wrote, replacing the held sides' state.
    fn take_held(&mut self, r: &mut StateReader) -> Result<()> {
        if !self.holds() {
            return Ok(());
        }
        let sig = self.signature();
        let s = r.take("join.held", &sig)?;
        let (sides, next) = (s.i64s("side")?, s.bools("next")?);
        let (keys, rows, counts) = (s.binary("key")?, s.binary("row")?, s.i64s("count")?);
        let t = r.take("join.held_ticks", &sig)?;
        let (tick_sides, pending_at, until) =
            (t.i64s("side")?, t.opt_i64s("pending_at")?, t.opt_i64s("until")?);
        for side in 0..2 {
            let Some(held) = self.held[side].as_mut() else { continue };
            let (sides, next, keys, rows, counts) = (&sides, &next, &keys, &rows, &counts);
            let of = |window: bool| {
                (0..keys.len())
                    .filter(move |&i| sides[i] == side as i64 && next[i] == window)
                    .map(|i| (keys[i], rows[i], counts[i]))
            };
            let (current, current_keys) = super::held::rebuild(of(false))?;
            let (pending, pending_keys) = super::held::rebuild(of(true))?;
            let Some(at) = tick_sides.iter().position(|&s| s == side as i64) else {
                return Err(invalid("section 'join.held_ticks': a held side missing"));
            };
            held.current_keys = current_keys;
            held.pending = pending;
            held.pending_keys = pending_keys;
            held.pending_at = pending_at[at];
            held.until = until[at];
            if side == 0 {
                self.left_index = current;
            } else {
                self.right_index = current;
            }
        }
        Ok(())
    }

    fn key_codec_types(&self) -> String {
        format!("{:?}", self.key_codec.types())
    }

    /// Writes the join's own state (see the module docs).
    pub(super) fn save_own(&self, w: &mut StateWriter) -> Result<()> {
        let sig = self.signature();
        for (side, (name, index)) in
            [("join.left_index", &self.left_index), ("join.right_index", &self.right_index)]
                .into_iter()
                .enumerate()
        {
            // A held side's rows are in `join.held`.
            let held = self.held[side].is_some();
            let mut rows: Vec<(&[u8], &[u8], i64)> = index
                .iter()
                .filter(|_| !held)
                .flat_map(|(k, bucket)| bucket.iter().map(move |(r, c)| (&k[..], &r[..], c)))
                .collect();
            rows.sort_unstable();
            put_index_rows(w, name, &sig, &rows)?;
        }
        for (name, tracked) in
            [("join.left_rows", &self.left_rows), ("join.right_rows", &self.right_rows)]
        {
            let mut rows: Vec<(&[u8], Tracked)> =
                tracked.iter().map(|(r, t)| (&r[..], *t)).collect();
            rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
            put_tracked(w, name, &sig, &rows)?;
        }
        self.put_totals(w, &sig)?;
        self.put_held(w, &sig)
    }

    /// Writes the changes since the last checkpoint, given the index keys and the tracked rows
    /// of each side changed since, sorted (see the module docs).
    pub(super) fn save_changed(
        &self,
        w: &mut StateWriter,
        keys: [Vec<Vec<u8>>; 2],
        tracked: [Vec<RowBytes>; 2],
    ) -> Result<()> {
        let sig = self.signature();
        let sides = [
            ("join.left_index.changes", &self.left_index),
            ("join.right_index.changes", &self.right_index),
        ];
        for ((name, index), entries) in sides.into_iter().zip(&keys) {
            let mut rows: Vec<(&[u8], &[u8], i64)> = Vec::with_capacity(entries.len());
            for e in entries {
                let (key, row) = split_entry(e)?;
                rows.push((key, row, index.get(key).map_or(0, |b| b.count(row))));
            }
            put_index_rows(w, name, &sig, &rows)?;
        }
        let sides = [
            ("join.left_rows.changes", &self.left_rows),
            ("join.right_rows.changes", &self.right_rows),
        ];
        for ((name, map), rows) in sides.into_iter().zip(&tracked) {
            let now: Vec<(&[u8], Tracked)> =
                rows.iter().map(|r| (&r[..], map.get(r).copied().unwrap_or_default())).collect();
            put_tracked(w, name, &sig, &now)?;
        }
        self.put_totals(w, &sig)?;
        self.put_held(w, &sig)
    }

    /// Applies what [`Join::save_changed`] wrote to the state of the previous checkpoint.
    pub(super) fn restore_changed(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = self.signature();
        for (name, left) in [("join.left_index.changes", true), ("join.right_index.changes", false)]
        {
            let s = r.take(name, &sig)?;
            let (keys, rows, counts) = (s.binary("key")?, s.binary("row")?, s.i64s("count")?);
            let index = if left { &mut self.left_index } else { &mut self.right_index };
            for i in 0..keys.len() {
                let (key, row, count) = (keys[i], rows[i], counts[i]);
                if count < 0 {
                    return Err(invalid(format!("section '{name}': a negative count")));
                }
                match index.get_mut(key) {
                    Some(bucket) => {
                        let diff = count - bucket.count(row);
                        if diff != 0 && bucket.add(row, diff) {
                            index.remove(key);
                        }
                    }
                    None if count > 0 => {
                        index.insert(Key::from_slice(key), Bucket::One(RowBytes::from(row), count));
                    }
                    None => {}
                }
            }
        }
        for (name, left) in [("join.left_rows.changes", true), ("join.right_rows.changes", false)] {
            let s = r.take(name, &sig)?;
            let (rows, counts) = (s.binary("row")?, s.i64s("count")?);
            let (matches, nulls) = (s.i64s("matches")?, s.bools("null_key")?);
            let map = if left { &mut self.left_rows } else { &mut self.right_rows };
            for i in 0..rows.len() {
                if counts[i] == 0 {
                    map.remove(rows[i]);
                } else {
                    let t = Tracked { count: counts[i], matches: matches[i], null_key: nulls[i] };
                    map.insert(RowBytes::from(rows[i]), t);
                }
            }
        }
        let s = r.take("join.totals", &sig)?;
        self.right_total = s.scalar_i64("right_total")?;
        self.right_null = s.scalar_i64("right_null")?;
        self.take_held(r)
    }

    /// Section `join.totals`: the null-aware anti join's counts of the right side.
    fn put_totals(&self, w: &mut StateWriter, sig: &str) -> Result<()> {
        w.put(
            "join.totals",
            sig,
            1,
            vec![
                ("right_total", i64_col([self.right_total])),
                ("right_null", i64_col([self.right_null])),
            ],
        )
    }

    /// Reads what [`Join::save_own`] wrote.
    pub(super) fn restore_own(&mut self, r: &mut StateReader) -> Result<()> {
        let sig = self.signature();
        let mut indexes = Vec::with_capacity(2);
        for name in ["join.left_index", "join.right_index"] {
            let s = r.take(name, &sig)?;
            let (keys, rows, counts) = (s.binary("key")?, s.binary("row")?, s.i64s("count")?);
            let mut index = Index::new();
            for (start, end) in runs(&keys) {
                let mut bucket: Option<Bucket> = None;
                let mut seen = datafusion_common::HashSet::with_capacity(end - start);
                for i in start..end {
                    if !seen.insert(rows[i]) {
                        return Err(invalid(format!("section '{name}': a row appears twice")));
                    }
                    let count = nonzero(name, counts[i])?;
                    match bucket.as_mut() {
                        None => bucket = Some(Bucket::One(RowBytes::from(rows[i]), count)),
                        Some(b) => {
                            b.add(rows[i], count);
                        }
                    }
                }
                let Some(bucket) = bucket else { continue };
                if index.insert(Key::from_slice(keys[start]), bucket).is_some() {
                    return Err(invalid(format!("section '{name}': a key appears twice")));
                }
            }
            indexes.push(index);
        }
        let mut tracked = Vec::with_capacity(2);
        for name in ["join.left_rows", "join.right_rows"] {
            let s = r.take(name, &sig)?;
            let (rows, counts) = (s.binary("row")?, s.i64s("count")?);
            let (matches, nulls) = (s.i64s("matches")?, s.bools("null_key")?);
            let mut map = HashMap::with_capacity(rows.len());
            for i in 0..rows.len() {
                let t = Tracked {
                    count: nonzero(name, counts[i])?,
                    matches: matches[i],
                    null_key: nulls[i],
                };
                if map.insert(RowBytes::from(rows[i]), t).is_some() {
                    return Err(invalid(format!("section '{name}': a row appears twice")));
                }
            }
            tracked.push(map);
        }
        let s = r.take("join.totals", &sig)?;
        let (total, null) = (s.scalar_i64("right_total")?, s.scalar_i64("right_null")?);
        let (Some(right_rows), Some(left_rows)) = (tracked.pop(), tracked.pop()) else {
            return Err(invalid("join: tracked rows missing"));
        };
        let (Some(right_index), Some(left_index)) = (indexes.pop(), indexes.pop()) else {
            return Err(invalid("join: indexes missing"));
        };
        self.left_index = left_index;
        self.right_index = right_index;
        self.left_rows = left_rows;
        self.right_rows = right_rows;
        self.right_total = total;
        self.right_null = null;
        self.take_held(r)
    }
}
