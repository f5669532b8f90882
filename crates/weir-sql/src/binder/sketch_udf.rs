//! The sketch aggregates the binder knows, as DataFusion `AggregateUDF`s: names, argument
//! counts and result types only, so that `SqlToRel` plans `APPROX_COUNT_DISTINCT(x, 12)`,
//! `APPROX_PERCENTILE(x, 0.9)` and `APPROX_TOP_K(x, 10)`.
//! They are never executed by DataFusion: the converter turns them into
//! [`weir_plan::AggFunc`]s, which Weir's executor evaluates. DataFusion's own `approx_distinct`
//! takes one argument and a fixed precision, and its `approx_median` is a t-digest Weir cannot
//! slice, so those names are registered here too, over DataFusion's.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields};
use datafusion_common::{not_impl_err, Result};
use datafusion_expr::function::AccumulatorArgs;
use datafusion_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, TypeSignature, Volatility,
};

/// An aggregate known by name and type only.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Known {
    name: &'static str,
    signature: Signature,
    returns: DataType,
}

impl AggregateUDFImpl for Known {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.returns.clone())
    }

    fn accumulator(&self, _acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        not_impl_err!("aggregate {} is evaluated by Weir's executor", self.name)
    }
}

/// `APPROX_TOP_K(x, k [, capacity])`: its result is a list of `{value, count}` structs, the
/// value of x's type (so known from its argument's type).
#[derive(Debug, PartialEq, Eq, Hash)]
struct TopK {
    signature: Signature,
}

/// The type of `APPROX_TOP_K`'s result over values of type `value`: `LIST<STRUCT<value, count
/// BIGINT>>`, as BigQuery's `APPROX_TOP_COUNT` gives (value/count pairs).
fn top_k_type(value: &DataType) -> DataType {
    let fields = Fields::from(vec![
        Field::new("value", value.clone(), true),
        Field::new("count", DataType::Int64, false),
    ]);
    DataType::List(Arc::new(Field::new("item", DataType::Struct(fields), false)))
}

impl AggregateUDFImpl for TopK {
    fn name(&self) -> &str {
        "approx_top_k"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(top_k_type(arg_types.first().unwrap_or(&DataType::Null)))
    }

    fn accumulator(&self, _acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        not_impl_err!("aggregate approx_top_k is evaluated by Weir's executor")
    }
}

/// Every sketch aggregate the binder knows by name.
pub(super) fn known_sketch_aggregates() -> Vec<Arc<AggregateUDF>> {
    let v = Volatility::Immutable;
    let known = |name, counts: &[usize], returns| {
        let signature =
            Signature::one_of(counts.iter().map(|n| TypeSignature::Any(*n)).collect(), v);
        Arc::new(AggregateUDF::new_from_impl(Known { name, signature, returns }))
    };
    vec![
        // The value, and optionally a precision.
        known("approx_count_distinct", &[1, 2], DataType::Int64),
        known("approx_distinct", &[1, 2], DataType::Int64),
        // The value, the quantile, and optionally a compression.
        known("approx_percentile", &[2, 3], DataType::Float64),
        known("approx_quantile", &[2, 3], DataType::Float64),
        known("approx_median", &[1], DataType::Float64),
        // The value, k, and optionally a capacity.
        Arc::new(AggregateUDF::new_from_impl(TopK {
            signature: Signature::one_of(vec![TypeSignature::Any(2), TypeSignature::Any(3)], v),
        })),
    ]
}
