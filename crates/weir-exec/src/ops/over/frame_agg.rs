//! Aggregates over row frames, for [`super::frames`]: given each row's frame `[s, e)` (row
//! positions in a partition's context), the aggregate of the argument over it.
//!
//! [`frame_values`] picks the cheapest walk: a running accumulation when every frame starts at
//! the partition's start (or ends at its end), else one accumulation per distinct frame (rows
//! whose frames are equal, like RANGE peers, share it). It is generic over the accumulator:
//! [`ScalarRunning`] takes any argument type through [`ScalarValue`]s ([`super::agg::Acc`]);
//! [`NumRunning`] takes a BIGINT argument as plain `i64`s for COUNT, SUM, AVG, MIN and MAX, and
//! a DOUBLE one (AVG's argument is one: the planner casts it) as `f64`s for COUNT, SUM and AVG,
//! adding the values in the same order with the same arithmetic as `Acc` (AVG sums `f64`s), so
//! it gives the same results without a `ScalarValue` per row and frame. On a BIGINT SUM that
//! overflows, `NumRunning` says so and the caller takes the scalar path, whose error names the
//! overflow.

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array};
use arrow::datatypes::DataType;
use datafusion_common::ScalarValue;
use weir_common::{Result, WeirError};
use weir_plan::{AggFunc, FrameBound, WindowFrame};

use super::agg::{df, Acc};
use crate::numeric_row::Num;

/// An accumulator over rows given by position.
pub(super) trait Running {
    type Out: Clone;
    /// Back to no rows.
    fn reset(&mut self) -> Result<()>;
    /// Adds the row at position `i`.
    fn add(&mut self, i: usize) -> Result<()>;
    /// Adds the rows at positions `s..e`, in order.
    fn add_range(&mut self, s: usize, e: usize) -> Result<()> {
        for i in s..e {
            self.add(i)?;
        }
        Ok(())
    }
    /// The aggregate of the rows added.
    fn value(&self) -> Result<Self::Out>;
}

/// The aggregate over each of `frames` (in the order given, positions among `n` rows).
pub(super) fn frame_values<R: Running>(
    r: &mut R,
    frame: &WindowFrame,
    frames: &[(usize, usize)],
    n: usize,
) -> Result<Vec<R::Out>> {
    let mut vals = Vec::with_capacity(frames.len());
    frame_values_into(r, frame, frames, n, &mut vals)?;
    Ok(vals)
}

/// [`frame_values`] into `vals` (cleared first), whose room is reused.
pub(super) fn frame_values_into<R: Running>(
    r: &mut R,
    frame: &WindowFrame,
    frames: &[(usize, usize)],
    n: usize,
    vals: &mut Vec<R::Out>,
) -> Result<()> {
    vals.clear();
    if frame.start == FrameBound::UnboundedPreceding {
        r.reset()?;
        let mut p = 0;
        for &(_, e) in frames {
            if e < p {
                r.reset()?;
                p = 0;
            }
            r.add_range(p, e)?;
            p = p.max(e);
            vals.push(r.value()?);
        }
    } else if frame.end == FrameBound::UnboundedFollowing {
        r.reset()?;
        let mut p = n;
        for &(s, _) in frames.iter().rev() {
            if s > p {
                r.reset()?;
                p = n;
            }
            for i in (s..p).rev() {
                r.add(i)?;
            }
            p = p.min(s);
            vals.push(r.value()?);
        }
        vals.reverse();
    } else {
        let mut prev: Option<((usize, usize), R::Out)> = None;
        for &fr in frames {
            let v = match &prev {
                Some((f, v)) if *f == fr => v.clone(),
                _ => {
                    r.reset()?;
                    r.add_range(fr.0, fr.1)?;
                    r.value()?
                }
            };
            prev = Some((fr, v.clone()));
            vals.push(v);
        }
    }
    Ok(())
}

/// Any aggregate over any argument, through [`Acc`] (`arg` `None`: `COUNT(*)`).
pub(super) struct ScalarRunning<'a> {
    pub acc: Acc,
    pub func: AggFunc,
    pub arg: Option<&'a ArrayRef>,
    pub arg_type: &'a DataType,
    pub out_type: &'a DataType,
}

impl Running for ScalarRunning<'_> {
    type Out = ScalarValue;

    fn reset(&mut self) -> Result<()> {
        self.acc = Acc::new(self.arg_type)?;
        Ok(())
    }

    fn add(&mut self, i: usize) -> Result<()> {
        let v = match self.arg {
            Some(a) => ScalarValue::try_from_array(a, i).map_err(df)?,
            None => ScalarValue::Int64(Some(1)),
        };
        self.acc.add(self.func, &v)
    }

    fn value(&self) -> Result<ScalarValue> {
        self.acc.value(self.func, self.out_type)
    }
}

/// The argument of a [`NumRunning`]: an array, or values read from rows (see
/// `crate::numeric_row`).
pub(super) enum NumArg<'a> {
    /// `COUNT(*)`.
    None,
    Int(&'a Int64Array),
    Float(&'a Float64Array),
    Ints(&'a [Option<i64>]),
    Floats(&'a [Option<f64>]),
}

impl NumArg<'_> {
    fn is_float(&self) -> bool {
        matches!(self, NumArg::Float(_) | NumArg::Floats(_))
    }

    /// The DOUBLE at `i` (None: NULL, or not a DOUBLE argument).
    #[inline]
    fn float(&self, i: usize) -> Option<f64> {
        match self {
            NumArg::Float(v) => v.is_valid(i).then(|| v.value(i)),
            NumArg::Floats(v) => v[i],
            _ => None,
        }
    }

    /// The BIGINT at `i` (None: NULL, or not a BIGINT argument).
    #[inline]
    fn int(&self, i: usize) -> Option<i64> {
        match self {
            NumArg::Int(v) => v.is_valid(i).then(|| v.value(i)),
            NumArg::Ints(v) => v[i],
            _ => None,
        }
    }
}

/// COUNT(*), and COUNT, SUM, AVG, MIN or MAX over a BIGINT argument, or COUNT, SUM or AVG over
/// a DOUBLE one.
pub(super) struct NumRunning<'a> {
    vals: NumArg<'a>,
    func: AggFunc,
    rows: i64,
    count: i64,
    sum: i64,
    /// AVG's sum, and SUM's over a DOUBLE.
    fsum: f64,
    min: i64,
    max: i64,
    /// A SUM overflowed: the values are not to be used.
    pub overflow: bool,
}

impl<'a> NumRunning<'a> {
    /// The accumulator for `func` over `arg` (of `arg_type`) giving `out_type`, if this
    /// function and these types are ones it computes exactly as [`Acc`] does.
    pub fn new(
        func: AggFunc,
        arg: Option<&'a ArrayRef>,
        arg_type: &DataType,
        out_type: &DataType,
    ) -> Option<Self> {
        let vals = match arg {
            None if func == AggFunc::CountStar => NumArg::None,
            None => return None,
            Some(a) if arg_type == &DataType::Int64 => NumArg::Int(a.as_any().downcast_ref()?),
            Some(a) if arg_type == &DataType::Float64 => NumArg::Float(a.as_any().downcast_ref()?),
            Some(_) => return None,
        };
        Self::over(func, vals, out_type)
    }

    /// Whether `func` over an argument of `arg_type` (None: `COUNT(*)`) giving `out_type` is
    /// one [`NumRunning`] computes.
    pub fn computes(func: AggFunc, arg_type: Option<&DataType>, out_type: &DataType) -> bool {
        let (int, float) = (&DataType::Int64, &DataType::Float64);
        match (func, arg_type) {
            (AggFunc::CountStar, None) => out_type == int,
            (_, None) => false,
            (AggFunc::CountStar | AggFunc::Count, Some(t)) => {
                (t == int || t == float) && out_type == int
            }
            (AggFunc::Avg, Some(t)) => (t == int || t == float) && out_type == float,
            (AggFunc::Sum | AggFunc::Min | AggFunc::Max, Some(t)) if t == int => out_type == int,
            (AggFunc::Sum, Some(t)) if t == float => out_type == float,
            _ => false,
        }
    }

    /// The accumulator for `func` over `vals` giving `out_type`, if [`NumRunning::computes`]
    /// it.
    pub fn over(func: AggFunc, vals: NumArg<'a>, out_type: &DataType) -> Option<Self> {
        let arg_type = match vals {
            NumArg::None => None,
            NumArg::Int(_) | NumArg::Ints(_) => Some(&DataType::Int64),
            NumArg::Float(_) | NumArg::Floats(_) => Some(&DataType::Float64),
        };
        Self::computes(func, arg_type, out_type).then_some(NumRunning {
            vals,
            func,
            rows: 0,
            count: 0,
            sum: 0,
            fsum: 0.0,
            min: 0,
            max: 0,
            overflow: false,
        })
    }

    /// `vals` as an array of `out_type` (the type [`NumRunning::new`] accepted).
    pub fn array(vals: Vec<Num>, out_type: &DataType) -> ArrayRef {
        if out_type == &DataType::Float64 {
            std::sync::Arc::new(vals.into_iter().map(Num::as_float).collect::<Float64Array>())
        } else {
            std::sync::Arc::new(vals.into_iter().map(Num::as_int).collect::<Int64Array>())
        }
    }
}

impl NumRunning<'_> {
    /// Adds a DOUBLE value. SUM's first value is taken as it is (as `Acc` does: -0.0 stays
    /// -0.0).
    #[inline]
    fn add_float(&mut self, x: f64) {
        let first = self.count == 0 && self.func == AggFunc::Sum;
        self.fsum = if first { x } else { self.fsum + x };
        self.count += 1;
    }

    /// Adds a BIGINT value.
    #[inline]
    fn add_int(&mut self, x: i64) {
        if self.count == 0 {
            (self.min, self.max) = (x, x);
        } else {
            (self.min, self.max) = (self.min.min(x), self.max.max(x));
        }
        self.count += 1;
        match self.func {
            AggFunc::Sum => match self.sum.checked_add(x) {
                Some(s) => self.sum = s,
                None => self.overflow = true,
            },
            AggFunc::Avg => self.fsum += x as f64,
            _ => {}
        }
    }
}

impl Running for NumRunning<'_> {
    type Out = Num;

    fn reset(&mut self) -> Result<()> {
        (self.rows, self.count, self.sum, self.fsum) = (0, 0, 0, 0.0);
        Ok(())
    }

    fn add(&mut self, i: usize) -> Result<()> {
        self.rows += 1;
        if matches!(self.vals, NumArg::None) {
            return Ok(());
        }
        if self.vals.is_float() {
            if let Some(x) = self.vals.float(i) {
                self.add_float(x);
            }
            return Ok(());
        }
        if let Some(x) = self.vals.int(i) {
            self.add_int(x);
        }
        Ok(())
    }

    /// Adds the rows at `s..e` with one look at the argument's form (the frames of a
    /// region are read from slices: q6's AVG over ten rows per row).
    fn add_range(&mut self, s: usize, e: usize) -> Result<()> {
        let past = || WeirError::internal("a window frame past its partition's rows");
        match self.vals {
            NumArg::Floats(v) => {
                let v = v.get(s..e).ok_or_else(past)?;
                self.rows += v.len() as i64;
                for &x in v.iter().flatten() {
                    self.add_float(x);
                }
            }
            NumArg::Ints(v) => {
                let v = v.get(s..e).ok_or_else(past)?;
                self.rows += v.len() as i64;
                for &x in v.iter().flatten() {
                    self.add_int(x);
                }
            }
            _ => {
                for i in s..e {
                    self.add(i)?;
                }
            }
        }
        Ok(())
    }

    fn value(&self) -> Result<Num> {
        let some = self.count > 0;
        let float = self.vals.is_float();
        Ok(match self.func {
            AggFunc::CountStar => Num::Int(self.rows),
            AggFunc::Count => Num::Int(self.count),
            AggFunc::Sum if some && float => Num::Float(self.fsum),
            AggFunc::Sum if some => Num::Int(self.sum),
            AggFunc::Avg if some => Num::Float(self.fsum / self.count as f64),
            AggFunc::Min if some => Num::Int(self.min),
            AggFunc::Max if some => Num::Int(self.max),
            _ => Num::Null,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Frames (s, e) over `n` rows: every shape `frame_values` walks.
    fn frames_for(frame: &WindowFrame, n: usize, rows: i64) -> Vec<(usize, usize)> {
        (0..n)
            .map(|j| {
                let s = match frame.start {
                    FrameBound::UnboundedPreceding => 0,
                    _ => j.saturating_sub(rows as usize),
                };
                let e = match frame.end {
                    FrameBound::UnboundedFollowing => n,
                    _ => j + 1,
                };
                (s, e)
            })
            .collect()
    }

    fn frame(start: FrameBound, end: FrameBound) -> WindowFrame {
        WindowFrame { range: false, start, end }
    }

    /// The values of a BIGINT array.
    fn as_ints(a: &ArrayRef) -> Vec<Option<i64>> {
        a.as_any().downcast_ref::<Int64Array>().unwrap().iter().collect()
    }

    /// The i64 and f64 accumulators give what the scalar one gives, for each function and frame
    /// shape, over values with NULLs, and flags an overflowing SUM.
    #[test]
    fn num_running_equals_scalar_running() {
        let arr: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(5),
            None,
            Some(-3),
            Some(7),
            None,
            None,
            Some(2),
            Some(i64::MAX / 2),
            Some(9),
        ]));
        let n = arr.len();
        let shapes = [
            frame(FrameBound::UnboundedPreceding, FrameBound::CurrentRow),
            frame(FrameBound::Preceding(2), FrameBound::UnboundedFollowing),
            frame(FrameBound::Preceding(2), FrameBound::CurrentRow),
            frame(FrameBound::Preceding(0), FrameBound::CurrentRow),
        ];
        let funcs = [
            (AggFunc::CountStar, DataType::Int64),
            (AggFunc::Count, DataType::Int64),
            (AggFunc::Sum, DataType::Int64),
            (AggFunc::Avg, DataType::Float64),
            (AggFunc::Min, DataType::Int64),
            (AggFunc::Max, DataType::Int64),
        ];
        for f in &shapes {
            let frames = frames_for(f, n, 2);
            for (func, out) in &funcs {
                let arg = (*func != AggFunc::CountStar).then_some(&arr);
                let mut fast = NumRunning::new(*func, arg, &DataType::Int64, out).unwrap();
                let got = NumRunning::array(frame_values(&mut fast, f, &frames, n).unwrap(), out);
                assert!(!fast.overflow);
                // The same values read from a slice (the numeric path's form, added a range at
                // a time).
                let ints: Vec<Option<i64>> = as_ints(&arr);
                let vals = if arg.is_some() { NumArg::Ints(&ints) } else { NumArg::None };
                let mut sliced = NumRunning::over(*func, vals, out).unwrap();
                let from_slice = frame_values(&mut sliced, f, &frames, n).unwrap();
                assert_eq!(&NumRunning::array(from_slice, out), &got, "{func:?} over {f:?}");
                let mut slow = ScalarRunning {
                    acc: Acc::new(&DataType::Int64).unwrap(),
                    func: *func,
                    arg,
                    arg_type: &DataType::Int64,
                    out_type: out,
                };
                let want = frame_values(&mut slow, f, &frames, n).unwrap();
                let want = ScalarValue::iter_to_array(want).unwrap();
                assert_eq!(&got, &want, "{func:?} over {f:?}");
            }
        }
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![
            Some(-0.0),
            None,
            Some(0.1),
            Some(0.2),
            Some(f64::NAN),
            None,
            Some(1e300),
            Some(1e300),
            Some(-3.5),
        ]));
        for f in &shapes {
            let frames = frames_for(f, n, 2);
            for func in [AggFunc::Count, AggFunc::Sum, AggFunc::Avg] {
                let out = if func == AggFunc::Count { DataType::Int64 } else { DataType::Float64 };
                let ty = DataType::Float64;
                let mut fast = NumRunning::new(func, Some(&floats), &ty, &out).unwrap();
                let got = NumRunning::array(frame_values(&mut fast, f, &frames, n).unwrap(), &out);
                let fs: Vec<Option<f64>> =
                    floats.as_any().downcast_ref::<Float64Array>().unwrap().iter().collect();
                let mut sliced = NumRunning::over(func, NumArg::Floats(&fs), &out).unwrap();
                let from_slice =
                    NumRunning::array(frame_values(&mut sliced, f, &frames, n).unwrap(), &out);
                assert_eq!(format!("{from_slice:?}"), format!("{got:?}"), "{func:?} over {f:?}");
                let mut slow = ScalarRunning {
                    acc: Acc::new(&ty).unwrap(),
                    func,
                    arg: Some(&floats),
                    arg_type: &ty,
                    out_type: &out,
                };
                let want = frame_values(&mut slow, f, &frames, n).unwrap();
                let want = ScalarValue::iter_to_array(want).unwrap();
                // Compared bit for bit (NaN, -0.0).
                assert_eq!(format!("{got:?}"), format!("{want:?}"), "{func:?} over {f:?}");
                if func == AggFunc::Sum {
                    let bits = |a: &ArrayRef| -> Vec<Option<u64>> {
                        let a = a.as_any().downcast_ref::<Float64Array>().unwrap();
                        a.iter().map(|v| v.map(f64::to_bits)).collect()
                    };
                    assert_eq!(bits(&got), bits(&want));
                }
            }
        }
        let big: ArrayRef = Arc::new(Int64Array::from(vec![i64::MAX, 1]));
        let f = frame(FrameBound::UnboundedPreceding, FrameBound::CurrentRow);
        let mut fast =
            NumRunning::new(AggFunc::Sum, Some(&big), &DataType::Int64, &DataType::Int64).unwrap();
        frame_values(&mut fast, &f, &[(0, 1), (0, 2)], 2).unwrap();
        assert!(fast.overflow);
        let ints = as_ints(&big);
        let mut sliced = NumRunning::over(AggFunc::Sum, NumArg::Ints(&ints), &DataType::Int64);
        let sliced = sliced.as_mut().unwrap();
        frame_values(sliced, &f, &[(0, 1), (0, 2)], 2).unwrap();
        assert!(sliced.overflow);
    }

    #[test]
    fn num_running_declines_other_types() {
        let arr: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        assert!(
            NumRunning::new(AggFunc::Sum, Some(&arr), &DataType::Int32, &DataType::Int64).is_none()
        );
        assert!(
            NumRunning::new(AggFunc::Avg, Some(&arr), &DataType::Int64, &DataType::Int64).is_none()
        );
        let f: ArrayRef = Arc::new(Float64Array::from(vec![1.0]));
        assert!(NumRunning::new(AggFunc::Min, Some(&f), &DataType::Float64, &DataType::Float64)
            .is_none());
        assert!(NumRunning::new(AggFunc::Count, None, &DataType::Int64, &DataType::Int64).is_none());
    }
}
