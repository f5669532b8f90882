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
//! columns used above it, over the whole plan, views inlined. The window rewrites follow, and
//! last [`weir_plan::share_subplans`] makes a sub-plan that occurs twice (a CTE or view read
//! twice) one node.
//!
//! CQL's defaults are applied here: a stream named without a window gets `[UNBOUNDED]`; a
//! top-level monotonic query without an explicit relation-to-stream operator gets `ISTREAM`.
//!
//! Files: this one plans (the catalog as DataFusion sees it, `SqlToRel`, the rewrites);
//! [`convert`] turns DataFusion's plan into Weir's; [`names`] walks the parsed query before
//! planning (repeated column names, the names a query reads).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::config::ConfigOptions;
use datafusion_common::{DataFusionError, TableReference};
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::{
    AggregateUDF, HigherOrderUDF, JoinType, LogicalPlan as DfPlan, ScalarUDF, TableSource,
    WindowUDF,
};
use datafusion_optimizer::analyzer::Analyzer;
use datafusion_optimizer::optimizer::{Optimizer, OptimizerContext};
use datafusion_sql::planner::{ParserOptions, SqlToRel};
use sqlparser::ast as sql;
use weir_common::{Result, Span, TimeDomain, WeirError};
use weir_plan::{LogicalPlan, PlanKind, R2S};

use crate::catalog::{Catalog, CatalogEntry};
use crate::parser::{object_name, CqlQuery, WindowAst, WINDOW_PREFIX};

pub mod convert;
pub(crate) mod might_contain;
pub mod names;
mod sketch_udf;
mod to_char_udf;
mod window_udf;

use convert::{window_schema, Converter};
pub use names::collect_relation_names;
use names::{
    check_number_literals, check_row_in_subquery, check_table_factors, check_window_calls,
    check_window_placement, fetch_as_limit, float_literals_as_double, inherit_named_windows,
    name_duplicate_columns, quantified_conditions, quantified_subqueries, timestamps_in_micros,
    typed_null_aggregate_args, window_null_order,
};

/// Binds queries against a catalog.
pub struct Binder<'a> {
    catalog: &'a dyn Catalog,
    options: BindOptions,
}

/// Where an `ORDER BY` term without `NULLS FIRST` or `NULLS LAST` puts NULL: the engine's
/// `null_order` setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NullOrder {
    /// NULL is smaller than every value: first for `ASC`, last for `DESC` (SQLite, MySQL).
    #[default]
    Smallest,
    /// NULL is larger than every value: last for `ASC`, first for `DESC` (PostgreSQL,
    /// RisingWave, Flink, Oracle).
    Largest,
}

impl NullOrder {
    /// The setting's values, as `SET null_order = ...` takes them: `smallest` (or `sqlite`)
    /// and `largest` (or `postgres`, `postgresql`), in any case.
    pub fn parse(value: &str) -> Option<NullOrder> {
        match value.to_ascii_lowercase().as_str() {
            "smallest" | "sqlite" => Some(NullOrder::Smallest),
            "largest" | "postgres" | "postgresql" => Some(NullOrder::Largest),
            _ => None,
        }
    }

    /// The value as `SHOW null_order` prints it.
    pub fn name(self) -> &'static str {
        match self {
            NullOrder::Smallest => "smallest",
            NullOrder::Largest => "largest",
        }
    }
}

/// What a query's meaning depends on besides its text and the catalog: the engine's settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BindOptions {
    pub null_order: NullOrder,
}

/// Binds a continuous or one-shot query: see the module docs.
pub fn bind_query(catalog: &dyn Catalog, query: &CqlQuery) -> Result<Arc<LogicalPlan>> {
    Binder::new(catalog).bind(query)
}

/// [`bind_query`] under the given settings.
pub fn bind_query_with(
    catalog: &dyn Catalog,
    options: BindOptions,
    query: &CqlQuery,
) -> Result<Arc<LogicalPlan>> {
    Binder::with_options(catalog, options).bind(query)
}

/// The functions `SqlToRel` can call, by name and alias. Ordered maps: DataFusion suggests
/// the first name closest to an unknown one, so the names must come in a fixed order for
/// the hint ("Did you mean ...?") to be the same on every run.
struct Functions {
    scalar: BTreeMap<String, Arc<ScalarUDF>>,
    aggregate: BTreeMap<String, Arc<AggregateUDF>>,
    window: BTreeMap<String, Arc<WindowUDF>>,
    planners: Vec<Arc<dyn ExprPlanner>>,
}

fn functions() -> &'static Functions {
    static F: OnceLock<Functions> = OnceLock::new();
    F.get_or_init(|| {
        let mut scalar = BTreeMap::new();
        // The list functions (array_length, array_element, ...): DataFusion's own library.
        let nested = datafusion_functions_nested::all_default_nested_functions();
        for f in datafusion_functions::all_default_functions().into_iter().chain(nested) {
            // `to_char` with its format parsed once per batch, not once per row.
            let f = if f.name() == "to_char" { to_char_udf::to_char() } else { f };
            for alias in f.aliases() {
                scalar.insert(alias.clone(), f.clone());
            }
            scalar.insert(f.name().to_string(), f);
        }
        let mut aggregate = BTreeMap::new();
        for f in datafusion_functions_aggregate::all_default_aggregate_functions() {
            for alias in f.aliases() {
                aggregate.insert(alias.clone(), f.clone());
            }
            aggregate.insert(f.name().to_string(), f);
        }
        for f in sketch_udf::known_sketch_aggregates() {
            aggregate.insert(f.name().to_string(), f);
        }
        // SQL's name for BOOL_AND (PostgreSQL has both).
        if let Some(f) = aggregate.get("bool_and").cloned() {
            aggregate.insert("every".to_string(), f);
        }
        let planners: Vec<Arc<dyn ExprPlanner>> = vec![
            Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
            Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
            Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
            // List literals (`[1, 2]`), `||` on lists, and indexing (`regexp_match(...)[2]`).
            Arc::new(datafusion_functions_nested::planner::NestedFunctionPlanner),
            Arc::new(datafusion_functions_nested::planner::FieldAccessPlanner),
        ];
        let window = window_udf::known_window_functions()
            .into_iter()
            .map(|f| (f.name().to_string(), f))
            .collect();
        Functions { scalar, aggregate, window, planners }
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

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        functions().window.get(name).cloned()
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
        functions().window.keys().cloned().collect()
    }
}

/// The planner's refusal of an SQL expression it has no plan for, which it words as a dump of
/// the syntax tree ("Unsupported ast node in sqltorel: Collate { expr: ... }"): named in SQL's
/// words instead, at the first such expression of `query`. Any other error as [`df_error`].
fn unsupported_expression(e: DataFusionError, query: &sql::Query) -> WeirError {
    const MARK: &str = "Unsupported ast node in sqltorel: ";
    let text = e.strip_backtrace();
    let Some(node) = text.split(MARK).nth(1) else { return df_error(e) };
    let variant: String = node.chars().take_while(char::is_ascii_alphanumeric).collect();
    if variant.is_empty() {
        return df_error(e);
    }
    let found = sql::visit_expressions(query, |x| {
        let debug = format!("{x:?}");
        match debug.strip_prefix(variant.as_str()) {
            Some(rest) if !rest.starts_with(|c: char| c.is_ascii_alphanumeric()) => {
                std::ops::ControlFlow::Break(sql::Spanned::span(x))
            }
            _ => std::ops::ControlFlow::Continue(()),
        }
    });
    let at = match found {
        std::ops::ControlFlow::Break(span) => Span::from_sql(span),
        std::ops::ControlFlow::Continue(()) => None,
    };
    let message = match variant.as_str() {
        "Collate" => "COLLATE is not supported: strings compare by their bytes (the order of \
                      PostgreSQL's \"C\" collation)"
            .to_string(),
        _ => {
            // `IsNormalized` -> `IS NORMALIZED`.
            let mut words = String::new();
            for (i, c) in variant.char_indices() {
                if i > 0 && c.is_ascii_uppercase() {
                    words.push(' ');
                }
                words.push(c.to_ascii_uppercase());
            }
            format!("the SQL expression {words} is not supported in Weir yet")
        }
    };
    WeirError::plan_at(message, at)
}

/// Converts a DataFusion error into a plan error, keeping its source span when it has one.
pub fn df_error(e: DataFusionError) -> WeirError {
    if let Some(message) = incompatible_operands(&e) {
        let span = e.diagnostic().and_then(|d| d.span).filter(|s| s.start.line > 0).map(|s| Span {
            line: s.start.line,
            column: s.start.column,
            end_line: s.end.line,
            end_column: s.end.column,
        });
        return WeirError::plan_at(message, span);
    }
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
    let msg = no_function_match(&msg).unwrap_or(msg);
    let msg = msg
        .strip_prefix("Error during planning: ")
        .or_else(|| msg.strip_prefix("Schema error: "))
        .or_else(|| msg.strip_prefix("This feature is not implemented: "))
        .unwrap_or(&msg)
        .to_string();
    WeirError::plan(msg)
}

/// DataFusion's "expressions have incompatible types (has type Int64) (has type Utf8)" for an
/// operator whose operand types do not go together (`price + 'abc'`), in SQL's words:
/// "operator + cannot take BIGINT and VARCHAR". Its span covers the left operand only (a
/// literal has none); [`place_operator_error`] widens it to the whole expression.
fn incompatible_operands(e: &DataFusionError) -> Option<String> {
    let d = e.diagnostic()?;
    if d.message != "expressions have incompatible types" {
        return None;
    }
    let types: Vec<&str> =
        d.notes.iter().filter_map(|n| n.message.strip_prefix("has type ")).collect();
    let [lhs, rhs] = types[..] else { return None };
    let sql = |t: &str| {
        t.parse::<DataType>().map_or_else(|_| t.to_string(), |t| crate::types::sql_type_name(&t))
    };
    // The operator, from the error under the diagnostic: "... {lhs} {op} {rhs} to valid types"
    // or "... {lhs} {op} {rhs}".
    let text = e.strip_backtrace();
    let op = text.split_once(&format!("{lhs} ")).and_then(|(_, rest)| {
        let (op, _) = rest.split_once(&format!(" {rhs}"))?;
        (!op.is_empty() && op.len() <= 12 && !op.contains(' ')).then(|| op.to_string())
    });
    let (l, r) = (sql(lhs), sql(rhs));
    Some(match op {
        Some(op) => format!(
            "operator {op} cannot take {l} and {r} (CAST one \
             of them)"
        ),
        None => format!("operands of types {l} and {r} do not go together (CAST one of them)"),
    })
}

/// Widens the span of an [`incompatible_operands`] error from the left operand to the whole
/// binary expression that starts there, so the caret covers `price + 'abc'`.
fn place_operator_error(e: WeirError, q: &sql::Query) -> WeirError {
    let WeirError::Plan(d) = &e else { return e };
    let Some(span) = d.span else { return e };
    if !d.message.starts_with("operator ") && !d.message.starts_with("operands of types ") {
        return e;
    }
    let found = sql::visit_expressions(q, |x| match x {
        sql::Expr::BinaryOp { left, .. } => {
            let l = sql::Spanned::span(left.as_ref());
            if l.start.line == span.line && l.start.column == span.column {
                std::ops::ControlFlow::Break(sql::Spanned::span(x))
            } else {
                std::ops::ControlFlow::Continue(())
            }
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    match found {
        std::ops::ControlFlow::Break(whole) => match Span::from_sql(whole) {
            Some(whole) => WeirError::plan_at(d.message.clone(), Some(whole)),
            None => e,
        },
        std::ops::ControlFlow::Continue(()) => e,
    }
}

/// DataFusion reports a call that matches no signature of its function (`substr(s, 1, 11.0)`,
/// `SUM` over a TIMESTAMP) as an "Internal error ... likely caused by a bug in DataFusion's
/// code" (or that coercion failed): it is the user's type mistake. Keeps the part that says
/// so, with the candidate signatures.
fn no_function_match(msg: &str) -> Option<String> {
    const MARK: &str = "No function matches the given name and argument types ";
    if !msg.contains("Internal error") && !msg.contains("Failed to coerce arguments") {
        return None;
    }
    let at = msg.find(MARK)?;
    let rest = &msg[at + MARK.len()..];
    let (call, rest) = rest.split_once(". You might need to add explicit type casts.")?;
    let candidates: Vec<&str> = rest
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Candidate functions"))
        .collect();
    let mut out = format!("no function matches the argument types of {call}: add explicit casts");
    if !candidates.is_empty() {
        out.push_str(&format!(" (candidates: {})", candidates.join("; ")));
    }
    Some(out)
}

/// The span of the first call of function `name` in `q`, to place an error about it.
fn function_span(q: &sql::Query, name: &str) -> Option<Span> {
    let found = sql::visit_expressions(q, |e| match e {
        sql::Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case(name) => {
            std::ops::ControlFlow::Break(sql::Spanned::span(f))
        }
        // sqlparser has its own node for SUBSTR/SUBSTRING.
        sql::Expr::Substring { .. } if matches!(name, "substr" | "substring") => {
            std::ops::ControlFlow::Break(sql::Spanned::span(e))
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    match found {
        std::ops::ControlFlow::Break(span) => Span::from_sql(span),
        std::ops::ControlFlow::Continue(()) => None,
    }
}

/// Places an error about a function call without a position (see [`no_function_match`]) at the
/// call's first appearance in `q`.
fn place_function_error(e: WeirError, q: &sql::Query) -> WeirError {
    let WeirError::Plan(d) = &e else { return e };
    if d.span.is_some() {
        return e;
    }
    let Some(call) = d.message.strip_prefix("no function matches the argument types of '") else {
        return e;
    };
    let Some(name) = call.split('(').next() else { return e };
    match function_span(q, name) {
        Some(span) => WeirError::plan_at(d.message.clone(), Some(span)),
        None => e,
    }
}

/// DataFusion refuses a relation named twice in one FROM without aliases (`FROM t, t`) with
/// "Schema contains duplicate qualified field name t.a"; says what is wrong and how to mend
/// it, at the second mention.
fn place_duplicate_relation(e: WeirError, q: &sql::Query) -> WeirError {
    let WeirError::Plan(d) = &e else { return e };
    let Some(field) = d.message.strip_prefix("Schema contains duplicate qualified field name ")
    else {
        return e;
    };
    let qualifier = field.rsplit_once('.').map_or(field, |(q, _)| q).trim_matches('"');
    let mut found: Option<(String, Option<Span>)> = None;
    if let sql::SetExpr::Select(select) = q.body.as_ref() {
        let mut seen: Vec<String> = Vec::new();
        let factors = select.from.iter().flat_map(|twj| {
            std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation))
        });
        for f in factors {
            if let sql::TableFactor::Table { name, alias, .. } = f {
                let shown = alias
                    .as_ref()
                    .map_or_else(|| object_name(name), |a| a.name.value.to_ascii_lowercase());
                if shown.eq_ignore_ascii_case(qualifier) && seen.contains(&shown) {
                    found = Some((shown.clone(), Span::from_sql(sql::Spanned::span(f))));
                    break;
                }
                seen.push(shown);
            }
        }
    }
    let Some((name, span)) = found else { return e };
    WeirError::plan_at(
        format!(
            "'{name}' is named twice in FROM: give each its own alias \
             (FROM {name} AS a, {name} AS b) and qualify the columns with them"
        ),
        span,
    )
}

/// The sketch aggregates' names (see [`sketch_udf`]), by the name errors give them (their
/// [`weir_plan::AggFunc`]'s, in capitals).
const SKETCH_NAMES: [(&str, &[&str]); 4] = [
    ("APPROX_COUNT_DISTINCT", &["approx_count_distinct", "approx_distinct"]),
    ("APPROX_PERCENTILE", &["approx_percentile", "approx_quantile"]),
    ("APPROX_MEDIAN", &["approx_median"]),
    ("APPROX_TOP_K", &["approx_top_k"]),
];

/// Checks the constant arguments of sketch aggregates on the syntax tree, where an error can
/// point at them: `APPROX_COUNT_DISTINCT(x, precision)`'s precision, an integer constant in
/// [`weir_plan::HLL_PRECISIONS`]; `APPROX_PERCENTILE(x, p, compression)`'s p, a numeric
/// constant in [0, 1], and compression, an integer constant in
/// [`weir_plan::TDIGEST_COMPRESSIONS`]; `APPROX_TOP_K(x, k, capacity)`'s k, an integer constant
/// in [`weir_plan::TOP_K_KS`] (and given), and capacity, one in
/// [`weir_plan::TOP_K_CAPACITIES`] and at least k.
fn check_sketch_args(q: &sql::Query) -> Result<()> {
    let found = sql::visit_expressions(q, |e| {
        let sql::Expr::Function(f) = e else { return std::ops::ControlFlow::Continue(()) };
        let name = f.name.to_string().to_ascii_lowercase();
        let sql::FunctionArguments::List(list) = &f.args else {
            return std::ops::ControlFlow::Continue(());
        };
        let number = |i: usize| -> Option<&str> {
            match list.args.get(i)? {
                sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(e)) => number_literal(e),
                _ => None,
            }
        };
        // (argument index, whether it is fine, what it must be)
        let mut checks: Vec<(usize, bool, String)> = Vec::new();
        match name.as_str() {
            "approx_count_distinct" | "approx_distinct" => {
                let range = weir_plan::HLL_PRECISIONS;
                checks.push((
                    1,
                    number(1)
                        .and_then(|n| n.parse::<u8>().ok())
                        .is_some_and(|p| range.contains(&p)),
                    format!(
                        "precision must be an integer constant from {} to {} (2^precision \
                         registers)",
                        range.start(),
                        range.end()
                    ),
                ));
            }
            "approx_percentile" | "approx_quantile" => {
                checks.push((
                    1,
                    number(1)
                        .and_then(|n| n.parse::<f64>().ok())
                        .is_some_and(|p| weir_plan::Fraction::new(p).is_some()),
                    "quantile must be a numeric constant from 0 to 1".to_string(),
                ));
                let range = weir_plan::TDIGEST_COMPRESSIONS;
                checks.push((
                    2,
                    number(2)
                        .and_then(|n| n.parse::<u32>().ok())
                        .is_some_and(|c| range.contains(&c)),
                    format!(
                        "compression must be an integer constant from {} to {} (the t-digest's \
                         δ: at most about that many centroids)",
                        range.start(),
                        range.end()
                    ),
                ));
            }
            "approx_top_k" => {
                if list.args.len() < 2 {
                    return std::ops::ControlFlow::Break(WeirError::plan_at(
                        "APPROX_TOP_K takes a value and k, the number of most frequent values to \
                         give: APPROX_TOP_K(x, 10)",
                        Span::from_sql(sql::Spanned::span(e)),
                    ));
                }
                let ks = weir_plan::TOP_K_KS;
                let k = number(1).and_then(|n| n.parse::<u32>().ok()).filter(|k| ks.contains(k));
                checks.push((
                    1,
                    k.is_some(),
                    format!(
                        "k must be an integer constant from {} to {} (the number of most frequent \
                         values to give)",
                        ks.start(),
                        ks.end()
                    ),
                ));
                let range = weir_plan::TOP_K_CAPACITIES;
                checks.push((
                    2,
                    number(2)
                        .and_then(|n| n.parse::<u32>().ok())
                        .is_some_and(|c| range.contains(&c) && k.is_none_or(|k| c >= k)),
                    format!(
                        "capacity must be an integer constant from k to {} (the counters kept: a \
                         count is at most n/(capacity+1) below the true one)",
                        range.end()
                    ),
                ));
            }
            _ => {}
        }
        for (i, ok, what) in checks {
            let Some(arg) = list.args.get(i) else { continue };
            if !ok {
                return std::ops::ControlFlow::Break(WeirError::plan_at(
                    format!("{}'s {what}, found {arg}", name.to_uppercase()),
                    Span::from_sql(sql::Spanned::span(arg)),
                ));
            }
        }
        std::ops::ControlFlow::Continue(())
    });
    match found {
        std::ops::ControlFlow::Break(e) => Err(e),
        std::ops::ControlFlow::Continue(()) => Ok(()),
    }
}

/// A numeric literal's text (`12`, `0.5`, `1e-3`), if `e` is one.
pub(super) fn number_literal(e: &sql::Expr) -> Option<&str> {
    match e {
        sql::Expr::Value(v) => match &v.value {
            sql::Value::Number(n, _) => Some(n.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// Places an error about a sketch aggregate (its message starts with its name) at its call.
fn place_sketch_error(e: WeirError, q: &sql::Query) -> WeirError {
    let WeirError::Plan(d) = &e else { return e };
    if d.span.is_some() {
        return e;
    }
    let named = |n: &str| {
        d.message
            .strip_prefix(n)
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
    };
    let Some((_, names)) = SKETCH_NAMES.iter().find(|(n, _)| named(n)) else { return e };
    match names.iter().find_map(|name| function_span(q, name)) {
        Some(span) => WeirError::plan_at(d.message.clone(), Some(span)),
        None => e,
    }
}

impl<'a> Binder<'a> {
    pub fn new(catalog: &'a dyn Catalog) -> Self {
        Binder { catalog, options: BindOptions::default() }
    }

    pub fn with_options(catalog: &'a dyn Catalog, options: BindOptions) -> Self {
        Binder { catalog, options }
    }

    /// Binds one query. See the module docs.
    pub fn bind(&self, q: &CqlQuery) -> Result<Arc<LogicalPlan>> {
        self.check_windows(&q.windows)?;
        self.check_relations(&q.query, &[])?;
        check_sketch_args(&q.query)?;
        let (df, probes) = self.plan_sql(&q.query, &q.windows).map_err(|e| {
            let e = place_operator_error(place_function_error(e, &q.query), &q.query);
            place_duplicate_relation(e, &q.query)
        })?;
        let converter = Converter {
            catalog: self.catalog,
            windows: &q.windows,
            temporal: Default::default(),
            probes: &probes,
        };
        let plan = converter.convert(&df).map_err(|e| place_sketch_error(e, &q.query))?;
        converter.check_versioned()?;
        // FETCH FIRST n ROWS WITH TIES (the outermost query's: see `fetch_as_limit`).
        let plan = if q.query.fetch.as_ref().is_some_and(|f| f.with_ties) {
            keep_ties(&plan).ok_or_else(|| {
                WeirError::plan("FETCH ... WITH TIES needs ORDER BY on the outermost query")
            })?
        } else {
            plan
        };
        // Aggregates per TUMBLE/HOP window run over the plain window, the bounds added after.
        let plan = weir_plan::lift_window_bounds(&plan)?;
        // Aggregates over sliding windows are pre-aggregated pane by pane as elements arrive.
        let plan = weir_plan::pre_aggregate_panes(&plan)?;
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
        let plan = match q.r2s {
            Some(op) => Arc::new(LogicalPlan::ToStream { op, input: plan }),
            None if plan.is_monotonic() => {
                Arc::new(LogicalPlan::ToStream { op: R2S::Istream, input: plan })
            }
            None => plan,
        };
        // An ISTREAM of window bounds needs no retractions of the old bounds.
        let plan = weir_plan::mark_istream_bounds(&plan)?;
        // ... and then, per TUMBLE/HOP/CUMULATE window, each window's groups once when it closes.
        let plan = weir_plan::fuse_window_aggregates(&plan)?;
        // Inner joins over tumbling windows index the window's elements as they arrive.
        let plan = weir_plan::hold_join_windows(&plan)?;
        // Last: a sub-plan that occurs twice (a CTE read twice) is computed once.
        weir_plan::share_subplans(&plan)
    }

    /// DataFusion's plan of `query`, and the filters of its `MIGHT_CONTAIN` calls (which the
    /// plan holds as IN subqueries: see [`might_contain`]).
    fn plan_sql(
        &self,
        query: &sql::Query,
        windows: &[WindowAst],
    ) -> Result<(DfPlan, Vec<might_contain::BloomProbe>)> {
        let mut options = ConfigOptions::new();
        options.sql_parser.enable_ident_normalization = true;
        options.optimizer.filter_null_join_keys = false;
        // Weir has no physical subquery operator: every scalar subquery becomes a join.
        options.optimizer.enable_physical_uncorrelated_scalar_subquery = false;
        let provider = Provider { catalog: self.catalog, windows, options: options.clone() };
        // NULL sorts as the smallest value, as in SQLite, unless the `null_order` setting says
        // largest, as in PostgreSQL. This is every ORDER BY without NULLS FIRST/LAST: the
        // query's (and its top-k's) and an aggregate's own; window functions' ORDER BY is
        // PostgreSQL's either way (`window_null_order`).
        let default_null_ordering = match self.options.null_order {
            NullOrder::Smallest => datafusion_sql::planner::NullOrdering::NullsMin,
            NullOrder::Largest => datafusion_sql::planner::NullOrdering::NullsMax,
        };
        let parser_options = ParserOptions {
            collect_spans: true,
            default_null_ordering,
            map_string_types_to_utf8view: false,
            // Exact decimals; `float_literals_as_double` keeps scientific notation DOUBLE.
            parse_float_as_decimal: true,
            ..ParserOptions::default()
        };
        let planner = SqlToRel::new_with_options(&provider, parser_options);
        check_number_literals(query)?;
        check_window_calls(query)?;
        check_window_placement(query)?;
        check_table_factors(query)?;
        check_row_in_subquery(query)?;
        let mut query = query.clone();
        // MIGHT_CONTAIN becomes an IN subquery whose join the converter recognises.
        let probes = might_contain::rewrite(&mut query)?;
        fetch_as_limit(&mut query)?;
        timestamps_in_micros(&mut query);
        float_literals_as_double(&mut query);
        inherit_named_windows(&mut query)?;
        let quantified = quantified_conditions(&mut query)?;
        quantified_subqueries(&mut query)?;
        window_null_order(&mut query);
        typed_null_aggregate_args(&mut query);
        // Output columns are named as written (`1 + 1`, `sum(v)`), repeated names told apart.
        name_duplicate_columns(&mut query);
        let plan = planner
            .sql_statement_to_plan(sql::Statement::Query(Box::new(query.clone())))
            .map_err(|e| unsupported_expression(e, &query))?;
        crate::correlated_on::check_quantified_derived(&plan, &quantified)?;
        let plan = mark_bag_set_operations(plan).map_err(df_error)?;
        // Before type coercion: a text or binary literal tested for membership in numbers.
        let plan = crate::mixed_types::rewrite(plan).map_err(df_error)?;
        let plan =
            Analyzer::new().execute_and_check(plan, &options, |_, _| {}).map_err(df_error)?;
        // Integer literal arithmetic overflows as an error, not a wrap (see `checked_literals`).
        let plan = crate::checked_literals::rewrite(plan).map_err(df_error)?;
        // A subquery's correlated join condition moves out of its inner join (`correlated_on`).
        let plan = crate::correlated_on::rewrite(plan, &query)?;
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
        let plan =
            Optimizer::with_rules(push_down).optimize(plan, &ctx, |_, _| {}).map_err(df_error)?;
        Ok((plan, probes))
    }

    /// Every window names a stream (base or derived), with durations in its time domain;
    /// `TUMBLE` and `HOP` may also name a table or a relation view.
    fn check_windows(&self, windows: &[WindowAst]) -> Result<()> {
        for w in windows {
            if matches!(w.kind, crate::parser::WindowKind::AsOf { .. }) {
                self.check_versioned(w)?;
                continue;
            }
            match self.catalog.lookup(&w.stream) {
                None => {
                    return Err(WeirError::plan_at(
                        format!("unknown stream '{}'", w.stream),
                        w.span,
                    ))
                }
                // TUMBLE and HOP map each row of a relation to its windows (see `convert`).
                Some(CatalogEntry::Table(_)) if w.kind.maps_relations() => {}
                Some(CatalogEntry::View(v))
                    if v.kind() == PlanKind::Relation && w.kind.maps_relations() => {}
                Some(CatalogEntry::Table(_))
                    if matches!(w.kind, crate::parser::WindowKind::Cumulate { .. }) =>
                {
                    return Err(WeirError::plan_at(
                        format!(
                            "CUMULATE applies to streams: '{}' is a table (TUMBLE and HOP map a \
                             table's rows to their windows)",
                            w.stream
                        ),
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

    /// The versioned side of a temporal join is a table, a stream with a primary key, or a view
    /// that is a relation.
    fn check_versioned(&self, w: &WindowAst) -> Result<()> {
        let why = match self.catalog.lookup(&w.stream) {
            None => format!("unknown table or stream '{}'", w.stream),
            Some(CatalogEntry::Table(_)) => return Ok(()),
            Some(CatalogEntry::Stream(s)) if !s.primary_key.is_empty() => return Ok(()),
            Some(CatalogEntry::Stream(_)) => format!(
                "FOR SYSTEM_TIME AS OF needs a versioned relation: stream '{}' has no PRIMARY KEY \
                 (declare one to read the stream as a changelog of its key's rows)",
                w.stream
            ),
            Some(CatalogEntry::View(v)) if v.kind() == PlanKind::Relation => return Ok(()),
            Some(CatalogEntry::View(_)) => format!(
                "FOR SYSTEM_TIME AS OF needs a versioned relation: view '{}' is a stream (name a \
                 table, a stream with a PRIMARY KEY, or a view that is a relation: one without \
                 ISTREAM, DSTREAM or RSTREAM)",
                w.stream
            ),
        };
        Err(WeirError::plan_at(why, w.span))
    }

    /// Every name in a FROM clause exists, reported with its position. `ctes` are the WITH
    /// names in scope: those of the enclosing queries, which a subquery in FROM sees as SQL
    /// says, and then each of this query's, seen by the ones after it and by its body.
    fn check_relations(&self, q: &sql::Query, ctes: &[String]) -> Result<()> {
        let mut ctes: Vec<String> = ctes.to_vec();
        if let Some(with) = &q.with {
            for cte in &with.cte_tables {
                let name = cte.alias.name.value.to_ascii_lowercase();
                if let Err(e) = self.check_relations(&cte.query, &ctes) {
                    // A query that reads itself is recursive: say so, not that it is unknown.
                    ctes.push(name.clone());
                    if with.recursive && self.check_relations(&cte.query, &ctes).is_ok() {
                        return Err(WeirError::plan_at(
                            format!("WITH RECURSIVE is not supported: '{name}' reads itself"),
                            Span::from_sql(cte.alias.name.span),
                        ));
                    }
                    return Err(e);
                }
                ctes.push(name);
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
            sql::SetExpr::Query(q) => self.check_relations(q, ctes),
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
            sql::TableFactor::Derived { subquery, .. } => self.check_relations(subquery, ctes),
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

/// The plan with its top-level ordered top-k (seen through projections, renames and filters
/// above it) keeping ties; `None` if there is none.
fn keep_ties(plan: &Arc<LogicalPlan>) -> Option<Arc<LogicalPlan>> {
    Some(Arc::new(match plan.as_ref() {
        LogicalPlan::TopK { order, skip, fetch: Some(n), input, .. } if !order.is_empty() => {
            LogicalPlan::TopK {
                order: order.clone(),
                skip: *skip,
                fetch: Some(*n),
                with_ties: true,
                input: input.clone(),
            }
        }
        LogicalPlan::Project { exprs, input, schema } => LogicalPlan::Project {
            exprs: exprs.clone(),
            input: keep_ties(input)?,
            schema: schema.clone(),
        },
        LogicalPlan::Rename { input, schema } => {
            LogicalPlan::Rename { input: keep_ties(input)?, schema: schema.clone() }
        }
        LogicalPlan::Filter { predicate, input } => {
            LogicalPlan::Filter { predicate: predicate.clone(), input: keep_ties(input)? }
        }
        _ => return None,
    }))
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
