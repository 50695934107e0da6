//! reduce_scatter: a partial tensor's pieces combined, each rank keeping its slab of the result
//! (partial -> slab along `axis`).

use crate::backend::work::{Run, Runs};
use super::collective::{Collective, Expect, Kernel, Keys, Moving, redistributed};
use super::exchange::{self, Side};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::step::{ReduceOp, StepCommon, axis0};
use crate::spec::tensor::{Axis, Distribution};
use anyhow::Result;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// reduce_scatter step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ReduceScatter {
    /// A partial tensor.
    pub input: String,
    /// The result, a slab along `axis`.
    pub out: String,
    /// How to combine (default sum).
    #[serde(default)]
    pub reduce: ReduceOp,
    /// The axis the result is split along (default 0), as a slab: rank r gets `S//P + (r < S%P)`.
    #[serde(default = "axis0")]
    pub axis: Axis,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Collective for ReduceScatter {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, Some(&self.out))
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        r.check_reduce(i, self.reduce, x.dtype);
        let axis = r.check_axis(i, self.axis, x);
        let partial = x.dist == Distribution::Partial;
        (r.expect_dist(i, "input", &self.input, &x.dist, "partial", partial) && axis)
            .then(|| redistributed(x, Distribution::slab(self.axis.index())))
    }

    fn kernel(&self, m: &Moving<'_>, rank: u64) -> Result<Kernel> {
        let (runs, counts) = blocks(m);
        let packs = !in_rank_order(&runs, m.piece(m.input, rank) as usize / elem(m));
        Ok(Kernel::ReduceScatter {
            runs: packs.then(|| Box::new(runs)),
            counts,
            op: self.reduce,
        })
    }

    /// The packed blocks (the whole input, unless it holds them in rank order), and MPI's
    /// buffer of the whole input that its reduce_scatter reduces through.
    fn workspace<'a>(&'a self, m: Moving<'a>) -> Box<dyn Fn(u64) -> u64 + 'a> {
        let (runs, counts) = blocks(&m);
        let packed = match in_rank_order(&runs, m.piece(m.input, 0) as usize / elem(&m)) {
            true => 0,
            false => (counts.iter().sum::<usize>() * elem(&m)) as u64,
        };
        Box::new(move |rank| packed + m.piece(m.input, rank) + m.widened_bytes(rank))
    }

    fn bandwidth(&self, m: &Moving<'_>, _: f64) -> (f64, f64) {
        (Moving::whole(m.input), m.spread())
    }

    fn expect(&self, _: u64) -> Expect {
        Expect::Reduced(self.reduce)
    }
}

fn elem(m: &Moving<'_>) -> usize {
    m.input.dtype.size() as usize
}

/// The packing of every rank's block, in rank order, from the input's layout, and each rank's
/// block's elements (its slab, which may differ by a row from its neighbours').
fn blocks(m: &Moving<'_>) -> (Runs, Vec<usize>) {
    let counts = (0..m.ranks)
        .map(|r| m.piece(m.output, r) as usize / elem(m))
        .collect();
    let to = Side::of(m.output);
    (exchange::blocks(m.input.layout, to, m.ranks), counts)
}

/// Whether `runs` take all `n` elements in place, in order (splitting along the slowest axis of
/// the layout): then nothing needs packing.
fn in_rank_order(runs: &[Run], n: usize) -> bool {
    runs.iter()
        .all(|r| r.src == r.dst && (r.count <= 1 || (r.src_stride == 1 && r.dst_stride == 1)))
        && runs.iter().map(|r| r.count).sum::<usize>() == n
}
