//! The sketch aggregates the binder knows, as DataFusion `AggregateUDF`s: names, argument
//! counts and result types only, so that `SqlToRel` plans `APPROX_COUNT_DISTINCT(x, 12)`.
//! They are never executed by DataFusion: the converter turns them into
//! [`weir_plan::AggFunc`]s, which Weir's executor evaluates. DataFusion's own `approx_distinct`
//! takes one argument and a fixed precision, so the name is registered here too, over it.

use std::sync::Arc;

use arrow::datatypes::DataType;
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
}

impl AggregateUDFImpl for Known {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn accumulator(&self, _acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        not_impl_err!("aggregate {} is evaluated by Weir's executor", self.name)
    }
}

/// Every sketch aggregate the binder knows by name.
pub(super) fn known_sketch_aggregates() -> Vec<Arc<AggregateUDF>> {
    let v = Volatility::Immutable;
    // One argument, or the value and a precision.
    let one_or_two = || Signature::one_of(vec![TypeSignature::Any(1), TypeSignature::Any(2)], v);
    let f = |name| Arc::new(AggregateUDF::new_from_impl(Known { name, signature: one_or_two() }));
    vec![f("approx_count_distinct"), f("approx_distinct")]
}
