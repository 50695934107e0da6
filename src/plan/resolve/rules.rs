//! The meaning rules several ops share: the distribution an input needs, reduce operators, root
//! ranks and axes.

use super::*;

impl Resolver<'_> {
    pub(crate) fn expect_dist(
        &mut self,
        step: usize,
        key: &str,
        name: &str,
        got: &Distribution,
        want: &str,
        ok: bool,
    ) -> bool {
        if !ok {
            let op = self.loaded.spec.steps[step].op();
            self.err(
                Diagnostic::value(
                    KeyPath::root().key("steps").index(step).key(key),
                    format!(
                        "{op} needs a {want} input, but `{name}` is {} here",
                        dist_name(got)
                    ),
                )
                .help(format!(
                    "give `{name}` a {want} distribution, or redistribute it first"
                )),
            );
        }
        ok
    }

    pub(crate) fn check_reduce(&mut self, step: usize, op: ReduceOp, dtype: DType) {
        let bad = match op {
            ReduceOp::Min | ReduceOp::Max if dtype.is_complex() => {
                Some("complex numbers have no order")
            }
            _ => None,
        };
        if let Some(why) = bad {
            self.err(
                Diagnostic::value(
                    KeyPath::root().key("steps").index(step).key("reduce"),
                    format!("reduce = {:?} does not apply to {dtype}: {why}", op).to_lowercase(),
                )
                .help("use sum, prod or avg"),
            );
        }
    }

    pub(crate) fn check_root(&mut self, step: usize, key: &str, root: u32) -> bool {
        match self.ranks {
            Some(p) if u64::from(root) >= p => {
                self.err(
                    Diagnostic::value(
                        KeyPath::root().key("steps").index(step).key(key),
                        format!("root rank {root} does not exist with {p} ranks"),
                    )
                    .help(format!("use a rank from 0 to {}", p - 1)),
                );
                false
            }
            _ => true,
        }
    }

    /// Whether `axis` exists in the input's shape (a slab splits any length, unevenly where it
    /// must: rank r gets `S//P + (r < S%P)` rows).
    pub(crate) fn check_axis(&mut self, step: usize, axis: Axis, state: &TensorState) -> bool {
        let a = axis.index();
        if a >= state.shape.len() {
            self.err(
                Diagnostic::value(
                    KeyPath::root().key("steps").index(step).key("axis"),
                    format!("axis {a} does not exist in shape {:?}", state.shape),
                )
                .help(format!("use an axis from 0 to {}", state.shape.len() - 1)),
            );
            return false;
        }
        true
    }

    /// The root holding `x` when the step's own `root` (if given) agrees with it.
    pub(crate) fn root_of(
        &mut self,
        i: usize,
        given: Option<u32>,
        input: &str,
        x: &TensorState,
    ) -> Option<u32> {
        let Distribution::Root(r) = x.dist else {
            self.expect_dist(i, "input", input, &x.dist, "root", false);
            return None;
        };
        if let Some(given) = given.filter(|&g| g != r) {
            self.err(
                Diagnostic::value(
                    KeyPath::root().key("steps").index(i).key("root"),
                    format!("root = {given} but `{input}` is held by rank {r}"),
                )
                .help(format!("leave root out, or set it to {r}")),
            );
            return None;
        }
        Some(r)
    }
}
