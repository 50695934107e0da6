//! reduce: a partial tensor's pieces combined, the result on one rank (partial -> root).

use super::collective::{Collective, Expect, Kernel, Keys, Moving, redistributed};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::step::{ReduceOp, StepCommon};
use crate::spec::tensor::Distribution;
use anyhow::Result;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// reduce step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Reduce {
    /// A partial tensor.
    pub input: String,
    /// The result on `root` (absent: in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    /// How to combine (default sum).
    #[serde(default)]
    pub reduce: ReduceOp,
    /// The rank that receives the result (default 0).
    #[serde(default)]
    pub root: u32,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Collective for Reduce {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, self.out.as_deref())
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        r.check_reduce(i, self.reduce, x.dtype);
        let root = r.check_root(i, "root", self.root);
        let partial = x.dist == Distribution::Partial;
        (r.expect_dist(i, "input", &self.input, &x.dist, "partial", partial) && root)
            .then(|| redistributed(x, Distribution::Root(self.root)))
    }

    fn kernel(&self, _: &Moving<'_>, _: u64) -> Result<Kernel> {
        Ok(Kernel::Reduce(self.reduce, self.root as usize))
    }

    fn workspace<'a>(&'a self, m: Moving<'a>) -> Box<dyn Fn(u64) -> u64 + 'a> {
        Box::new(move |rank| m.relayout_bytes(rank) + m.widened_bytes(rank))
    }

    fn bandwidth(&self, m: &Moving<'_>, _: f64) -> (f64, f64) {
        (Moving::whole(m.input), 1.0)
    }

    fn expect(&self, _: u64) -> Expect {
        Expect::Reduced(self.reduce)
    }
}
