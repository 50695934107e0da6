//! The meaning pass for data movement: collectives, redistribution, roots, reduce ops and the
//! distributions each op needs.

use super::*;

impl Resolver<'_> {
    pub(super) fn expect_dist(
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

    fn check_reduce(&mut self, step: usize, op: ReduceOp, dtype: DType) {
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

    fn check_root(&mut self, step: usize, key: &str, root: u32) -> bool {
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
    fn check_axis(&mut self, step: usize, axis: Axis, state: &TensorState) -> bool {
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

    pub(super) fn redistribute(
        &mut self,
        i: usize,
        r: &crate::spec::step::Redistribute,
        x: &TensorState,
    ) -> Option<TensorState> {
        let here = KeyPath::root().key("steps").index(i).key("distribution");
        if r.distribution == Distribution::Partial {
            self.err(
                Diagnostic::value(here, "redistribute cannot make a partial tensor").help(
                    "partial tensors come from an init; reduce them with all_reduce or reduce_scatter",
                ),
            );
            return None;
        }
        let moved = x.dist != Distribution::Partial;
        if !self.expect_dist(i, "input", &r.input, &x.dist, "non-partial", moved) {
            return None;
        }
        let found = dist::check(&r.distribution, &x.shape, self.ranks, &here);
        let ok = found.is_empty();
        self.diags.extend(found);
        ok.then(|| TensorState {
            dist: r.distribution.clone(),
            layout: r.layout.unwrap_or(x.layout),
            ..x.clone()
        })
    }

    /// The root holding `x` when the step's own `root` (if given) agrees with it.
    fn root_of(
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

    /// Checks a collective and returns the distribution of its result.
    pub(super) fn collective(
        &mut self,
        i: usize,
        step: &Step,
        x: &TensorState,
    ) -> Option<Distribution> {
        let here = KeyPath::root().key("steps").index(i);
        let partial = x.dist == Distribution::Partial;
        let is_slab = matches!(x.dist, Distribution::Slab(_));
        let slab0 = matches!(x.dist, Distribution::Slab(a) if a.index() == 0);
        match step {
            Step::AllReduce(s) => {
                self.check_reduce(i, s.reduce, x.dtype);
                self.expect_dist(i, "input", &s.input, &x.dist, "partial", partial)
                    .then_some(Distribution::Replicated)
            }
            Step::Reduce(s) => {
                self.check_reduce(i, s.reduce, x.dtype);
                let root = self.check_root(i, "root", s.root);
                (self.expect_dist(i, "input", &s.input, &x.dist, "partial", partial) && root)
                    .then_some(Distribution::Root(s.root))
            }
            Step::Broadcast(s) => self
                .root_of(i, s.root, &s.input, x)
                .map(|_| Distribution::Replicated),
            Step::AllGather(s) => self
                .expect_dist(i, "input", &s.input, &x.dist, "slab", is_slab)
                .then_some(Distribution::Replicated),
            Step::ReduceScatter(s) => {
                self.check_reduce(i, s.reduce, x.dtype);
                let axis = self.check_axis(i, s.axis, x);
                (self.expect_dist(i, "input", &s.input, &x.dist, "partial", partial) && axis)
                    .then(|| Distribution::slab(s.axis.index()))
            }
            Step::AllToAll(s) => {
                let p = self.ranks;
                let square = x.shape.len() >= 2
                    && x.shape[0] == x.shape[1]
                    && p.is_none_or(|p| x.shape[0] == p);
                if !square {
                    let want = p.map_or("P".to_string(), |p| p.to_string());
                    self.err(
                        Diagnostic::value(
                            here.key("input"),
                            format!(
                                "all_to_all needs shape [{want}, {want}, ...], but `{}` has {:?}",
                                s.input, x.shape
                            ),
                        )
                        .help("row j of rank r's piece goes to rank j: the first two axes are the rank count"),
                    );
                    return None;
                }
                self.expect_dist(i, "input", &s.input, &x.dist, "{ slab = 0 }", slab0)
                    .then(|| Distribution::slab(1))
            }
            Step::Gather(s) => {
                let root = self.check_root(i, "root", s.root);
                (self.expect_dist(i, "input", &s.input, &x.dist, "slab", is_slab) && root)
                    .then_some(Distribution::Root(s.root))
            }
            Step::Scatter(s) => {
                self.root_of(i, s.root, &s.input, x)?;
                self.check_axis(i, s.axis, x)
                    .then(|| Distribution::slab(s.axis.index()))
            }
            Step::SendRecv(s) => {
                let pairs_ok = self.check_send_recv(i, s, x);
                (self.expect_dist(i, "input", &s.input, &x.dist, "{ slab = 0 }", slab0) && pairs_ok)
                    .then(|| x.dist.clone())
            }
            _ => None,
        }
    }

    fn check_send_recv(
        &mut self,
        i: usize,
        s: &crate::spec::step::SendRecv,
        x: &TensorState,
    ) -> bool {
        let here = KeyPath::root().key("steps").index(i);
        let mut ok = true;
        if let Some(p) = self.ranks.filter(|&p| x.shape[0] != p) {
            ok = false;
            self.err(
                Diagnostic::value(
                    here.key("input"),
                    format!(
                        "send_recv needs shape [{p}, ...] (one row per rank), but `{}` has {:?}",
                        s.input, x.shape
                    ),
                )
                .help("rank r holds row r"),
            );
        }
        let mut receivers = std::collections::HashMap::new();
        for (j, [src, dst]) in s.pairs.iter().flatten().enumerate() {
            if let Some(p) = self.ranks.filter(|&p| u64::from(*src.max(dst)) >= p) {
                ok = false;
                self.err(
                    Diagnostic::value(
                        here.key("pairs").index(j),
                        format!(
                            "pair [{src}, {dst}] names a rank that does not exist with {p} ranks"
                        ),
                    )
                    .help(format!("use ranks 0 to {}", p - 1)),
                );
            }
            if let Some(k) = receivers.insert(*dst, j) {
                ok = false;
                self.err(
                    Diagnostic::value(
                        here.key("pairs").index(j),
                        format!("rank {dst} receives twice (pairs {k} and {j})"),
                    )
                    .help("each rank receives at most one row"),
                );
            }
        }
        ok
    }
}
