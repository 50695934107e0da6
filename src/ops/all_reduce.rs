//! all_reduce: a partial tensor's pieces combined, the result on every rank (partial ->
//! replicated).

use super::collective::{Collective, Expect, Kernel, Keys, Moving, redistributed};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::step::{ReduceOp, StepCommon};
use crate::spec::tensor::Distribution;
use anyhow::Result;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// all_reduce step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AllReduce {
    /// A partial tensor.
    pub input: String,
    /// The replicated result (absent: in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    /// How to combine (default sum).
    #[serde(default)]
    pub reduce: ReduceOp,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Collective for AllReduce {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, self.out.as_deref())
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        r.check_reduce(i, self.reduce, x.dtype);
        let partial = x.dist == Distribution::Partial;
        r.expect_dist(i, "input", &self.input, &x.dist, "partial", partial)
            .then(|| redistributed(x, Distribution::Replicated))
    }

    fn kernel(&self, _: &Moving<'_>, _: u64) -> Result<Kernel> {
        Ok(Kernel::AllReduce(self.reduce))
    }

    fn workspace<'a>(&'a self, m: Moving<'a>) -> Box<dyn Fn(u64) -> u64 + 'a> {
        Box::new(move |rank| m.relayout_bytes(rank) + m.widened_bytes(rank))
    }

    fn bandwidth(&self, m: &Moving<'_>, _: f64) -> (f64, f64) {
        (Moving::whole(m.input), 2.0 * m.spread())
    }

    fn expect(&self, _: u64) -> Expect {
        Expect::Reduced(self.reduce)
    }
}
