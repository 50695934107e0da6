//! all_to_all: row j of every rank's piece goes to rank j (shape `[P, P, ...]`, slab 0 -> slab 1).

use super::collective::{Collective, Keys, Moving, redistributed};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::diag::{Diagnostic, KeyPath};
use crate::spec::step::StepCommon;
use crate::spec::tensor::Distribution;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// all_to_all step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AllToAll {
    /// Shape `[P, P, ...]`, slab 0: rank r's row j goes to rank j.
    pub input: String,
    /// Shape `[P, P, ...]`, slab 1.
    pub out: String,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Collective for AllToAll {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, Some(&self.out))
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        let p = r.ranks;
        let square =
            x.shape.len() >= 2 && x.shape[0] == x.shape[1] && p.is_none_or(|p| x.shape[0] == p);
        if !square {
            let want = p.map_or("P".to_string(), |p| p.to_string());
            let at = KeyPath::root().key("steps").index(i).key("input");
            let message = format!(
                "all_to_all needs shape [{want}, {want}, ...], but `{}` has {:?}",
                self.input, x.shape
            );
            let help = "row j of rank r's piece goes to rank j: the first two axes are the rank count";
            r.err(Diagnostic::value(at, message).help(help));
            return None;
        }
        let slab0 = matches!(x.dist, Distribution::Slab(a) if a.index() == 0);
        r.expect_dist(i, "input", &self.input, &x.dist, "{ slab = 0 }", slab0)
            .then(|| redistributed(x, Distribution::slab(1)))
    }

    fn bandwidth(&self, m: &Moving<'_>, _: f64) -> (f64, f64) {
        (Moving::whole(m.input) / m.ranks as f64, m.spread())
    }
}
