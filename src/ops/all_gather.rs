//! all_gather: every rank's slab, gathered whole on every rank (slab -> replicated).

use super::collective::{Collective, Keys, Moving, redistributed};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::step::StepCommon;
use crate::spec::tensor::Distribution;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// all_gather step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AllGather {
    /// A slab-distributed tensor.
    pub input: String,
    /// The replicated result.
    pub out: String,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Collective for AllGather {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, Some(&self.out))
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        let slab = matches!(x.dist, Distribution::Slab(_));
        r.expect_dist(i, "input", &self.input, &x.dist, "slab", slab)
            .then(|| redistributed(x, Distribution::Replicated))
    }

    fn bandwidth(&self, m: &Moving<'_>, _: f64) -> (f64, f64) {
        (Moving::whole(m.output), m.spread())
    }
}
