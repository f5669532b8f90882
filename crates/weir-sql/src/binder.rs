//! Binding: a parsed [`CqlQuery`] plus the catalog -> Weir's [`LogicalPlan`].
//!
//! The relational part is planned by DataFusion's `SqlToRel` (names, types, functions), then its
//! analyzer (type coercion) and a chosen set of optimizer rules (subquery decorrelation, equi-join
//! extraction, filter push-down). Those rewrites are sound in CQL because each CQL operator is a
//! leaf for DataFusion: a windowed stream `s [RANGE 2]` reaches `SqlToRel` as a table named
//! `__weir_w0`, and a view as a table of its own name. The resulting DataFusion plan is then
//! converted node by node into Weir's plan, where those leaves become [`LogicalPlan::Window`]
//! over a [`LogicalPlan::StreamScan`] (or over the view's own plan).
//!
//! The converted plan is then pruned ([`weir_plan::prune`]): each join input is narrowed to the
//! columns used above it, over the whole plan, views inlined.
//!
//! CQL's defaults are applied here: a stream named without a window gets `[UNBOUNDED]`; a
//! top-level monotonic query without an explicit relation-to-stream operator gets `ISTREAM`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::config::ConfigOptions;
use datafusion_common::tree_node::TreeNode;
use datafusion_common::{DFSchema, DataFusionError, TableReference};
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::{
    AggregateUDF, Distinct, Expr, HigherOrderUDF, JoinType, LogicalPlan as DfPlan, ScalarUDF,
    TableSource, WindowUDF,
};
use datafusion_optimizer::analyzer::Analyzer;
use datafusion_optimizer::optimizer::{Optimizer, OptimizerContext};
use datafusion_sql::planner::{ParserOptions, SqlToRel};
use sqlparser::ast as sql;
use weir_common::{Result, Span, TimeDomain, WeirError};
use weir_plan::{
    AggCall, AggFunc, ApplyKind, ApplySubquery, JoinKind, LogicalPlan, PlanKind, WindowSpec, R2S,
};

use crate::catalog::{Catalog, CatalogEntry};
use crate::parser::{object_name, CqlQuery, Duration, WindowAst, WindowKind, WINDOW_PREFIX};

/// Binds queries against a catalog.
pub struct Binder<'a> {
    catalog: &'a dyn Catalog,
}

/// Binds a continuous or one-shot query: see the module docs.
pub fn bind_query(catalog: &dyn Catalog, query: &CqlQuery) -> Result<Arc<LogicalPlan>> {
    Binder::new(catalog).bind(query)
}

struct Functions {
    scalar: HashMap<String, Arc<ScalarUDF>>,
    aggregate: HashMap<String, Arc<AggregateUDF>>,
    planners: Vec<Arc<dyn ExprPlanner>>,
}

fn functions() -> &'static Functions {
    static F: OnceLock<Functions> = OnceLock::new();
    F.get_or_init(|| {
        let mut scalar = HashMap::new();
        for f in datafusion_functions::all_default_functions() {
            for alias in f.aliases() {
                scalar.insert(alias.clone(), f.clone());
            }
            scalar.insert(f.name().to_string(), f);
        }
        let mut aggregate = HashMap::new();
        for f in datafusion_functions_aggregate::all_default_aggregate_functions() {
            for alias in f.aliases() {
                aggregate.insert(alias.clone(), f.clone());
            }
            aggregate.insert(f.name().to_string(), f);
        }
        let planners: Vec<Arc<dyn ExprPlanner>> = vec![
            Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
            Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
            Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
        ];
        Functions { scalar, aggregate, planners }
    })
}

/// A stream, table or view as DataFusion sees it: a schema. Filters are never pushed into it
/// (the default of [`TableSource`]): a filter above a window must stay above the window.
#[derive(Debug)]
struct Source(SchemaRef);

impl TableSource for Source {
    fn schema(&self) -> SchemaRef {
        self.0.clone()
    }
}

/// What `SqlToRel` sees: catalog entries and windowed streams as tables.
struct Provider<'a> {
    catalog: &'a dyn Catalog,
    windows: &'a [WindowAst],
    options: ConfigOptions,
}

impl ContextProvider for Provider<'_> {
    fn get_table_source(
        &self,
        name: TableReference,
    ) -> datafusion_common::Result<Arc<dyn TableSource>> {
        let table = name.table();
        let schema = if let Some(w) = self.windows.iter().find(|w| w.synthetic == table) {
            window_schema(self.catalog, w)
        } else {
            self.catalog.lookup(table).map(|e| e.schema())
        };
        match schema {
            Some(s) => Ok(Arc::new(Source(s))),
            None => Err(DataFusionError::Plan(format!("unknown stream, table or view '{table}'"))),
        }
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        functions().scalar.get(name).cloned()
    }

    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        functions().aggregate.get(name).cloned()
    }

    fn get_window_meta(&self, _name: &str) -> Option<Arc<WindowUDF>> {
        None
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &functions().planners
    }

    fn options(&self) -> &ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        functions().scalar.keys().cloned().collect()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        vec![]
    }

    fn udaf_names(&self) -> Vec<String> {
        functions().aggregate.keys().cloned().collect()
    }

    fn udwf_names(&self) -> Vec<String> {
        vec![]
    }
}

/// Converts a DataFusion error into a plan error, keeping its source span when it has one.
pub fn df_error(e: DataFusionError) -> WeirError {
    if let Some(d) = e.diagnostic() {
        let span = d.span.filter(|s| s.start.line > 0).map(|s| Span {
            line: s.start.line,
            column: s.start.column,
            end_line: s.end.line,
            end_column: s.end.column,
        });
        let mut message = d.message.clone();
        let extra = d.notes.iter().map(|n| &n.message).chain(d.helps.iter().map(|h| &h.message));
        for m in extra {
            message.push_str(&format!(" ({m})"));
        }
        return WeirError::plan_at(message, span);
    }
    let msg = e.strip_backtrace();
    // Keep the innermost cause of a wrapped error ("Optimizer rule ... failed caused by ...").
    let msg = msg.rsplit("caused by\n").next().unwrap_or(&msg).trim().to_string();
    let msg = msg
        .strip_prefix("Arrow error: ")
        .unwrap_or(&msg)
        .strip_prefix("Cast error: ")
        .unwrap_or(msg.strip_prefix("Arrow error: ").unwrap_or(&msg))
        .to_string();
    let msg = msg
        .strip_prefix("Error during planning: ")
        .or_else(|| msg.strip_prefix("Schema error: "))
        .or_else(|| msg.strip_prefix("This feature is not implemented: "))
        .unwrap_or(&msg)
        .to_string();
    WeirError::plan(msg)
}

impl<'a> Binder<'a> {
    pub fn new(catalog: &'a dyn Catalog) -> Self {
        Binder { catalog }
    }

    /// Binds one query. See the module docs.
    pub fn bind(&self, q: &CqlQuery) -> Result<Arc<LogicalPlan>> {
        self.check_windows(&q.windows)?;
        self.check_relations(&q.query)?;
        let df = self.plan_sql(&q.query, &q.windows)?;
        let plan = Converter { catalog: self.catalog, windows: &q.windows }.convert(&df)?;
        // Joins store whole input rows: each input keeps only the columns used above it.
        let plan = weir_plan::prune(&plan)?;
        let domains = plan.stream_domains();
        let ticks = domains.iter().find(|(_, d)| *d == TimeDomain::Ticks);
        let micros = domains.iter().find(|(_, d)| *d == TimeDomain::Micros);
        if let (Some((t, _)), Some((m, _))) = (ticks, micros) {
            return Err(WeirError::plan(format!(
                "a query cannot mix time domains: '{t}' is stamped by integer ticks and '{m}' by \
                 TIMESTAMP"
            )));
        }
        Ok(match q.r2s {
            Some(op) => Arc::new(LogicalPlan::ToStream { op, input: plan }),
            None if plan.is_monotonic() => {
                Arc::new(LogicalPlan::ToStream { op: R2S::Istream, input: plan })
            }
            None => plan,
        })
    }

    fn plan_sql(&self, query: &sql::Query, windows: &[WindowAst]) -> Result<DfPlan> {
        let mut options = ConfigOptions::new();
        options.sql_parser.enable_ident_normalization = true;
        options.optimizer.filter_null_join_keys = false;
        // Weir has no physical subquery operator: every scalar subquery becomes a join.
        options.optimizer.enable_physical_uncorrelated_scalar_subquery = false;
        let provider = Provider { catalog: self.catalog, windows, options: options.clone() };
        let parser_options = ParserOptions {
            collect_spans: true,
            // NULL sorts as the smallest value, as in SQLite.
            default_null_ordering: datafusion_sql::planner::NullOrdering::NullsMin,
            map_string_types_to_utf8view: false,
            ..ParserOptions::default()
        };
        let planner = SqlToRel::new_with_options(&provider, parser_options);
        let plan =
            match planner.sql_statement_to_plan(sql::Statement::Query(Box::new(query.clone()))) {
                Err(e) if e.to_string().contains("Projections require unique expression names") => {
                    // SQL allows repeated output names; DataFusion does not. Name the columns after
                    // their SQL text and plan again.
                    let mut query = query.clone();
                    name_duplicate_columns(&mut query);
                    planner.sql_statement_to_plan(sql::Statement::Query(Box::new(query)))
                }
                other => other,
            }
            .map_err(df_error)?;
        let plan = mark_bag_set_operations(plan).map_err(df_error)?;
        // Before type coercion: a text or binary literal tested for membership in numbers.
        let plan = crate::mixed_types::rewrite(plan).map_err(df_error)?;
        let plan =
            Analyzer::new().execute_and_check(plan, &options, |_, _| {}).map_err(df_error)?;
        // IN nested in a larger condition keeps SQL's unknown result (see `in_subquery`).
        let plan = crate::in_subquery::rewrite(plan).map_err(df_error)?;
        // Three steps: subqueries become joins; Weir orders each tree of inner joins (see
        // `join_order`), once; filters move down and equalities become join keys.
        let ctx = OptimizerContext::new_with_config_options(Arc::new(options));
        let decorrelate: Vec<Arc<dyn datafusion_optimizer::OptimizerRule + Send + Sync>> = vec![
            Arc::new(datafusion_optimizer::simplify_expressions::SimplifyExpressions::new()),
            Arc::new(datafusion_optimizer::decorrelate_predicate_subquery::DecorrelatePredicateSubquery::new()),
            Arc::new(datafusion_optimizer::scalar_subquery_to_join::ScalarSubqueryToJoin::new()),
            Arc::new(datafusion_optimizer::extract_equijoin_predicate::ExtractEquijoinPredicate::new()),
        ];
        let plan =
            Optimizer::with_rules(decorrelate).optimize(plan, &ctx, |_, _| {}).map_err(df_error)?;
        let plan = crate::join_order::reorder(plan).map_err(df_error)?.data;
        let push_down: Vec<Arc<dyn datafusion_optimizer::OptimizerRule + Send + Sync>> = vec![
            Arc::new(datafusion_optimizer::push_down_filter::PushDownFilter::new()),
            Arc::new(
                datafusion_optimizer::extract_equijoin_predicate::ExtractEquijoinPredicate::new(),
            ),
        ];
        Optimizer::with_rules(push_down).optimize(plan, &ctx, |_, _| {}).map_err(df_error)
    }

    /// Every window names a stream (base or derived), with durations in its time domain.
    fn check_windows(&self, windows: &[WindowAst]) -> Result<()> {
        for w in windows {
            match self.catalog.lookup(&w.stream) {
                None => {
                    return Err(WeirError::plan_at(
                        format!("unknown stream '{}'", w.stream),
                        w.span,
                    ))
                }
                Some(CatalogEntry::Table(_)) => {
                    return Err(WeirError::plan_at(
                        format!("window over a relation: '{}' is a table, not a stream", w.stream),
                        w.span,
                    ))
                }
                Some(CatalogEntry::View(v)) if v.kind() == PlanKind::Relation => {
                    return Err(WeirError::plan_at(
                        format!(
                            "window over a relation: view '{}' is a relation, not a stream \
                             (define it with ISTREAM, DSTREAM or RSTREAM)",
                            w.stream
                        ),
                        w.span,
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Every name in a FROM clause exists, reported with its position.
    fn check_relations(&self, q: &sql::Query) -> Result<()> {
        let mut ctes: Vec<String> = vec![];
        if let Some(with) = &q.with {
            for cte in &with.cte_tables {
                ctes.push(cte.alias.name.value.to_ascii_lowercase());
                self.check_relations(&cte.query)?;
            }
        }
        self.check_set_expr(&q.body, &ctes)
    }

    fn check_set_expr(&self, body: &sql::SetExpr, ctes: &[String]) -> Result<()> {
        match body {
            sql::SetExpr::Select(s) => {
                for twj in &s.from {
                    self.check_factor(&twj.relation, ctes)?;
                    for j in &twj.joins {
                        self.check_factor(&j.relation, ctes)?;
                    }
                }
                Ok(())
            }
            sql::SetExpr::Query(q) => self.check_relations(q),
            sql::SetExpr::SetOperation { left, right, .. } => {
                self.check_set_expr(left, ctes)?;
                self.check_set_expr(right, ctes)
            }
            _ => Ok(()),
        }
    }

    fn check_factor(&self, f: &sql::TableFactor, ctes: &[String]) -> Result<()> {
        match f {
            sql::TableFactor::Table { name, .. } => {
                let n = object_name(name);
                if n.starts_with(WINDOW_PREFIX) || ctes.contains(&n) {
                    return Ok(());
                }
                if self.catalog.lookup(&n).is_none() {
                    let span = Span::from_sql(sql::Spanned::span(name));
                    return Err(WeirError::plan_at(
                        format!("unknown stream, table or view '{n}'"),
                        span,
                    ));
                }
                Ok(())
            }
            sql::TableFactor::Derived { subquery, .. } => self.check_relations(subquery),
            sql::TableFactor::NestedJoin { table_with_joins, .. } => {
                self.check_factor(&table_with_joins.relation, ctes)?;
                for j in &table_with_joins.joins {
                    self.check_factor(&j.relation, ctes)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// DataFusion plans `L INTERSECT ALL R` and `L EXCEPT ALL R` as a semi and an anti join of L
/// and R on every column with NULLs equal, and `INTERSECT` / `EXCEPT` as the same joins over
/// `DISTINCT L`; no other SQL gives a semi or anti join with NULLs equal. A semi or anti join
/// computes a set operation, not the bag one SQL defines for ALL, so, straight out of the
/// planner, each such join whose left input is not a `DISTINCT` is flipped into the right-side
/// join of the same inputs (kept side on the right, same output): nothing else produces those,
/// so they reach the converter intact, which makes them [`JoinKind::IntersectAll`] and
/// [`JoinKind::ExceptAll`].
fn mark_bag_set_operations(plan: DfPlan) -> datafusion_common::Result<DfPlan> {
    use datafusion_common::tree_node::Transformed;
    Ok(plan
        .transform_up_with_subqueries(|node| match node {
            DfPlan::Join(j)
                if matches!(j.join_type, JoinType::LeftSemi | JoinType::LeftAnti)
                    && j.null_equality == datafusion_common::NullEquality::NullEqualsNull
                    && j.filter.is_none()
                    && !matches!(j.left.as_ref(), DfPlan::Distinct(_)) =>
            {
                let join_type = if j.join_type == JoinType::LeftSemi {
                    JoinType::RightSemi
                } else {
                    JoinType::RightAnti
                };
                let on = j.on.iter().map(|(l, r)| (r.clone(), l.clone())).collect();
                Ok(Transformed::yes(DfPlan::Join(datafusion_expr::logical_plan::Join::try_new(
                    j.right,
                    j.left,
                    on,
                    None,
                    join_type,
                    j.join_constraint,
                    j.null_equality,
                    false,
                )?)))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// SQL allows two output columns with the same name (`SELECT 1, 1`, `SELECT v, v`, two scalar
/// subqueries); DataFusion's planner does not. Every unaliased expression is named after its
/// SQL text, and a name that repeats an earlier one gets a suffix `:n` (n = 2, 3, ...), in
/// every SELECT of the query.
fn name_duplicate_columns(q: &mut sql::Query) {
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
                        (alias.value.to_ascii_lowercase(), None)
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

/// DataFusion plan -> Weir plan.
struct Converter<'a> {
    catalog: &'a dyn Catalog,
    windows: &'a [WindowAst],
}

fn unsupported(what: &str) -> WeirError {
    WeirError::plan(format!("{what} is not supported in Weir yet"))
}

impl Converter<'_> {
    fn convert(&self, plan: &DfPlan) -> Result<Arc<LogicalPlan>> {
        Ok(Arc::new(match plan {
            DfPlan::TableScan(scan) => {
                if scan.projection.is_some() || !scan.filters.is_empty() || scan.fetch.is_some() {
                    return Err(WeirError::internal("table scan with pushed-down work"));
                }
                return self.scan(scan.table_name.table(), scan.projected_schema.clone());
            }
            DfPlan::Projection(p) => {
                let input = self.convert(&p.input)?;
                let (exprs, input) = self.apply_subqueries(p.expr.clone(), input)?;
                LogicalPlan::Project { exprs, input, schema: p.schema.clone() }
            }
            DfPlan::Filter(f) => {
                let input = self.convert(&f.input)?;
                let (mut exprs, input) = self.apply_subqueries(vec![f.predicate.clone()], input)?;
                let predicate =
                    exprs.pop().ok_or_else(|| WeirError::internal("filter predicate"))?;
                let filter = LogicalPlan::Filter { predicate, input: input.clone() };
                // Drop the subquery columns again: a filter keeps its input's schema.
                if let LogicalPlan::Apply { input: below, .. } = input.as_ref() {
                    let below_schema = below.schema();
                    let keep = below_schema.columns().into_iter().map(Expr::Column).collect();
                    LogicalPlan::Project {
                        exprs: keep,
                        input: Arc::new(filter),
                        schema: below_schema,
                    }
                } else {
                    filter
                }
            }
            DfPlan::Join(j) => {
                let kind = match j.join_type {
                    JoinType::Inner => JoinKind::Inner,
                    JoinType::Left => JoinKind::Left,
                    JoinType::Right => JoinKind::Right,
                    JoinType::Full => JoinKind::Full,
                    JoinType::LeftSemi => JoinKind::LeftSemi,
                    JoinType::LeftAnti if j.null_aware && j.on.len() > 1 => {
                        // NOT IN's NULL rules would have to hold per correlation key; the
                        // null-aware anti join applies them over the whole subquery.
                        return Err(unsupported("a correlated NOT IN subquery"));
                    }
                    JoinType::LeftAnti => JoinKind::LeftAnti { null_aware: j.null_aware },
                    JoinType::LeftMark => JoinKind::LeftMark,
                    // `mark_bag_set_operations` turned INTERSECT ALL / EXCEPT ALL into these,
                    // with the kept side on the right.
                    JoinType::RightSemi | JoinType::RightAnti
                        if j.null_equality == datafusion_common::NullEquality::NullEqualsNull =>
                    {
                        let kind = if j.join_type == JoinType::RightSemi {
                            JoinKind::IntersectAll
                        } else {
                            JoinKind::ExceptAll
                        };
                        return Ok(Arc::new(LogicalPlan::Join {
                            kind,
                            left: self.convert(&j.right)?,
                            right: self.convert(&j.left)?,
                            on: j.on.iter().map(|(l, r)| (r.clone(), l.clone())).collect(),
                            filter: j.filter.clone(),
                            nulls_equal: true,
                            schema: j.schema.clone(),
                        }));
                    }
                    other => return Err(unsupported(&format!("{other} JOIN"))),
                };
                LogicalPlan::Join {
                    kind,
                    left: self.convert(&j.left)?,
                    right: self.convert(&j.right)?,
                    on: j.on.clone(),
                    filter: j.filter.clone(),
                    nulls_equal: j.null_equality == datafusion_common::NullEquality::NullEqualsNull,
                    schema: j.schema.clone(),
                }
            }
            DfPlan::Aggregate(a) => {
                let mut group = Vec::new();
                for g in &a.group_expr {
                    if matches!(g, Expr::GroupingSet(_)) {
                        return Err(unsupported("GROUPING SETS, CUBE and ROLLUP"));
                    }
                    group.push(g.clone());
                }
                let aggs = a.aggr_expr.iter().map(agg_call).collect::<Result<Vec<_>>>()?;
                LogicalPlan::Aggregate {
                    group,
                    aggs,
                    input: self.convert(&a.input)?,
                    schema: a.schema.clone(),
                }
            }
            DfPlan::Distinct(Distinct::All(input)) => {
                LogicalPlan::Distinct { input: self.convert(input)? }
            }
            DfPlan::Distinct(Distinct::On(_)) => return Err(unsupported("DISTINCT ON")),
            DfPlan::Union(u) => LogicalPlan::UnionAll {
                inputs: u.inputs.iter().map(|i| self.convert(i)).collect::<Result<_>>()?,
                schema: u.schema.clone(),
            },
            DfPlan::SubqueryAlias(s) => {
                // An alias only renames: fold it into a leaf rather than add a node.
                let input = self.convert(&s.input)?;
                let schema = s.schema.clone();
                match input.as_ref() {
                    LogicalPlan::Window { spec, input, bounds_columns, .. } => {
                        LogicalPlan::Window {
                            spec: spec.clone(),
                            input: input.clone(),
                            schema,
                            bounds_columns: *bounds_columns,
                        }
                    }
                    LogicalPlan::TableScan { name, .. } => {
                        LogicalPlan::TableScan { name: name.clone(), schema }
                    }
                    LogicalPlan::Rename { input, .. } => {
                        LogicalPlan::Rename { input: input.clone(), schema }
                    }
                    _ => LogicalPlan::Rename { input, schema },
                }
            }
            DfPlan::EmptyRelation(e) => LogicalPlan::Values {
                rows: if e.produce_one_row { vec![vec![]] } else { vec![] },
                schema: e.schema.clone(),
            },
            DfPlan::Values(v) => {
                LogicalPlan::Values { rows: v.values.clone(), schema: v.schema.clone() }
            }
            DfPlan::Sort(sort) => LogicalPlan::TopK {
                order: sort.expr.clone(),
                skip: 0,
                fetch: sort.fetch,
                input: self.convert(&sort.input)?,
            },
            DfPlan::Limit(limit) => {
                let skip = match limit.get_skip_type().map_err(df_error)? {
                    datafusion_expr::logical_plan::SkipType::Literal(n) => n,
                    _ => return Err(WeirError::plan("OFFSET must be a constant")),
                };
                let fetch = match limit.get_fetch_type().map_err(df_error)? {
                    datafusion_expr::logical_plan::FetchType::Literal(n) => n,
                    _ => return Err(WeirError::plan("LIMIT must be a constant")),
                };
                // LIMIT over ORDER BY is one top-k; over anything else it takes rows in value order.
                match self.convert(&limit.input)?.as_ref() {
                    LogicalPlan::TopK { order, skip: 0, fetch: None, input } => LogicalPlan::TopK {
                        order: order.clone(),
                        skip,
                        fetch,
                        input: input.clone(),
                    },
                    _ => LogicalPlan::TopK {
                        order: vec![],
                        skip,
                        fetch,
                        input: self.convert(&limit.input)?,
                    },
                }
            }
            DfPlan::Window(_) => return Err(unsupported("window functions (OVER)")),
            other => return Err(unsupported(&format!("'{}'", other.display()))),
        }))
    }

    /// Replaces the scalar subqueries DataFusion could not decorrelate by columns of an
    /// [`LogicalPlan::Apply`] over `input`, which evaluates them row by row.
    fn apply_subqueries(
        &self,
        exprs: Vec<Expr>,
        input: Arc<LogicalPlan>,
    ) -> Result<(Vec<Expr>, Arc<LogicalPlan>)> {
        if !exprs.iter().any(|e| e.exists(|x| Ok(is_subquery(x))).unwrap_or(false)) {
            return Ok((exprs, input));
        }
        let mut subqueries: Vec<ApplySubquery> = Vec::new();
        let mut fields: Vec<(Option<TableReference>, Arc<arrow::datatypes::Field>)> = Vec::new();
        let mut rewritten = Vec::with_capacity(exprs.len());
        for e in exprs {
            let mut err = None;
            let new = e
                .transform_up(|x| {
                    let (subquery, kind) = match x {
                        Expr::ScalarSubquery(sq) => (sq, ApplyKind::Scalar),
                        Expr::Exists(ex) => {
                            (ex.subquery, ApplyKind::Exists { negated: ex.negated })
                        }
                        Expr::InSubquery(i) => {
                            (i.subquery, ApplyKind::In { probe: *i.expr, negated: i.negated })
                        }
                        other => return Ok(datafusion_common::tree_node::Transformed::no(other)),
                    };
                    let plan = match self.convert(&subquery.subquery) {
                        Ok(p) => p,
                        Err(e) => {
                            err = Some(e);
                            return Ok(datafusion_common::tree_node::Transformed::no(
                                Expr::ScalarSubquery(subquery),
                            ));
                        }
                    };
                    let name = format!("__sq_{}", subqueries.len());
                    let field = match kind {
                        ApplyKind::Scalar => {
                            plan.schema().field(0).as_ref().clone().with_name(&name)
                        }
                        _ => arrow::datatypes::Field::new(&name, DataType::Boolean, true),
                    };
                    fields.push((None, Arc::new(field.with_nullable(true))));
                    subqueries.push(ApplySubquery { plan, kind });
                    Ok(datafusion_common::tree_node::Transformed::yes(Expr::Column(
                        datafusion_common::Column::new_unqualified(name),
                    )))
                })
                .map_err(df_error)?
                .data;
            if let Some(e) = err {
                return Err(e);
            }
            rewritten.push(new);
        }
        let extra = DFSchema::new_with_metadata(fields, Default::default()).map_err(df_error)?;
        let schema = Arc::new(input.schema().join(&extra).map_err(df_error)?);
        Ok((rewritten, Arc::new(LogicalPlan::Apply { input, subqueries, schema })))
    }

    /// A leaf: windowed stream, bare stream (UNBOUNDED), table or view.
    fn scan(&self, name: &str, schema: Arc<DFSchema>) -> Result<Arc<LogicalPlan>> {
        if let Some(w) = self.windows.iter().find(|w| w.synthetic == name) {
            let source = self.source(&w.stream)?;
            let spec = self.window_spec(w, &source)?;
            let bounds_columns = w.kind.has_bounds_columns();
            return Ok(Arc::new(LogicalPlan::Window {
                spec,
                input: source,
                schema,
                bounds_columns,
            }));
        }
        let source = self.source(name)?;
        Ok(Arc::new(match source.kind() {
            PlanKind::Stream => LogicalPlan::Window {
                spec: WindowSpec::Unbounded,
                input: source,
                schema,
                bounds_columns: false,
            },
            PlanKind::Relation => LogicalPlan::Rename { input: source, schema },
        }))
    }

    fn source(&self, name: &str) -> Result<Arc<LogicalPlan>> {
        match self.catalog.lookup(name) {
            Some(CatalogEntry::Stream(s)) => Ok(Arc::new(LogicalPlan::StreamScan {
                name: s.name.clone(),
                schema: qualified(&s.name, &s.schema)?,
                time_column: s.time_column,
                domain: s.domain,
            })),
            Some(CatalogEntry::Table(t)) => Ok(Arc::new(LogicalPlan::TableScan {
                name: t.name.clone(),
                schema: qualified(&t.name, &t.schema)?,
            })),
            Some(CatalogEntry::View(v)) => Ok(v.plan.clone()),
            None => Err(WeirError::plan(format!("unknown stream, table or view '{name}'"))),
        }
    }

    fn window_spec(&self, w: &WindowAst, source: &LogicalPlan) -> Result<WindowSpec> {
        let domain = source.time_domain().unwrap_or(TimeDomain::Ticks);
        let ticks = |d: Duration| -> Result<i64> {
            let v = match (d, domain) {
                (Duration::Ticks(t), TimeDomain::Ticks)
                | (Duration::Micros(t), TimeDomain::Micros) => t,
                (Duration::Ticks(t), TimeDomain::Micros) => {
                    return Err(WeirError::plan_at(
                        format!(
                            "'{}' is stamped by a TIMESTAMP column: give the duration a unit \
                             (e.g. {t} SECONDS)",
                            w.stream
                        ),
                        w.span,
                    ))
                }
                (Duration::Micros(_), TimeDomain::Ticks) => {
                    return Err(WeirError::plan_at(
                        format!(
                            "'{}' is stamped by integer ticks: give the duration as a bare integer",
                            w.stream
                        ),
                        w.span,
                    ))
                }
            };
            if v <= 0 {
                return Err(WeirError::plan_at("a window duration must be positive", w.span));
            }
            Ok(v)
        };
        Ok(match &w.kind {
            WindowKind::Unbounded => WindowSpec::Unbounded,
            WindowKind::Now => WindowSpec::Now,
            WindowKind::Range(d) => WindowSpec::Range(ticks(*d)?),
            WindowKind::RangeSlide(r, s) => {
                WindowSpec::RangeSlide { range: ticks(*r)?, slide: ticks(*s)? }
            }
            WindowKind::Rows(n) => WindowSpec::Rows(*n),
            WindowKind::Tumble { column, size } => {
                self.check_descriptor(w, source, column)?;
                WindowSpec::RangeSlide { range: ticks(*size)?, slide: ticks(*size)? }
            }
            WindowKind::Hop { column, slide, size } => {
                self.check_descriptor(w, source, column)?;
                WindowSpec::RangeSlide { range: ticks(*size)?, slide: ticks(*slide)? }
            }
            WindowKind::PartitionRows(cols, n) => {
                let schema = source.schema();
                let mut by = Vec::new();
                for (c, span) in cols {
                    let idx =
                        schema.fields().iter().position(|f| f.name() == c).ok_or_else(|| {
                            WeirError::plan_at(
                                format!("unknown column '{c}' in PARTITION BY of '{}'", w.stream),
                                *span,
                            )
                        })?;
                    by.push(idx);
                }
                WindowSpec::PartitionRows { by, rows: *n }
            }
        })
    }
}

impl Converter<'_> {
    /// TUMBLE/HOP's DESCRIPTOR names the stream's event-time column: windows run on event time.
    fn check_descriptor(&self, w: &WindowAst, source: &LogicalPlan, column: &str) -> Result<()> {
        match source {
            LogicalPlan::StreamScan { schema, time_column, .. } => {
                let tc = schema.field(*time_column).name();
                if tc == column {
                    Ok(())
                } else {
                    Err(WeirError::plan_at(
                        format!(
                            "DESCRIPTOR({column}) must name '{}''s event-time column '{tc}'",
                            w.stream
                        ),
                        w.span,
                    ))
                }
            }
            _ => Err(WeirError::plan_at(
                format!("TUMBLE and HOP apply to base streams; '{}' is a view", w.stream),
                w.span,
            )),
        }
    }
}

/// The schema a windowed stream shows the query: the stream's columns, plus `window_start`
/// and `window_end` for the window table functions.
fn window_schema(catalog: &dyn Catalog, w: &WindowAst) -> Option<SchemaRef> {
    let entry = catalog.lookup(&w.stream)?;
    let schema = entry.schema();
    if !w.kind.has_bounds_columns() {
        return Some(schema);
    }
    let ty = match &entry {
        CatalogEntry::Stream(s) if s.domain == TimeDomain::Micros => {
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None)
        }
        _ => DataType::Int64,
    };
    let mut fields: Vec<arrow::datatypes::FieldRef> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(arrow::datatypes::Field::new("window_start", ty.clone(), true)));
    fields.push(Arc::new(arrow::datatypes::Field::new("window_end", ty, true)));
    Some(Arc::new(arrow::datatypes::Schema::new(fields)))
}

fn qualified(name: &str, schema: &SchemaRef) -> Result<Arc<DFSchema>> {
    DFSchema::try_from_qualified_schema(name, schema).map(Arc::new).map_err(df_error)
}

fn is_subquery(e: &Expr) -> bool {
    matches!(e, Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_))
}

fn agg_call(e: &Expr) -> Result<AggCall> {
    let e = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    let Expr::AggregateFunction(af) = e else {
        return Err(WeirError::internal(format!("aggregate expression expected, got {e}")));
    };
    let p = &af.params;
    if p.filter.is_some() {
        return Err(unsupported("FILTER on aggregates"));
    }
    if !p.order_by.is_empty() {
        return Err(unsupported("ORDER BY inside aggregates"));
    }
    let name = af.func.name().to_ascii_lowercase();
    let arg = match p.args.as_slice() {
        [] => None,
        [a] => Some(a.clone()),
        _ => return Err(unsupported(&format!("aggregate {name} with several arguments"))),
    };
    let func = match name.as_str() {
        "count" => match &arg {
            None => AggFunc::CountStar,
            Some(Expr::Literal(v, _)) if !v.is_null() && !p.distinct => AggFunc::CountStar,
            #[allow(deprecated)]
            Some(Expr::Wildcard { .. }) => AggFunc::CountStar,
            Some(_) => AggFunc::Count,
        },
        "sum" => AggFunc::Sum,
        "avg" | "mean" => AggFunc::Avg,
        "min" => AggFunc::Min,
        "max" => AggFunc::Max,
        other => return Err(unsupported(&format!("aggregate function {other}"))),
    };
    let arg = if func == AggFunc::CountStar { None } else { arg };
    if func != AggFunc::CountStar && arg.is_none() {
        return Err(WeirError::plan(format!("{name} needs an argument")));
    }
    Ok(AggCall { func, arg, distinct: p.distinct })
}

/// The plan of `SELECT * FROM table WHERE selection`: the rows a `DELETE` removes. The query
/// is built around the parsed `selection` (no text round trip), so an error in it points into
/// the DELETE statement's own text.
pub fn bind_selection(
    catalog: &dyn Catalog,
    table: &str,
    selection: Option<Box<sql::Expr>>,
) -> Result<Arc<LogicalPlan>> {
    let template = format!("SELECT * FROM \"{}\"", table.replace('"', "\"\""));
    let dialect = sqlparser::dialect::GenericDialect {};
    let mut stmts = sqlparser::parser::Parser::parse_sql(&dialect, &template)
        .map_err(|e| WeirError::internal(format!("the DELETE template does not parse: {e}")))?;
    let Some(sql::Statement::Query(mut query)) = stmts.pop() else {
        return Err(WeirError::internal("the DELETE template is not a query"));
    };
    if let sql::SetExpr::Select(select) = query.body.as_mut() {
        select.selection = selection.map(|e| *e);
    }
    bind_query(catalog, &CqlQuery { query, r2s: None, windows: vec![] })
}
