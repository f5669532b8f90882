//! Walks over the parsed query before it is planned: naming repeated output columns (which
//! DataFusion's planner refuses), collecting the names a query reads (for dependencies), and
//! giving `TIMESTAMP` literals and casts Weir's unit.

use std::collections::HashMap;

use sqlparser::ast as sql;

use crate::parser::{object_name, WINDOW_PREFIX};

/// SQL allows two output columns with the same name (`SELECT 1, 1`, `SELECT v, v`, two scalar
/// subqueries, `SELECT x.a, SUM(x.b) AS a`); DataFusion's planner does not. Every unaliased
/// expression is named after its SQL text, and a name (an alias too) that repeats an earlier one
/// gets a suffix `:n` (n = 2, 3, ...), in every SELECT of the query.
pub(super) fn name_duplicate_columns(q: &mut sql::Query) {
    if let Some(with) = &mut q.with {
        for cte in &mut with.cte_tables {
            name_duplicate_columns(&mut cte.query);
        }
    }
    name_duplicates_in(&mut q.body);
}

fn name_duplicates_in(body: &mut sql::SetExpr) {
    match body {
        sql::SetExpr::Select(select) => {
            let mut seen: HashMap<String, usize> = HashMap::new();
            for item in &mut select.projection {
                let (name, expr) = match item {
                    sql::SelectItem::UnnamedExpr(e) => {
                        let (name, rename) = match &*e {
                            sql::Expr::Identifier(id) => (id.value.to_ascii_lowercase(), false),
                            sql::Expr::CompoundIdentifier(ids) => (
                                ids.last()
                                    .map(|i| i.value.to_ascii_lowercase())
                                    .unwrap_or_default(),
                                false,
                            ),
                            e => (e.to_string(), true),
                        };
                        if rename {
                            let expr = e.clone();
                            let n = seen.entry(name.clone()).or_insert(0);
                            *n += 1;
                            let alias = if *n > 1 { format!("{name}:{n}") } else { name };
                            *item = sql::SelectItem::ExprWithAlias {
                                expr,
                                alias: sql::Ident::with_quote('"', alias),
                            };
                            continue;
                        }
                        (name, Some(e.clone()))
                    }
                    sql::SelectItem::ExprWithAlias { alias, .. } => {
                        let name = alias.value.to_ascii_lowercase();
                        let n = seen.entry(name.clone()).or_insert(0);
                        *n += 1;
                        if *n > 1 {
                            *alias = sql::Ident::with_quote('"', format!("{name}:{n}"));
                        }
                        continue;
                    }
                    _ => continue,
                };
                let n = seen.entry(name.clone()).or_insert(0);
                *n += 1;
                if *n > 1 {
                    if let Some(expr) = expr {
                        *item = sql::SelectItem::ExprWithAlias {
                            expr,
                            alias: sql::Ident::with_quote('"', format!("{name}:{n}")),
                        };
                    }
                }
            }
            for twj in &mut select.from {
                name_duplicates_in_factor(&mut twj.relation);
                for j in &mut twj.joins {
                    name_duplicates_in_factor(&mut j.relation);
                }
            }
        }
        sql::SetExpr::Query(q) => name_duplicate_columns(q),
        sql::SetExpr::SetOperation { left, right, .. } => {
            name_duplicates_in(left);
            name_duplicates_in(right);
        }
        _ => {}
    }
}

fn name_duplicates_in_factor(f: &mut sql::TableFactor) {
    if let sql::TableFactor::Derived { subquery, .. } = f {
        name_duplicate_columns(subquery);
    }
}

/// Appends the names of the streams, tables and views a query's FROM clauses name (not CTEs,
/// not windowed streams' synthetic names), for dependency tracking.
pub fn collect_relation_names(q: &sql::Query, out: &mut Vec<String>) {
    let ctes: Vec<String> = q
        .with
        .iter()
        .flat_map(|w| w.cte_tables.iter().map(|c| c.alias.name.value.to_ascii_lowercase()))
        .collect();
    if let Some(with) = &q.with {
        for cte in &with.cte_tables {
            collect_relation_names(&cte.query, out);
        }
    }
    collect_set_expr(&q.body, &ctes, out);
}

fn collect_set_expr(body: &sql::SetExpr, ctes: &[String], out: &mut Vec<String>) {
    match body {
        sql::SetExpr::Select(s) => {
            for twj in &s.from {
                collect_factor(&twj.relation, ctes, out);
                for j in &twj.joins {
                    collect_factor(&j.relation, ctes, out);
                }
            }
        }
        sql::SetExpr::Query(q) => collect_relation_names(q, out),
        sql::SetExpr::SetOperation { left, right, .. } => {
            collect_set_expr(left, ctes, out);
            collect_set_expr(right, ctes, out);
        }
        _ => {}
    }
}

fn collect_factor(f: &sql::TableFactor, ctes: &[String], out: &mut Vec<String>) {
    match f {
        sql::TableFactor::Table { name, .. } => {
            let n = object_name(name);
            if !n.starts_with(WINDOW_PREFIX) && !ctes.contains(&n) {
                out.push(n);
            }
        }
        sql::TableFactor::Derived { subquery, .. } => collect_relation_names(subquery, out),
        sql::TableFactor::NestedJoin { table_with_joins, .. } => {
            collect_factor(&table_with_joins.relation, ctes, out);
            for j in &table_with_joins.joins {
                collect_factor(&j.relation, ctes, out);
            }
        }
        _ => {}
    }
}

/// `TIMESTAMP '...'` and `CAST(x AS TIMESTAMP)` without a precision mean microseconds, the
/// unit of Weir's TIMESTAMP columns and instants (DataFusion would read nanoseconds, which
/// cannot hold years after 2262): they are given precision 6 before planning.
pub(super) fn timestamps_in_micros(q: &mut sql::Query) {
    use sqlparser::ast::{visit_expressions_mut, DataType as T};
    let micros = |t: &mut T| {
        if let T::Timestamp(precision @ None, _) = t {
            *precision = Some(6);
        }
    };
    let _ = visit_expressions_mut(q, |e| {
        match e {
            sql::Expr::TypedString(ts) => micros(&mut ts.data_type),
            sql::Expr::Cast { data_type, .. } => micros(data_type),
            _ => {}
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// A window's `ORDER BY` term without `NULLS FIRST`/`NULLS LAST` gets SQL's (PostgreSQL's)
/// default before planning: NULL sorts as the largest value, so `NULLS LAST` for `ASC` and
/// `NULLS FIRST` for `DESC`. (The planner's own default, NULL smallest as in SQLite, stays for
/// a query's `ORDER BY`.) Applies to inline windows and to named ones (`WINDOW w AS (...)`).
pub(super) fn window_null_order(q: &mut sql::Query) {
    use sqlparser::ast::{NamedWindowExpr, VisitMut, VisitorMut, WindowType};
    fn fix(order_by: &mut [sql::OrderByExpr]) {
        for o in order_by {
            if o.options.nulls_first.is_none() {
                let asc = o.options.asc.unwrap_or(true);
                o.options.nulls_first = Some(!asc);
            }
        }
    }
    struct V;
    impl VisitorMut for V {
        type Break = ();
        fn pre_visit_select(&mut self, s: &mut sql::Select) -> std::ops::ControlFlow<()> {
            for w in &mut s.named_window {
                if let NamedWindowExpr::WindowSpec(spec) = &mut w.1 {
                    fix(&mut spec.order_by);
                }
            }
            std::ops::ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &mut sql::Expr) -> std::ops::ControlFlow<()> {
            if let sql::Expr::Function(f) = e {
                if let Some(WindowType::WindowSpec(spec)) = &mut f.over {
                    fix(&mut spec.order_by);
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = q.visit(&mut V);
}

/// A window written as a named window plus more, `OVER (w ROWS BETWEEN ...)` or
/// `WINDOW w2 AS (w ORDER BY ...)`, copies the named window's `PARTITION BY` and `ORDER BY`
/// (SQL's rule, as in PostgreSQL): it may add an `ORDER BY` if `w` has none, and a frame, but
/// not a `PARTITION BY`, and `w` must not have a frame of its own. Each such window is
/// rewritten to the whole specification before planning (DataFusion's planner reads only the
/// window's own clauses, so `w`'s partitioning and order were silently lost). `OVER w` itself
/// is resolved the same way, through any chain of named windows. A window that names no
/// window of its `SELECT`, or breaks those rules, is an error at the name.
pub(super) fn inherit_named_windows(q: &mut sql::Query) -> weir_common::Result<()> {
    use sqlparser::ast::{
        visit_expressions_mut, NamedWindowExpr, VisitMut, VisitorMut, WindowSpec, WindowType,
    };
    use weir_common::{Span, WeirError};

    fn error(message: String, name: &sql::Ident) -> WeirError {
        WeirError::plan_at(message, Span::from_sql(name.span))
    }

    /// `spec` with the named window it starts from (if any) written out, from the windows
    /// `defined` in its `SELECT`, resolved in turn (`depth` guards against a cycle).
    fn resolve(
        spec: &WindowSpec,
        defined: &[sql::NamedWindowDefinition],
        depth: usize,
    ) -> weir_common::Result<WindowSpec> {
        let Some(name) = &spec.window_name else { return Ok(spec.clone()) };
        let base = named(name, defined, depth)?;
        let n = &name.value;
        if !spec.partition_by.is_empty() {
            return Err(error(format!("cannot override the PARTITION BY of window {n}"), name));
        }
        if !base.order_by.is_empty() && !spec.order_by.is_empty() {
            return Err(error(format!("cannot override the ORDER BY of window {n}"), name));
        }
        if base.window_frame.is_some() {
            return Err(error(
                format!("cannot copy window {n}: it has a frame clause (ROWS, RANGE)"),
                name,
            ));
        }
        Ok(WindowSpec {
            window_name: None,
            partition_by: base.partition_by,
            order_by: if spec.order_by.is_empty() { base.order_by } else { spec.order_by.clone() },
            window_frame: spec.window_frame.clone(),
        })
    }

    /// The whole specification of the window `name` of `defined`.
    fn named(
        name: &sql::Ident,
        defined: &[sql::NamedWindowDefinition],
        depth: usize,
    ) -> weir_common::Result<WindowSpec> {
        let found = defined.iter().find(|d| d.0.value.eq_ignore_ascii_case(&name.value));
        let (Some(def), true) = (found, depth < 64) else {
            return Err(error(
                format!("window {} is not defined in this SELECT's WINDOW clause", name.value),
                name,
            ));
        };
        match &def.1 {
            NamedWindowExpr::WindowSpec(spec) => resolve(spec, defined, depth + 1),
            NamedWindowExpr::NamedWindow(other) => named(other, defined, depth + 1),
        }
    }

    /// Writes out every window of a window function in `e` from the windows `defined`.
    fn resolve_in(e: &mut sql::Expr, defined: &[sql::NamedWindowDefinition]) -> Option<WeirError> {
        let mut failed = None;
        let _ = visit_expressions_mut(e, |e| {
            let sql::Expr::Function(f) = e else {
                return std::ops::ControlFlow::Continue(());
            };
            let resolved = match &f.over {
                Some(WindowType::WindowSpec(spec)) if spec.window_name.is_some() => {
                    resolve(spec, defined, 0)
                }
                Some(WindowType::NamedWindow(name)) => named(name, defined, 0),
                _ => return std::ops::ControlFlow::Continue(()),
            };
            match resolved {
                Ok(spec) => {
                    f.over = Some(WindowType::WindowSpec(spec));
                    std::ops::ControlFlow::Continue(())
                }
                Err(e) => {
                    failed = Some(e);
                    std::ops::ControlFlow::Break(())
                }
            }
        });
        failed
    }

    struct V(Option<WeirError>);
    impl VisitorMut for V {
        type Break = ();
        // Inner SELECTs first: each resolves against its own WINDOW clause, so an outer one
        // sees only its own windows' references.
        fn post_visit_select(&mut self, s: &mut sql::Select) -> std::ops::ControlFlow<()> {
            let defined = s.named_window.clone();
            for item in &mut s.projection {
                let failed = match item {
                    sql::SelectItem::UnnamedExpr(e)
                    | sql::SelectItem::ExprWithAlias { expr: e, .. } => resolve_in(e, &defined),
                    _ => None,
                };
                if let Some(e) = failed {
                    self.0 = Some(e);
                    return std::ops::ControlFlow::Break(());
                }
            }
            std::ops::ControlFlow::Continue(())
        }

        // A query's ORDER BY sees the windows of its SELECT: `ORDER BY RANK() OVER w`.
        fn post_visit_query(&mut self, q: &mut sql::Query) -> std::ops::ControlFlow<()> {
            let sql::SetExpr::Select(s) = q.body.as_ref() else {
                return std::ops::ControlFlow::Continue(());
            };
            let Some(sql::OrderBy { kind: sql::OrderByKind::Expressions(terms), .. }) =
                &mut q.order_by
            else {
                return std::ops::ControlFlow::Continue(());
            };
            for term in terms {
                if let Some(e) = resolve_in(&mut term.expr, &s.named_window) {
                    self.0 = Some(e);
                    return std::ops::ControlFlow::Break(());
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut v = V(None);
    let _ = q.visit(&mut v);
    v.0.map_or(Ok(()), Err)
}

/// A window function called without `OVER` is an error that says so (DataFusion would call
/// it an invalid function, as it looks for it among scalar functions), and so is `IGNORE
/// NULLS` on a window function, which Weir's window operators would otherwise ignore, and a
/// PostgreSQL aggregate Weir does not have (named as such, not as an invalid function).
pub(super) fn check_window_calls(q: &sql::Query) -> weir_common::Result<()> {
    use sqlparser::ast::visit_expressions;
    // FIRST_VALUE and LAST_VALUE are aggregates too (`FIRST_VALUE(x ORDER BY t)`).
    const WINDOW_ONLY: [&str; 9] = [
        "row_number",
        "rank",
        "dense_rank",
        "percent_rank",
        "cume_dist",
        "ntile",
        "lag",
        "lead",
        "nth_value",
    ];
    // IGNORE NULLS, after the call or among its arguments: Weir's window operators do not
    // evaluate it, so it is refused rather than ignored.
    let ignores_nulls = |f: &sql::Function| {
        let ignore = sql::NullTreatment::IgnoreNulls;
        let among_args = match &f.args {
            sql::FunctionArguments::List(l) => l.clauses.iter().any(|c| {
                matches!(c, sql::FunctionArgumentClause::IgnoreOrRespectNulls(n) if *n == ignore)
            }),
            _ => false,
        };
        f.null_treatment == Some(ignore) || among_args
    };
    // PostgreSQL's aggregates that DataFusion does not know, which it would call invalid with
    // the nearest name of another function as a hint ("Possible function 'cos'" for MODE).
    const AGGREGATES_NOT_YET: [&str; 6] =
        ["mode", "variance", "json_agg", "jsonb_agg", "json_object_agg", "xmlagg"];
    let found = visit_expressions(q, |e| match e {
        sql::Expr::Function(f)
            if AGGREGATES_NOT_YET.contains(&f.name.to_string().to_ascii_lowercase().as_str()) =>
        {
            let name = f.name.to_string().to_ascii_uppercase();
            std::ops::ControlFlow::Break(weir_common::WeirError::plan_at(
                format!("aggregate function {name} is not supported in Weir yet"),
                weir_common::Span::from_sql(sql::Spanned::span(&f.name)),
            ))
        }
        sql::Expr::Function(f) if f.over.is_some() && ignores_nulls(f) => {
            let name = f.name.to_string().to_ascii_uppercase();
            std::ops::ControlFlow::Break(weir_common::WeirError::plan_at(
                format!(
                    "IGNORE NULLS in window function {name} is not supported yet (RESPECT NULLS, \
                     the default, is)"
                ),
                weir_common::Span::from_sql(sql::Spanned::span(&f.name)),
            ))
        }
        sql::Expr::Function(f) if f.over.is_none() => {
            let name = f.name.to_string().to_ascii_lowercase();
            if WINDOW_ONLY.contains(&name.as_str()) {
                let upper = name.to_ascii_uppercase();
                std::ops::ControlFlow::Break(weir_common::WeirError::plan_at(
                    format!(
                        "{upper} is a window function: it needs an OVER clause, e.g. {upper}() \
                         OVER (PARTITION BY ... ORDER BY ...)"
                    ),
                    weir_common::Span::from_sql(sql::Spanned::span(&f.name)),
                ))
            } else {
                std::ops::ControlFlow::Continue(())
            }
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    match found {
        std::ops::ControlFlow::Break(e) => Err(e),
        std::ops::ControlFlow::Continue(()) => Ok(()),
    }
}

/// A window function in a WHERE, GROUP BY, HAVING or JOIN ... ON of its own SELECT is an
/// error at the function, as in SQL: windows are computed after those clauses (DataFusion
/// would fail at run time with a dump of its plan). A window function in a subquery there is
/// that subquery's, and fine.
pub(super) fn check_window_placement(q: &sql::Query) -> weir_common::Result<()> {
    use sqlparser::ast::{Visit, Visitor};
    use std::ops::ControlFlow;
    /// The first window function of an expression outside its subqueries.
    struct Find {
        depth: usize,
    }
    impl Visitor for Find {
        type Break = (String, sqlparser::tokenizer::Span);
        fn pre_visit_query(&mut self, _: &sql::Query) -> ControlFlow<Self::Break> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &sql::Query) -> ControlFlow<Self::Break> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &sql::Expr) -> ControlFlow<Self::Break> {
            match e {
                sql::Expr::Function(f) if f.over.is_some() && self.depth == 0 => {
                    ControlFlow::Break((f.name.to_string(), sql::Spanned::span(&f.name)))
                }
                _ => ControlFlow::Continue(()),
            }
        }
    }
    struct Selects(Option<weir_common::WeirError>);
    impl Visitor for Selects {
        type Break = ();
        fn pre_visit_select(&mut self, s: &sql::Select) -> ControlFlow<()> {
            let mut clauses: Vec<(&str, &sql::Expr)> = Vec::new();
            clauses.extend(s.selection.iter().map(|e| ("WHERE", e)));
            clauses.extend(s.having.iter().map(|e| ("HAVING", e)));
            if let sql::GroupByExpr::Expressions(exprs, _) = &s.group_by {
                clauses.extend(exprs.iter().map(|e| ("GROUP BY", e)));
            }
            for join in s.from.iter().flat_map(|t| &t.joins) {
                use sql::{JoinConstraint as C, JoinOperator as J};
                let on = match &join.join_operator {
                    J::Join(C::On(e))
                    | J::Inner(C::On(e))
                    | J::Left(C::On(e))
                    | J::LeftOuter(C::On(e))
                    | J::Right(C::On(e))
                    | J::RightOuter(C::On(e))
                    | J::FullOuter(C::On(e)) => Some(e),
                    _ => None,
                };
                clauses.extend(on.map(|e| ("JOIN ... ON", e)));
            }
            for (clause, e) in clauses {
                if let ControlFlow::Break((name, span)) = e.visit(&mut Find { depth: 0 }) {
                    let name = name.to_ascii_uppercase();
                    self.0 = Some(weir_common::WeirError::plan_at(
                        format!(
                            "window function {name} is not allowed in {clause}: window \
                             functions are computed after WHERE, GROUP BY and HAVING; compute \
                             it in a subquery and filter on it outside (SELECT * FROM (SELECT \
                             ..., {name}() OVER (...) AS r FROM ...) WHERE r ...)"
                        ),
                        weir_common::Span::from_sql(span),
                    ));
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = Selects(None);
    let _ = q.visit(&mut v);
    v.0.map_or(Ok(()), Err)
}

/// `TABLESAMPLE` and `LATERAL` subqueries in `FROM` are refused at the table or subquery
/// (DataFusion's planner ignored `TABLESAMPLE`, returning every row, and refused `LATERAL`
/// with a message naming its own plan node).
pub(super) fn check_table_factors(q: &sql::Query) -> weir_common::Result<()> {
    use sqlparser::ast::{Visit, Visitor};
    use std::ops::ControlFlow;
    struct V;
    impl Visitor for V {
        type Break = weir_common::WeirError;
        fn pre_visit_table_factor(&mut self, f: &sql::TableFactor) -> ControlFlow<Self::Break> {
            let at = weir_common::Span::from_sql(sql::Spanned::span(f));
            match f {
                sql::TableFactor::Table { sample: Some(_), .. }
                | sql::TableFactor::Derived { sample: Some(_), .. } => {
                    ControlFlow::Break(weir_common::WeirError::plan_at(
                        "TABLESAMPLE is not supported: a stream is sampled by its window, \
                         s [SAMPLE 1000 ROWS] (see docs/sql.md, De-duplication and sampling)",
                        at,
                    ))
                }
                sql::TableFactor::Derived { lateral: true, .. } => {
                    ControlFlow::Break(weir_common::WeirError::plan_at(
                        "LATERAL subqueries are not supported yet: join the subquery's tables, \
                         or use a correlated subquery in WHERE or the SELECT list",
                        at,
                    ))
                }
                _ => ControlFlow::Continue(()),
            }
        }
    }
    match q.visit(&mut V) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// A number literal too large for a DOUBLE (`1e400`) is an error where it is written, not an
/// infinity.
pub(super) fn check_number_literals(q: &sql::Query) -> weir_common::Result<()> {
    use sqlparser::ast::{visit_expressions, Value};
    let found = visit_expressions(q, |e| match e {
        sql::Expr::Value(v) => match &v.value {
            Value::Number(n, _) if n.parse::<f64>().is_ok_and(f64::is_infinite) => {
                std::ops::ControlFlow::Break((n.clone(), v.span))
            }
            _ => std::ops::ControlFlow::Continue(()),
        },
        _ => std::ops::ControlFlow::Continue(()),
    });
    match found {
        std::ops::ControlFlow::Break((n, span)) => Err(weir_common::WeirError::plan_at(
            format!("number out of range: {n} is beyond what a DOUBLE holds"),
            weir_common::Span::from_sql(span),
        )),
        std::ops::ControlFlow::Continue(()) => Ok(()),
    }
}

/// Number literals take the types SQL gives them (as in PostgreSQL and Flink): an integer that
/// fits is `BIGINT` (or `BIGINT UNSIGNED`), a literal with a decimal point or too many digits
/// is an exact `DECIMAL(p, s)` with its written digits (`0.908` is `DECIMAL(3,3)`, `1.50` is
/// `DECIMAL(3,2)`), and one in scientific notation (`1e3`, `2.5E-4`) is a `DOUBLE`, as in
/// Flink. The planner reads every non-integer literal as a decimal; this pass makes the
/// `DOUBLE` ones, and a literal beyond `DECIMAL`'s 38 digits, a cast of their text to `DOUBLE`.
pub(super) fn float_literals_as_double(q: &mut sql::Query) {
    use sqlparser::ast::{visit_expressions_mut, Value};
    let _ = visit_expressions_mut(q, |e| {
        if let sql::Expr::Value(v) = e {
            if let Value::Number(n, _) = &v.value {
                let digits = n.bytes().filter(u8::is_ascii_digit).count();
                let integer = n.bytes().all(|b| b.is_ascii_digit() || b == b'_');
                let fits_integer = integer && n.replace('_', "").parse::<u64>().is_ok();
                if !fits_integer && (n.contains(['e', 'E']) || digits > 38) {
                    let text = Value::SingleQuotedString(n.replace('_', "")).with_span(v.span);
                    *e = sql::Expr::Cast {
                        kind: sql::CastKind::Cast,
                        expr: Box::new(sql::Expr::Value(text)),
                        data_type: sql::DataType::Double(sql::ExactNumberInfo::None),
                        array: false,
                        format: None,
                    };
                }
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `SUM(NULL)`, `SUM(DISTINCT NULL)`, `AVG(NULL)`: SQL gives NULL (no non-NULL value), while
/// DataFusion has no SUM or AVG over its NULL type. The NULL argument becomes a `BIGINT` NULL.
pub(super) fn typed_null_aggregate_args(q: &mut sql::Query) {
    use sqlparser::ast::{visit_expressions_mut, FunctionArg, FunctionArgExpr, FunctionArguments};
    let _ = visit_expressions_mut(q, |e| {
        if let sql::Expr::Function(f) = e {
            let name = f.name.to_string().to_ascii_lowercase();
            if matches!(name.as_str(), "sum" | "avg" | "mean") {
                if let FunctionArguments::List(list) = &mut f.args {
                    if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))] =
                        list.args.as_mut_slice()
                    {
                        if matches!(arg, sql::Expr::Value(v) if v.value == sql::Value::Null) {
                            *arg = sql::Expr::Cast {
                                kind: sql::CastKind::Cast,
                                expr: Box::new(arg.clone()),
                                data_type: sql::DataType::BigInt(None),
                                array: false,
                                format: None,
                            };
                        }
                    }
                }
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// The SQL standard's `[OFFSET n ROWS] FETCH FIRST m ROWS ONLY` (also `NEXT`, `ROW`; no count
/// is 1) becomes `LIMIT m [OFFSET n]`, which DataFusion plans. Returns whether the outermost
/// query asks `WITH TIES` (rows tied with the last one on the ORDER BY key are kept too), which
/// the binder applies to the plan's top-k; `WITH TIES` needs an `ORDER BY`, and in a subquery
/// it is refused.
pub(super) fn fetch_as_limit(q: &mut sql::Query) -> weir_common::Result<bool> {
    use sqlparser::ast::{VisitMut, VisitorMut};
    let ties = one_fetch(q)?;
    if ties && q.order_by.is_none() {
        return Err(weir_common::WeirError::plan(
            "FETCH ... WITH TIES needs an ORDER BY: ties are rows equal on its key",
        ));
    }
    struct V(Option<weir_common::WeirError>);
    impl VisitorMut for V {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut sql::Query) -> std::ops::ControlFlow<()> {
            match one_fetch(q) {
                Ok(false) => std::ops::ControlFlow::Continue(()),
                Ok(true) => {
                    self.0 = Some(weir_common::WeirError::plan(
                        "FETCH ... WITH TIES is supported on the outermost query only",
                    ));
                    std::ops::ControlFlow::Break(())
                }
                Err(e) => {
                    self.0 = Some(e);
                    std::ops::ControlFlow::Break(())
                }
            }
        }
    }
    let mut v = V(None);
    let _ = q.visit(&mut v);
    match v.0 {
        Some(e) => Err(e),
        None => Ok(ties),
    }
}

/// Rewrites one query's FETCH into its LIMIT; whether it said WITH TIES.
fn one_fetch(q: &mut sql::Query) -> weir_common::Result<bool> {
    let Some(fetch) = q.fetch.take() else { return Ok(false) };
    let span =
        fetch.quantity.as_ref().and_then(|e| weir_common::Span::from_sql(sql::Spanned::span(e)));
    if fetch.percent {
        return Err(weir_common::WeirError::plan_at("FETCH ... PERCENT is not supported", span));
    }
    let quantity = fetch
        .quantity
        .unwrap_or_else(|| sql::Expr::value(sql::Value::Number("1".to_string(), false)));
    match &mut q.limit_clause {
        None => {
            q.limit_clause = Some(sql::LimitClause::LimitOffset {
                limit: Some(quantity),
                offset: None,
                limit_by: vec![],
            })
        }
        Some(sql::LimitClause::LimitOffset { limit: limit @ None, .. }) => *limit = Some(quantity),
        Some(_) => {
            return Err(weir_common::WeirError::plan_at(
                "a query has either LIMIT or FETCH FIRST, not both",
                span,
            ))
        }
    }
    Ok(fetch.with_ties)
}

/// `x = ANY (SELECT ...)` (or `SOME`) is `x IN (SELECT ...)` and `x <> ALL (SELECT ...)` is
/// `x NOT IN (SELECT ...)`, by SQL's definitions of IN, NULLs included; both are written so
/// before planning (DataFusion plans a quantified comparison but cannot evaluate it). Any
/// other comparison quantified over a subquery, and a row (`(a, b) = ANY (...)`), is refused
/// at its left operand, by name.
pub(super) fn quantified_subqueries(q: &mut sql::Query) -> weir_common::Result<()> {
    use sql::BinaryOperator as Op;
    let mut refused = None;
    let _ = sql::visit_expressions_mut(q, |e| {
        let (left, op, right, all) = match e {
            sql::Expr::AnyOp { left, compare_op, right, .. } => (left, compare_op, right, false),
            sql::Expr::AllOp { left, compare_op, right } => (left, compare_op, right, true),
            _ => return std::ops::ControlFlow::Continue(()),
        };
        let sql::Expr::Subquery(subquery) = right.as_ref() else {
            return std::ops::ControlFlow::Continue(());
        };
        if matches!(left.as_ref(), sql::Expr::Tuple(_)) {
            refused = Some(weir_common::WeirError::plan_at(
                "a row compared with a subquery's rows, (a, b) = ANY (SELECT x, y ...), is not \
                 supported yet: write EXISTS (SELECT 1 ... WHERE x = a AND y = b)",
                weir_common::Span::from_sql(sql::Spanned::span(left.as_ref())),
            ));
            return std::ops::ControlFlow::Break(());
        }
        let negated = match (op.clone(), all) {
            (Op::Eq, false) => false,
            (Op::NotEq, true) => true,
            (op, all) => {
                let quantifier = if all { "ALL" } else { "ANY" };
                refused = Some(weir_common::WeirError::plan_at(
                    format!(
                        "a comparison {op} {quantifier} (SELECT ...) is supported only as a \
                         condition of WHERE (the WHERE or one of its AND-ed terms), not here \
                         (= ANY and <> ALL are supported anywhere: they are IN and NOT IN)"
                    ),
                    weir_common::Span::from_sql(sql::Spanned::span(left.as_ref())),
                ));
                return std::ops::ControlFlow::Break(());
            }
        };
        *e = sql::Expr::InSubquery { expr: left.clone(), subquery: subquery.clone(), negated };
        std::ops::ControlFlow::Continue(())
    });
    refused.map_or(Ok(()), Err)
}

/// `x op ALL (subquery)` and `x op ANY (subquery)` (`SOME`), for `<`, `<=`, `>`, `>=`, `= ALL`
/// and `<> ANY`, as a condition of a WHERE (the WHERE itself or one of its AND-ed terms): a
/// filter keeps a row only where the condition is TRUE, so each is written as an EXISTS over
/// the subquery's values, exactly:
/// - `x op ANY (S)` is TRUE when some value v of S makes `x op v` TRUE:
///   `EXISTS (SELECT 1 FROM (S) AS q (v) WHERE x op q.v)`;
/// - `x op ALL (S)` is TRUE when no value makes `x op v` FALSE or NULL (so always over an
///   empty S, even for a NULL x): `NOT EXISTS (SELECT 1 FROM (S) AS q (v) WHERE (x op q.v)
///   IS NOT TRUE)`;
/// - under NOT, `NOT (x op ALL (S))` is TRUE when some value makes `x op v` FALSE (`EXISTS
///   ... WHERE (x op q.v) IS FALSE`), `NOT (x op ANY (S))` when every value does (`NOT EXISTS
///   ... WHERE (x op q.v) IS NOT FALSE`).
///
/// Anywhere else (in the SELECT list, under OR) the comparison's NULL has to be told from
/// FALSE, which EXISTS cannot; [`quantified_subqueries`] refuses those by name. `= ANY`
/// and `<> ALL` anywhere are IN and NOT IN there.
///
/// Returns, for each subquery read as a derived table, its alias and where the comparison's
/// left operand is written (see `correlated_on::check_quantified_derived`).
pub(super) fn quantified_conditions(
    q: &mut sql::Query,
) -> weir_common::Result<Vec<(String, Option<weir_common::Span>)>> {
    use sqlparser::ast::{VisitMut, VisitorMut};
    struct V {
        made: usize,
        derived: Vec<(String, Option<weir_common::Span>)>,
        error: Option<weir_common::WeirError>,
    }
    impl VisitorMut for V {
        type Break = ();
        fn pre_visit_select(&mut self, s: &mut sql::Select) -> std::ops::ControlFlow<()> {
            let quantified = |e: &sql::Expr| {
                matches!(
                    negation(e).0,
                    sql::Expr::AnyOp { right, .. } | sql::Expr::AllOp { right, .. }
                        if matches!(right.as_ref(), sql::Expr::Subquery(_))
                )
            };
            let Some(selection) = s.selection.take_if(|w| {
                let mut terms = Vec::new();
                conjuncts(w.clone(), &mut terms);
                terms.iter().any(quantified)
            }) else {
                // No such condition: the WHERE stays as written.
                return std::ops::ControlFlow::Continue(());
            };
            let mut terms = Vec::new();
            conjuncts(selection, &mut terms);
            let mut rewritten = Vec::with_capacity(terms.len());
            for term in terms {
                match self.rewrite(term) {
                    Ok(t) => rewritten.push(t),
                    Err(e) => {
                        self.error = Some(e);
                        return std::ops::ControlFlow::Break(());
                    }
                }
            }
            s.selection = rewritten.into_iter().reduce(|a, b| sql::Expr::BinaryOp {
                left: Box::new(a),
                op: sql::BinaryOperator::And,
                right: Box::new(b),
            });
            std::ops::ControlFlow::Continue(())
        }
    }
    impl V {
        fn rewrite(&mut self, term: sql::Expr) -> weir_common::Result<sql::Expr> {
            use sql::BinaryOperator as Op;
            let (inner, negated) = negation(&term);
            let (left, op, right, all) = match inner {
                sql::Expr::AnyOp { left, compare_op, right, .. } => {
                    (left, compare_op, right, false)
                }
                sql::Expr::AllOp { left, compare_op, right } => (left, compare_op, right, true),
                _ => return Ok(term),
            };
            let sql::Expr::Subquery(subquery) = right.as_ref() else { return Ok(term) };
            let ordered = matches!(op, Op::Lt | Op::LtEq | Op::Gt | Op::GtEq);
            let equality = matches!((op, all), (Op::Eq, true) | (Op::NotEq, false));
            if matches!(left.as_ref(), sql::Expr::Tuple(_)) || !(ordered || equality) {
                return Ok(term);
            }
            // What the EXISTS looks for among the values: for ANY a value making `left op v`
            // TRUE; for ALL one making it not TRUE (then NOT EXISTS). Under NOT, for ALL one
            // making it FALSE; for ANY one making it not FALSE (then NOT EXISTS).
            let condition = |value: sql::Expr| {
                let compared = sql::Expr::BinaryOp {
                    left: left.clone(),
                    op: op.clone(),
                    right: Box::new(value),
                };
                let nested = || Box::new(sql::Expr::Nested(Box::new(compared.clone())));
                match (all, negated) {
                    (false, false) => compared.clone(),
                    (true, false) => sql::Expr::IsNotTrue(nested()),
                    (true, true) => sql::Expr::IsFalse(nested()),
                    (false, true) => sql::Expr::IsNotFalse(nested()),
                }
            };
            let inline = simple_value(subquery).filter(|_| outer_only(left, subquery));
            let exists = match inline {
                Some(value) => {
                    // The comparison joins the subquery's own WHERE (which may refer to the
                    // outer row: a correlated subquery).
                    let mut q = subquery.as_ref().clone();
                    let sql::SetExpr::Select(select) = q.body.as_mut() else {
                        return Err(weir_common::WeirError::internal("a simple subquery"));
                    };
                    let condition = condition(value);
                    select.selection = Some(match select.selection.take() {
                        Some(w) => sql::Expr::BinaryOp {
                            left: Box::new(sql::Expr::Nested(Box::new(w))),
                            op: Op::And,
                            right: Box::new(condition),
                        },
                        None => condition,
                    });
                    q
                }
                None => {
                    self.made += 1;
                    let alias = sql::Ident::new(format!("weir_quantified_{}", self.made));
                    let value = sql::Expr::CompoundIdentifier(vec![
                        alias.clone(),
                        sql::Ident::new(QUANTIFIED_VALUE),
                    ]);
                    let at = weir_common::Span::from_sql(sql::Spanned::span(left.as_ref()));
                    self.derived.push((alias.value.clone(), at));
                    values_where(subquery.clone(), alias, condition(value))?
                }
            };
            Ok(sql::Expr::Exists { subquery: Box::new(exists), negated: all != negated })
        }
    }
    let mut v = V { made: 0, derived: Vec::new(), error: None };
    let _ = q.visit(&mut v);
    v.error.map_or(Ok(v.derived), Err)
}

/// `e` without the parentheses around it, and under one `NOT` whether it was negated.
fn negation(e: &sql::Expr) -> (&sql::Expr, bool) {
    fn bare(mut e: &sql::Expr) -> &sql::Expr {
        while let sql::Expr::Nested(inner) = e {
            e = inner;
        }
        e
    }
    match bare(e) {
        sql::Expr::UnaryOp { op: sql::UnaryOperator::Not, expr } => (bare(expr), true),
        other => (other, false),
    }
}

/// The column a quantified comparison's subquery is renamed to (see [`quantified_conditions`]).
const QUANTIFIED_VALUE: &str = "weir_value";

/// The AND-ed terms of `e`, in order.
fn conjuncts(e: sql::Expr, out: &mut Vec<sql::Expr>) {
    match e {
        sql::Expr::BinaryOp { left, op: sql::BinaryOperator::And, right } => {
            conjuncts(*left, out);
            conjuncts(*right, out);
        }
        sql::Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                sql::Expr::BinaryOp { op: sql::BinaryOperator::And, .. }
            ) =>
        {
            conjuncts(*inner, out)
        }
        e => out.push(e),
    }
}

/// The value of a subquery that is one SELECT of one plain expression over its FROM and WHERE
/// (no aggregate or other call, grouping, DISTINCT, order or limit): a row of the FROM
/// satisfying the WHERE gives one value, so a comparison with it can join the WHERE itself.
/// None for any other subquery, which is then read as a derived table.
fn simple_value(q: &sql::Query) -> Option<sql::Expr> {
    let plain_query =
        q.with.is_none() && q.order_by.is_none() && q.limit_clause.is_none() && q.fetch.is_none();
    let sql::SetExpr::Select(s) = q.body.as_ref() else { return None };
    let plain_select = s.distinct.is_none()
        && s.top.is_none()
        && s.having.is_none()
        && s.qualify.is_none()
        && s.named_window.is_empty()
        && matches!(
            &s.group_by,
            sql::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty()
        );
    let [item] = s.projection.as_slice() else { return None };
    let value = match item {
        sql::SelectItem::UnnamedExpr(e) | sql::SelectItem::ExprWithAlias { expr: e, .. } => e,
        _ => return None,
    };
    let calls = sql::visit_expressions(value, |e| match e {
        sql::Expr::Function(_) | sql::Expr::Subquery(_) => std::ops::ControlFlow::Break(()),
        _ => std::ops::ControlFlow::Continue(()),
    });
    (plain_query && plain_select && calls.is_continue()).then(|| value.clone())
}

/// Whether `left` still means what it meant when moved into `subquery`'s WHERE: each column it
/// names is qualified by a name that is not one of the subquery's FROM items (an unqualified
/// `v` would be taken as the subquery's own `v` if it has one, and which columns it has is not
/// known here).
fn outer_only(left: &sql::Expr, subquery: &sql::Query) -> bool {
    let sql::SetExpr::Select(s) = subquery.body.as_ref() else { return false };
    let mut inner: Vec<String> = Vec::new();
    for twj in &s.from {
        for factor in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            match factor {
                sql::TableFactor::Table { name, alias, .. } => {
                    inner.extend(alias.as_ref().map(|a| a.name.value.to_lowercase()));
                    inner.extend(
                        name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()),
                    );
                }
                sql::TableFactor::Derived { alias: Some(a), .. } => {
                    inner.push(a.name.value.to_lowercase())
                }
                _ => return false,
            }
        }
    }
    let captured = sql::visit_expressions(left, |e| match e {
        sql::Expr::Identifier(_) => std::ops::ControlFlow::Break(()),
        sql::Expr::CompoundIdentifier(parts) => match parts.first() {
            Some(q) if parts.len() > 1 && !inner.contains(&q.value.to_lowercase()) => {
                std::ops::ControlFlow::Continue(())
            }
            _ => std::ops::ControlFlow::Break(()),
        },
        sql::Expr::Subquery(_) | sql::Expr::Exists { .. } | sql::Expr::InSubquery { .. } => {
            std::ops::ControlFlow::Break(())
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    captured.is_continue()
}

/// `SELECT 1 FROM (subquery) AS alias (weir_value) WHERE condition`.
fn values_where(
    subquery: Box<sql::Query>,
    alias: sql::Ident,
    condition: sql::Expr,
) -> weir_common::Result<sql::Query> {
    let template = "SELECT 1 FROM (SELECT 1) AS q (weir_value) WHERE TRUE";
    let internal = || weir_common::WeirError::internal("the EXISTS of a quantified comparison");
    let parsed =
        sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::GenericDialect {}, template)
            .map_err(|_| internal())?;
    let Some(sql::Statement::Query(mut query)) = parsed.into_iter().next() else {
        return Err(internal());
    };
    let sql::SetExpr::Select(select) = query.body.as_mut() else { return Err(internal()) };
    let from = select.from.first_mut().ok_or_else(internal)?;
    let sql::TableFactor::Derived { subquery: inner, alias: Some(a), .. } = &mut from.relation
    else {
        return Err(internal());
    };
    *inner = subquery;
    a.name = alias;
    select.selection = Some(condition);
    Ok(*query)
}

/// `(a, b) [NOT] IN (SELECT x, y ...)`: a row compared with a subquery's rows, which
/// DataFusion reports without a position (or as a one-column subquery's error). Refused,
/// pointing at the row, with the rewrite that works.
pub(super) fn check_row_in_subquery(q: &sql::Query) -> weir_common::Result<()> {
    let found = sql::visit_expressions(q, |e| match e {
        sql::Expr::InSubquery { expr, .. } if matches!(expr.as_ref(), sql::Expr::Tuple(_)) => {
            std::ops::ControlFlow::Break(sql::Spanned::span(expr.as_ref()))
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    match found {
        std::ops::ControlFlow::Break(span) => Err(weir_common::WeirError::plan_at(
            "IN with several columns, (a, b) IN (SELECT x, y ...), is not supported yet: write \
             EXISTS (SELECT 1 ... WHERE x = a AND y = b)",
            weir_common::Span::from_sql(span),
        )),
        std::ops::ControlFlow::Continue(()) => Ok(()),
    }
}
