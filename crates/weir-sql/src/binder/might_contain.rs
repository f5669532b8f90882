//! `MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(c [, capacity [, error]]) FROM ...), x)`: Spark's
//! approximate membership test, against a relation held as a counting Bloom filter.
//!
//! On the syntax tree, before planning, each such call becomes `x IN (SELECT c AS
//! __weir_bloom_N FROM ...)`, so DataFusion decorrelates it like any `IN`: a semi join as a
//! filter conjunct, an anti join under `NOT`, a mark join inside a larger condition. The
//! converter then recognises the join by its right column's name ([`probe_of`]) and makes it a
//! [`weir_plan::JoinKind::MightContain`] with the filter's capacity and error kept here.
//! `BLOOM_FILTER_AGG` anywhere else, and `MIGHT_CONTAIN` in another shape, are errors naming
//! the form expected.

use std::ops::ControlFlow;

use sqlparser::ast as sql;
use sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
use weir_common::{Result, Span, WeirError};
use weir_plan::{
    Fraction, BLOOM_CAPACITIES, DEFAULT_BLOOM_CAPACITY, DEFAULT_BLOOM_ERROR, MAX_FILTER_BYTES,
};

use super::number_literal;

/// The name the rewritten subquery gives its column: this prefix and the probe's number.
const PREFIX: &str = "__weir_bloom_";

/// The form errors point to.
const FORM: &str = "MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(column [, capacity [, error]]) FROM \
                    relation ...), value)";

/// One `MIGHT_CONTAIN` call: its filter's size and where it was written.
#[derive(Debug, Clone)]
pub struct BloomProbe {
    pub capacity: u64,
    pub error: Fraction,
    pub span: Option<Span>,
}

/// Whether `name` is a column a rewritten `MIGHT_CONTAIN` subquery outputs.
pub fn is_probe_column(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// The probe whose subquery outputs the column `name`, if it is one.
pub fn probe_of<'a>(name: &str, probes: &'a [BloomProbe]) -> Option<&'a BloomProbe> {
    probes.get(name.strip_prefix(PREFIX)?.parse::<usize>().ok()?)
}

fn span_of(node: &impl sql::Spanned) -> Option<Span> {
    Span::from_sql(node.span())
}

fn unnamed(arg: &FunctionArg) -> Option<&sql::Expr> {
    match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
        _ => None,
    }
}

fn function_args(f: &sql::Function) -> Option<Vec<&sql::Expr>> {
    match &f.args {
        FunctionArguments::List(list) if list.duplicate_treatment.is_none() => {
            list.args.iter().map(unnamed).collect()
        }
        FunctionArguments::None => Some(vec![]),
        _ => None,
    }
}

fn is_named(f: &sql::Function, name: &str) -> bool {
    f.name.to_string().eq_ignore_ascii_case(name)
}

/// Rewrites every `MIGHT_CONTAIN` of `q` (see the module docs); returns their filters, the
/// N-th for the column `__weir_bloom_N`.
pub fn rewrite(q: &mut sql::Query) -> Result<Vec<BloomProbe>> {
    let mut probes: Vec<BloomProbe> = Vec::new();
    let found = sql::visit_expressions_mut(q, |e| {
        let sql::Expr::Function(f) = e else { return ControlFlow::Continue(()) };
        if !is_named(f, "might_contain") {
            return ControlFlow::Continue(());
        }
        match probe(f, probes.len()) {
            Ok((rewritten, p)) => {
                probes.push(p);
                *e = rewritten;
                ControlFlow::Continue(())
            }
            Err(err) => ControlFlow::Break(err),
        }
    });
    if let ControlFlow::Break(err) = found {
        return Err(err);
    }
    // What is left is a BLOOM_FILTER_AGG outside MIGHT_CONTAIN.
    let stray = sql::visit_expressions(q, |e| match e {
        sql::Expr::Function(f) if is_named(f, "bloom_filter_agg") => ControlFlow::Break(span_of(e)),
        _ => ControlFlow::Continue(()),
    });
    if let ControlFlow::Break(span) = stray {
        return Err(WeirError::plan_at(
            format!(
                "BLOOM_FILTER_AGG builds the filter MIGHT_CONTAIN looks values up in, and is only \
                 usable there: {FORM}"
            ),
            span,
        ));
    }
    Ok(probes)
}

/// `MIGHT_CONTAIN((SELECT BLOOM_FILTER_AGG(c, n, p) FROM ...), x)` -> `x IN (SELECT c AS
/// __weir_bloom_<number> FROM ...)`, with its filter.
fn probe(f: &sql::Function, number_: usize) -> Result<(sql::Expr, BloomProbe)> {
    let call = span_of(f);
    let shape = |what: &str, span: Option<Span>| {
        WeirError::plan_at(format!("MIGHT_CONTAIN {what}: expected {FORM}"), span.or(call))
    };
    let args = function_args(f).ok_or_else(|| shape("takes two plain arguments", call))?;
    let [filter, value] = args[..] else {
        return Err(shape(&format!("takes 2 arguments, found {}", args.len()), call));
    };
    let sql::Expr::Subquery(query) = filter else {
        return Err(shape(
            "looks values up in a filter built by a subquery (a literal filter is not supported)",
            span_of(filter),
        ));
    };
    let mut query = query.clone();
    let sql::SetExpr::Select(select) = query.body.as_mut() else {
        return Err(shape("needs one SELECT of BLOOM_FILTER_AGG", span_of(filter)));
    };
    let grouped = match &select.group_by {
        sql::GroupByExpr::All(_) => true,
        sql::GroupByExpr::Expressions(e, _) => !e.is_empty(),
    };
    if grouped || select.having.is_some() || select.distinct.is_some() {
        return Err(shape(
            "builds one filter of the whole subquery (no GROUP BY, HAVING or DISTINCT)",
            span_of(filter),
        ));
    }
    let agg = match select.projection.as_slice() {
        [sql::SelectItem::UnnamedExpr(sql::Expr::Function(g))]
        | [sql::SelectItem::ExprWithAlias { expr: sql::Expr::Function(g), .. }]
            if is_named(g, "bloom_filter_agg") =>
        {
            g
        }
        _ => {
            return Err(shape(
                "needs a subquery selecting BLOOM_FILTER_AGG(column) alone",
                span_of(filter),
            ))
        }
    };
    let agg_args = function_args(agg)
        .filter(|a| (1..=3).contains(&a.len()))
        .ok_or_else(|| shape("takes BLOOM_FILTER_AGG with 1 to 3 plain arguments", span_of(agg)))?;
    let column = agg_args[0].clone();
    let capacity = match agg_args.get(1) {
        None => DEFAULT_BLOOM_CAPACITY,
        Some(a) => number_literal(a)
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|c| BLOOM_CAPACITIES.contains(c))
            .ok_or_else(|| {
                WeirError::plan_at(
                    format!(
                        "BLOOM_FILTER_AGG's capacity must be an integer constant from {} to {} \
                         (the distinct values the filter holds at its error rate), found {a}",
                        BLOOM_CAPACITIES.start(),
                        BLOOM_CAPACITIES.end()
                    ),
                    span_of(*a),
                )
            })?,
    };
    let error = match agg_args.get(2) {
        None => Fraction::new(DEFAULT_BLOOM_ERROR),
        Some(a) => number_literal(a)
            .and_then(|n| n.parse::<f64>().ok())
            .filter(|p| *p > 0.0 && *p < 1.0)
            .and_then(Fraction::new),
    };
    let Some(error) = error else {
        let a = agg_args.get(2).map(|a| a.to_string()).unwrap_or_default();
        return Err(WeirError::plan_at(
            format!(
                "BLOOM_FILTER_AGG's error must be a numeric constant strictly between 0 and 1 \
                 (the false-positive rate; Spark's third argument, a number of bits, is not \
                 taken), found {a}"
            ),
            agg_args.get(2).and_then(|a| span_of(*a)),
        ));
    };
    // The counters are a byte each: refuse a filter that would not fit in memory before it
    // is allocated (a typo in the capacity or the error would otherwise abort the process).
    let counters = weir_plan::bloom_cells(capacity, error.get());
    if counters > MAX_FILTER_BYTES as f64 {
        return Err(WeirError::plan_at(
            format!(
                "BLOOM_FILTER_AGG with capacity {capacity} and error {} needs {:.1} GB of \
                 counters (a byte per counter, -capacity·ln(error)/ln²2 of them); at most {} GB: \
                 lower the capacity or raise the error",
                error.get(),
                counters / 1e9,
                MAX_FILTER_BYTES / 1_000_000_000
            ),
            span_of(agg),
        ));
    }
    select.projection = vec![sql::SelectItem::ExprWithAlias {
        expr: column,
        alias: sql::Ident::new(format!("{PREFIX}{number_}")),
    }];
    let rewritten =
        sql::Expr::InSubquery { expr: Box::new(value.clone()), subquery: query, negated: false };
    Ok((rewritten, BloomProbe { capacity, error, span: call }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(text: &str) -> sql::Query {
        let dialect = sqlparser::dialect::GenericDialect {};
        let mut stmts = sqlparser::parser::Parser::parse_sql(&dialect, text).unwrap();
        match stmts.remove(0) {
            sql::Statement::Query(q) => *q,
            other => panic!("not a query: {other}"),
        }
    }

    fn rewritten(text: &str) -> Result<(String, Vec<BloomProbe>)> {
        let mut q = query(text);
        let probes = rewrite(&mut q)?;
        Ok((q.to_string(), probes))
    }

    #[test]
    fn calls_become_in_subqueries_with_their_filters() {
        let (text, probes) = rewritten(
            "SELECT * FROM s WHERE might_contain((SELECT BLOOM_FILTER_AGG(id, 1000, 0.05) FROM t \
             WHERE t.ok), s.k) AND NOT MIGHT_CONTAIN((SELECT bloom_filter_agg(u) FROM v), s.j)",
        )
        .unwrap();
        assert_eq!(
            text,
            "SELECT * FROM s WHERE s.k IN (SELECT id AS __weir_bloom_0 FROM t WHERE t.ok) AND NOT \
             s.j IN (SELECT u AS __weir_bloom_1 FROM v)"
        );
        assert_eq!((probes[0].capacity, probes[0].error.get()), (1000, 0.05));
        assert_eq!((probes[1].capacity, probes[1].error.get()), (1_000_000, 0.01));
        assert_eq!(probe_of("__weir_bloom_1", &probes).map(|p| p.capacity), Some(1_000_000));
        assert!(probe_of("__weir_bloom_2", &probes).is_none() && probe_of("k", &probes).is_none());
    }

    #[test]
    fn other_shapes_are_errors_naming_the_form() {
        for (text, says) in [
            ("SELECT might_contain(x) FROM s", "takes 2 arguments"),
            ("SELECT * FROM s WHERE might_contain(x'00', k)", "a literal filter"),
            ("SELECT * FROM s WHERE might_contain((SELECT id FROM t), k)", "BLOOM_FILTER_AGG"),
            (
                "SELECT * FROM s WHERE might_contain((SELECT bloom_filter_agg(id) FROM t GROUP BY \
                 g), k)",
                "no GROUP BY",
            ),
            (
                "SELECT * FROM s WHERE might_contain((SELECT bloom_filter_agg(id, 0) FROM t), k)",
                "capacity must be",
            ),
            (
                "SELECT * FROM s WHERE might_contain((SELECT bloom_filter_agg(id, 10, 8388608) \
                 FROM t), k)",
                "a number of bits",
            ),
            ("SELECT bloom_filter_agg(id) FROM t", "only usable there"),
            (
                "SELECT * FROM s WHERE might_contain((SELECT bloom_filter_agg(id, 100000000, \
                 1e-30) FROM t), k)",
                "at most 4 GB",
            ),
        ] {
            let err = rewritten(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
