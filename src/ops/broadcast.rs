//! broadcast: a tensor one rank holds, copied to every rank (root -> replicated).

use super::collective::{Collective, Kernel, Keys, Moving, redistributed};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::step::StepCommon;
use crate::spec::tensor::Distribution;
use anyhow::{Result, bail};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// broadcast step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Broadcast {
    /// A tensor held by `root` (distribution `{ root = R }`).
    pub input: String,
    /// The replicated result (absent: in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    /// The sending rank (default: the input's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Collective for Broadcast {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, self.out.as_deref())
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        r.root_of(i, self.root, &self.input, x)
            .map(|_| redistributed(x, Distribution::Replicated))
    }

    fn kernel(&self, m: &Moving<'_>, _: u64) -> Result<Kernel> {
        let Distribution::Root(root) = m.input.dist else {
            bail!("broadcast of a tensor no root holds");
        };
        Ok(Kernel::Broadcast(root as usize))
    }

    fn workspace<'a>(&'a self, m: Moving<'a>) -> Box<dyn Fn(u64) -> u64 + 'a> {
        Box::new(move |rank| m.relayout_bytes(rank))
    }

    fn bandwidth(&self, m: &Moving<'_>, _: f64) -> (f64, f64) {
        (Moving::whole(m.input), 1.0)
    }
}
