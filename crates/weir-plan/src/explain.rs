//! `EXPLAIN`: the plan as an indented tree, one CQL operator per line.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

use datafusion_common::DFSchema;

use crate::plan::{LogicalPlan, PlanKind};
use crate::share::indexed_post_order;

/// Renders `plan` as an indented tree. Each line names the operator, its arguments and whether
/// it outputs a stream or a relation. A node the plan shares ([`crate::share_subplans`]) is
/// shown whole where it is first read, marked with its number of readers, and on one line,
/// marked as the same node, where it is read again.
pub fn explain(plan: &LogicalPlan) -> String {
    explain_with(plan, &[])
}

/// [`explain`] with a line above some operators: `notes[i][e]` for the i-th node in
/// [`crate::post_order`] (inputs first, as the executor compiles them) where its e-th reader
/// reads it (its readers in that order, each input of a reader in its order), shown as the
/// operator its output passes through on the way to that reader (an exchange between workers),
/// the node indented below it.
pub fn explain_with(plan: &LogicalPlan, notes: &[Vec<Option<String>>]) -> String {
    let (order, index) = indexed_post_order(plan);
    let mut readers: Vec<Vec<(usize, usize)>> = vec![Vec::new(); order.len()];
    for (c, node) in order.iter().enumerate() {
        for (k, input) in node.inputs().into_iter().enumerate() {
            if let Some(&i) = index.get(&Arc::as_ptr(input)) {
                readers[i].push((c, k));
            }
        }
    }
    let mut walk = Walk { index, readers, notes, shown: vec![false; order.len()] };
    let mut lines = Vec::new();
    walk.render(plan, None, &mut lines);
    let mut out = String::new();
    for (depth, line) in lines {
        let _ = writeln!(out, "{}{line}", "  ".repeat(depth));
    }
    out
}

/// What rendering a plan needs to know of its nodes.
struct Walk<'a> {
    index: HashMap<*const LogicalPlan, usize>,
    /// Per node, its readers and which of their inputs it is, in [`explain_with`]'s order.
    readers: Vec<Vec<(usize, usize)>>,
    notes: &'a [Vec<Option<String>>],
    /// Per node, whether it was shown whole already.
    shown: Vec<bool>,
}

impl Walk<'_> {
    /// The lines of `plan`'s subtree, each with its depth below `plan`; `read` is the node
    /// that reads it here and which of its inputs it is (None at the root).
    fn render(
        &mut self,
        plan: &LogicalPlan,
        read: Option<(usize, usize)>,
        out: &mut Vec<(usize, String)>,
    ) {
        let Some(&i) = self.index.get(&(plan as *const LogicalPlan)) else { return };
        let kind = match plan.kind() {
            PlanKind::Stream => "stream",
            PlanKind::Relation => "relation",
        };
        let note = read
            .and_then(|r| self.readers[i].iter().position(|&x| x == r))
            .and_then(|e| self.notes.get(i)?.get(e)?.as_ref());
        let shift = match note {
            Some(note) => {
                out.push((0, format!("{note}  -> {kind}")));
                1
            }
            None => 0,
        };
        let readers = self.readers[i].len();
        if std::mem::replace(&mut self.shown[i], true) {
            out.push((shift, format!("{}  -> {kind}  (the same node as above)", label(plan))));
            return;
        }
        let shared =
            if readers > 1 { format!("  (shared: {readers} readers)") } else { String::new() };
        out.push((shift, format!("{}  -> {kind}{shared}", label(plan))));
        let mut below = Vec::new();
        for (k, input) in plan.inputs().into_iter().enumerate() {
            self.render(input, Some((i, k)), &mut below);
        }
        out.extend(below.into_iter().map(|(d, l)| (d + shift + 1, l)));
    }
}

fn names(schema: &DFSchema) -> Vec<String> {
    schema.fields().iter().map(|f| f.name().clone()).collect()
}

fn list(exprs: impl IntoIterator<Item = String>) -> String {
    exprs.into_iter().collect::<Vec<_>>().join(", ")
}

/// The line EXPLAIN shows for `plan`'s own operator (without its inputs or output kind).
pub fn label(plan: &LogicalPlan) -> String {
    match plan {
        LogicalPlan::StreamScan { name, .. } => format!("StreamScan: {name}"),
        LogicalPlan::TableScan { name, .. } => format!("TableScan: {name}"),
        LogicalPlan::Window { spec, input, bounds_columns, .. } => {
            let domain = input.time_domain().unwrap_or(weir_common::TimeDomain::Ticks);
            let label = LogicalPlan::window_label(spec, domain, &names(&input.schema()));
            if *bounds_columns {
                format!("Window: [{label}] with window_start, window_end")
            } else {
                format!("Window: [{label}]")
            }
        }
        LogicalPlan::TimeWindows { column, size, slide, domain, input, .. } => {
            let col = names(&input.schema()).get(*column).cloned().unwrap_or_default();
            let d = |t| LogicalPlan::duration_label(t, *domain);
            if size == slide {
                format!("TimeWindows: TUMBLE({col}, {}) with window_start, window_end", d(*size))
            } else {
                format!(
                    "TimeWindows: HOP({col}, {}, {}) with window_start, window_end",
                    d(*slide),
                    d(*size)
                )
            }
        }
        LogicalPlan::WindowBounds { spec, input, istream_sees, .. } => {
            let domain = input.time_domain().unwrap_or(weir_common::TimeDomain::Ticks);
            let label = LogicalPlan::window_label(spec, domain, &names(&input.schema()));
            let seen: Vec<&str> = ["window_start", "window_end"]
                .into_iter()
                .zip(istream_sees)
                .filter_map(|(n, s)| s.then_some(n))
                .collect();
            if seen.is_empty() {
                format!("WindowBounds: window_start, window_end of [{label}]")
            } else {
                format!(
                    "WindowBounds: window_start, window_end of [{label}], inserts only (ISTREAM \
                     sees {})",
                    seen.join(", ")
                )
            }
        }
        LogicalPlan::WindowAggregate { spec, merge, input, .. } => {
            let domain = input.time_domain().unwrap_or(weir_common::TimeDomain::Ticks);
            let label = LogicalPlan::window_label(spec, domain, &names(&input.schema()));
            let merged = match merge {
                Some((group, aggs)) => format!(
                    " group=[{}] aggs=[{}]",
                    list(group.iter().map(|e| e.to_string())),
                    list(aggs.iter().map(|a| a.to_string()))
                ),
                None => String::new(),
            };
            format!(
                "WindowAggregate: [{label}]{merged}, each window once when it closes, with \
                 window_start, window_end"
            )
        }
        LogicalPlan::Filter { predicate, .. } => format!("Filter: {predicate}"),
        LogicalPlan::Project { exprs, .. } => {
            format!("Project: {}", list(exprs.iter().map(|e| e.to_string())))
        }
        LogicalPlan::Join { kind, on, filter, left, right, held, .. } => {
            let mut s = format!("Join: {kind}");
            if !on.is_empty() {
                let _ = write!(s, " on {}", list(on.iter().map(|(l, r)| format!("{l} = {r}"))));
            }
            if let Some(f) = filter {
                let _ = write!(s, " filter {f}");
            }
            // Windows the join holds (see `crate::held`).
            for ((side, input), h) in [("left", left), ("right", right)].iter().zip(held) {
                if let Some(h) = h {
                    let domain = input.time_domain().unwrap_or(weir_common::TimeDomain::Ticks);
                    let label = LogicalPlan::window_label(&h.spec, domain, &names(&input.schema()));
                    let _ = write!(s, ", holds {side} as [{label}]");
                    if h.bounds_columns {
                        s.push_str(" with window_start, window_end");
                    }
                }
            }
            // An interval join: when each side's rows leave its state.
            let bounds = crate::interval::expiry_bounds(*kind, left, right, filter.as_ref());
            let leave: Vec<String> = ["left", "right"]
                .iter()
                .zip(&bounds)
                .filter_map(|(side, b)| b.as_ref().map(|b| format!("{side} rows at {b}")))
                .collect();
            if !leave.is_empty() {
                let _ = write!(s, ", leave: {}", leave.join(", "));
            }
            s
        }
        LogicalPlan::Aggregate { group, aggs, .. } => {
            let aggs = aggs.iter().map(|a| a.to_string());
            format!(
                "Aggregate: group=[{}] aggs=[{}]",
                list(group.iter().map(|e| e.to_string())),
                list(aggs)
            )
        }
        LogicalPlan::PaneAggregate { pane, offset, group, aggs, input, .. } => {
            let domain = input.time_domain().unwrap_or(weir_common::TimeDomain::Ticks);
            let mut panes = LogicalPlan::duration_label(*pane, domain);
            if *offset != 0 {
                let _ = write!(panes, " OFFSET {}", LogicalPlan::duration_label(*offset, domain));
            }
            format!(
                "PaneAggregate: panes of {panes} group=[{}] aggs=[{}]",
                list(group.iter().map(|e| e.to_string())),
                list(aggs.iter().map(|a| a.to_string()))
            )
        }
        LogicalPlan::Distinct { .. } => "Distinct".to_string(),
        LogicalPlan::Apply { subqueries, .. } => {
            format!("Apply: {} subquery(ies) per row", subqueries.len())
        }
        LogicalPlan::UnionAll { .. } => "UnionAll".to_string(),
        LogicalPlan::Values { rows, .. } => format!("Values: {} row(s)", rows.len()),
        LogicalPlan::ToStream { op, .. } => format!("{op}"),
        LogicalPlan::TopK { order, skip, fetch, with_ties, .. } => {
            let mut s = String::from("TopK:");
            if !order.is_empty() {
                let _ = write!(s, " order=[{}]", list(order.iter().map(|o| o.to_string())));
            }
            if *skip > 0 {
                let _ = write!(s, " skip={skip}");
            }
            if let Some(f) = fetch {
                let _ = write!(s, " fetch={f}");
            }
            if *with_ties {
                s.push_str(" with ties");
            }
            s
        }
        LogicalPlan::OverAggregate { partition_by, order_by, frame, aggs, .. } => {
            let aggs = aggs.iter().map(|a| match &a.arg {
                None => "count(*)".to_string(),
                Some(e) => format!("{}({e})", a.func),
            });
            let mut s = format!("OverAggregate: [{}]", list(aggs));
            if !partition_by.is_empty() {
                let _ =
                    write!(s, " partition=[{}]", list(partition_by.iter().map(|e| e.to_string())));
            }
            let _ = write!(s, " order=[{}] {frame}", list(order_by.iter().map(|o| o.to_string())));
            s
        }
        LogicalPlan::OverRelation { partition_by, order_by, calls, .. } => {
            let calls = calls.iter().map(|c| {
                let arg = c.arg.as_ref().map_or("*".to_string(), |e| e.to_string());
                match c.func {
                    crate::plan::OverFunc::Lag(_) | crate::plan::OverFunc::Lead(_) => {
                        format!("{}({arg})", c.func)
                    }
                    _ => format!("{}({arg}) {}", c.func, c.frame),
                }
            });
            let mut s = format!("OverRelation: [{}]", list(calls));
            if !partition_by.is_empty() {
                let _ =
                    write!(s, " partition=[{}]", list(partition_by.iter().map(|e| e.to_string())));
            }
            if !order_by.is_empty() {
                let _ = write!(s, " order=[{}]", list(order_by.iter().map(|o| o.to_string())));
            }
            s
        }
        LogicalPlan::Ranking { partition_by, order_by, funcs, mode, .. } => {
            let mut s = format!("Ranking: [{}]", list(funcs.iter().map(|f| format!("{f}()"))));
            if !partition_by.is_empty() {
                let _ =
                    write!(s, " partition=[{}]", list(partition_by.iter().map(|e| e.to_string())));
            }
            if !order_by.is_empty() {
                let _ = write!(s, " order=[{}]", list(order_by.iter().map(|o| o.to_string())));
            }
            match mode {
                crate::plan::RankMode::Full => {}
                crate::plan::RankMode::Top { func, lo, hi } => {
                    let name = funcs.get(*func).map(|f| f.to_string()).unwrap_or_default();
                    let _ = write!(s, " top={name} in {lo}..={hi}");
                }
                crate::plan::RankMode::KeepFirst => s.push_str(" dedup=keep first"),
                crate::plan::RankMode::KeepLast => s.push_str(" dedup=keep last"),
            }
            s
        }
        LogicalPlan::Rename { schema, .. } => {
            let q: Vec<String> = schema
                .iter()
                .map(|(q, f)| match q {
                    Some(q) => format!("{q}.{}", f.name()),
                    None => f.name().clone(),
                })
                .collect();
            format!("Rename: {}", q.join(", "))
        }
    }
}
