//! Tests of the init module, each piece checked against an independent reading of the
//! distribution (`Placement::to_global` and `linear_offset` per element).

mod fdlibm;
mod npy;
mod scalar;
mod values;

use crate::dist::TensorState;
use crate::dist::tests::for_each_index;
use crate::dist::{Placement, check, linear_offset, process_grid};
use crate::spec::diag::KeyPath;
use crate::spec::tensor::*;

/// A tensor as created.
pub(crate) fn state(
    shape: &[u64],
    dtype: DType,
    layout: Layout,
    dist: Distribution,
) -> TensorState {
    TensorState {
        shape: shape.to_vec(),
        dtype,
        layout,
        dist,
    }
}

/// The C-order linear index of `g` in `shape`.
fn c_linear(g: &[u64], shape: &[u64]) -> u64 {
    linear_offset(g, shape, Layout::C)
}

/// Distributions of many kinds that fit `shape` on `ranks` ranks.
fn distributions(shape: &[u64], ranks: u64) -> Vec<Distribution> {
    let nd = shape.len();
    let odd = [3u64, 1, 5, 3];
    let (p, n0) = (ranks, shape[0]);
    // Boxes tiling axis 0, in reverse rank order (empty boxes when rows run short).
    let boxes = (0..p)
        .map(|r| {
            let s = p - 1 - r;
            let mut lo = vec![0; nd];
            let mut hi = shape.to_vec();
            lo[0] = s * n0 / p;
            hi[0] = (s + 1) * n0 / p;
            [lo, hi]
        })
        .collect();
    let mut all = vec![
        Distribution::Replicated,
        Distribution::Partial,
        Distribution::Root((ranks - 1) as u32),
        Distribution::Slab(Axis::Index(0)),
        Distribution::Slab(Axis::Index(1)),
        Distribution::Block(BlockSpec {
            grid: None,
            grid_layout: GridLayout::ColMajor,
        }),
        Distribution::BlockCyclic(BlockCyclicSpec {
            grid: None,
            blocks: odd[..nd].to_vec(),
            grid_layout: GridLayout::RowMajor,
            first: None,
        }),
        Distribution::BlockCyclic(BlockCyclicSpec {
            grid: None,
            blocks: odd[1..=nd].to_vec(),
            grid_layout: GridLayout::ColMajor,
            // The first block on grid row 1 wherever the grid has one.
            first: Some(
                process_grid(&None, ranks, nd)
                    .iter()
                    .map(|&g| u32::from(g > 1))
                    .collect(),
            ),
        }),
        Distribution::Boxes(boxes),
    ];
    all.retain(|d| check(d, shape, Some(ranks), &KeyPath::root()).is_empty());
    all
}

/// Checks every rank's piece of `st` against `expect(global linear index)`, the bytes of one
/// element, where the global index counts over `[P, *S]` for partial. Also checks that every
/// global element is held by some rank.
fn check_pieces(
    st: &TensorState,
    ranks: u64,
    piece: impl Fn(u64) -> Vec<u8>,
    expect: impl Fn(u64) -> Vec<u8>,
) {
    let placement = Placement::new(&st.dist, &st.shape, ranks);
    let size = st.dtype.size() as usize;
    let volume: u64 = st.shape.iter().product();
    let mut seen = vec![false; volume as usize];
    for rank in 0..ranks {
        let bytes = piece(rank);
        let Some(local) = placement.local_shape(rank) else {
            assert!(bytes.is_empty(), "rank {rank} holds nothing: {st:?}");
            continue;
        };
        assert_eq!(
            bytes.len() as u64,
            local.iter().product::<u64>() * size as u64
        );
        let base = if st.dist == Distribution::Partial {
            rank * volume
        } else {
            0
        };
        for_each_index(&local, |l| {
            let g = placement.to_global(rank, l);
            let gl = c_linear(&g, &st.shape);
            seen[gl as usize] = true;
            let at = linear_offset(l, &local, st.layout) as usize * size;
            assert_eq!(
                bytes[at..at + size],
                expect(base + gl)[..],
                "rank {rank}/{ranks} local {l:?} global {g:?} of {st:?}"
            );
        });
    }
    assert!(seen.iter().all(|&s| s), "not covered: {st:?} on {ranks}");
}
