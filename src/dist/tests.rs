//! Tests of distributions: properties over random shapes, rank counts and distributions, checked
//! against an independent reference (a brute-force dealing of rows, blocks and grid numbering),
//! plus the documented examples and the errors `check` reports.

use super::*;
use crate::spec::diag::{Diagnostic, KeyPath};
use crate::spec::tensor::*;
use proptest::prelude::*;
use proptest::sample::Index;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Calls `f` on every index of `shape`, in C order.
pub(crate) fn for_each_index(shape: &[u64], mut f: impl FnMut(&[u64])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0u64; shape.len()];
    loop {
        f(&idx);
        let mut a = shape.len();
        loop {
            if a == 0 {
                return;
            }
            a -= 1;
            idx[a] += 1;
            if idx[a] < shape[a] {
                break;
            }
            idx[a] = 0;
        }
    }
}

/// Calls `f` on every global index inside `region`.
fn for_each_in_region(region: &Region, mut f: impl FnMut(&[u64])) {
    let extent: Vec<u64> = region
        .lower
        .iter()
        .zip(&region.upper)
        .map(|(l, u)| u.saturating_sub(*l))
        .collect();
    for_each_index(&extent, |off| {
        let g: Vec<u64> = off.iter().zip(&region.lower).map(|(o, l)| o + l).collect();
        f(&g)
    });
}

fn contains(region: &Region, g: &[u64]) -> bool {
    g.len() == region.lower.len()
        && (0..g.len()).all(|a| region.lower[a] <= g[a] && g[a] < region.upper[a])
}

fn within(local: &[u64], shape: &[u64]) -> bool {
    local.len() == shape.len() && local.iter().zip(shape).all(|(l, s)| l < s)
}

fn root_path() -> KeyPath {
    KeyPath::root().key("tensors").key("a").key("distribution")
}

fn diags(dist: &Distribution, shape: &[u64], ranks: Option<u64>) -> Vec<Diagnostic> {
    check(dist, shape, ranks, &root_path())
}

// ---------------------------------------------------------------------------------------------
// Independent reference of the rules
// ---------------------------------------------------------------------------------------------

/// Rank of grid coordinates, written straight from the documented numbering: col-major has the
/// first grid axis varying fastest, row-major the last.
fn reference_rank(coords: &[u64], grid: &[u32], layout: GridLayout) -> u64 {
    let nd = grid.len();
    let mut rank = 0;
    for a in 0..nd {
        let stride: u64 = match layout {
            GridLayout::ColMajor => grid[..a].iter().map(|&g| g as u64).product(),
            GridLayout::RowMajor => grid[a + 1..].iter().map(|&g| g as u64).product(),
        };
        rank += coords[a] * stride;
    }
    rank
}

/// For one axis of size `n`: (part, local index) of every global index, by dealing the rows out
/// literally.
#[derive(Debug, Clone, Copy)]
enum RefSplit {
    Whole,
    /// Rank r gets n//p + (r < n%p) rows, in rank order.
    Slab(u64),
    /// Blocks of ceil(n/p) rows, in order.
    Block(u64),
    /// (parts, block, first): block k goes to part (first + k) % parts.
    Cyclic(u64, u64, u64),
}

fn reference_table(split: RefSplit, n: u64) -> (Vec<(u64, u64)>, u64) {
    let mut table = Vec::with_capacity(n as usize);
    match split {
        RefSplit::Whole => {
            table.extend((0..n).map(|g| (0, g)));
            (table, 1)
        }
        RefSplit::Slab(p) => {
            for r in 0..p {
                let rows = n / p + u64::from(r < n % p);
                table.extend((0..rows).map(|l| (r, l)));
            }
            (table, p)
        }
        RefSplit::Block(p) => {
            let b = n.div_ceil(p);
            let mut r = 0;
            while (table.len() as u64) < n {
                let take = b.min(n - table.len() as u64);
                table.extend((0..take).map(|l| (r, l)));
                r += 1;
            }
            assert!(r <= p);
            (table, p)
        }
        RefSplit::Cyclic(p, nb, first) => {
            let mut next_local = vec![0u64; p as usize];
            let mut k = 0;
            while (table.len() as u64) < n {
                let owner = (first + k) % p;
                let take = nb.min(n - table.len() as u64);
                for _ in 0..take {
                    table.push((owner, next_local[owner as usize]));
                    next_local[owner as usize] += 1;
                }
                k += 1;
            }
            (table, p)
        }
    }
}

/// Maps grid coordinates to a rank.
type RankOf = Box<dyn Fn(&[u64]) -> u64>;

/// The reference for a non-replicated, non-box distribution: per-axis tables, and the rank of a
/// vector of per-axis parts.
struct Reference {
    tables: Vec<(Vec<(u64, u64)>, u64)>,
    rank_of: RankOf,
}

impl Reference {
    fn new(dist: &Distribution, shape: &[u64], ranks: u64) -> Option<Reference> {
        let nd = shape.len();
        let (splits, rank_of): (Vec<RefSplit>, RankOf) = match dist {
            Distribution::Slab(axis) => {
                let a = axis.index();
                return Some(Reference {
                    tables: (0..nd)
                        .map(|i| {
                            reference_table(
                                if i == a {
                                    RefSplit::Slab(ranks)
                                } else {
                                    RefSplit::Whole
                                },
                                shape[i],
                            )
                        })
                        .collect(),
                    rank_of: Box::new(move |parts: &[u64]| parts[a]),
                });
            }
            Distribution::Block(b) => {
                let grid = process_grid(&b.grid, ranks, nd);
                let layout = b.grid_layout;
                (
                    grid.iter().map(|&p| RefSplit::Block(p as u64)).collect(),
                    Box::new(move |c: &[u64]| reference_rank(c, &grid, layout)),
                )
            }
            Distribution::BlockCyclic(c) => {
                let grid = process_grid(&c.grid, ranks, nd);
                let layout = c.grid_layout;
                (
                    (0..nd)
                        .map(|i| {
                            RefSplit::Cyclic(
                                grid[i] as u64,
                                c.blocks[i],
                                c.first.as_ref().map_or(0, |f| f[i] as u64),
                            )
                        })
                        .collect(),
                    Box::new(move |co: &[u64]| reference_rank(co, &grid, layout)),
                )
            }
            _ => return None,
        };
        Some(Reference {
            tables: (0..nd)
                .map(|i| reference_table(splits[i], shape[i]))
                .collect(),
            rank_of,
        })
    }

    fn owner(&self, g: &[u64]) -> (u64, Vec<u64>) {
        let (parts, local): (Vec<u64>, Vec<u64>) = g
            .iter()
            .enumerate()
            .map(|(a, &x)| self.tables[a].0[x as usize])
            .unzip();
        ((self.rank_of)(&parts), local)
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Every ordered tuple of `nd` positive integers whose product is `p`.
fn factorizations(p: u64, nd: usize) -> Vec<Vec<u32>> {
    if nd == 0 {
        return if p == 1 { vec![vec![]] } else { vec![] };
    }
    let mut out = Vec::new();
    for d in (1..=p).filter(|d| p.is_multiple_of(*d)) {
        for mut rest in factorizations(p / d, nd - 1) {
            rest.insert(0, d as u32);
            out.push(rest);
        }
    }
    out
}

fn layout() -> impl Strategy<Value = GridLayout> {
    prop_oneof![Just(GridLayout::ColMajor), Just(GridLayout::RowMajor)]
}

/// `ranks` boxes covering `shape` exactly once, made by splitting a box along a random axis at a
/// random point, `ranks - 1` times (some boxes may come out empty), then shuffled.
fn boxes(shape: Vec<u64>, ranks: u64) -> impl Strategy<Value = Distribution> {
    let nd = shape.len();
    prop::collection::vec((any::<Index>(), 0..nd, 0..=40u64), (ranks - 1) as usize)
        .prop_map(move |cuts| {
            let mut out: Vec<GlobalBox> = vec![[vec![0; nd], shape.clone()]];
            for (pick, axis, cut) in cuts {
                let i = pick.index(out.len());
                let [lo, hi] = out[i].clone();
                let at = lo[axis] + cut % (hi[axis] - lo[axis] + 1);
                let mut first_hi = hi.clone();
                first_hi[axis] = at;
                let mut second_lo = lo.clone();
                second_lo[axis] = at;
                out[i] = [lo, first_hi];
                out.push([second_lo, hi]);
            }
            out
        })
        .prop_shuffle()
        .prop_map(Distribution::Boxes)
}

fn distribution(shape: Vec<u64>, ranks: u64) -> BoxedStrategy<Distribution> {
    let nd = shape.len();
    let grids = factorizations(ranks, nd);
    let slab = (0..nd, any::<bool>()).prop_map(|(a, by_name)| {
        let axis = match (by_name, a) {
            (true, 0) => Axis::Name(AxisName::X),
            (true, 1) => Axis::Name(AxisName::Y),
            (true, 2) => Axis::Name(AxisName::Z),
            _ => Axis::Index(a as u8),
        };
        Distribution::Slab(axis)
    });
    let block = (prop::sample::select(grids.clone()), layout()).prop_map(|(grid, grid_layout)| {
        Distribution::Block(BlockSpec {
            grid: Some(grid),
            grid_layout,
        })
    });
    let cyclic = (
        prop::sample::select(grids),
        layout(),
        prop::collection::vec(1..=8u64, nd),
    )
        .prop_flat_map(|(grid, grid_layout, blocks)| {
            let first = grid.iter().map(|&g| 0..g).collect::<Vec<_>>();
            (
                Just(grid),
                Just(grid_layout),
                Just(blocks),
                prop::option::of(first),
            )
        })
        .prop_map(|(grid, grid_layout, blocks, first)| {
            Distribution::BlockCyclic(BlockCyclicSpec {
                grid: Some(grid),
                blocks,
                grid_layout,
                first,
            })
        });
    prop_oneof![
        1 => Just(Distribution::Replicated),
        1 => Just(Distribution::Partial),
        1 => (0..ranks as u32).prop_map(Distribution::Root),
        2 => slab,
        3 => block,
        4 => cyclic,
        3 => boxes(shape, ranks),
    ]
    .boxed()
}

/// A global shape (1 to 3 axes, sizes 1 to 39), a rank count (1 to 9) and a valid distribution.
fn case() -> impl Strategy<Value = (Vec<u64>, u64, Distribution)> {
    (prop::collection::vec(1..40u64, 1..=3), 1..=9u64).prop_flat_map(|(shape, ranks)| {
        (Just(shape.clone()), Just(ranks), distribution(shape, ranks))
    })
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every element is owned by exactly the expected ranks, owners and to_global are inverse,
    /// the local indices are within the local shapes, and each rank holds exactly its local
    /// element count.
    #[test]
    fn owners_and_to_global_are_inverse((shape, ranks, dist) in case()) {
        let pl = Placement::new(&dist, &shape, ranks);
        let local_shapes: Vec<Option<Vec<u64>>> = (0..ranks).map(|r| pl.local_shape(r)).collect();
        let mut held = vec![0u64; ranks as usize];
        let mut failure: Option<String> = None;
        for_each_index(&shape, |g| {
            if failure.is_some() {
                return;
            }
            let owners = pl.owners(g);
            let mut who: Vec<u64> = owners.iter().map(|(r, _)| *r).collect();
            who.sort_unstable();
            let expected: Vec<u64> = match &dist {
                Distribution::Replicated | Distribution::Partial => (0..ranks).collect(),
                Distribution::Root(r) => vec![u64::from(*r)],
                _ => {
                    if who.len() != 1 {
                        failure = Some(format!("element {g:?} has owners {who:?}, expected exactly one"));
                    }
                    return check_each(&pl, g, &owners, &local_shapes, &mut held, &mut failure);
                }
            };
            if who != expected {
                failure = Some(format!("element {g:?} has owners {who:?}, expected {expected:?}"));
                return;
            }
            check_each(&pl, g, &owners, &local_shapes, &mut held, &mut failure);
        });
        if let Some(f) = failure {
            return Err(TestCaseError::fail(f));
        }
        for r in 0..ranks {
            let count: u64 = local_shapes[r as usize].as_ref().map_or(0, |s| s.iter().product());
            prop_assert_eq!(held[r as usize], count, "rank {} owns {} elements but its local shape {:?} holds {}",
                r, held[r as usize], &local_shapes[r as usize], count);
        }
    }

    /// The local element counts add up to the global count (P times for replicated and partial);
    /// only the root holds anything under root.
    #[test]
    fn local_counts_sum_to_the_global_count((shape, ranks, dist) in case()) {
        let pl = Placement::new(&dist, &shape, ranks);
        let total: u64 = shape.iter().product();
        let sum: u64 = (0..ranks)
            .map(|r| pl.local_shape(r).map_or(0, |s| s.iter().product::<u64>()))
            .sum();
        let expected = match dist {
            Distribution::Replicated | Distribution::Partial => total * ranks,
            _ => total,
        };
        prop_assert_eq!(sum, expected);
        if let Distribution::Root(root) = dist {
            for r in 0..ranks {
                prop_assert_eq!(pl.local_shape(r).is_some(), r == u64::from(root));
            }
        }
        for r in 0..ranks {
            if let Some(s) = pl.local_shape(r) {
                prop_assert_eq!(s.len(), shape.len());
            }
        }
    }

    /// regions(rank) volumes add up to the local count, every element in a rank's regions is
    /// owned by that rank, the owner's regions contain each element, and the regions come in
    /// local order (the i-th element of the local array, in C order over the regions, maps back
    /// through to_global for one-region-per-axis splits).
    #[test]
    fn regions_cover_exactly_the_local_piece((shape, ranks, dist) in case()) {
        let pl = Placement::new(&dist, &shape, ranks);
        let all_regions: Vec<Vec<Region>> = (0..ranks).map(|r| pl.regions(r)).collect();
        for r in 0..ranks {
            let regions = &all_regions[r as usize];
            let volume: u64 = regions.iter().map(Region::volume).sum();
            let count: u64 = pl.local_shape(r).map_or(0, |s| s.iter().product());
            prop_assert_eq!(volume, count, "rank {} regions {:?}", r, regions);
            for region in regions {
                prop_assert_eq!(region.lower.len(), shape.len());
                prop_assert_eq!(region.upper.len(), shape.len());
                prop_assert!(region.volume() > 0, "empty region {:?} on rank {}", region, r);
                prop_assert!(region.upper.iter().zip(&shape).all(|(u, s)| u <= s), "region {:?} outside {:?}", region, shape);
                let mut bad = None;
                for_each_in_region(region, |g| {
                    if bad.is_none() && !pl.owners(g).iter().any(|(o, _)| *o == r) {
                        bad = Some(g.to_vec());
                    }
                });
                prop_assert!(bad.is_none(), "rank {} region {:?} holds {:?}, which the rank does not own", r, region, bad);
            }
        }
        let mut missing = None;
        for_each_index(&shape, |g| {
            if missing.is_some() {
                return;
            }
            for (o, _) in pl.owners(g) {
                if !all_regions[o as usize].iter().any(|reg| contains(reg, g)) {
                    missing = Some((g.to_vec(), o));
                }
            }
        });
        prop_assert!(missing.is_none(), "element and owner {:?} not in the owner's regions", missing);
    }

    /// Regions are listed in local order: walking them, the global lower corners map to local
    /// indices that increase in C order (block-cyclic gives several regions per rank).
    #[test]
    fn regions_are_in_local_order((shape, ranks, dist) in case()) {
        let pl = Placement::new(&dist, &shape, ranks);
        for r in 0..ranks {
            let locals: Vec<Vec<u64>> = pl
                .regions(r)
                .iter()
                .map(|reg| {
                    pl.owners(&reg.lower)
                        .into_iter()
                        .find(|(o, _)| *o == r)
                        .map(|(_, l)| l)
                        .expect("a region's corner is owned by its rank")
                })
                .collect();
            for w in locals.windows(2) {
                prop_assert!(w[0] < w[1], "rank {}: regions out of local order: {:?}", r, locals);
            }
        }
    }

    /// Slab, block and block-cyclic agree with a brute-force dealing of rows and blocks and the
    /// documented grid numbering.
    #[test]
    fn grid_distributions_match_the_reference((shape, ranks, dist) in case()) {
        let Some(reference) = Reference::new(&dist, &shape, ranks) else { return Ok(()); };
        let pl = Placement::new(&dist, &shape, ranks);
        let mut counts = vec![0u64; ranks as usize];
        let mut failure = None;
        for_each_index(&shape, |g| {
            let (r, l) = reference.owner(g);
            counts[r as usize] += 1;
            let got = pl.owners(g);
            if failure.is_none() && got != vec![(r, l.clone())] {
                failure = Some(format!("element {g:?}: owners {got:?}, reference {:?}", (r, l)));
            }
        });
        prop_assert!(failure.is_none(), "{}", failure.unwrap());
        for r in 0..ranks {
            let count: u64 = pl.local_shape(r).map_or(0, |s| s.iter().product());
            prop_assert_eq!(count, counts[r as usize], "rank {} local shape {:?}", r, pl.local_shape(r));
        }
    }

    /// check accepts every valid distribution, with the rank count known or not.
    #[test]
    fn check_accepts_valid_distributions((shape, ranks, dist) in case()) {
        let with = diags(&dist, &shape, Some(ranks));
        prop_assert!(with.is_empty(), "{:?}", with);
        let without = diags(&dist, &shape, None);
        prop_assert!(without.is_empty(), "{:?}", without);
    }

    /// grid_coords and grid_rank are inverse, coordinates stay inside the grid, and they follow
    /// the documented numbering.
    #[test]
    fn grid_coords_and_grid_rank_are_inverse(grid in prop::collection::vec(1..=6u32, 1..=3), layout in layout()) {
        let size: u64 = grid.iter().map(|&g| g as u64).product();
        let mut seen = std::collections::HashSet::new();
        for r in 0..size {
            let coords = grid_coords(r, &grid, layout);
            prop_assert_eq!(coords.len(), grid.len());
            prop_assert!(coords.iter().zip(&grid).all(|(c, g)| *c < *g as u64), "{:?} outside {:?}", coords, grid);
            prop_assert_eq!(grid_rank(&coords, &grid, layout), r);
            prop_assert_eq!(reference_rank(&coords, &grid, layout), r);
            prop_assert!(seen.insert(coords.clone()));
            if grid.len() == 2 {
                let (nprow, npcol) = (grid[0] as u64, grid[1] as u64);
                let expected = match layout {
                    GridLayout::ColMajor => vec![r % nprow, r / nprow],
                    GridLayout::RowMajor => vec![r / npcol, r % npcol],
                };
                prop_assert_eq!(&coords, &expected);
            }
        }
    }

    /// The axis rules on their own, for any size and part count: numroc adds up, and each
    /// split's owner/to_global/count agree.
    #[test]
    fn axis_splits_are_consistent(n in 1..60u64, parts in 1..=9u64, block in 1..=8u64, first in 0..9u64) {
        let first = first % parts;
        for split in [
            AxisSplit::Whole,
            AxisSplit::Even { parts },
            AxisSplit::Block { parts },
            AxisSplit::Cyclic { parts, block, first },
        ] {
            let total: u64 = (0..split.parts()).map(|i| split.count(n, i)).sum();
            prop_assert_eq!(total, n, "{:?}", split);
            for g in 0..n {
                let (i, l) = split.owner(n, g);
                prop_assert!(i < split.parts(), "{:?}: {} -> part {}", split, g, i);
                prop_assert!(l < split.count(n, i), "{:?}: {} -> ({}, {})", split, g, i, l);
                prop_assert_eq!(split.to_global(n, i, l), g, "{:?}", split);
            }
            for i in 0..split.parts() {
                let covered: u64 = split.intervals(n, i).iter().map(|(lo, hi)| hi - lo).sum();
                prop_assert_eq!(covered, split.count(n, i), "{:?} part {}", split, i);
            }
        }
        let sum: u64 = (0..parts).map(|i| axis::numroc(n, block, i, first, parts)).sum();
        prop_assert_eq!(sum, n);
    }
}

/// Per-owner checks shared by the owners test.
fn check_each(
    pl: &Placement<'_>,
    g: &[u64],
    owners: &[(u64, Vec<u64>)],
    local_shapes: &[Option<Vec<u64>>],
    held: &mut [u64],
    failure: &mut Option<String>,
) {
    for (r, l) in owners {
        let Some(Some(ls)) = local_shapes.get(*r as usize) else {
            *failure = Some(format!(
                "element {g:?} owned by rank {r}, which holds nothing"
            ));
            return;
        };
        if !within(l, ls) {
            *failure = Some(format!(
                "element {g:?} on rank {r} at local {l:?}, outside local shape {ls:?}"
            ));
            return;
        }
        let back = pl.to_global(*r, l);
        if back != g {
            *failure = Some(format!(
                "element {g:?} on rank {r} at local {l:?}, but to_global gives {back:?}"
            ));
            return;
        }
        held[*r as usize] += 1;
    }
}

// ---------------------------------------------------------------------------------------------
// Documented examples
// ---------------------------------------------------------------------------------------------

#[test]
fn slab_39_by_64_on_4_ranks() {
    let dist = Distribution::Slab(Axis::Name(AxisName::X));
    let shape = [39, 64];
    let pl = Placement::new(&dist, &shape, 4);
    let shapes: Vec<Vec<u64>> = (0..4).map(|r| pl.local_shape(r).unwrap()).collect();
    assert_eq!(
        shapes,
        [vec![10, 64], vec![10, 64], vec![10, 64], vec![9, 64]]
    );
    assert_eq!(pl.owners(&[29, 5]), vec![(2, vec![9, 5])]);
    assert_eq!(pl.owners(&[30, 5]), vec![(3, vec![0, 5])]);
    assert_eq!(pl.to_global(3, &[8, 63]), vec![38, 63]);
    assert_eq!(
        pl.regions(1),
        vec![Region {
            lower: vec![10, 0],
            upper: vec![20, 64]
        }]
    );
    assert!(diags(&dist, &shape, Some(4)).is_empty());
}

#[test]
fn slab_along_y_by_index_and_by_name_agree() {
    let shape = [5, 7];
    let by_index = Distribution::Slab(Axis::Index(1));
    let by_name = Distribution::Slab(Axis::Name(AxisName::Y));
    let a = Placement::new(&by_index, &shape, 3);
    let b = Placement::new(&by_name, &shape, 3);
    for r in 0..3 {
        assert_eq!(a.local_shape(r), b.local_shape(r));
    }
    let shapes: Vec<Vec<u64>> = (0..3).map(|r| a.local_shape(r).unwrap()).collect();
    assert_eq!(shapes, [vec![5, 3], vec![5, 2], vec![5, 2]]);
}

#[test]
fn slab_with_more_ranks_than_rows() {
    let dist = Distribution::Slab(Axis::Index(0));
    let shape = [3];
    let pl = Placement::new(&dist, &shape, 5);
    let shapes: Vec<Vec<u64>> = (0..5).map(|r| pl.local_shape(r).unwrap()).collect();
    assert_eq!(shapes, [vec![1], vec![1], vec![1], vec![0], vec![0]]);
    assert_eq!(pl.regions(4), vec![]);
    assert_eq!(pl.owners(&[2]), vec![(2, vec![0])]);
}

#[test]
fn col_major_2x2_grid_numbering() {
    let grid = [2, 2];
    let table: Vec<Vec<u64>> = (0..2)
        .map(|prow| {
            (0..2)
                .map(|pcol| grid_rank(&[prow, pcol], &grid, GridLayout::ColMajor))
                .collect()
        })
        .collect();
    assert_eq!(table, [[0, 2], [1, 3]]);
    assert_eq!(grid_coords(2, &grid, GridLayout::ColMajor), [0, 1]);
    assert_eq!(grid_coords(1, &grid, GridLayout::ColMajor), [1, 0]);
    assert_eq!(GridLayout::default(), GridLayout::ColMajor);
}

#[test]
fn row_major_2x2_grid_numbering() {
    let grid = [2, 2];
    let table: Vec<Vec<u64>> = (0..2)
        .map(|prow| {
            (0..2)
                .map(|pcol| grid_rank(&[prow, pcol], &grid, GridLayout::RowMajor))
                .collect()
        })
        .collect();
    assert_eq!(table, [[0, 1], [2, 3]]);
    assert_eq!(grid_coords(2, &grid, GridLayout::RowMajor), [1, 0]);
    assert_eq!(grid_coords(1, &grid, GridLayout::RowMajor), [0, 1]);
}

#[test]
fn non_square_grid_numbering() {
    // 2x3 grid: col-major prow = r % 2, pcol = r / 2; row-major prow = r / 3, pcol = r % 3.
    let grid = [2, 3];
    assert_eq!(grid_coords(3, &grid, GridLayout::ColMajor), [1, 1]);
    assert_eq!(grid_coords(4, &grid, GridLayout::ColMajor), [0, 2]);
    assert_eq!(grid_coords(3, &grid, GridLayout::RowMajor), [1, 0]);
    assert_eq!(grid_coords(4, &grid, GridLayout::RowMajor), [1, 1]);
    assert_eq!(grid_rank(&[1, 2], &grid, GridLayout::ColMajor), 5);
    assert_eq!(grid_rank(&[0, 2], &grid, GridLayout::RowMajor), 2);
}

#[test]
fn block_uses_ceiling_blocks() {
    let dist = Distribution::Block(BlockSpec {
        grid: Some(vec![4]),
        grid_layout: GridLayout::ColMajor,
    });
    let shape = [10];
    let pl = Placement::new(&dist, &shape, 4);
    let shapes: Vec<Vec<u64>> = (0..4).map(|r| pl.local_shape(r).unwrap()).collect();
    assert_eq!(shapes, [vec![3], vec![3], vec![3], vec![1]]);
    assert_eq!(pl.owners(&[9]), vec![(3, vec![0])]);
    assert_eq!(pl.owners(&[5]), vec![(1, vec![2])]);
    assert_eq!(
        pl.regions(3),
        vec![Region {
            lower: vec![9],
            upper: vec![10]
        }]
    );

    // 5 on 4: blocks of 2, the last rank gets nothing.
    let shape = [5];
    let pl = Placement::new(&dist, &shape, 4);
    let shapes: Vec<Vec<u64>> = (0..4).map(|r| pl.local_shape(r).unwrap()).collect();
    assert_eq!(shapes, [vec![2], vec![2], vec![1], vec![0]]);
    assert_eq!(pl.regions(3), vec![]);
}

#[test]
fn block_2d_over_a_row_major_grid() {
    // 7x5 over a 2x3 grid, row-major: rows in blocks of 4 (4, 3), cols in blocks of 2 (2, 2, 1).
    let dist = Distribution::Block(BlockSpec {
        grid: Some(vec![2, 3]),
        grid_layout: GridLayout::RowMajor,
    });
    let shape = [7, 5];
    let pl = Placement::new(&dist, &shape, 6);
    let shapes: Vec<Vec<u64>> = (0..6).map(|r| pl.local_shape(r).unwrap()).collect();
    assert_eq!(
        shapes,
        [
            vec![4, 2],
            vec![4, 2],
            vec![4, 1],
            vec![3, 2],
            vec![3, 2],
            vec![3, 1]
        ]
    );
    // (5, 4): prow 1 (local 1), pcol 2 (local 0) -> rank 1*3 + 2 = 5.
    assert_eq!(pl.owners(&[5, 4]), vec![(5, vec![1, 0])]);
}

/// Hand computation: shape (10, 7) over a 2x2 col-major grid, blocks (3, 2), first (1, 0).
/// Rows: blocks [0-2] -> prow 1, [3-5] -> prow 0, [6-8] -> prow 1, [9] -> prow 0,
///   so prow 0 holds rows 3,4,5,9 (4) and prow 1 holds rows 0,1,2,6,7,8 (6).
/// Cols: [0,1] -> pcol 0, [2,3] -> pcol 1, [4,5] -> pcol 0, [6] -> pcol 1,
///   so pcol 0 holds cols 0,1,4,5 (4) and pcol 1 holds 2,3,6 (3).
/// Col-major ranks: 0 = (0,0), 1 = (1,0), 2 = (0,1), 3 = (1,1).
#[test]
fn block_cyclic_hand_computed_example() {
    let spec = |grid_layout| {
        Distribution::BlockCyclic(BlockCyclicSpec {
            grid: Some(vec![2, 2]),
            blocks: vec![3, 2],
            grid_layout,
            first: Some(vec![1, 0]),
        })
    };
    let dist = spec(GridLayout::ColMajor);
    let shape = [10, 7];
    let pl = Placement::new(&dist, &shape, 4);
    let shapes: Vec<Vec<u64>> = (0..4).map(|r| pl.local_shape(r).unwrap()).collect();
    assert_eq!(shapes, [vec![4, 4], vec![6, 4], vec![4, 3], vec![6, 3]]);

    // Row 9 is prow 0's local row 3; col 6 is pcol 1's local col 2 -> rank 2.
    assert_eq!(pl.owners(&[9, 6]), vec![(2, vec![3, 2])]);
    // Row 7 is prow 1's local row 4; col 5 is pcol 0's local col 3 -> rank 1.
    assert_eq!(pl.owners(&[7, 5]), vec![(1, vec![4, 3])]);
    // Row 0 is prow 1's local row 0; col 0 is pcol 0's local col 0 -> rank 1.
    assert_eq!(pl.owners(&[0, 0]), vec![(1, vec![0, 0])]);
    assert_eq!(pl.to_global(1, &[3, 2]), vec![6, 4]);
    assert_eq!(pl.to_global(2, &[3, 2]), vec![9, 6]);
    assert_eq!(pl.to_global(0, &[0, 0]), vec![3, 0]);

    let region = |lo: [u64; 2], hi: [u64; 2]| Region {
        lower: lo.to_vec(),
        upper: hi.to_vec(),
    };
    assert_eq!(
        pl.regions(1),
        vec![
            region([0, 0], [3, 2]),
            region([0, 4], [3, 6]),
            region([6, 0], [9, 2]),
            region([6, 4], [9, 6])
        ]
    );
    assert_eq!(
        pl.regions(2),
        vec![
            region([3, 2], [6, 4]),
            region([3, 6], [6, 7]),
            region([9, 2], [10, 4]),
            region([9, 6], [10, 7])
        ]
    );

    // Row-major numbering: rank 1 = (0,1), rank 2 = (1,0).
    let dist = spec(GridLayout::RowMajor);
    let pl = Placement::new(&dist, &shape, 4);
    let shapes: Vec<Vec<u64>> = (0..4).map(|r| pl.local_shape(r).unwrap()).collect();
    assert_eq!(shapes, [vec![4, 4], vec![4, 3], vec![6, 4], vec![6, 3]]);
    assert_eq!(pl.owners(&[9, 6]), vec![(1, vec![3, 2])]);
    assert_eq!(pl.owners(&[7, 5]), vec![(2, vec![4, 3])]);
}

#[test]
fn block_cyclic_default_first_is_zero() {
    // 10 in blocks of 3 over 2: [0-2] -> 0, [3-5] -> 1, [6-8] -> 0, [9] -> 1 (numroc 6 and 4).
    let dist = Distribution::BlockCyclic(BlockCyclicSpec {
        grid: Some(vec![2]),
        blocks: vec![3],
        grid_layout: GridLayout::ColMajor,
        first: None,
    });
    let shape = [10];
    let pl = Placement::new(&dist, &shape, 2);
    assert_eq!(pl.local_shape(0), Some(vec![6]));
    assert_eq!(pl.local_shape(1), Some(vec![4]));
    assert_eq!(pl.owners(&[9]), vec![(1, vec![3])]);
    assert_eq!(pl.owners(&[7]), vec![(0, vec![4])]);
}

#[test]
fn replicated_partial_and_root() {
    let shape = [3, 2];
    for dist in [Distribution::Replicated, Distribution::Partial] {
        let pl = Placement::new(&dist, &shape, 3);
        for r in 0..3 {
            assert_eq!(pl.local_shape(r), Some(vec![3, 2]));
            assert_eq!(
                pl.regions(r),
                vec![Region {
                    lower: vec![0, 0],
                    upper: vec![3, 2]
                }]
            );
        }
        assert_eq!(
            pl.owners(&[2, 1]),
            vec![(0, vec![2, 1]), (1, vec![2, 1]), (2, vec![2, 1])]
        );
    }
    let dist = Distribution::Root(1);
    let pl = Placement::new(&dist, &shape, 3);
    assert_eq!(pl.local_shape(0), None);
    assert_eq!(pl.local_shape(1), Some(vec![3, 2]));
    assert_eq!(pl.regions(2), vec![]);
    assert_eq!(pl.owners(&[2, 1]), vec![(1, vec![2, 1])]);
}

#[test]
fn boxes_example() {
    let dist = Distribution::Boxes(vec![[vec![0, 0], vec![2, 4]], [vec![2, 0], vec![4, 4]]]);
    let shape = [4, 4];
    let pl = Placement::new(&dist, &shape, 2);
    assert_eq!(pl.local_shape(1), Some(vec![2, 4]));
    assert_eq!(pl.owners(&[3, 1]), vec![(1, vec![1, 1])]);
    assert_eq!(pl.to_global(1, &[1, 1]), vec![3, 1]);
    assert!(diags(&dist, &shape, Some(2)).is_empty());
}

#[test]
fn region_volume_and_intersection() {
    let a = Region {
        lower: vec![0, 0],
        upper: vec![3, 4],
    };
    let b = Region {
        lower: vec![2, 1],
        upper: vec![5, 2],
    };
    assert_eq!(a.volume(), 12);
    assert_eq!(
        a.intersect(&b),
        Some(Region {
            lower: vec![2, 1],
            upper: vec![3, 2]
        })
    );
    let c = Region {
        lower: vec![3, 0],
        upper: vec![4, 4],
    };
    assert_eq!(a.intersect(&c), None);
}

#[test]
fn linear_offsets_in_c_and_f_order() {
    assert_eq!(linear_offset(&[1, 2], &[3, 4], Layout::C), 6);
    assert_eq!(linear_offset(&[1, 2], &[3, 4], Layout::F), 7);
}

// ---------------------------------------------------------------------------------------------
// check: errors
// ---------------------------------------------------------------------------------------------

fn only_one(d: Vec<Diagnostic>) -> Diagnostic {
    assert_eq!(d.len(), 1, "expected one diagnostic, got {d:#?}");
    d.into_iter().next().unwrap()
}

#[test]
fn check_rejects_a_grid_whose_product_is_not_the_rank_count() {
    let shape = [6, 6];
    let dist = Distribution::Block(BlockSpec {
        grid: Some(vec![3, 2]),
        grid_layout: GridLayout::ColMajor,
    });
    let d = only_one(diags(&dist, &shape, Some(4)));
    assert_eq!(d.path.to_string(), "tensors.a.distribution.block.grid");
    assert!(
        d.message.contains("3x2") && d.message.contains('6') && d.message.contains('4'),
        "{}",
        d.message
    );
    // Without a rank count, the grid cannot be judged.
    assert!(diags(&dist, &shape, None).is_empty());

    let dist = Distribution::BlockCyclic(BlockCyclicSpec {
        grid: Some(vec![3, 2]),
        blocks: vec![2, 2],
        grid_layout: GridLayout::RowMajor,
        first: None,
    });
    let d = only_one(diags(&dist, &shape, Some(4)));
    assert_eq!(
        d.path.to_string(),
        "tensors.a.distribution.block_cyclic.grid"
    );
}

#[test]
fn check_rejects_a_grid_of_the_wrong_rank() {
    let dist = Distribution::Block(BlockSpec {
        grid: Some(vec![2, 2]),
        grid_layout: GridLayout::ColMajor,
    });
    let d = only_one(diags(&dist, &[8], Some(4)));
    assert_eq!(d.path.to_string(), "tensors.a.distribution.block.grid");
}

#[test]
fn check_rejects_bad_block_cyclic_parameters() {
    let dist = Distribution::BlockCyclic(BlockCyclicSpec {
        grid: Some(vec![2, 2]),
        blocks: vec![2],
        grid_layout: GridLayout::ColMajor,
        first: Some(vec![0, 2]),
    });
    let d = diags(&dist, &[8, 8], Some(4));
    let paths: Vec<String> = d.iter().map(|d| d.path.to_string()).collect();
    assert_eq!(
        paths,
        [
            "tensors.a.distribution.block_cyclic.blocks",
            "tensors.a.distribution.block_cyclic.first[1]"
        ],
        "{d:#?}"
    );
    let dist = Distribution::BlockCyclic(BlockCyclicSpec {
        grid: Some(vec![2, 2]),
        blocks: vec![2, 2],
        grid_layout: GridLayout::ColMajor,
        first: Some(vec![0]),
    });
    let d = only_one(diags(&dist, &[8, 8], Some(4)));
    assert_eq!(
        d.path.to_string(),
        "tensors.a.distribution.block_cyclic.first"
    );
}

#[test]
fn check_rejects_overlapping_boxes() {
    let dist = Distribution::Boxes(vec![[vec![0, 0], vec![3, 4]], [vec![2, 0], vec![4, 4]]]);
    let d = only_one(diags(&dist, &[4, 4], Some(2)));
    assert_eq!(d.path.to_string(), "tensors.a.distribution.boxes[1]");
    assert!(d.message.contains("overlaps box 0"), "{}", d.message);
    assert!(
        d.message.contains("[2, 0]") && d.message.contains("[3, 4]"),
        "{}",
        d.message
    );
}

#[test]
fn check_rejects_boxes_that_leave_a_gap() {
    let dist = Distribution::Boxes(vec![[vec![0, 0], vec![2, 4]], [vec![3, 0], vec![4, 4]]]);
    let d = only_one(diags(&dist, &[4, 4], Some(2)));
    assert_eq!(d.path.to_string(), "tensors.a.distribution.boxes");
    assert!(d.message.contains("12 of the 16"), "{}", d.message);
}

#[test]
fn check_rejects_boxes_outside_the_shape_or_miscounted() {
    let dist = Distribution::Boxes(vec![[vec![0, 0], vec![2, 4]], [vec![2, 0], vec![5, 4]]]);
    let d = only_one(diags(&dist, &[4, 4], Some(2)));
    assert_eq!(d.path.to_string(), "tensors.a.distribution.boxes[1]");

    let dist = Distribution::Boxes(vec![[vec![0, 0], vec![2, 4]], [vec![2], vec![4]]]);
    let d = only_one(diags(&dist, &[4, 4], Some(2)));
    assert_eq!(d.path.to_string(), "tensors.a.distribution.boxes[1]");

    let dist = Distribution::Boxes(vec![[vec![0, 0], vec![4, 4]]]);
    let d = only_one(diags(&dist, &[4, 4], Some(2)));
    assert_eq!(d.path.to_string(), "tensors.a.distribution.boxes");
    assert!(diags(&dist, &[4, 4], None).is_empty());
}

#[test]
fn check_rejects_a_slab_axis_out_of_range() {
    let dist = Distribution::Slab(Axis::Name(AxisName::Z));
    let d = only_one(diags(&dist, &[4, 4], Some(2)));
    assert_eq!(d.path.to_string(), "tensors.a.distribution.slab");
    assert!(d.message.contains("slab axis 2"), "{}", d.message);
    let d = only_one(diags(&Distribution::Slab(Axis::Index(5)), &[4, 4, 4], None));
    assert!(d.message.contains("slab axis 5"), "{}", d.message);
    assert!(diags(&Distribution::Slab(Axis::Index(1)), &[4, 4], Some(2)).is_empty());
}

#[test]
fn check_rejects_a_root_rank_that_does_not_exist() {
    let d = only_one(diags(&Distribution::Root(4), &[4, 4], Some(4)));
    assert_eq!(d.path.to_string(), "tensors.a.distribution.root");
    assert!(
        d.message.contains("root rank 4") && d.message.contains("4 ranks"),
        "{}",
        d.message
    );
    assert!(diags(&Distribution::Root(3), &[4, 4], Some(4)).is_empty());
    assert!(diags(&Distribution::Root(9), &[4, 4], None).is_empty());
}

#[test]
fn derived_grids_are_nearly_square_like_mpi_dims_create() {
    assert_eq!(process_grid(&None, 1, 2), [1, 1]);
    assert_eq!(process_grid(&None, 2, 2), [2, 1]);
    assert_eq!(process_grid(&None, 3, 2), [3, 1]);
    assert_eq!(process_grid(&None, 4, 2), [2, 2]);
    assert_eq!(process_grid(&None, 12, 2), [4, 3]);
    assert_eq!(process_grid(&None, 4096, 2), [64, 64]);
    assert_eq!(process_grid(&None, 8, 3), [2, 2, 2]);
    assert_eq!(process_grid(&Some(vec![1, 4]), 4, 2), [1, 4]);
}
