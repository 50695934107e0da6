//! redistribute: a tensor moved to another distribution (and layout), any to any but partial.

use super::collective::{Collective, Keys, Moving};
use crate::dist::{self, TensorState};
use crate::plan::resolve::Resolver;
use crate::spec::diag::{Diagnostic, KeyPath};
use crate::spec::step::StepCommon;
use crate::spec::tensor::{Distribution, Layout};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Redistribute step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Redistribute {
    /// The tensor to move.
    pub input: String,
    /// The result.
    pub out: String,
    /// The result's distribution.
    pub distribution: Distribution,
    /// The result's layout (default: the input's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Collective for Redistribute {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, Some(&self.out))
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        let here = KeyPath::root().key("steps").index(i).key("distribution");
        if self.distribution == Distribution::Partial {
            r.err(
                Diagnostic::value(here, "redistribute cannot make a partial tensor").help(
                    "partial tensors come from an init; reduce them with all_reduce or reduce_scatter",
                ),
            );
            return None;
        }
        let moved = x.dist != Distribution::Partial;
        if !r.expect_dist(i, "input", &self.input, &x.dist, "non-partial", moved) {
            return None;
        }
        let found = dist::check(&self.distribution, &x.shape, r.ranks, &here);
        let ok = found.is_empty();
        r.diags.extend(found);
        ok.then(|| TensorState {
            dist: self.distribution.clone(),
            layout: self.layout.unwrap_or(x.layout),
            ..x.clone()
        })
    }

    /// The global tensor; the bus carries what the busiest rank sends.
    fn bandwidth(&self, m: &Moving<'_>, sent: f64) -> (f64, f64) {
        let whole = Moving::whole(m.input);
        (whole, if whole > 0.0 { sent / whole } else { 0.0 })
    }
}
