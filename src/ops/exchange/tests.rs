//! Every rank's plan, run together in memory: the destination pieces must hold exactly the
//! global elements the destination distribution assigns them.

use super::*;
use crate::dist::Placement;
use crate::spec::tensor::{Axis, BlockCyclicSpec, BlockSpec, GridLayout};
use proptest::prelude::*;

/// Each rank's piece of a tensor whose element value is its global C-order linear index.
fn pieces(side: &Side<'_>, ranks: u64) -> Vec<Vec<u64>> {
    let placement = Placement::new(side.dist, side.shape, ranks);
    (0..ranks)
        .map(|r| {
            let Some(local) = placement.local_shape(r) else {
                return vec![];
            };
            let local: Vec<usize> = local.iter().map(|&n| n as usize).collect();
            let st = strides(&local, side.layout);
            let n: usize = local.iter().product();
            let mut out = vec![u64::MAX; n];
            for lin in 0..n {
                // C-order multi-index of lin over the local shape.
                let mut idx = vec![0u64; local.len()];
                let mut rest = lin;
                for a in (0..local.len()).rev() {
                    idx[a] = (rest % local[a]) as u64;
                    rest /= local[a];
                }
                let g = placement.to_global(r, &idx);
                let value = g.iter().zip(side.shape).fold(0, |acc, (i, s)| acc * s + i);
                let at: usize = idx.iter().zip(&st).map(|(i, s)| *i as usize * s).sum();
                out[at] = value;
            }
            out
        })
        .collect()
}

fn apply(runs: &[Run], src: &[u64], dst: &mut [u64]) {
    for r in runs {
        for i in 0..r.count {
            dst[r.dst + i * r.dst_stride] = src[r.src + i * r.src_stride];
        }
    }
}

/// Runs the exchange on all ranks at once and returns the destination pieces.
fn exchange(from: Side<'_>, to: Side<'_>, ranks: u64) -> Vec<Vec<u64>> {
    let src = pieces(&from, ranks);
    let plans: Vec<Exchange> = (0..ranks).map(|r| plan(from, &to, ranks, r)).collect();
    let placement = Placement::new(to.dist, to.shape, ranks);
    (0..ranks as usize)
        .map(|me| {
            let n: usize = placement
                .local_shape(me as u64)
                .map_or(0, |s| s.iter().product::<u64>() as usize);
            let mut dst = vec![u64::MAX; n];
            apply(&plans[me].local, &src[me], &mut dst);
            // From each source rank, the elements it sends me: straight from its piece where the
            // plan says they are contiguous there, else from its packed send buffer.
            let mut recv = Vec::new();
            for (r, plan) in plans.iter().enumerate() {
                let len = plan.send_counts[me];
                assert_eq!(len, plans[me].recv_counts[r], "counts agree {r} -> {me}");
                let part = match &plan.direct_send {
                    Some(at) => src[r][at[me]..at[me] + len].to_vec(),
                    None => {
                        let mut send = vec![0u64; plan.sent()];
                        apply(&plan.pack, &src[r], &mut send);
                        let offset: usize = plan.send_counts[..me].iter().sum();
                        send[offset..offset + len].to_vec()
                    }
                };
                match &plans[me].direct_recv {
                    Some(at) => dst[at[r]..at[r] + len].copy_from_slice(&part),
                    None => recv.extend_from_slice(&part),
                }
            }
            if plans[me].direct_recv.is_none() {
                apply(&plans[me].unpack, &recv, &mut dst);
            }
            dst
        })
        .collect()
}

fn dist_strategy(nd: usize, ranks: u64) -> BoxedStrategy<Distribution> {
    let axis = (0..nd).prop_map(|a| Distribution::Slab(Axis::Index(a as u8)));
    let grids: Vec<Vec<u32>> = (1..=ranks)
        .filter(|d| ranks.is_multiple_of(*d))
        .map(|d| {
            let mut g = vec![1u32; nd];
            g[0] = d as u32;
            if nd > 1 {
                g[1] = (ranks / d) as u32;
            } else {
                g[0] = ranks as u32;
            }
            g
        })
        .collect();
    let layout = prop_oneof![Just(GridLayout::ColMajor), Just(GridLayout::RowMajor)];
    let block = (proptest::sample::select(grids.clone()), layout.clone()).prop_map(|(g, l)| {
        Distribution::Block(BlockSpec {
            grid: Some(g),
            grid_layout: l,
        })
    });
    let cyclic = (
        proptest::sample::select(grids),
        layout,
        proptest::collection::vec(1..5u64, nd),
    )
        .prop_map(|(g, l, b)| {
            Distribution::BlockCyclic(BlockCyclicSpec {
                grid: Some(g),
                blocks: b,
                grid_layout: l,
                first: None,
            })
        });
    prop_oneof![
        Just(Distribution::Replicated),
        (0..ranks as u32).prop_map(Distribution::Root),
        axis,
        block,
        cyclic,
    ]
    .boxed()
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![Just(Layout::C), Just(Layout::F)]
}

fn case() -> impl Strategy<Value = (Vec<u64>, u64, Distribution, Layout, Distribution, Layout)> {
    (1..=3usize, 1..=5u64).prop_flat_map(|(nd, ranks)| {
        (
            proptest::collection::vec(1..12u64, nd),
            Just(ranks),
            dist_strategy(nd, ranks),
            layout(),
            dist_strategy(nd, ranks),
            layout(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_destination_piece_gets_its_elements(
        (shape, ranks, d_from, l_from, d_to, l_to) in case()
    ) {
        let from = Side { dist: &d_from, shape: &shape, layout: l_from };
        let to = Side { dist: &d_to, shape: &shape, layout: l_to };
        let got = exchange(from, to, ranks);
        let want = pieces(&to, ranks);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn packs_and_unpacks_come_in_a_part_per_peer(
        (shape, ranks, d_from, l_from, d_to, l_to) in case()
    ) {
        // A backend may copy each peer's runs apart: each part must hold exactly the elements
        // of one peer, the peers in order.
        let from = Side { dist: &d_from, shape: &shape, layout: l_from };
        let to = Side { dist: &d_to, shape: &shape, layout: l_to };
        for me in 0..ranks {
            let ex = plan(from, &to, ranks, me);
            for (runs, counts) in [(&ex.pack, &ex.send_counts), (&ex.unpack, &ex.recv_counts)] {
                let parts: Vec<usize> = (runs.parts().iter())
                    .map(|p| runs[p.range.clone()].iter().map(|r| r.count).sum())
                    .filter(|&n| n > 0)
                    .collect();
                let peers: Vec<usize> = counts.iter().copied().filter(|&n| n > 0).collect();
                if !runs.is_empty() {
                    prop_assert_eq!(parts, peers);
                }
            }
        }
    }

    #[test]
    fn the_rows_a_plan_visits_bound_the_runs_it_makes(
        (shape, ranks, d_from, l_from, d_to, l_to) in case()
    ) {
        let from = Side { dist: &d_from, shape: &shape, layout: l_from };
        let to = Side { dist: &d_to, shape: &shape, layout: l_to };
        for me in 0..ranks {
            let ex = plan(from, &to, ranks, me);
            let made = ex.pack.len() + ex.unpack.len() + ex.local.len();
            prop_assert!(rows(from, &to, ranks, me) >= made as u64);
        }
    }
}

#[test]
fn the_rows_of_slabs_to_slabs_are_one_per_line_and_peer() {
    // 8 x 6 in C order, rows to columns over 2 ranks: rank 0 keeps 4 lines of 3 and packs 4
    // for rank 1 (lines 6 apart: none joins), and visits 4 from rank 1, which land one after
    // the other in its piece of 3 columns (one run).
    let shape = [8u64, 6];
    let (x, y) = (
        Distribution::Slab(Axis::Index(0)),
        Distribution::Slab(Axis::Index(1)),
    );
    let side = |dist| Side {
        dist,
        shape: &shape,
        layout: Layout::C,
    };
    let ex = plan(side(&x), &side(&y), 2, 0);
    assert_eq!((ex.local.len(), ex.pack.len(), ex.unpack.len()), (4, 4, 1));
    assert_eq!(rows(side(&x), &side(&y), 2, 0), 12);
    // A 1024^3 tensor over 4 ranks: 256 x 256 lines for each of 4 destinations, and as many
    // from each of 3 sources.
    let cube = [1024u64; 3];
    let side = |dist| Side {
        dist,
        shape: &cube,
        layout: Layout::C,
    };
    assert_eq!(rows(side(&x), &side(&y), 4, 1), 7 * 256 * 256);
}

#[test]
fn slab_to_replicated_sends_each_piece_to_every_other_rank() {
    let shape = [7u64, 3];
    let from_d = Distribution::Slab(Axis::Index(0));
    let from = Side {
        dist: &from_d,
        shape: &shape,
        layout: Layout::C,
    };
    let to = Side {
        dist: &Distribution::Replicated,
        shape: &shape,
        layout: Layout::C,
    };
    let ex = plan(from, &to, 3, 0);
    // Rank 0 holds 3 rows = 9 elements, sent to ranks 1 and 2; receives 2 rows from each.
    assert_eq!(ex.send_counts, [0, 9, 9]);
    assert_eq!(ex.recv_counts, [0, 6, 6]);
    // C layout on both sides: the rows follow each other, so each peer's three move as one run
    // (a run per peer), one contiguous range at both ends: nothing is packed or unpacked.
    assert_eq!(ex.pack.len(), 2);
    assert!(ex.pack.iter().all(|r| r.count == 9 && r.src_stride == 1));
    assert_eq!(ex.direct_send, Some(vec![0, 0, 0]));
    assert_eq!(ex.direct_recv, Some(vec![0, 9, 15]));
}

#[test]
fn replicated_to_slab_moves_nothing() {
    let shape = [8u64, 8];
    let to_d = Distribution::Slab(Axis::Index(1));
    let from = Side {
        dist: &Distribution::Replicated,
        shape: &shape,
        layout: Layout::C,
    };
    let to = Side {
        dist: &to_d,
        shape: &shape,
        layout: Layout::F,
    };
    let ex = plan(from, &to, 4, 2);
    assert_eq!(ex.sent(), 0);
    assert_eq!(ex.recv_counts.iter().sum::<usize>(), 0);
    assert_eq!(ex.local.iter().map(|r| r.count).sum::<usize>(), 16);
}

#[test]
fn blocks_lay_out_each_ranks_piece_in_its_layout() {
    // Even and uneven slabs (7 columns on 3 ranks: 3, 2, 2), either axis, either layout.
    for (shape, axis, layout) in [
        ([4u64, 6], 1, Layout::F),
        ([4, 7], 1, Layout::F),
        ([7, 5], 0, Layout::C),
        ([2, 5], 0, Layout::F),
    ] {
        let to_d = Distribution::Slab(Axis::Index(axis));
        let to = Side {
            dist: &to_d,
            shape: &shape,
            layout,
        };
        let whole = Side {
            dist: &Distribution::Replicated,
            shape: &shape,
            layout: Layout::C,
        };
        let src = &pieces(&whole, 3)[0];
        let runs = blocks(Layout::C, to, 3);
        let mut send = vec![u64::MAX; src.len()];
        apply(&runs, src, &mut send);
        let want: Vec<u64> = pieces(&to, 3).concat();
        assert_eq!(send, want, "{shape:?} slab {axis} {layout:?}");
        // A part a rank's block, which a backend may copy apart.
        let parts: Vec<usize> = (runs.parts().iter())
            .map(|p| runs[p.range.clone()].iter().map(|r| r.count).sum())
            .collect();
        let blocks: Vec<usize> = (pieces(&to, 3).iter().map(Vec::len))
            .filter(|&n| n > 0)
            .collect();
        assert_eq!(parts, blocks, "{shape:?} slab {axis} {layout:?}");
    }
}

/// A block-cyclic piece of one-element blocks is many boxes of one element; the runs still
/// come out whole: contiguous where the blocks are adjacent, strided where they are a fixed step
/// apart (one run per box was a 40-byte run per element).
#[test]
fn single_element_blocks_move_in_whole_runs() {
    let shape = [6u64, 8];
    let rows = Distribution::Slab(Axis::Index(0));
    let cyclic = |grid: Vec<u32>| {
        Distribution::BlockCyclic(BlockCyclicSpec {
            grid: Some(grid),
            blocks: vec![1, 1],
            grid_layout: GridLayout::ColMajor,
            first: None,
        })
    };
    let side = |dist| Side {
        dist,
        shape: &shape,
        layout: Layout::C,
    };
    // One rank holds every block, adjacent: the whole array is one run.
    let one = cyclic(vec![1, 1]);
    let ex = plan(side(&rows), &side(&one), 1, 0);
    assert_eq!(&ex.local[..], [Run::contiguous(0, 0, 48)]);
    // Columns dealt over two ranks: rank 0's rows 0-2 keep the even columns and pack the odd
    // ones for rank 1, each of the four a box of three rows: a run down each column (its
    // rows, adjacent, make one box), not one per element.
    let two = cyclic(vec![1, 2]);
    let ex = plan(side(&rows), &side(&two), 2, 0);
    let down = |src, dst| Run {
        src,
        dst,
        count: 3,
        src_stride: 8,
        dst_stride: 4,
    };
    assert_eq!(&ex.local[..], [0, 1, 2, 3].map(|c| down(2 * c, c)));
    assert_eq!(
        &ex.pack[..],
        [0, 1, 2, 3]
            .map(|c| down(2 * c + 1, 3 * c))
            .map(|r| Run { dst_stride: 1, ..r })
    );
}
