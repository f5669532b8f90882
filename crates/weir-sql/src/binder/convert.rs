//! The converter: DataFusion's logical plan -> Weir's [`LogicalPlan`], node by node, with
//! windowed streams and views (leaves for DataFusion) turned into Weir's own nodes.

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::tree_node::TreeNode;
use datafusion_common::{DFSchema, ScalarValue, TableReference};
use datafusion_expr::{Distinct, Expr, ExprSchemable, JoinType, LogicalPlan as DfPlan};
use weir_common::{Result, TimeDomain, WeirError};
use weir_plan::{
    AggCall, AggFunc, ApplyKind, ApplySubquery, FrameBound, JoinKind, LogicalPlan, Membership,
    OverCall, OverFrame, OverFunc, PlanKind, RankFunc, RankMode, SampleOver, WindowFrame,
    WindowSpec, R2S,
};

use super::df_error;
use super::might_contain::{is_probe_column, probe_of, BloomProbe};
use crate::catalog::{Catalog, CatalogEntry};
use crate::parser::{Duration, WindowAst, WindowKind};

/// The most windows a `HOP` or `CUMULATE` may put each element in: its output repeats every
/// element once per window, so a size/slide of a million would multiply the input a million
/// times.
const MAX_WINDOWS_PER_ELEMENT: i128 = 10_000;

/// DataFusion plan -> Weir plan.
pub(super) struct Converter<'a> {
    pub catalog: &'a dyn Catalog,
    pub windows: &'a [WindowAst],
    /// The synthetic names of the versioned sides (`FOR SYSTEM_TIME AS OF`) that became the
    /// right side of a temporal join; any other is misplaced (see [`Converter::check_versioned`]).
    pub temporal: std::cell::RefCell<Vec<String>>,
    /// The filters of the query's `MIGHT_CONTAIN` calls (see [`super::might_contain`]).
    pub probes: &'a [BloomProbe],
}

/// The `FOR SYSTEM_TIME AS OF` clause a plan stands for, if it is one seen through aliases,
/// filters and projections.
fn versioned<'w>(plan: &DfPlan, windows: &'w [WindowAst]) -> Option<&'w WindowAst> {
    match plan {
        DfPlan::TableScan(scan) => {
            let name = scan.table_name.table();
            windows
                .iter()
                .find(|w| w.synthetic == name && matches!(w.kind, WindowKind::AsOf { .. }))
        }
        DfPlan::SubqueryAlias(a) => versioned(&a.input, windows),
        DfPlan::Filter(f) => versioned(&f.input, windows),
        DfPlan::Projection(p) => versioned(&p.input, windows),
        _ => None,
    }
}

fn unsupported(what: &str) -> WeirError {
    WeirError::plan(format!("{what} is not supported in Weir yet"))
}

impl Converter<'_> {
    pub fn convert(&self, plan: &DfPlan) -> Result<Arc<LogicalPlan>> {
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
                if !matches!(input.as_ref(), LogicalPlan::Apply { .. }) {
                    // A bound on a rank computed below: plan a top-N (or a deduplication),
                    // under what is left of the predicate.
                    if let Some((ranked, rest)) = fold_rank_filter(&predicate, &input)? {
                        return Ok(match rest {
                            Some(predicate) => {
                                Arc::new(LogicalPlan::Filter { predicate, input: ranked })
                            }
                            None => ranked,
                        });
                    }
                }
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
                if let Some(w) = versioned(&j.right, self.windows) {
                    return self.temporal_join(j, w);
                }
                if let Some(p) = self.might_contain(j)? {
                    return Ok(p);
                }
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
                            held: [None, None],
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
                    held: [None, None],
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
                let aggs =
                    aggs.into_iter().map(|c| exact_avg(c, a.input.schema())).collect::<Vec<_>>();
                let input = self.convert(&a.input)?;
                check_sketch_input(&aggs, &input, a.input.schema())?;
                LogicalPlan::Aggregate { group, aggs, input, schema: a.schema.clone() }
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
                    LogicalPlan::TimeWindows { column, size, slide, domain, input, .. } => {
                        LogicalPlan::TimeWindows {
                            column: *column,
                            size: *size,
                            slide: *slide,
                            domain: *domain,
                            input: input.clone(),
                            schema,
                        }
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
                with_ties: false,
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
                    LogicalPlan::TopK { order, skip: 0, fetch: None, input, .. } => {
                        LogicalPlan::TopK {
                            order: order.clone(),
                            skip,
                            fetch,
                            with_ties: false,
                            input: input.clone(),
                        }
                    }
                    _ => LogicalPlan::TopK {
                        order: vec![],
                        skip,
                        fetch,
                        with_ties: false,
                        input: self.convert(&limit.input)?,
                    },
                }
            }
            DfPlan::Window(w) => return self.window(w),
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
                    let sq_fields = subquery.subquery.schema().fields().clone();
                    if sq_fields.iter().any(|f| is_probe_column(f.name())) {
                        let span =
                            sq_fields.iter().find_map(|f| probe_of(f.name(), self.probes)?.span);
                        err = Some(WeirError::plan_at(
                            "MIGHT_CONTAIN is a filter: it is usable in WHERE (alone, under NOT, \
                             or inside a larger condition), not in a SELECT list or elsewhere",
                            span,
                        ));
                        return Ok(datafusion_common::tree_node::Transformed::no(
                            Expr::ScalarSubquery(subquery),
                        ));
                    }
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

    /// `s JOIN t FOR SYSTEM_TIME AS OF s.ts ON ...` (or LEFT JOIN): a
    /// [`JoinKind::Temporal`] join of the stream on the left, read whole, whose `AS OF` column
    /// is its event-time column, with the versioned relation on the right.
    fn temporal_join(
        &self,
        j: &datafusion_expr::logical_plan::Join,
        w: &WindowAst,
    ) -> Result<Arc<LogicalPlan>> {
        let WindowKind::AsOf { qualifier, column, at } = &w.kind else {
            return Err(WeirError::internal("a versioned side without FOR SYSTEM_TIME"));
        };
        let outer = match j.join_type {
            JoinType::Inner => false,
            JoinType::Left => true,
            other => {
                return Err(WeirError::plan_at(
                    format!(
                        "FOR SYSTEM_TIME AS OF: a temporal join is a JOIN or a LEFT JOIN, not a \
                         {} JOIN",
                        other.to_string().to_ascii_uppercase()
                    ),
                    w.span,
                ))
            }
        };
        let left = self.convert(&j.left)?;
        let right = self.convert(&j.right)?;
        let named = match qualifier {
            Some(q) => format!("{q}.{column}"),
            None => column.clone(),
        };
        let col = datafusion_common::Column::new(qualifier.clone(), column.clone());
        if left.schema().index_of_column(&col).is_err() {
            return Err(WeirError::plan_at(
                format!(
                    "FOR SYSTEM_TIME AS OF {named}: not a column of the stream on the left of the \
                     JOIN"
                ),
                *at,
            ));
        }
        if !ordered_by_event_time(&left, &Expr::Column(col.clone()))
            && matches!(strip_renames(&left), LogicalPlan::Join { .. })
        {
            return Err(WeirError::plan_at(
                format!(
                    "FOR SYSTEM_TIME AS OF {named}: the left of this JOIN is another join, not a \
                     stream read whole; join the stream with the versioned side first: FROM \
                     <stream>{q} JOIN {v} FOR SYSTEM_TIME AS OF {named} ON ... JOIN ...",
                    q = qualifier.as_deref().map(|q| format!(" AS {q}")).unwrap_or_default(),
                    v = w.stream,
                ),
                *at,
            ));
        }
        if !ordered_by_event_time(&left, &Expr::Column(col)) {
            return Err(WeirError::plan_at(
                format!(
                    "FOR SYSTEM_TIME AS OF {named}: expected the event-time column (WATERMARK \
                     FOR) of a stream read whole on the left of the JOIN, or that column as a \
                     view passes it on (the ISTREAM of the stream filtered and projected)"
                ),
                *at,
            ));
        }
        self.temporal.borrow_mut().push(w.synthetic.clone());
        Ok(Arc::new(LogicalPlan::Join {
            kind: JoinKind::Temporal { outer },
            left,
            right,
            on: j.on.clone(),
            filter: j.filter.clone(),
            nulls_equal: false,
            schema: j.schema.clone(),
            held: [None, None],
        }))
    }

    /// The join DataFusion made of a rewritten `MIGHT_CONTAIN` (its right side outputs a
    /// probe column), as a [`JoinKind::MightContain`]; `None` for any other join. Its input must
    /// be append-only: each row is looked up once, as it arrives.
    fn might_contain(
        &self,
        j: &datafusion_expr::logical_plan::Join,
    ) -> Result<Option<Arc<LogicalPlan>>> {
        let right_fields = j.right.schema().fields();
        let Some(probe) = right_fields.iter().find_map(|f| probe_of(f.name(), self.probes)) else {
            return Ok(None);
        };
        let test = match j.join_type {
            JoinType::LeftSemi => Membership::Semi,
            JoinType::LeftAnti => Membership::Anti,
            JoinType::LeftMark => Membership::Mark,
            other => {
                return Err(WeirError::internal(format!("MIGHT_CONTAIN planned as a {other} join")))
            }
        };
        if j.on.len() != 1 || j.filter.is_some() || right_fields.len() != 1 {
            return Err(WeirError::plan_at(
                "MIGHT_CONTAIN's subquery reads columns of the enclosing query: its filter is \
                 built once, from the whole subquery, and cannot depend on the row looked up",
                probe.span,
            ));
        }
        let left = self.convert(&j.left)?;
        if !left.is_monotonic() {
            return Err(WeirError::plan_at(
                "MIGHT_CONTAIN looks each row up once, as it arrives, so its input must be \
                 append-only (a stream, or filters, projections and joins of streams); here rows \
                 of the input can leave (a table, a window or an aggregate): for an exact test \
                 that follows the relation, write value IN (SELECT column FROM ...)",
                probe.span,
            ));
        }
        Ok(Some(Arc::new(LogicalPlan::Join {
            kind: JoinKind::MightContain { test, capacity: probe.capacity, error: probe.error },
            left,
            right: self.convert(&j.right)?,
            on: j.on.clone(),
            filter: None,
            nulls_equal: false,
            schema: j.schema.clone(),
            held: [None, None],
        })))
    }

    /// Every `FOR SYSTEM_TIME AS OF` became the right side of a temporal join.
    pub fn check_versioned(&self) -> Result<()> {
        let used = self.temporal.borrow();
        for w in self.windows {
            if matches!(w.kind, WindowKind::AsOf { .. }) && !used.contains(&w.synthetic) {
                return Err(WeirError::plan_at(
                    format!(
                        "FOR SYSTEM_TIME AS OF applies to the right side of a JOIN with a stream: \
                         write FROM s JOIN {} FOR SYSTEM_TIME AS OF s.ts ON ...",
                        w.stream
                    ),
                    w.span,
                ));
            }
        }
        Ok(())
    }

    /// The versioned relation of `t FOR SYSTEM_TIME AS OF ...`: a table or a relation view as
    /// it is at each instant, a stream with a primary key as its latest element per key
    /// ([`changelog_relation`]).
    fn versioned_relation(&self, w: &WindowAst, schema: Arc<DFSchema>) -> Result<Arc<LogicalPlan>> {
        let source = self.source(&w.stream)?;
        match self.catalog.lookup(&w.stream) {
            Some(CatalogEntry::Table(_)) => {
                Ok(Arc::new(LogicalPlan::Rename { input: source, schema }))
            }
            Some(CatalogEntry::View(v)) if v.kind() == PlanKind::Relation => {
                Ok(Arc::new(LogicalPlan::Rename { input: source, schema }))
            }
            Some(CatalogEntry::Stream(s)) if !s.primary_key.is_empty() => {
                changelog_relation(&s, source, schema)
            }
            _ => Err(WeirError::internal("a versioned side that check_windows let through")),
        }
    }

    /// A leaf: windowed stream, bare stream (UNBOUNDED; a stream with a primary key: its latest
    /// element per key), table or view.
    fn scan(&self, name: &str, schema: Arc<DFSchema>) -> Result<Arc<LogicalPlan>> {
        if let Some(w) = self.windows.iter().find(|w| w.synthetic == name) {
            if matches!(w.kind, WindowKind::AsOf { .. }) {
                return self.versioned_relation(w, schema);
            }
            let source = self.source(&w.stream)?;
            if source.kind() == PlanKind::Relation {
                // TUMBLE/HOP over a table or a relation view (`check_windows`).
                return self.relation_windows(w, source, schema);
            }
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
        if let Some(CatalogEntry::Stream(s)) = self.catalog.lookup(name) {
            if !s.primary_key.is_empty() {
                return changelog_relation(&s, source, schema);
            }
        }
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

    /// `TUMBLE`/`HOP` over a relation: a [`LogicalPlan::TimeWindows`] mapping each row to
    /// its windows by the time in the DESCRIPTOR column (integer ticks, or a TIMESTAMP with
    /// durations that have a unit). Not event time: no watermark, no window closes.
    fn relation_windows(
        &self,
        w: &WindowAst,
        source: Arc<LogicalPlan>,
        schema: Arc<DFSchema>,
    ) -> Result<Arc<LogicalPlan>> {
        if w.offset.is_some() {
            return Err(WeirError::plan_at(
                format!(
                    "a window offset applies to windows over streams: '{}' is a relation",
                    w.stream
                ),
                w.span,
            ));
        }
        let (column, size, slide) = match &w.kind {
            WindowKind::Tumble { column, size } => (column, *size, *size),
            WindowKind::Hop { column, slide, size } => (column, *size, *slide),
            _ => {
                return Err(WeirError::internal("a window over a relation that is not TUMBLE/HOP"))
            }
        };
        let in_schema = source.schema();
        let idx = in_schema.fields().iter().position(|f| f.name() == column).ok_or_else(|| {
            WeirError::plan_at(
                format!("unknown column '{column}' in DESCRIPTOR of '{}'", w.stream),
                w.span,
            )
        })?;
        let domain = match in_schema.field(idx).data_type() {
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, _) => TimeDomain::Micros,
            t if t.is_integer() => TimeDomain::Ticks,
            other => {
                return Err(WeirError::plan_at(
                    format!(
                        "TUMBLE and HOP need a time column of an integer or TIMESTAMP type: \
                         '{column}' of '{}' is {}",
                        w.stream,
                        crate::types::sql_type_name(other)
                    ),
                    w.span,
                ))
            }
        };
        let ticks = |d: Duration| -> Result<i64> {
            let v = match (d, domain) {
                (Duration::Ticks(t), TimeDomain::Ticks)
                | (Duration::Micros(t), TimeDomain::Micros) => t,
                (Duration::Ticks(t), TimeDomain::Micros) => {
                    return Err(WeirError::plan_at(
                        format!(
                            "'{column}' of '{}' is a TIMESTAMP: give the duration a unit \
                             (e.g. {t} SECONDS)",
                            w.stream
                        ),
                        w.span,
                    ))
                }
                (Duration::Micros(_), TimeDomain::Ticks) => {
                    return Err(WeirError::plan_at(
                        format!(
                            "'{column}' of '{}' is an integer: give the duration as a bare integer",
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
        let (size, slide) = (ticks(size)?, ticks(slide)?);
        check_windows_per_element(w, "HOP", size, slide)?;
        Ok(Arc::new(LogicalPlan::TimeWindows {
            column: idx,
            size,
            slide,
            domain,
            input: source,
            schema,
        }))
    }

    fn window_spec(&self, w: &WindowAst, source: &LogicalPlan) -> Result<WindowSpec> {
        let domain = source.time_domain().unwrap_or(TimeDomain::Ticks);
        // A duration (`what`: "duration" or "offset") in the stream's ticks: a TIMESTAMP stream
        // needs a unit, a tick stream a bare integer.
        let in_domain = |d: Duration, what: &str| -> Result<i64> {
            match (d, domain) {
                (Duration::Ticks(t), TimeDomain::Ticks)
                | (Duration::Micros(t), TimeDomain::Micros) => Ok(t),
                (Duration::Ticks(t), TimeDomain::Micros) => Err(WeirError::plan_at(
                    format!(
                        "'{}' is stamped by a TIMESTAMP column: give the {what} a unit \
                         (e.g. {t} SECONDS)",
                        w.stream
                    ),
                    w.span,
                )),
                (Duration::Micros(_), TimeDomain::Ticks) => Err(WeirError::plan_at(
                    format!(
                        "'{}' is stamped by integer ticks: give the {what} as a bare integer",
                        w.stream
                    ),
                    w.span,
                )),
            }
        };
        let ticks = |d: Duration| -> Result<i64> {
            let v = in_domain(d, "duration")?;
            if v <= 0 {
                return Err(WeirError::plan_at("a window duration must be positive", w.span));
            }
            Ok(v)
        };
        // The offset, in ticks, as a remainder of `modulus` (the slide, or the period of a
        // cumulating window): offsets that differ by it give the same windows.
        let offset = |modulus: i64| -> Result<i64> {
            let Some(o) = w.offset else { return Ok(0) };
            Ok(in_domain(o, "offset")?.rem_euclid(modulus))
        };
        Ok(match &w.kind {
            WindowKind::Unbounded => WindowSpec::Unbounded,
            WindowKind::Now => WindowSpec::Now,
            WindowKind::Range(d) => WindowSpec::Range(ticks(*d)?),
            WindowKind::RangeSlide(r, s) => {
                let slide = ticks(*s)?;
                WindowSpec::RangeSlide { range: ticks(*r)?, slide, offset: offset(slide)? }
            }
            WindowKind::Rows(n) => WindowSpec::Rows(*n),
            WindowKind::Tumble { column, size } => {
                self.check_descriptor(w, source, column)?;
                let size = ticks(*size)?;
                WindowSpec::RangeSlide { range: size, slide: size, offset: offset(size)? }
            }
            WindowKind::Hop { column, slide, size } => {
                self.check_descriptor(w, source, column)?;
                let (range, slide) = (ticks(*size)?, ticks(*slide)?);
                check_windows_per_element(w, "HOP", range, slide)?;
                WindowSpec::RangeSlide { range, slide, offset: offset(slide)? }
            }
            WindowKind::Cumulate { column, step, size } => {
                self.check_descriptor(w, source, column)?;
                let (step_ticks, size_ticks) = (ticks(*step)?, ticks(*size)?);
                if size_ticks % step_ticks != 0 {
                    let d = |t| LogicalPlan::duration_label(t, domain);
                    return Err(WeirError::plan_at(
                        format!(
                            "CUMULATE's size ({}) must be a multiple of its step ({}): each \
                             window is one step longer than the one before",
                            d(size_ticks),
                            d(step_ticks)
                        ),
                        w.span,
                    ));
                }
                check_windows_per_element(w, "CUMULATE", size_ticks, step_ticks)?;
                WindowSpec::Cumulate {
                    step: step_ticks,
                    size: size_ticks,
                    offset: offset(size_ticks)?,
                }
            }
            WindowKind::PartitionRows(cols, n) => {
                WindowSpec::PartitionRows { by: partition_indices(w, source, cols)?, rows: *n }
            }
            WindowKind::Session { column, gap, by } => {
                if let Some(column) = column {
                    self.check_descriptor(w, source, column)?;
                }
                WindowSpec::Session { gap: ticks(*gap)?, by: partition_indices(w, source, by)? }
            }
            WindowKind::AsOf { .. } => {
                return Err(WeirError::internal("FOR SYSTEM_TIME AS OF planned as a window"))
            }
            WindowKind::Deduplicate { by, capacity, error } => {
                let p = match error {
                    Some(p) => p.parse::<f64>().ok(),
                    None => Some(weir_plan::DEFAULT_DEDUP_ERROR),
                };
                let error = p.filter(|p| *p > 0.0 && *p < 1.0).and_then(weir_plan::Fraction::new);
                let error = error.ok_or_else(|| {
                    WeirError::plan_at("a DEDUPLICATE window's ERROR must lie in (0, 1)", w.span)
                })?;
                WindowSpec::Deduplicate {
                    by: column_indices(w, source, by, "DEDUPLICATE BY")?,
                    capacity: capacity.unwrap_or(weir_plan::DEFAULT_DEDUP_CAPACITY),
                    error,
                }
            }
            WindowKind::Sample { rows, seed, over } => {
                let over = match over {
                    None => None,
                    Some((r, s)) => {
                        let slide = ticks(*s)?;
                        Some(SampleOver { range: ticks(*r)?, slide, offset: offset(slide)? })
                    }
                };
                WindowSpec::Sample { rows: *rows, seed: seed.unwrap_or(0), over }
            }
        })
    }
}

/// The input positions of a window's PARTITION BY columns.
fn partition_indices(
    w: &WindowAst,
    source: &LogicalPlan,
    cols: &[(String, Option<weir_common::Span>)],
) -> Result<Vec<usize>> {
    column_indices(w, source, cols, "PARTITION BY")
}

/// The input positions of the columns a window's `clause` names.
fn column_indices(
    w: &WindowAst,
    source: &LogicalPlan,
    cols: &[(String, Option<weir_common::Span>)],
    clause: &str,
) -> Result<Vec<usize>> {
    let schema = source.schema();
    let mut by = Vec::new();
    for (c, span) in cols {
        let idx = schema.fields().iter().position(|f| f.name() == c).ok_or_else(|| {
            WeirError::plan_at(format!("unknown column '{c}' in {clause} of '{}'", w.stream), *span)
        })?;
        by.push(idx);
    }
    Ok(by)
}

/// Whether `e` (maybe aliased) is ROW_NUMBER, RANK or DENSE_RANK over a window.
fn is_rank(e: &Expr) -> bool {
    let e = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    matches!(e, Expr::WindowFunction(wf)
    if matches!(wf.fun, datafusion_expr::WindowFunctionDefinition::WindowUDF(_))
        && matches!(
            wf.fun.name().to_ascii_uppercase().as_str(),
            "ROW_NUMBER" | "RANK" | "DENSE_RANK"
        ))
}

impl Converter<'_> {
    /// `f() OVER (...)`: Flink's OVER aggregation on a stream becomes a
    /// [`LogicalPlan::OverAggregate`], the ranking functions a [`LogicalPlan::Ranking`], the
    /// other functions over a relation a [`LogicalPlan::OverRelation`]; any other window
    /// function is refused by name and shape.
    fn window(&self, w: &datafusion_expr::logical_plan::Window) -> Result<Arc<LogicalPlan>> {
        let input = self.convert(&w.input)?;
        if on_stream(w, &input) {
            return over_aggregate(w, input);
        }
        if !w.window_expr.iter().any(is_rank) {
            return over_relation(w, input);
        }
        if !w.window_expr.iter().all(is_rank) {
            return self.rank_then_others(w);
        }
        let shape = match input.kind() {
            PlanKind::Stream => "a stream",
            PlanKind::Relation => "a relation",
        };
        let mut spec: Option<(Vec<Expr>, Vec<datafusion_expr::SortExpr>)> = None;
        let mut funcs = Vec::new();
        for e in &w.window_expr {
            let e = match e {
                Expr::Alias(a) => a.expr.as_ref(),
                e => e,
            };
            let Expr::WindowFunction(wf) = e else {
                return Err(WeirError::internal(format!("window expression expected, got {e}")));
            };
            let name = wf.fun.name().to_ascii_uppercase();
            let func = match (&wf.fun, name.as_str()) {
                (datafusion_expr::WindowFunctionDefinition::WindowUDF(_), "ROW_NUMBER") => {
                    RankFunc::RowNumber
                }
                (datafusion_expr::WindowFunctionDefinition::WindowUDF(_), "RANK") => RankFunc::Rank,
                (datafusion_expr::WindowFunctionDefinition::WindowUDF(_), "DENSE_RANK") => {
                    RankFunc::DenseRank
                }
                _ => {
                    return Err(unsupported(&format!(
                        "window function {name} together with ROW_NUMBER, RANK or DENSE_RANK \
                         over {shape} in the same window"
                    )))
                }
            };
            let p = &wf.params;
            if p.filter.is_some() {
                return Err(unsupported(&format!("FILTER on window function {name}")));
            }
            if p.distinct {
                return Err(unsupported(&format!("DISTINCT in window function {name}")));
            }
            if !p.args.is_empty() {
                return Err(WeirError::plan(format!("{name}() takes no arguments")));
            }
            let this = (p.partition_by.clone(), p.order_by.clone());
            match &spec {
                None => spec = Some(this),
                Some(s) if *s == this => {}
                Some(_) => {
                    return Err(unsupported(
                        "window functions with different PARTITION BY or ORDER BY over the \
                         same sort order",
                    ))
                }
            }
            funcs.push(func);
        }
        let (partition_by, order_by) =
            spec.ok_or_else(|| WeirError::internal("a window node without functions"))?;
        Ok(Arc::new(LogicalPlan::Ranking {
            partition_by,
            order_by,
            funcs,
            mode: RankMode::Full,
            input,
            schema: w.schema.clone(),
        }))
    }

    /// Ranking functions and other window functions over one window (`ROW_NUMBER() OVER w,
    /// LAG(v) OVER w`): the ranking first, the other functions over its output, then the
    /// columns in the query's order. The other functions read only the input's columns, so
    /// the rank columns beside them change no value; they order copies of one row, which the
    /// ranking numbers in the order it breaks ties in, so each copy's value follows its rank
    /// (Weir breaks ties by the whole row).
    fn rank_then_others(
        &self,
        w: &datafusion_expr::logical_plan::Window,
    ) -> Result<Arc<LogicalPlan>> {
        use datafusion_expr::logical_plan::{Projection, Window};
        let (ranks, others): (Vec<Expr>, Vec<Expr>) =
            w.window_expr.iter().cloned().partition(is_rank);
        let ranked = Window::try_new(ranks, w.input.clone()).map_err(df_error)?;
        let rest = Window::try_new(others, Arc::new(DfPlan::Window(ranked))).map_err(df_error)?;
        let columns = w.schema.columns().into_iter().map(Expr::Column).collect();
        let ordered =
            Projection::try_new(columns, Arc::new(DfPlan::Window(rest))).map_err(df_error)?;
        self.convert(&DfPlan::Projection(ordered))
    }

    /// TUMBLE/HOP/SESSION's DESCRIPTOR names the stream's event-time column: windows run on event time.
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
            _ => {
                let function = match w.kind {
                    WindowKind::Session { .. } => "SESSION applies",
                    WindowKind::Cumulate { .. } => "CUMULATE applies",
                    _ => "TUMBLE and HOP apply",
                };
                Err(WeirError::plan_at(
                    format!("{function} to base streams; '{}' is a view", w.stream),
                    w.span,
                ))
            }
        }
    }
}

/// `HOP` and `CUMULATE` repeat each element (or row) once per window it is in (size / slide,
/// size / step): at most [`MAX_WINDOWS_PER_ELEMENT`].
fn check_windows_per_element(w: &WindowAst, function: &str, size: i64, slide: i64) -> Result<()> {
    let windows = (size as i128 + slide as i128 - 1) / slide as i128;
    if windows > MAX_WINDOWS_PER_ELEMENT {
        let slide_name = if function == "CUMULATE" { "step" } else { "slide" };
        return Err(WeirError::plan_at(
            format!(
                "{function} puts each element in {windows} windows (size / {slide_name}); at \
                 most {MAX_WINDOWS_PER_ELEMENT} are allowed: choose a larger {slide_name}"
            ),
            w.span,
        ));
    }
    Ok(())
}

/// The schema a windowed stream shows the query: the stream's columns, plus `window_start`
/// and `window_end` for the window table functions.
pub(super) fn window_schema(catalog: &dyn Catalog, w: &WindowAst) -> Option<SchemaRef> {
    let entry = catalog.lookup(&w.stream)?;
    let schema = entry.schema();
    if !w.kind.has_bounds_columns() {
        return Some(schema);
    }
    let ty = match &entry {
        CatalogEntry::Stream(s) if s.domain == TimeDomain::Micros => {
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None)
        }
        CatalogEntry::Stream(_) => DataType::Int64,
        // Over a relation the bounds have the type of the DESCRIPTOR column's times.
        _ => {
            let column = match &w.kind {
                WindowKind::Tumble { column, .. } | WindowKind::Hop { column, .. } => column,
                _ => return Some(schema),
            };
            match schema.field_with_name(column).map(|f| f.data_type()) {
                Ok(t @ DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, _)) => {
                    t.clone()
                }
                _ => DataType::Int64,
            }
        }
    };
    let mut fields: Vec<arrow::datatypes::FieldRef> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(arrow::datatypes::Field::new("window_start", ty.clone(), true)));
    fields.push(Arc::new(arrow::datatypes::Field::new("window_end", ty, true)));
    Some(Arc::new(arrow::datatypes::Schema::new(fields)))
}

/// Aggregates, `FIRST_VALUE`, `LAST_VALUE` and `LAG` with `OVER` on a stream (Flink's OVER
/// aggregation): over a stream read whole, ordered by its event-time column ascending, with a
/// frame that ends at the current row (LAG has no frame).
fn over_aggregate(
    w: &datafusion_expr::logical_plan::Window,
    input: Arc<LogicalPlan>,
) -> Result<Arc<LogicalPlan>> {
    use datafusion_expr::{WindowFrameBound, WindowFrameUnits};
    let mut spec: Option<(Vec<Expr>, Vec<datafusion_expr::SortExpr>)> = None;
    let mut frame_of_all: Option<OverFrame> = None;
    let mut aggs = Vec::new();
    let domain = input.time_domain().unwrap_or(TimeDomain::Ticks);
    for e in &w.window_expr {
        let e = match e {
            Expr::Alias(a) => a.expr.as_ref(),
            e => e,
        };
        let Expr::WindowFunction(wf) = e else {
            return Err(WeirError::internal(format!("window expression expected, got {e}")));
        };
        let name = wf.fun.name().to_ascii_uppercase();
        let p = &wf.params;
        let [order] = p.order_by.as_slice() else {
            return Err(over_shape(&name, "it needs ORDER BY the stream's event-time column"));
        };
        if !order.asc || !ordered_by_event_time(&input, &order.expr) {
            return Err(over_shape(
                &name,
                "it needs ORDER BY the event-time column (ascending) of a stream read whole, \
                 without a window",
            ));
        }
        if p.filter.is_some() || p.distinct {
            return Err(unsupported(&format!("FILTER or DISTINCT in window function {name}")));
        }
        let call = match (&wf.fun, name.as_str()) {
            (datafusion_expr::WindowFunctionDefinition::AggregateUDF(_), _) => {
                let a = over_agg_call(&name, &p.args)?;
                OverCall { func: OverFunc::Agg(a.func), arg: a.arg, default: None, frame: NO_FRAME }
            }
            (_, "LAG") => {
                let (x, n, d) = match p.args.as_slice() {
                    [x] => (x, 1, None),
                    [x, n] => (x, offset_arg(&name, n)?, None),
                    [x, n, d] => (x, offset_arg(&name, n)?, Some(d.clone())),
                    _ => return Err(WeirError::plan("LAG takes one to three arguments")),
                };
                OverCall {
                    func: OverFunc::Lag(n),
                    arg: Some(x.clone()),
                    default: d,
                    frame: NO_FRAME,
                }
            }
            (_, "FIRST_VALUE" | "LAST_VALUE") => {
                let [x] = p.args.as_slice() else {
                    return Err(WeirError::plan(format!("{name} takes one argument")));
                };
                let func =
                    if name == "FIRST_VALUE" { OverFunc::FirstValue } else { OverFunc::LastValue };
                OverCall { func, arg: Some(x.clone()), default: None, frame: NO_FRAME }
            }
            _ => {
                return Err(over_shape(
                    &name,
                    "it is not an aggregate, LAG, FIRST_VALUE or LAST_VALUE",
                ))
            }
        };
        if !matches!(call.func, OverFunc::Lag(_)) {
            let frame = &p.window_frame;
            if frame.end_bound != WindowFrameBound::CurrentRow {
                return Err(over_shape(&name, "its frame must end at CURRENT ROW"));
            }
            let WindowFrameBound::Preceding(start) = &frame.start_bound else {
                return Err(over_shape(&name, "its frame must start before the current row"));
            };
            let frame = match frame.units {
                WindowFrameUnits::Rows if start.is_null() => OverFrame::Rows(None),
                WindowFrameUnits::Rows => match start.cast_to(&DataType::UInt64) {
                    Ok(datafusion_common::ScalarValue::UInt64(Some(n))) => OverFrame::Rows(Some(n)),
                    _ => return Err(over_shape(&name, "ROWS needs an integer count")),
                },
                WindowFrameUnits::Range if start.is_null() => OverFrame::Range(None),
                WindowFrameUnits::Range => {
                    OverFrame::Range(Some(range_ticks(start, domain, &name)?))
                }
                WindowFrameUnits::Groups => return Err(over_shape(&name, "GROUPS frames")),
            };
            match frame_of_all {
                None => frame_of_all = Some(frame),
                Some(f) if f == frame => {}
                Some(_) => {
                    return Err(unsupported(
                        "aggregates with OVER of different frames, PARTITION BY or ORDER BY in \
                         one window",
                    ))
                }
            }
        }
        let this = (p.partition_by.clone(), p.order_by.clone());
        match &spec {
            None => spec = Some(this),
            Some(s) if *s == this => {}
            Some(_) => {
                return Err(unsupported(
                    "aggregates with OVER of different frames, PARTITION BY or ORDER BY in one \
                     window",
                ))
            }
        }
        aggs.push(call);
    }
    let (partition_by, order_by) =
        spec.ok_or_else(|| WeirError::internal("a window node without functions"))?;
    Ok(Arc::new(LogicalPlan::OverAggregate {
        partition_by,
        order_by,
        // Only LAG: no frame is needed beyond the current row.
        frame: frame_of_all.unwrap_or(OverFrame::Rows(Some(0))),
        aggs,
        input,
        schema: w.schema.clone(),
    }))
}

/// The frame an [`OverCall`] of a [`LogicalPlan::OverAggregate`] carries: the node's own
/// frame applies.
const NO_FRAME: WindowFrame =
    WindowFrame { range: false, start: FrameBound::CurrentRow, end: FrameBound::CurrentRow };

/// Whether `w` has the shape of Flink's OVER aggregation on a stream: aggregates,
/// FIRST_VALUE, LAST_VALUE and LAG, ORDER BY the event-time column (ascending) of a stream read
/// whole, one frame (LAG aside) from some rows or a range before the row to the row itself.
/// Such a window is evaluated on the stream (each row once, its values final, bounded state);
/// any other is evaluated on the relation.
fn on_stream(w: &datafusion_expr::logical_plan::Window, input: &Arc<LogicalPlan>) -> bool {
    use datafusion_expr::{WindowFrameBound, WindowFrameUnits};
    let mut first: Option<&datafusion_expr::WindowFrame> = None;
    w.window_expr.iter().all(|e| {
        let e = match e {
            Expr::Alias(a) => a.expr.as_ref(),
            e => e,
        };
        let Expr::WindowFunction(wf) = e else { return false };
        let p = &wf.params;
        let name = wf.fun.name().to_ascii_uppercase();
        let is_agg = matches!(wf.fun, datafusion_expr::WindowFunctionDefinition::AggregateUDF(_));
        let ordered =
            matches!(p.order_by.as_slice(), [o] if o.asc && ordered_by_event_time(input, &o.expr));
        if !is_agg && name == "LAG" {
            return ordered;
        }
        if !is_agg && name != "FIRST_VALUE" && name != "LAST_VALUE" {
            return false;
        }
        let frame = &p.window_frame;
        let same = *first.get_or_insert(frame) == frame;
        same && ordered
            && frame.end_bound == WindowFrameBound::CurrentRow
            && matches!(frame.start_bound, WindowFrameBound::Preceding(_))
            && frame.units != WindowFrameUnits::Groups
    })
}

/// Window functions over a relation (`LAG`, `LEAD`, `FIRST_VALUE`, `LAST_VALUE`, aggregates
/// with any ROWS or RANGE frame): a [`LogicalPlan::OverRelation`].
fn over_relation(
    w: &datafusion_expr::logical_plan::Window,
    input: Arc<LogicalPlan>,
) -> Result<Arc<LogicalPlan>> {
    let shape = match input.kind() {
        PlanKind::Stream => "a stream",
        PlanKind::Relation => "a relation",
    };
    let in_schema = input.schema();
    let mut spec: Option<(Vec<Expr>, Vec<datafusion_expr::SortExpr>)> = None;
    let mut calls = Vec::new();
    for e in &w.window_expr {
        let e = match e {
            Expr::Alias(a) => a.expr.as_ref(),
            e => e,
        };
        let Expr::WindowFunction(wf) = e else {
            return Err(WeirError::internal(format!("window expression expected, got {e}")));
        };
        let name = wf.fun.name().to_ascii_uppercase();
        let p = &wf.params;
        if p.filter.is_some() || p.distinct {
            return Err(unsupported(&format!("FILTER or DISTINCT in window function {name}")));
        }
        let refuse = || {
            WeirError::plan(format!(
                "window function {name} over {shape} is not supported yet (ROW_NUMBER, RANK, \
                 DENSE_RANK, LAG, LEAD, FIRST_VALUE, LAST_VALUE and COUNT, SUM, AVG, MIN, MAX \
                 are)"
            ))
        };
        let (func, arg, default) = match &wf.fun {
            datafusion_expr::WindowFunctionDefinition::AggregateUDF(_) => {
                let a = over_agg_call(&name, &p.args)?;
                (OverFunc::Agg(a.func), a.arg, None)
            }
            datafusion_expr::WindowFunctionDefinition::WindowUDF(_) => match name.as_str() {
                "LAG" | "LEAD" => {
                    let (x, n, d) = match p.args.as_slice() {
                        [x] => (x, 1, None),
                        [x, n] => (x, offset_arg(&name, n)?, None),
                        [x, n, d] => (x, offset_arg(&name, n)?, Some(d.clone())),
                        _ => {
                            return Err(WeirError::plan(format!(
                                "{name} takes one to three arguments: {name}(x [, offset [, \
                                 default]])"
                            )))
                        }
                    };
                    let f = if name == "LAG" { OverFunc::Lag(n) } else { OverFunc::Lead(n) };
                    (f, Some(x.clone()), d)
                }
                "FIRST_VALUE" | "LAST_VALUE" => {
                    let [x] = p.args.as_slice() else {
                        return Err(WeirError::plan(format!("{name} takes one argument")));
                    };
                    let f = if name == "FIRST_VALUE" {
                        OverFunc::FirstValue
                    } else {
                        OverFunc::LastValue
                    };
                    (f, Some(x.clone()), None)
                }
                "ROW_NUMBER" | "RANK" | "DENSE_RANK" => {
                    return Err(unsupported(&format!(
                        "window function {name} together with other window functions over the \
                         same window"
                    )))
                }
                _ => return Err(refuse()),
            },
        };
        let order_ty = match p.order_by.as_slice() {
            [o] => o.expr.get_type(in_schema.as_ref()).ok(),
            _ => None,
        };
        let frame = relation_frame(&name, &p.window_frame, order_ty.as_ref())?;
        let this = (p.partition_by.clone(), p.order_by.clone());
        match &spec {
            None => spec = Some(this),
            Some(s) if *s == this => {}
            Some(_) => {
                return Err(unsupported(
                    "window functions with different PARTITION BY or ORDER BY over the same sort \
                     order",
                ))
            }
        }
        calls.push(OverCall { func, arg, default, frame });
    }
    let (partition_by, order_by) =
        spec.ok_or_else(|| WeirError::internal("a window node without functions"))?;
    Ok(Arc::new(LogicalPlan::OverRelation {
        partition_by,
        order_by,
        calls,
        input,
        schema: w.schema.clone(),
    }))
}

/// LAG/LEAD's offset: a non-negative integer constant.
fn offset_arg(name: &str, e: &Expr) -> Result<u64> {
    let bad =
        || WeirError::plan(format!("{name}'s offset must be a non-negative integer constant"));
    let Expr::Literal(v, _) = e else { return Err(bad()) };
    match v.cast_to(&DataType::Int64) {
        Ok(datafusion_common::ScalarValue::Int64(Some(n))) if n >= 0 => Ok(n as u64),
        _ => Err(bad()),
    }
}

/// A frame of a window function over a relation, RANGE offsets in the ORDER BY's units (an
/// integer's, or microseconds for a TIMESTAMP, from an INTERVAL).
fn relation_frame(
    name: &str,
    f: &datafusion_expr::WindowFrame,
    order_ty: Option<&DataType>,
) -> Result<WindowFrame> {
    use datafusion_expr::{WindowFrameBound as B, WindowFrameUnits as U};
    let range = match f.units {
        U::Rows => false,
        U::Range => true,
        U::Groups => {
            return Err(WeirError::plan(format!(
                "window function {name}: GROUPS frames are not supported yet (ROWS and RANGE are)"
            )))
        }
    };
    let offset = |v: &datafusion_common::ScalarValue| -> Result<i64> {
        if !range {
            return match v.cast_to(&DataType::Int64) {
                Ok(datafusion_common::ScalarValue::Int64(Some(n))) if n >= 0 => Ok(n),
                _ => Err(WeirError::plan(format!(
                    "window function {name}: a ROWS offset must be a non-negative integer"
                ))),
            };
        }
        let domain = match order_ty {
            Some(DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, _)) => {
                TimeDomain::Micros
            }
            Some(t) if t.is_integer() => TimeDomain::Ticks,
            _ => {
                return Err(WeirError::plan(format!(
                    "window function {name}: a RANGE frame with an offset needs one ORDER BY \
                     term of an integer or TIMESTAMP type"
                )))
            }
        };
        range_ticks(v, domain, name)
    };
    let bound = |b: &B| -> Result<FrameBound> {
        Ok(match b {
            B::Preceding(v) if v.is_null() => FrameBound::UnboundedPreceding,
            B::Preceding(v) => FrameBound::Preceding(offset(v)?),
            B::CurrentRow => FrameBound::CurrentRow,
            B::Following(v) if v.is_null() => FrameBound::UnboundedFollowing,
            B::Following(v) => FrameBound::Following(offset(v)?),
        })
    };
    Ok(WindowFrame { range, start: bound(&f.start_bound)?, end: bound(&f.end_bound)? })
}

fn frame_error(name: &str, why: &str) -> WeirError {
    WeirError::plan(format!("window function {name}: {why}"))
}

fn over_shape(name: &str, why: &str) -> WeirError {
    WeirError::plan(format!(
        "window function {name} over a relation is not supported yet: aggregates with OVER are \
         evaluated on a stream, and {why}"
    ))
}

/// A RANGE frame's offset in the stream's ticks (microseconds for a TIMESTAMP stream).
fn range_ticks(v: &datafusion_common::ScalarValue, domain: TimeDomain, name: &str) -> Result<i64> {
    use datafusion_common::ScalarValue as V;
    let micros = match v {
        V::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            Some(i64::from(i.days) * 86_400_000_000 + i.nanoseconds / 1000)
        }
        V::IntervalDayTime(Some(i)) => {
            Some(i64::from(i.days) * 86_400_000_000 + i64::from(i.milliseconds) * 1000)
        }
        V::DurationMicrosecond(Some(d)) => Some(*d),
        _ => None,
    };
    let ticks = match (domain, micros) {
        (TimeDomain::Micros, Some(m)) => m,
        (TimeDomain::Ticks, None) => match v.cast_to(&DataType::Int64) {
            Ok(V::Int64(Some(n))) => n,
            _ => return Err(frame_error(name, "RANGE needs an integer offset over integer ticks")),
        },
        (TimeDomain::Micros, None) => {
            return Err(frame_error(name, "RANGE over a TIMESTAMP needs an INTERVAL offset"))
        }
        (TimeDomain::Ticks, Some(_)) => {
            return Err(frame_error(name, "RANGE over integer ticks needs an integer offset"))
        }
    };
    if ticks < 0 {
        return Err(WeirError::plan(format!("{name}: a RANGE offset must not be negative")));
    }
    Ok(ticks)
}

/// The aggregate of an `agg(x) OVER (...)`.
fn over_agg_call(name: &str, args: &[Expr]) -> Result<AggCall> {
    let arg = match args {
        [] => None,
        [a] => Some(a.clone()),
        _ => return Err(unsupported(&format!("aggregate {name} with several arguments"))),
    };
    let func = match name {
        "COUNT" => match &arg {
            None => AggFunc::CountStar,
            Some(Expr::Literal(v, _)) if !v.is_null() => AggFunc::CountStar,
            #[allow(deprecated)]
            Some(Expr::Wildcard { .. }) => AggFunc::CountStar,
            Some(_) => AggFunc::Count,
        },
        "SUM" => AggFunc::Sum,
        "AVG" | "MEAN" => AggFunc::Avg,
        "MIN" => AggFunc::Min,
        "MAX" => AggFunc::Max,
        other => return Err(unsupported(&format!("aggregate function {other} with OVER"))),
    };
    let arg = if func == AggFunc::CountStar { None } else { arg };
    if func != AggFunc::CountStar && arg.is_none() {
        return Err(WeirError::plan(format!("{name} needs an argument")));
    }
    Ok(AggCall::new(func, arg, false))
}

/// Bounds `lo ..= hi` that `predicate`'s conjuncts put on column `col` of its input, if they
/// bound it from above: `c <= n`, `c < n`, `c = n`, `c >= n`, `c > n`, `c BETWEEN a AND b`,
/// either side of the comparison; with the conjuncts that are not such bounds (None: none).
fn rank_bounds(
    predicate: &Expr,
    col: &datafusion_common::Column,
) -> Option<((i64, i64), Option<Expr>)> {
    use datafusion_expr::Operator as Op;
    let lit = |e: &Expr| -> Option<i64> {
        let Expr::Literal(v, _) = e else { return None };
        match v.cast_to(&DataType::Int64).ok()? {
            datafusion_common::ScalarValue::Int64(Some(n)) => Some(n),
            _ => None,
        }
    };
    let is_col = |e: &Expr| matches!(e, Expr::Column(c) if c == col);
    let (mut lo, mut hi) = (i64::MIN, None::<i64>);
    let mut rest = Vec::new();
    for c in datafusion_expr::utils::split_conjunction(predicate) {
        let bound = match c {
            Expr::BinaryExpr(b) => {
                let (op, n) = if is_col(&b.left) {
                    (Some(b.op), lit(&b.right))
                } else if is_col(&b.right) {
                    (b.op.swap(), lit(&b.left))
                } else {
                    (None, None)
                };
                // (lower, upper if any) of the conjunct.
                match (op, n) {
                    (Some(Op::LtEq), Some(n)) => Some((i64::MIN, Some(n))),
                    (Some(Op::Lt), Some(n)) => Some((i64::MIN, Some(n.saturating_sub(1)))),
                    (Some(Op::Eq), Some(n)) => Some((n, Some(n))),
                    (Some(Op::GtEq), Some(n)) => Some((n, None)),
                    (Some(Op::Gt), Some(n)) => Some((n.saturating_add(1), None)),
                    _ => None,
                }
            }
            Expr::Between(b) if !b.negated && is_col(&b.expr) => {
                match (lit(&b.low), lit(&b.high)) {
                    (Some(l), Some(h)) => Some((l, Some(h))),
                    _ => None,
                }
            }
            _ => None,
        };
        match bound {
            Some((l, h)) => {
                lo = lo.max(l);
                hi = match (hi, h) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            None => rest.push(c.clone()),
        }
    }
    hi.map(|h| ((lo.max(1), h), datafusion_expr::utils::conjunction(rest)))
}

/// A filter over a full ranking (seen through renames, filters and projections of columns)
/// whose predicate bounds a rank from above: the same plan with the ranking in top-N mode,
/// or, for `ROW_NUMBER() ... = 1` (or `<= 1`) ordered by the event time of an append-only
/// stream, in deduplication mode; with what is left of the predicate. The ranking then outputs
/// exactly the rows whose rank is in the bounds (a top-N keeps the ranks in `lo ..= hi`, a
/// deduplication the rows numbered 1), so the conjuncts that made the bounds are dropped.
fn fold_rank_filter(
    predicate: &Expr,
    input: &Arc<LogicalPlan>,
) -> Result<Option<(Arc<LogicalPlan>, Option<Expr>)>> {
    let schema = input.schema();
    let mut cols = Vec::new();
    predicate
        .apply(|e| {
            if let Expr::Column(c) = e {
                if !cols.contains(c) {
                    cols.push(c.clone());
                }
            }
            Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
        })
        .map_err(super::df_error)?;
    for c in cols {
        let Some(((lo, hi), rest)) = rank_bounds(predicate, &c) else { continue };
        let Ok(idx) = schema.index_of_column(&c) else { continue };
        if let Some(p) = with_rank_bound(input, idx, lo, hi) {
            return Ok(Some((p, rest)));
        }
    }
    Ok(None)
}

/// `plan` with the full ranking that computes its column `col` put in top-N (or dedup) mode
/// for `lo ..= hi`; `None` if `col` is not a rank of such a ranking.
fn with_rank_bound(
    plan: &Arc<LogicalPlan>,
    col: usize,
    lo: i64,
    hi: i64,
) -> Option<Arc<LogicalPlan>> {
    let rebuilt = match plan.as_ref() {
        LogicalPlan::Ranking {
            partition_by,
            order_by,
            funcs,
            mode: RankMode::Full,
            input,
            schema,
        } => {
            let func = col.checked_sub(input.schema().fields().len())?;
            let f = *funcs.get(func)?;
            let dedup = f == RankFunc::RowNumber && funcs.len() == 1 && lo <= 1 && hi == 1;
            let mode = match order_by.as_slice() {
                [o] if dedup && ordered_by_event_time(input, &o.expr) => {
                    if o.asc {
                        RankMode::KeepFirst
                    } else {
                        RankMode::KeepLast
                    }
                }
                _ => RankMode::Top { func, lo, hi },
            };
            LogicalPlan::Ranking {
                partition_by: partition_by.clone(),
                order_by: order_by.clone(),
                funcs: funcs.clone(),
                mode,
                input: input.clone(),
                schema: schema.clone(),
            }
        }
        LogicalPlan::Rename { input, schema } => LogicalPlan::Rename {
            input: with_rank_bound(input, col, lo, hi)?,
            schema: schema.clone(),
        },
        LogicalPlan::Filter { predicate, input } => LogicalPlan::Filter {
            predicate: predicate.clone(),
            input: with_rank_bound(input, col, lo, hi)?,
        },
        LogicalPlan::Project { exprs, input, schema } => {
            let idx = column_index(exprs.get(col)?, input)?;
            LogicalPlan::Project {
                exprs: exprs.clone(),
                input: with_rank_bound(input, idx, lo, hi)?,
                schema: schema.clone(),
            }
        }
        _ => return None,
    };
    Some(Arc::new(rebuilt))
}

/// The input position of a projection's plain column reference.
fn column_index(e: &Expr, input: &LogicalPlan) -> Option<usize> {
    let e = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        e => e,
    };
    match e {
        Expr::Column(c) => input.schema().index_of_column(c).ok(),
        _ => None,
    }
}

/// Whether `e` is the event-time column of a base stream seen whole (`[UNBOUNDED]`, through
/// filters, renames and projections), so that the rows of `plan` only ever arrive, each at
/// the instant this column holds.
fn ordered_by_event_time(plan: &Arc<LogicalPlan>, e: &Expr) -> bool {
    /// Whether column `idx` of a relation is its elements' event time, passed through.
    fn time_col(plan: &LogicalPlan, idx: usize) -> bool {
        match plan {
            LogicalPlan::Window {
                spec: WindowSpec::Unbounded,
                bounds_columns: false,
                input,
                ..
            } => stream_time_col(input, idx),
            LogicalPlan::Rename { input, .. } | LogicalPlan::Filter { input, .. } => {
                time_col(input, idx)
            }
            LogicalPlan::Project { exprs, input, .. } => match exprs.get(idx) {
                Some(e) => column_index(e, input).is_some_and(|i| time_col(input, i)),
                None => false,
            },
            _ => false,
        }
    }
    /// Whether column `idx` of a stream holds each element's timestamp: a base stream's
    /// event-time column, or that column carried through a derived stream (a view) that is the
    /// `ISTREAM` of a base stream read whole, filtered and projected, where each element comes
    /// out at the instant its timestamp names (as Flink keeps a time attribute through
    /// projections and filters).
    fn stream_time_col(plan: &LogicalPlan, idx: usize) -> bool {
        match plan {
            LogicalPlan::StreamScan { time_column, .. } => *time_column == idx,
            LogicalPlan::Rename { input, .. } => stream_time_col(input, idx),
            LogicalPlan::ToStream { op: R2S::Istream, input } => time_col(input, idx),
            _ => false,
        }
    }
    match e {
        Expr::Column(c) => plan.schema().index_of_column(c).is_ok_and(|i| time_col(plan, i)),
        _ => false,
    }
}

/// `plan` seen through projections, filters and renames.
fn strip_renames(plan: &LogicalPlan) -> &LogicalPlan {
    match plan {
        LogicalPlan::Rename { input, .. }
        | LogicalPlan::Project { input, .. }
        | LogicalPlan::Filter { input, .. } => strip_renames(input),
        other => other,
    }
}

fn qualified(name: &str, schema: &SchemaRef) -> Result<Arc<DFSchema>> {
    DFSchema::try_from_qualified_schema(name, schema).map(Arc::new).map_err(df_error)
}

fn is_subquery(e: &Expr) -> bool {
    matches!(e, Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_))
}

/// `AVG` over an integer column, which DataFusion's coercion wraps in a cast to DOUBLE, gets
/// the integer itself: the executor then keeps an exact integer sum, so the average does not
/// depend on the order the values arrive in, nor lose digits past 2^53 (the result is still a
/// DOUBLE). Unsigned 64-bit integers keep the cast (they do not fit the executor's `i64`).
fn exact_avg(mut call: AggCall, input: &DFSchema) -> AggCall {
    if call.func != AggFunc::Avg {
        return call;
    }
    if let Some(Expr::Cast(c)) = &call.arg {
        let integer = matches!(
            c.expr.get_type(input),
            Ok(DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::UInt8
                | DataType::UInt16
                | DataType::UInt32)
        );
        if c.field.data_type() == &DataType::Float64 && integer {
            call.arg = Some(c.expr.as_ref().clone());
        }
    }
    call
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
    let name = af.func.name().to_ascii_lowercase();
    if p.null_treatment.is_some() {
        return Err(unsupported(&format!("IGNORE NULLS or RESPECT NULLS in aggregate {name}")));
    }
    let mut precision = weir_plan::DEFAULT_HLL_PRECISION;
    let mut quantile = None;
    let mut compression = weir_plan::DEFAULT_TDIGEST_COMPRESSION;
    let mut top = None;
    let (arg, separator) = match (name.as_str(), p.args.as_slice()) {
        (_, []) => (None, None),
        ("approx_top_k", [a, k, rest @ ..]) if rest.len() <= 1 => {
            let k = top_k_integer(k, "k", weir_plan::TOP_K_KS)?;
            let capacity = match rest {
                [c] => top_k_integer(c, "capacity", k..=*weir_plan::TOP_K_CAPACITIES.end())?,
                _ => weir_plan::DEFAULT_TOP_K_CAPACITY.max(k),
            };
            top = Some((k, capacity));
            (Some(a.clone()), None)
        }
        ("approx_count_distinct" | "approx_distinct", [a, prec]) => {
            precision = hll_precision(prec)?;
            (Some(a.clone()), None)
        }
        ("approx_percentile" | "approx_quantile", [a, q, rest @ ..]) if rest.len() <= 1 => {
            quantile = Some(percentile_fraction(q)?);
            if let [c] = rest {
                compression = tdigest_compression(c)?;
            }
            (Some(a.clone()), None)
        }
        ("string_agg", [a, sep]) => (Some(a.clone()), string_agg_separator(sep)?),
        (_, [a]) => (Some(a.clone()), None),
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
        "bool_and" => AggFunc::BoolAnd,
        "bool_or" => AggFunc::BoolOr,
        "string_agg" => AggFunc::StringAgg,
        "array_agg" => AggFunc::ArrayAgg,
        "first_value" => AggFunc::FirstValue,
        "last_value" => AggFunc::LastValue,
        "approx_count_distinct" | "approx_distinct" => AggFunc::ApproxCountDistinct { precision },
        "approx_percentile" | "approx_quantile" | "approx_median" => {
            let (p, median) = match quantile {
                Some(p) => (p, false),
                None => (weir_plan::Fraction::new(0.5).ok_or_else(|| unsupported("0.5"))?, true),
            };
            AggFunc::ApproxPercentile { p, compression, median }
        }
        "approx_top_k" => {
            let (k, capacity) =
                top.ok_or_else(|| WeirError::plan("APPROX_TOP_K takes a value and k"))?;
            AggFunc::ApproxTopK { k, capacity }
        }
        other => return Err(unsupported(&format!("aggregate function {other}"))),
    };
    let arg = if func == AggFunc::CountStar { None } else { arg };
    if func != AggFunc::CountStar && arg.is_none() {
        return Err(WeirError::plan(format!("{name} needs an argument")));
    }
    // The order of the values matters to the ordered aggregates only; the others' results do
    // not depend on it.
    let order_by = if func.is_ordered() { p.order_by.clone() } else { vec![] };
    if p.distinct && !order_by.is_empty() {
        // As in PostgreSQL: each distinct value is one element, so it can only be ordered by
        // something it determines.
        if order_by.iter().any(|o| Some(&o.expr) != arg.as_ref()) {
            return Err(WeirError::plan(format!(
                "in {name}(DISTINCT ...), ORDER BY expressions must appear in the argument list"
            )));
        }
    }
    let filter = p.filter.as_deref().cloned();
    Ok(AggCall { func, arg, distinct: p.distinct, filter, order_by, separator })
}

/// `APPROX_COUNT_DISTINCT`'s precision: an integer constant in [`weir_plan::HLL_PRECISIONS`]
/// (the binder checks it first on the syntax tree, where it can point at it).
fn hll_precision(e: &Expr) -> Result<u8> {
    let range = weir_plan::HLL_PRECISIONS;
    let bad = || {
        WeirError::plan(format!(
            "APPROX_COUNT_DISTINCT's precision must be an integer constant from {} to {}, found {e}",
            range.start(),
            range.end()
        ))
    };
    let lit = match e {
        Expr::Cast(c) => c.expr.as_ref(),
        Expr::TryCast(c) => c.expr.as_ref(),
        e => e,
    };
    let Expr::Literal(v, _) = lit else { return Err(bad()) };
    let p = match v {
        ScalarValue::Int64(Some(p)) => *p,
        ScalarValue::Int32(Some(p)) => *p as i64,
        ScalarValue::Int16(Some(p)) => *p as i64,
        ScalarValue::Int8(Some(p)) => *p as i64,
        ScalarValue::UInt64(Some(p)) => i64::try_from(*p).unwrap_or(i64::MAX),
        ScalarValue::UInt32(Some(p)) => *p as i64,
        ScalarValue::UInt16(Some(p)) => *p as i64,
        ScalarValue::UInt8(Some(p)) => *p as i64,
        _ => return Err(bad()),
    };
    u8::try_from(p).ok().filter(|p| range.contains(p)).ok_or_else(bad)
}

/// A numeric constant (under casts), as a DOUBLE.
fn numeric_constant(e: &Expr) -> Option<f64> {
    let lit = match e {
        Expr::Cast(c) => c.expr.as_ref(),
        Expr::TryCast(c) => c.expr.as_ref(),
        e => e,
    };
    let Expr::Literal(v, _) = lit else { return None };
    if !v.data_type().is_numeric() {
        return None;
    }
    match v.cast_to(&DataType::Float64) {
        Ok(ScalarValue::Float64(Some(f))) => Some(f),
        _ => None,
    }
}

/// `APPROX_PERCENTILE`'s quantile: a numeric constant in [0, 1] (the binder checks it first on
/// the syntax tree, where it can point at it).
fn percentile_fraction(e: &Expr) -> Result<weir_plan::Fraction> {
    numeric_constant(e).and_then(weir_plan::Fraction::new).ok_or_else(|| {
        WeirError::plan(format!(
            "APPROX_PERCENTILE's quantile must be a numeric constant from 0 to 1, found {e}"
        ))
    })
}

/// `APPROX_PERCENTILE`'s compression: an integer constant in
/// [`weir_plan::TDIGEST_COMPRESSIONS`] (checked first on the syntax tree, as the quantile).
fn tdigest_compression(e: &Expr) -> Result<u32> {
    let range = weir_plan::TDIGEST_COMPRESSIONS;
    numeric_constant(e)
        .filter(|c| c.fract() == 0.0 && *c >= *range.start() as f64 && *c <= *range.end() as f64)
        .map(|c| c as u32)
        .ok_or_else(|| {
            WeirError::plan(format!(
                "APPROX_PERCENTILE's compression must be an integer constant from {} to {}, \
                 found {e}",
                range.start(),
                range.end()
            ))
        })
}

/// `APPROX_TOP_K`'s k or capacity: an integer constant in `range` (checked first on the syntax
/// tree, as the others).
fn top_k_integer(e: &Expr, what: &str, range: std::ops::RangeInclusive<u32>) -> Result<u32> {
    numeric_constant(e)
        .filter(|c| c.fract() == 0.0 && *c >= *range.start() as f64 && *c <= *range.end() as f64)
        .map(|c| c as u32)
        .ok_or_else(|| {
            WeirError::plan(format!(
                "APPROX_TOP_K's {what} must be an integer constant from {} to {}, found {e}",
                range.start(),
                range.end()
            ))
        })
}

/// Whether `plan` holds a sliding window with an offset.
fn has_window_offset(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Window { spec: WindowSpec::RangeSlide { offset, .. }, .. } if *offset != 0)
        || plan.inputs().into_iter().any(|i| has_window_offset(i))
}

/// Refuses a sketch aggregate whose input can delete rows: a sketch cannot forget a value.
/// Accepted: a time window over a stream (counted slice by slice), or an append-only input.
/// A percentile's argument must be a number, and each value counts (no DISTINCT).
fn check_sketch_input(aggs: &[AggCall], input: &Arc<LogicalPlan>, schema: &DFSchema) -> Result<()> {
    let Some(sketch) = aggs.iter().find(|a| a.func.is_sketch()) else { return Ok(()) };
    if aggs.iter().any(|a| a.distinct && matches!(a.func, AggFunc::ApproxTopK { .. })) {
        return Err(WeirError::plan(
            "APPROX_TOP_K(DISTINCT ...) is not supported: each distinct value would count once, \
             so none would be more frequent than another",
        ));
    }
    for a in aggs.iter().filter(|a| matches!(a.func, AggFunc::ApproxPercentile { .. })) {
        let name = a.func.to_string().to_uppercase();
        if a.distinct {
            return Err(WeirError::plan(format!(
                "{name}(DISTINCT ...) is not supported: every value counts towards a quantile"
            )));
        }
        if let Some(arg) = &a.arg {
            let ty = arg.get_type(schema).map_err(df_error)?;
            if !(ty.is_numeric() || ty == DataType::Null) {
                return Err(WeirError::plan(format!(
                    "{name} takes a number (an integer, a DOUBLE or a DECIMAL), found {ty}"
                )));
            }
        }
    }
    let name = sketch.func.to_string().to_uppercase();
    if has_window_offset(input) {
        return Err(WeirError::plan(format!(
            "{name} over a window with an OFFSET is not supported: sketches are kept per slice, \
             and slices are aligned on multiples of the slide"
        )));
    }
    if weir_plan::sketch_input(input).is_none() {
        return Err(WeirError::plan(format!(
            "{name} cannot forget rows, and its input here can delete them: give it a stream with \
             a time window ([NOW], [RANGE ...], [RANGE ... SLIDE ...]) or an append-only input \
             (a stream [UNBOUNDED], joins of such); a table, a ROWS or SESSION window, an \
             aggregate or an outer join below it can delete rows"
        )));
    }
    if let Some(other) = aggs.iter().find(|a| {
        !(a.func.is_sketch() || matches!(a.func, AggFunc::CountStar | AggFunc::Count))
            || (a.distinct && !a.func.is_sketch())
    }) {
        return Err(WeirError::plan(format!(
            "{name} can be computed beside COUNT only, not beside {}: compute {} in another query",
            other.func.to_string().to_uppercase(),
            other.func.to_string().to_uppercase()
        )));
    }
    Ok(())
}

/// `STRING_AGG`'s second argument: a text constant, or NULL (the values are then joined with
/// nothing, as in PostgreSQL).
fn string_agg_separator(e: &Expr) -> Result<Option<String>> {
    let lit = match e {
        Expr::Cast(c) => c.expr.as_ref(),
        Expr::TryCast(c) => c.expr.as_ref(),
        e => e,
    };
    match lit {
        Expr::Literal(v, _) if v.is_null() => Ok(None),
        Expr::Literal(v, _) => match v.try_as_str() {
            Some(s) => Ok(s.map(str::to_string)),
            None => Err(WeirError::plan(format!(
                "STRING_AGG's separator must be a text constant, found {v}"
            ))),
        },
        other => Err(WeirError::plan(format!(
            "STRING_AGG's separator must be a text constant, found {other}"
        ))),
    }
}

/// A stream with a primary key read as a relation (a changelog): each key's latest element,
/// `[PARTITION BY key ROWS 1]` (`schema` is that window's). With a `ROW KIND` column, the
/// elements that only announce an update (`-U`) are dropped first, and a key whose latest
/// element is a delete (`-D`) has no row: the window's rows of that kind are filtered out
/// above it, so a delete retracts the key's row.
fn changelog_relation(
    s: &crate::catalog::StreamDef,
    source: Arc<LogicalPlan>,
    schema: Arc<DFSchema>,
) -> Result<Arc<LogicalPlan>> {
    use crate::catalog::RowKind;
    let kind_not_in = |schema: &DFSchema, k: usize, texts: &[&str]| -> Expr {
        let (q, f) = schema.qualified_field(k);
        let list = texts.iter().map(|t| datafusion_expr::lit(*t)).collect();
        Expr::Column(datafusion_common::Column::new(q.cloned(), f.name())).in_list(list, true)
    };
    let input = match s.row_kind {
        Some(k) => Arc::new(LogicalPlan::Filter {
            predicate: kind_not_in(&source.schema(), k, &RowKind::UPDATE_BEFORE),
            input: source,
        }),
        None => source,
    };
    let window = Arc::new(LogicalPlan::Window {
        spec: WindowSpec::PartitionRows { by: s.primary_key.clone(), rows: 1 },
        input,
        schema: schema.clone(),
        bounds_columns: false,
    });
    Ok(match s.row_kind {
        Some(k) => Arc::new(LogicalPlan::Filter {
            predicate: kind_not_in(&schema, k, &RowKind::DELETE),
            input: window,
        }),
        None => window,
    })
}
