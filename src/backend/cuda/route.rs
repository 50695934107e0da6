//! Which kernel moves a plan's runs (`Cuda::copy_runs`): the copy engines, the tile kernels, the
//! rows' kernel or the runs' kernel over a table, decided on the host from the runs alone.

use crate::backend::work::{Derived, Run, RunGrid, Runs};
use std::ops::Range;

/// The longest runs (in bytes) that a warp or two of the copy kernels take each; longer ones
/// take a block each 64 KiB, which keeps more in flight for few runs.
const ROWS_MOST: usize = 16384;

/// Grid rows contiguous on both sides up to this many bytes go to the tile kernels, which take
/// many rows a block (`copy_narrow`'s repack, or square tiles); longer ones a warp a row.
const TILE_ROWS_MOST: usize = 256;

/// Up to this many parts (an exchange's peers) a list's parts go each their own way whatever
/// their size (see [`routes`]); more only where they average [`PART_BYTES`] or more.
const PARTS_ANY_SIZE: usize = 8;

/// The bytes a part must average where a list has more than [`PARTS_ANY_SIZE`] parts.
const PART_BYTES: usize = 4 << 20;

/// Grids nested in levels (a layout change of four axes or more) go to the tile kernels only
/// where their tiles (32 words square, counted after the folds of `nested::Folded`) would hold
/// at least this share of their elements; else the table. On an H200, before the folds, tiles 12-25% full ran 2.4-8.8x faster than the table (f32 [64, 64,
/// 64, 64] from F to C order 0.344 -> 0.040 ms, [8, 8, 512, 512] C -> F 0.867 -> 0.202), tiles
/// 1-3% full 1.1-4.5x slower (f64 [6, 50, 70, 90, 11] C -> F 1.31 -> 2.13 ms, f16 [33, 65,
/// 129, 17] 0.089 -> 0.099; bench/RESULTS.md, 2026-11-28 twenty-third session).
const NESTED_FILL: f64 = 1.0 / 16.0;

/// The most grids a nested grid may hold: the kernels divide grid indices in 32 bits, below
/// 2^31 (the kernels' `Nested`).
pub(super) const NESTED_GRIDS_MOST: usize = 1 << 31;

/// Whether the tile kernels take grid `g` of `elem`-byte elements: any grid of one level, a
/// nested one where its tiles are filled enough ([`NESTED_FILL`]).
fn tiled(g: &RunGrid, elem: usize) -> bool {
    if !g.nested() {
        return true;
    }
    let side = 32 * super::word_elements(elem).unwrap_or(1);
    g.batches < NESTED_GRIDS_MOST && super::nested::Folded::of(g, side).fill(side) >= NESTED_FILL
}

/// How `copy_runs` moves a list of runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// Nothing to move.
    Nothing,
    /// One contiguous run (elements `src..`, `dst..`, `count`): the copy engines. Several runs go
    /// to a kernel, which moved MiB-sized runs 2-3x faster than a copy-engine copy per run
    /// (bench/RESULTS.md, FFT transposes) and leaves the copy engines to puts.
    Engines {
        src: usize,
        dst: usize,
        count: usize,
    },
    /// A grid, to the tile kernels (`copy_grid`: narrow, across or in square tiles).
    Tiles(RunGrid),
    /// A grid of rows contiguous on both sides, of more than [`TILE_ROWS_MOST`] bytes up to
    /// [`ROWS_MOST`]: `copy_rows`, 2^lanes_log threads a row (two warps from 4 KiB).
    Rows { grid: RunGrid, lanes_log: i32 },
    /// The table of runs: `copy_runs`, 2^lanes_log threads a run (a warp where runs are at
    /// most [`ROWS_MOST`] bytes, else a block), `chunks` blocks along each run's 64 KiB chunks.
    Table { lanes_log: i32, chunks: u32 },
}

/// How `copy_runs` moves `runs` of `elem`-byte elements: each part of the list (an exchange's
/// runs for a peer, see [`Runs::parts`]) its own way where the whole makes no grid but some part
/// does, so that each part's grid goes to its kernel instead of all to the table (the pieces
/// of uneven slabs differ in shape: an unpack from two peers on 3 ranks was a table of
/// strided runs); else the whole list one way. A part that makes no grid goes to the table,
/// as it would in the whole list. Many parts (more than [`PARTS_ANY_SIZE`]) each take their own
/// launch only where they are large.
pub(super) fn routes(runs: &Runs, elem: usize) -> Vec<(Range<usize>, Derived, Route)> {
    let whole = runs.derived();
    // (Parts are looked at only where the whole makes no grid, or makes grids nested in levels:
    // a part's own grid may take a kernel, narrow or gapped, that nested grids do not.)
    let parts = if whole.grid.is_none_or(|g| g.nested()) {
        runs.parts()
    } else {
        &[]
    };
    // A launch a part costs a few microseconds: many parts must be large to pay for theirs.
    let worth = parts.len() <= PARTS_ANY_SIZE || whole.elements * elem >= parts.len() * PART_BYTES;
    if parts.len() > 1 && worth {
        let each: Vec<_> = (parts.iter())
            .map(|p| {
                (
                    p.range.clone(),
                    p.derived,
                    route(&runs[p.range.clone()], &p.derived, elem),
                )
            })
            .collect();
        if each
            .iter()
            .any(|(_, _, r)| matches!(r, Route::Tiles(_) | Route::Rows { .. }))
        {
            return (each.into_iter())
                .map(|(range, d, r)| match r {
                    Route::Engines { .. } => (range, d, table(d.longest * elem)),
                    r => (range, d, r),
                })
                .collect();
        }
    }
    vec![(0..runs.len(), whole, route(runs, &whole, elem))]
}

/// The route of `runs` of `elem`-byte elements (`derived` from them).
pub(super) fn route(runs: &[Run], derived: &Derived, elem: usize) -> Route {
    match runs {
        [] => return Route::Nothing,
        [r] if r.count <= 1 || (r.src_stride == 1 && r.dst_stride == 1) => {
            return if r.count == 0 {
                Route::Nothing
            } else {
                Route::Engines {
                    src: r.src,
                    dst: r.dst,
                    count: r.count,
                }
            };
        }
        _ => {}
    }
    let grid = (derived.grid).filter(|g| matches!(elem, 1 | 2 | 4 | 8 | 16) && tiled(g, elem));
    if let Some(grid) = grid {
        let bytes = grid.count * elem;
        if grid.strides != (1, 1) || bytes <= TILE_ROWS_MOST {
            return Route::Tiles(grid);
        }
        // (copy_rows takes grids of one level; nested rows go to the table.)
        if bytes <= ROWS_MOST && !grid.nested() {
            let lanes_log = if bytes >= 4096 { 6 } else { 5 };
            return Route::Rows { grid, lanes_log };
        }
    }
    table(derived.longest * elem)
}

/// The table's route for runs of at most `longest` bytes.
fn table(longest: usize) -> Route {
    Route::Table {
        lanes_log: if longest <= ROWS_MOST { 5 } else { 8 },
        chunks: longest.div_ceil(65536).clamp(1, 1024) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::TileKernel;
    use crate::ops::exchange::{Exchange, Side, plan};
    use crate::spec::tensor::{Axis, Distribution, Layout};

    /// The route of a whole list.
    fn route(runs: &Runs, elem: usize) -> Route {
        super::route(runs, &runs.derived(), elem)
    }

    /// `rows` runs of `count` elements, `step` apart on each side, at `strides`.
    fn grid(rows: usize, count: usize, step: (usize, usize), strides: (usize, usize)) -> Runs {
        let runs: Vec<Run> = (0..rows)
            .map(|j| Run {
                src: j * step.0,
                dst: j * step.1,
                count,
                src_stride: strides.0,
                dst_stride: strides.1,
            })
            .collect();
        runs.into()
    }

    #[test]
    fn one_contiguous_run_goes_to_the_copy_engines_and_none_nowhere() {
        let one = grid(1, 1000, (0, 0), (1, 1));
        let want = Route::Engines {
            src: 0,
            dst: 0,
            count: 1000,
        };
        assert_eq!(route(&one, 4), want);
        assert_eq!(route(&grid(0, 5, (5, 5), (1, 1)), 4), Route::Nothing);
        // One strided run is no copy-engine copy.
        let strided = grid(1, 1000, (0, 0), (2, 1));
        assert!(matches!(
            route(&strided, 4),
            Route::Table { lanes_log: 5, .. }
        ));
    }

    #[test]
    fn rows_contiguous_on_both_sides_go_by_their_bytes() {
        // A 3-rank pack of a u8 [N, 1000]'s columns: 334-byte rows, a warp each.
        let pack = grid(400, 334, (1000, 334), (1, 1));
        assert!(matches!(route(&pack, 1), Route::Rows { lanes_log: 5, .. }));
        // Up to 256 bytes the tile kernels take many rows a block; from 4 KiB two warps a row.
        assert!(matches!(
            route(&grid(400, 64, (100, 64), (1, 1)), 4),
            Route::Tiles(_)
        ));
        assert!(matches!(
            route(&grid(400, 65, (100, 65), (1, 1)), 4),
            Route::Rows { .. }
        ));
        let wide = grid(40, 1024, (3000, 1024), (1, 1));
        assert!(matches!(route(&wide, 4), Route::Rows { lanes_log: 6, .. }));
        // Past 16 KiB a block a 64 KiB chunk of each run.
        let long = grid(40, 100_000, (300_000, 100_000), (1, 1));
        assert_eq!(
            route(&long, 4),
            Route::Table {
                lanes_log: 8,
                chunks: 7
            }
        );
    }

    #[test]
    fn transposes_go_to_the_tiles_and_irregular_runs_to_the_table() {
        // C -> F of a 300 x 500 f32: runs along the source's rows, strided in the destination.
        let transpose = grid(300, 500, (500, 1), (1, 300));
        assert!(matches!(route(&transpose, 4), Route::Tiles(_)));
        // Runs of unequal lengths make no grid: a warp a run.
        let runs: Vec<Run> = [(0, 0, 300), (400, 300, 17), (1000, 317, 5000)]
            .into_iter()
            .map(|(src, dst, count)| Run {
                src,
                dst,
                count,
                src_stride: 1,
                dst_stride: 1,
            })
            .collect();
        assert_eq!(
            route(&runs.into(), 2),
            Route::Table {
                lanes_log: 5,
                chunks: 1
            }
        );
    }

    /// Rank `me`'s exchange of a tensor of `shape` from slabs along `a` (C order) to slabs
    /// along `b` (in `layout`) among `ranks`.
    fn exchange(shape: &[u64], a: u8, b: u8, layout: Layout, ranks: u64, me: u64) -> Exchange {
        let (from, to) = (
            Distribution::Slab(Axis::Index(a)),
            Distribution::Slab(Axis::Index(b)),
        );
        let side = |dist, layout| Side {
            dist,
            shape,
            layout,
        };
        plan(side(&from, Layout::C), &side(&to, layout), ranks, me)
    }

    #[test]
    fn each_peers_grid_goes_to_its_kernel_where_together_they_make_none() {
        // f32 [7, 2049, 4097] slab 0 C -> slab 1 F, rank 1 of 3: rows 0-2 from rank 0 and 5-6
        // from rank 2, each a grid with gaps (its own rows 3-4 come apart). Together they were
        // one table of 3415 runs, each element 4781 apart.
        let ex = exchange(&[7, 2049, 4097], 0, 1, Layout::F, 3, 1);
        assert_eq!(ex.unpack.derived().grid, None);
        let parts = routes(&ex.unpack, 4);
        assert_eq!(parts.len(), 2);
        for ((range, derived, r), rows) in parts.iter().zip([3, 2]) {
            let Route::Tiles(g) = r else {
                panic!("{r:?}");
            };
            assert_eq!(*g, RunGrid::of(&ex.unpack[range.clone()]).unwrap());
            assert_eq!(derived.grid, Some(*g));
            assert_eq!((g.rows, g.batches, g.count), (rows, 683, 4097));
            assert!(super::super::gapped_rows(g));
        }
        // Rank 0 takes rows 3-6 from ranks 1 and 2, which stack into one grid: one route.
        let ex = exchange(&[7, 2049, 4097], 0, 1, Layout::F, 3, 0);
        assert!(matches!(&routes(&ex.unpack, 4)[..], [(_, _, Route::Tiles(g))] if g.rows == 4));
        // A 3-rank pack of a u8 [3000, 1000]'s columns on rank 1: 334 bytes of each row for
        // rank 0, 333 for rank 2, each part copy_rows.
        let ex = exchange(&[3000, 1000], 0, 1, Layout::C, 3, 1);
        let parts = routes(&ex.pack, 1);
        let widths: Vec<usize> = (parts.iter())
            .map(|(_, _, r)| match r {
                Route::Rows { grid, .. } => grid.count,
                r => panic!("{r:?}"),
            })
            .collect();
        assert_eq!(widths, [334, 333]);
    }

    #[test]
    fn few_rows_with_gaps_between_grids_take_the_gapped_kernel() {
        // f16 [5, 3000, 4001] slab 0 C -> slab 2 F on 2 ranks: rank 1 unpacks rows 0-2 of each
        // 5 from rank 0, and rank 0 keeps its own rows 0-2. A sweep took them (its bands of 64
        // lines holding 3), 1.06 ms on 2 H200s.
        let ex = |me| exchange(&[5, 3000, 4001], 0, 2, Layout::F, 2, me);
        for runs in [ex(1).unpack, ex(0).local] {
            let [(_, _, Route::Tiles(g))] = &routes(&runs, 2)[..] else {
                panic!("{:?}", routes(&runs, 2));
            };
            assert_eq!((g.rows, g.batches, g.outer.1), (3, 3000, 5));
            let kernel = TileKernel::of(g, 2, (0, 0));
            assert!(matches!(kernel, TileKernel::Gapped), "{kernel:?}");
        }
    }

    #[test]
    fn layout_changes_of_four_and_five_axes_take_the_nested_tiles() {
        // They made no grid of one level (the runs' table, 4-18% of the copy bandwidth on an
        // H200): one launch of tiles across the first axis and the last, the axes between nested.
        for (shape, elem) in [
            (&[64, 64, 64, 64][..], 4),
            (&[16, 128, 128, 64], 4),
            (&[8, 8, 512, 512], 4),
            (&[16, 32, 64, 128], 8),
            (&[40, 9, 10, 30, 70], 4),
        ] {
            let ex = exchange(shape, 0, 1, Layout::F, 1, 0);
            let [(_, _, Route::Tiles(g))] = &routes(&ex.local, elem)[..] else {
                panic!("{shape:?}: {:?}", routes(&ex.local, elem));
            };
            assert!(g.nested(), "{shape:?}");
            let last = shape[shape.len() - 1] as usize;
            assert_eq!((g.rows, g.count), (shape[0] as usize, last), "{shape:?}");
            let kernel = TileKernel::of(g, elem, (0, 0));
            assert!(matches!(kernel, TileKernel::Nested { .. }), "{kernel:?}");
        }
        // Short axes at both ends fold with their neighbours into full tiles (f64 [6, 50, 70,
        // 90, 11]: rows 6 x 50, elements 11 x 90); where none continues them (rank 0's own
        // half of the rows, 3 of 6, going to F order on 2 ranks) tiles a few hundredths full
        // stay in the table, which ran faster.
        let ex = exchange(&[6, 50, 70, 90, 11], 0, 1, Layout::F, 1, 0);
        assert!(matches!(
            &routes(&ex.local, 8)[..],
            [(_, _, Route::Tiles(_))]
        ));
        let ex = exchange(&[6, 50, 70, 11], 0, 1, Layout::F, 2, 0);
        assert!(
            ex.local
                .derived()
                .grid
                .is_some_and(|g| g.nested() && g.rows == 3)
        );
        let r = routes(&ex.local, 8);
        assert!(matches!(&r[..], [(_, _, Route::Table { .. })]), "{r:?}");
    }

    /// The tile kernel of a one-rank layout change of `shape` to `to` (from the other layout).
    fn kernel(shape: &[u64], elem: usize, to: Layout) -> TileKernel {
        let from = to.other();
        let d = Distribution::Slab(Axis::Index(0));
        let side = |layout| Side {
            dist: &d,
            shape,
            layout,
        };
        let ex = plan(side(from), &side(to), 1, 0);
        let [(_, _, Route::Tiles(g))] = &routes(&ex.local, elem)[..] else {
            panic!("{shape:?}: {:?}", routes(&ex.local, elem));
        };
        TileKernel::of(g, elem, (0, 0))
    }

    #[test]
    fn two_short_axes_at_one_end_pack_as_one() {
        // [N, a, b] to C order packs a x b elements after each element of the N: grid by grid
        // (each of the a a grid) it would leave gaps (u8 [16777216, 3, 5] to C order 8% of the
        // copy bandwidth on an H200); folded, the narrow kernels pack a x b lines whole.
        for (shape, elem, to, lines) in [
            (&[16777216, 3, 5][..], 1, Layout::C, (15, 5)),
            (&[1011148, 4, 4], 8, Layout::C, (16, 4)),
            (&[262144, 4, 7], 4, Layout::C, (28, 7)),
            (&[100000, 3, 3], 8, Layout::F, (9, 3)),
            (&[50000, 2, 7], 16, Layout::C, (14, 7)),
            (&[3, 3, 70001], 2, Layout::F, (9, 3)),
        ] {
            let k = kernel(shape, elem, to);
            let TileKernel::Narrow(narrow) = &k else {
                panic!("{shape:?}: {k:?}");
            };
            assert_eq!(narrow.lines(), lines, "{shape:?}");
        }
        // Too many lines for a narrow tile (16-byte elements up to 15): c128 [65536, 5, 8] goes
        // to the square tiles, folded (rows of 40).
        let k = kernel(&[65536, 5, 8], 16, Layout::C);
        let TileKernel::Nested { folded, .. } = &k else {
            panic!("{k:?}");
        };
        assert_eq!(folded.folds(), 1);
    }

    #[test]
    fn narrow_grids_move_every_element_where_their_runs_say() {
        // Three-axis layout changes with short axes at either end, one rank's local move and
        // its exchanges' packs and unpacks between slabs at 1 to 4 ranks: wherever the narrow
        // kernels take a grid (two short axes folded into one or not), their contract puts
        // every element where the runs do, and nothing else.
        let mut taken = [0; 2];
        for shape in [
            [97, 3, 5],
            [40, 4, 4],
            [3, 3, 101],
            [64, 2, 7],
            [5, 60, 3],
            [33, 6, 2],
        ] {
            for (elem, to, (ranks, a, b)) in sizes_layouts_slabs() {
                let slab = |axis| Distribution::Slab(Axis::Index(axis));
                let (from_dist, to_dist) = (slab(a), slab(b));
                for me in 0..ranks {
                    let ex = plan(
                        Side {
                            dist: &from_dist,
                            shape: &shape,
                            layout: to.other(),
                        },
                        &Side {
                            dist: &to_dist,
                            shape: &shape,
                            layout: to,
                        },
                        ranks,
                        me,
                    );
                    for runs in [&ex.local, &ex.pack, &ex.unpack] {
                        for (range, _, route) in routes(runs, elem) {
                            let Route::Tiles(g) = route else { continue };
                            let TileKernel::Narrow(narrow) = TileKernel::of(&g, elem, (0, 0))
                            else {
                                continue;
                            };
                            let mut want: Vec<(usize, usize)> = (runs[range].iter())
                                .flat_map(|r| {
                                    (0..r.count).map(move |i| {
                                        (r.src + i * r.src_stride, r.dst + i * r.dst_stride)
                                    })
                                })
                                .collect();
                            let mut got = narrow.places();
                            want.sort_unstable();
                            got.sort_unstable();
                            assert!(
                                got == want,
                                "{shape:?} x {elem} to {to:?}, {ranks} ranks: {narrow:?}"
                            );
                            taken[usize::from(narrow.folded())] += 1;
                        }
                    }
                }
            }
        }
        // (Both kinds were met: the folded ones in local moves at 1 to 4 ranks and in unpacks.)
        assert!(taken[0] > 1000 && taken[1] > 200, "{taken:?}");
    }

    /// Element sizes, layouts, and (ranks, slab axis from, slab axis to), every combination.
    fn sizes_layouts_slabs() -> Vec<(usize, Layout, (u64, u8, u8))> {
        let mut all = Vec::new();
        for elem in [1, 2, 4, 8, 16] {
            for to in [Layout::C, Layout::F] {
                for dist in [
                    (1, 0, 0),
                    (2, 0, 1),
                    (3, 0, 2),
                    (4, 1, 0),
                    (3, 2, 0),
                    (2, 2, 1),
                ] {
                    all.push((elem, to, dist));
                }
            }
        }
        all
    }

    #[test]
    fn three_axis_changes_with_a_short_end_axis_take_it_folded() {
        // A short axis at one end leaves the square tiles mostly empty (c64 [2, 933, 2721] to
        // C order 11% of the copy bandwidth on an H200): folded with the middle axis it fills
        // them, in the nested kernels.
        for (shape, elem, to) in [
            (&[2, 933, 2721][..], 8, Layout::C),
            (&[5, 32, 32768], 1, Layout::F),
            (&[3000, 4000, 5], 8, Layout::C),
            (&[8, 2048, 4096], 1, Layout::C),
            (&[8, 1024, 1168], 1, Layout::C),
            (&[2048, 2048, 8], 4, Layout::C),
            (&[1000, 1000, 24], 8, Layout::F),
        ] {
            let k = kernel(shape, elem, to);
            let TileKernel::Nested { folded, .. } = &k else {
                panic!("{shape:?}: {k:?}");
            };
            assert_eq!(folded.folds(), 1, "{shape:?}");
            assert!(folded.fill(32) >= 0.25, "{shape:?}: {folded:?}");
        }
        // Both end axes short (under half a tile's side): whole grids a tile, copy_ends.
        for (shape, elem, to) in [
            (&[3, 230013, 16][..], 4, Layout::C),
            (&[3, 230013, 16], 4, Layout::F),
            (&[4, 410362, 7], 2, Layout::F),
            (&[9, 1465759, 4], 1, Layout::F),
            (&[8, 104480, 3], 8, Layout::C),
            (&[12, 300000, 3], 16, Layout::F),
        ] {
            let k = kernel(shape, elem, to);
            assert!(matches!(k, TileKernel::Ends(_)), "{shape:?}: {k:?}");
        }
        // Not where the across kernels sweep the rows into long lines and the folded grid
        // would move one element at a time (or in 2-byte words), nor where the tiles are full
        // enough.
        for (shape, elem, to) in [
            (&[7827, 512, 33][..], 1, Layout::C),
            (&[7, 2049, 4097], 4, Layout::F),
            (&[6, 64, 104066], 1, Layout::F),
            (&[4, 4096, 4100], 2, Layout::F),
            (&[2471, 512, 16], 4, Layout::F),
            (&[255, 257, 33], 4, Layout::F),
            (&[128, 512, 72], 2, Layout::C),
            (&[256, 512, 1024], 4, Layout::F),
        ] {
            let k = kernel(shape, elem, to);
            assert!(!matches!(k, TileKernel::Nested { .. }), "{shape:?}: {k:?}");
        }
    }

    #[test]
    fn parts_that_make_no_faster_way_stay_one_table() {
        // c64 [8, 8, 2048] slab 0 -> slab 1 on 3 ranks: each peer's runs are rows of 32 KiB
        // or more, which go to the table anyway: one launch for all.
        let ex = exchange(&[8, 8, 2048], 0, 1, Layout::C, 3, 1);
        assert!(ex.pack.parts().len() > 1 && ex.pack.derived().grid.is_none());
        let whole = routes(&ex.pack, 8);
        assert!(matches!(&whole[..], [(r, _, Route::Table { .. })] if *r == (0..ex.pack.len())));
        // Beside a part that makes a grid, a part of one contiguous run goes to the runs'
        // kernel, as in the table of the whole, not to the copy engines.
        let mut list: Vec<Run> = (0..40)
            .map(|j| Run::contiguous(1000 * j, 300 * j, 300))
            .collect();
        list.push(Run::contiguous(50_000, 12_000, 100_000));
        let runs = Runs::in_parts(list, &[40]);
        let parts = routes(&runs, 4);
        assert!(matches!(parts[0], (_, _, Route::Rows { .. })));
        assert_eq!(parts[1].0, 40..41);
        assert!(matches!(
            parts[1].2,
            Route::Table {
                lanes_log: 8,
                chunks: 7
            }
        ));
    }

    #[test]
    fn many_parts_go_apart_only_where_large() {
        // Peers' rows of 300 f32, peer q taking `rows + q` rows: a grid each, none together.
        let parts = |peers: usize, rows: usize| {
            let (mut list, mut starts) = (Vec::new(), Vec::new());
            for q in 0..peers {
                starts.push(list.len());
                let at = list.len();
                list.extend(
                    (0..rows + q)
                        .map(|j| Run::contiguous(1000 * (at + j) + 7 * q, 300 * (at + j), 300)),
                );
            }
            let runs = Runs::in_parts(list, &starts);
            assert_eq!(runs.derived().grid, None);
            routes(&runs, 4).len()
        };
        // 16 parts of about 48 KB: too small for a launch each; of about 4.8 MB, large enough.
        assert_eq!(parts(16, 40), 1);
        assert_eq!(parts(16, 4000), 16);
        // Up to 8 parts go apart whatever their size.
        assert_eq!(parts(8, 10), 8);
    }
}
