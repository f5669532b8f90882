//! The window functions the binder knows, as DataFusion `WindowUDF`s: names, argument counts
//! and result types, so that `SqlToRel` plans `ROW_NUMBER() OVER (...)` instead of calling it
//! an invalid function. They are never executed by DataFusion: the converter turns the
//! functions Weir evaluates into [`weir_plan::LogicalPlan::Ranking`] and refuses the others
//! with an error naming the function and the shape. Registered here rather than taken from
//! `datafusion-functions-window`, which would add a crate (and its physical evaluators) to the
//! build only for their names and types.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{not_impl_err, Result};
use datafusion_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion_expr::{PartitionEvaluator, Signature, Volatility, WindowUDF, WindowUDFImpl};

/// A window function known by name and type only.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Known {
    name: &'static str,
    signature: Signature,
    result: ResultType,
}

/// The result type of a [`Known`] function.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum ResultType {
    Int64,
    Float64,
    /// The type of the first argument.
    FirstArg,
}

impl WindowUDFImpl for Known {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn partition_evaluator(
        &self,
        _args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        not_impl_err!("window function {} is evaluated by Weir's executor", self.name)
    }

    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        let ty = match self.result {
            ResultType::Int64 => DataType::Int64,
            ResultType::Float64 => DataType::Float64,
            ResultType::FirstArg => {
                args.get_input_field(0).map(|f| f.data_type().clone()).unwrap_or(DataType::Null)
            }
        };
        Ok(Arc::new(Field::new(args.name(), ty, true)))
    }
}

/// Every window function the binder knows by name (besides aggregates used with OVER).
pub(super) fn known_window_functions() -> Vec<Arc<WindowUDF>> {
    let v = Volatility::Immutable;
    let f = |name, signature, result| {
        Arc::new(WindowUDF::new_from_impl(Known { name, signature, result }))
    };
    vec![
        f("row_number", Signature::nullary(v), ResultType::Int64),
        f("rank", Signature::nullary(v), ResultType::Int64),
        f("dense_rank", Signature::nullary(v), ResultType::Int64),
        f("percent_rank", Signature::nullary(v), ResultType::Float64),
        f("cume_dist", Signature::nullary(v), ResultType::Float64),
        f("ntile", Signature::any(1, v), ResultType::Int64),
        f("lag", Signature::variadic_any(v), ResultType::FirstArg),
        f("lead", Signature::variadic_any(v), ResultType::FirstArg),
        f("first_value", Signature::any(1, v), ResultType::FirstArg),
        f("last_value", Signature::any(1, v), ResultType::FirstArg),
        f("nth_value", Signature::any(2, v), ResultType::FirstArg),
    ]
}
