//! Apply: scalar subqueries evaluated row by row, for the correlated subqueries that could not
//! be decorrelated into joins (e.g. `(SELECT count(*) FROM t AS x WHERE x.b < t.b)`).
//!
//! Semantics: each input row r gets one more column per subquery, computed with the subquery's
//! outer references bound to r's values: a scalar subquery's value (NULL if it returns no row;
//! an error if more than one), `[NOT] EXISTS`, or `probe [NOT] IN (subquery)` with SQL's NULL
//! rules (NULL when the probe is NULL or the set holds a NULL and no match, over a non-empty
//! set). Subquery results are cached per distinct outer binding. The operator is not
//! incremental: it runs in one-shot queries only, where every input arrives at one instant
//! (the engine refuses a continuous query that needs it). State: the cache. Not checkpointed:
//! saving or restoring it is an error, since one-shot queries are never saved.
//!
//! Each bound subquery is a plan of its own, compiled and evaluated by the [`SubqueryEval`]
//! the compiler hands the operator when it builds it, so the operator needs no compiler.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::Array;
use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use arrow::datatypes::SchemaRef;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{Column, DFSchemaRef, ScalarValue};
use datafusion_expr::Expr;
use weir_common::{ChangeBatch, Result, Time, WeirError};
use weir_plan::{ApplyKind, ApplySubquery, LogicalPlan};

use crate::expr::ScalarExpr;
use crate::heap::HeapSize;
use crate::operator::{take_inputs, EvalCtx, Operator, Step};
use crate::ops::batch_of;
use crate::row::{RowBytes, RowCodec};

/// What a subquery evaluated to for one outer binding.
#[derive(Debug, Clone)]
enum Outcome {
    Scalar(ScalarValue),
    /// The subquery's rows: encoded first-column values, whether one is NULL, and the count.
    Set {
        values: HashSet<RowBytes>,
        has_null: bool,
        rows: i64,
    },
}

impl HeapSize for Outcome {
    fn heap_bytes(&self) -> usize {
        match self {
            Outcome::Scalar(v) => v.heap_bytes(),
            Outcome::Set { values, .. } => values.heap_bytes(),
        }
    }
}

/// One subquery with the input columns its outer references name.
#[derive(Debug)]
struct Sub {
    plan: Arc<LogicalPlan>,
    kind: ApplyKind,
    /// For IN: the probe over the input, and the codec of the subquery's column.
    probe: Option<(ScalarExpr, RowCodec, DataType)>,
    /// (outer column, index in the input).
    outer: Vec<(Column, usize)>,
    codec: RowCodec,
    cache: HashMap<RowBytes, Outcome>,
}

/// Evaluates a plan (a subquery with its outer references bound) at instant `t` over the
/// step's source changes: the relation it denotes, consolidated, in the executor's schema for
/// the plan (all fields nullable).
pub type SubqueryEval = fn(plan: &LogicalPlan, t: Time, ctx: &EvalCtx) -> Result<ChangeBatch>;

#[derive(Debug)]
pub struct Apply {
    subs: Vec<Sub>,
    schema: SchemaRef,
    evaluated: bool,
    evaluate: SubqueryEval,
}

/// The outer columns a subquery plan references.
fn outer_columns(plan: &LogicalPlan) -> Vec<Column> {
    let found = std::cell::RefCell::new(Vec::<Column>::new());
    plan.map_exprs(&|e| {
        let _ = e.apply(|x| {
            if let Expr::OuterReferenceColumn(_, c) = x {
                if !found.borrow().contains(c) {
                    found.borrow_mut().push(c.clone());
                }
            }
            Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
        });
        e.clone()
    });
    found.into_inner()
}

impl Apply {
    /// An Apply over an input of `input_schema`, evaluating each bound subquery with
    /// `evaluate`.
    pub fn new(
        input_schema: &DFSchemaRef,
        subqueries: &[ApplySubquery],
        schema: SchemaRef,
        evaluate: SubqueryEval,
    ) -> Result<Self> {
        let mut subs = Vec::new();
        for q in subqueries {
            let plan = &q.plan;
            let probe = match &q.kind {
                ApplyKind::In { probe, .. } => {
                    let ty = plan.schema().field(0).data_type().clone();
                    Some((
                        ScalarExpr::compile(probe, input_schema)?,
                        RowCodec::new(vec![ty.clone()])?,
                        ty,
                    ))
                }
                _ => None,
            };
            let mut outer = Vec::new();
            for c in outer_columns(plan) {
                let idx = input_schema.index_of_column(&c).map_err(|e| {
                    WeirError::internal(format!("outer reference {c}: {}", e.strip_backtrace()))
                })?;
                outer.push((c, idx));
            }
            let types =
                outer.iter().map(|(_, i)| input_schema.field(*i).data_type().clone()).collect();
            subs.push(Sub {
                plan: plan.clone(),
                kind: q.kind.clone(),
                probe,
                outer,
                codec: RowCodec::new(types)?,
                cache: HashMap::new(),
            });
        }
        Ok(Apply { subs, schema, evaluated: false, evaluate })
    }
}

impl Sub {
    /// The subquery's result with its outer references bound to `values`.
    fn value(
        &self,
        evaluate: SubqueryEval,
        values: &[ScalarValue],
        t: Time,
        ctx: &EvalCtx,
    ) -> Result<Outcome> {
        let bindings: Vec<(Column, ScalarValue)> =
            self.outer.iter().map(|(c, _)| c.clone()).zip(values.iter().cloned()).collect();
        let bound = self.plan.map_exprs(&|e| {
            e.clone()
                .transform_up(|x| match &x {
                    Expr::OuterReferenceColumn(_, c) => {
                        match bindings.iter().find(|(b, _)| b == c) {
                            Some((_, v)) => Ok(Transformed::yes(Expr::Literal(v.clone(), None))),
                            None => Ok(Transformed::no(x)),
                        }
                    }
                    _ => Ok(Transformed::no(x)),
                })
                .map(|t| t.data)
                .unwrap_or_else(|_| e.clone())
        });
        let out = evaluate(&bound, t, ctx)?;
        let rows: i64 = out.diffs.iter().filter(|d| **d > 0).sum();
        if !matches!(self.kind, ApplyKind::Scalar) {
            let mut values = HashSet::new();
            let mut has_null = false;
            if let (Some((_, codec, _)), Some(col)) = (&self.probe, out.data.columns().first()) {
                let enc = codec.encode(std::slice::from_ref(col), out.len())?;
                for i in 0..out.len() {
                    if col.is_null(i) {
                        has_null = true;
                    } else {
                        values.insert(RowBytes::from(enc.get(i)));
                    }
                }
            }
            return Ok(Outcome::Set { values, has_null, rows });
        }
        match rows {
            0 => Ok(Outcome::Scalar(
                ScalarValue::try_from(out.schema().field(0).data_type())
                    .unwrap_or(ScalarValue::Null),
            )),
            1 => ScalarValue::try_from_array(out.data.column(0), 0)
                .map(Outcome::Scalar)
                .map_err(|e| WeirError::internal(e.to_string())),
            _ => Err(WeirError::exec("a scalar subquery returned more than one row")),
        }
    }
}

impl Operator for Apply {
    fn eval(&mut self, step: &Step<'_>, inputs: Vec<ChangeBatch>) -> Result<ChangeBatch> {
        let (t, ctx) = (step.instant()?, step.ctx);
        let [d] = take_inputs::<1>(inputs)?;
        if self.evaluated && (!d.is_empty() || !ctx.active.is_empty()) {
            return Err(WeirError::exec(
                "a correlated subquery that cannot be turned into a join is evaluated in one-shot \
                 queries only",
            ));
        }
        self.evaluated = true;
        let n = d.len();
        let mut cols: Vec<ArrayRef> = d.data.columns().to_vec();
        for sub in &mut self.subs {
            let outer_cols: Vec<ArrayRef> =
                sub.outer.iter().map(|(_, i)| d.data.column(*i).clone()).collect();
            let keys = sub.codec.encode(&outer_cols, n)?;
            // For IN: the probe values, encoded like the subquery's column.
            let probes = match &sub.probe {
                Some((expr, codec, ty)) if n > 0 => {
                    let col = expr.eval_as(&d.data, ty)?;
                    Some((codec.encode(std::slice::from_ref(&col), n)?, col))
                }
                _ => None,
            };
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                let key = keys.get(i);
                let outcome = match sub.cache.get(key) {
                    Some(o) => o.clone(),
                    None => {
                        let bound: Vec<ScalarValue> = outer_cols
                            .iter()
                            .map(|c| ScalarValue::try_from_array(c, i))
                            .collect::<std::result::Result<_, _>>()
                            .map_err(|e| WeirError::internal(e.to_string()))?;
                        let o = sub.value(self.evaluate, &bound, t, ctx)?;
                        sub.cache.insert(key.into(), o.clone());
                        o
                    }
                };
                values.push(match (outcome, &sub.kind) {
                    (Outcome::Scalar(v), _) => v,
                    (Outcome::Set { rows, .. }, ApplyKind::Exists { negated }) => {
                        ScalarValue::Boolean(Some((rows > 0) != *negated))
                    }
                    (Outcome::Set { values, has_null, rows }, ApplyKind::In { negated, .. }) => {
                        let (enc, col) = probes
                            .as_ref()
                            .ok_or_else(|| WeirError::internal("IN without a probe"))?;
                        let result = if rows == 0 {
                            Some(false)
                        } else if col.is_null(i) {
                            None
                        } else if values.contains(enc.get(i)) {
                            Some(true)
                        } else if has_null {
                            None
                        } else {
                            Some(false)
                        };
                        ScalarValue::Boolean(result.map(|r| r != *negated))
                    }
                    (Outcome::Set { .. }, ApplyKind::Scalar) => {
                        return Err(WeirError::internal("scalar subquery gave a set"))
                    }
                });
            }
            let ty = self.schema.field(cols.len()).data_type().clone();
            let arr = if values.is_empty() {
                arrow::array::new_empty_array(&ty)
            } else {
                let values: Vec<ScalarValue> = values
                    .into_iter()
                    .map(|v| if v.is_null() { ScalarValue::try_from(&ty).unwrap_or(v) } else { v })
                    .collect();
                ScalarValue::iter_to_array(values)
                    .map_err(|e| WeirError::internal(e.to_string()))?
            };
            cols.push(arr);
        }
        let data = batch_of(&self.schema, cols, n)?;
        Ok(ChangeBatch::new(data, d.times, d.diffs))
    }

    /// The subqueries' cached outcomes.
    fn state_bytes(&self) -> usize {
        self.subs.iter().map(|s| s.cache.heap_bytes()).sum()
    }

    /// Not checkpointed: Apply runs in one-shot queries only (the engine refuses a continuous
    /// query that needs it), which are never saved.
    fn save_state(&self, _w: &mut crate::state::StateWriter) -> Result<()> {
        Err(WeirError::exec(
            "a query with a correlated subquery evaluated row by row cannot be checkpointed",
        ))
    }

    fn restore_state(&mut self, _r: &mut crate::state::StateReader) -> Result<()> {
        Err(WeirError::exec(
            "a query with a correlated subquery evaluated row by row cannot be restored",
        ))
    }

    fn next_wakeup(&self) -> Option<Time> {
        None
    }
}
