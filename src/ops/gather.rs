//! gather: every rank's slab, gathered whole on one rank (slab -> root).

use super::collective::{Collective, Keys, Moving, redistributed};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::step::StepCommon;
use crate::spec::tensor::Distribution;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// gather step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Gather {
    /// A slab-distributed tensor.
    pub input: String,
    /// The result, held whole by `root`.
    pub out: String,
    /// The receiving rank (default 0).
    #[serde(default)]
    pub root: u32,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Collective for Gather {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, Some(&self.out))
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        let root = r.check_root(i, "root", self.root);
        let slab = matches!(x.dist, Distribution::Slab(_));
        (r.expect_dist(i, "input", &self.input, &x.dist, "slab", slab) && root)
            .then(|| redistributed(x, Distribution::Root(self.root)))
    }

    fn bandwidth(&self, m: &Moving<'_>, _: f64) -> (f64, f64) {
        (Moving::whole(m.input), m.spread())
    }
}
