//! scatter: a tensor one rank holds, split into slabs over the ranks (root -> slab).

use super::collective::{Collective, Keys, Moving, redistributed};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::step::{StepCommon, axis0};
use crate::spec::tensor::{Axis, Distribution};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// scatter step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Scatter {
    /// A tensor held by `root`.
    pub input: String,
    /// The result, a slab along `axis`.
    pub out: String,
    /// The sending rank (default: the input's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
    /// The axis the result is split along (default 0), as a slab: rank r gets `S//P + (r < S%P)`.
    #[serde(default = "axis0")]
    pub axis: Axis,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Collective for Scatter {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, Some(&self.out))
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        r.root_of(i, self.root, &self.input, x)?;
        r.check_axis(i, self.axis, x)
            .then(|| redistributed(x, Distribution::slab(self.axis.index())))
    }

    fn bandwidth(&self, m: &Moving<'_>, _: f64) -> (f64, f64) {
        (Moving::whole(m.input), m.spread())
    }
}
