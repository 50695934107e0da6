//! Grids nested in levels (a layout change of four axes or more, see [`RunGrid::more`]) as
//! `copy_nested_<bytes>` takes them: up to three levels taken into the rows where they continue
//! them on the side they run along, into a run's elements likewise, so that the square tiles fill
//! where the axes at both ends are short; the kernels' argument; and the kernels themselves, a
//! module compiled on the first such copy.

use super::{GridArg, NESTED_KERNELS, TILE_KERNELS, divider};
use crate::backend::work::{Level, MORE_LEVELS, RunGrid};
use anyhow::Result;
use cudarc::driver::{CudaContext, CudaFunction};
use std::sync::Arc;

/// copy_nested_<bytes>, copy_nested_folded_<bytes>, copy_nested_folded2_<bytes> and
/// copy_nested_folded3_<bytes> for elements of 1, 2, 4, 8 and 16 bytes: grids nested in levels,
/// their rows or elements not folded, or folded up to once, twice or three times a side.
pub(super) struct NestedKernels([[CudaFunction; 5]; FOLDS + 1]);

impl NestedKernels {
    /// Their source ([`TILE_KERNELS`]'s templates instantiated by [`NESTED_KERNELS`]) and
    /// NVRTC options (the architecture left to `load_module`).
    pub(super) fn module() -> (String, cudarc::nvrtc::CompileOptions) {
        let source = [TILE_KERNELS, NESTED_KERNELS].concat();
        (source, cudarc::nvrtc::CompileOptions::default())
    }

    /// Compiled for `ctx`'s GPU and loaded.
    pub(super) fn compile(ctx: &Arc<CudaContext>) -> Result<Self> {
        let (source, opts) = Self::module();
        let module = super::load_module(ctx, source, opts, "nested grids' copy kernels")?;
        let sizes = |name: &str| super::by_size(&module, name);
        Ok(NestedKernels([
            sizes("copy_nested")?,
            sizes("copy_nested_folded")?,
            sizes("copy_nested_folded2")?,
            sizes("copy_nested_folded3")?,
        ]))
    }

    /// The kernel for grids with `folds` levels taken into a side at most
    /// ([`Folded::folds`]), of `elem`-byte elements.
    pub(super) fn get(&self, folds: usize, elem: usize) -> &CudaFunction {
        &self.0[folds][elem.trailing_zeros() as usize]
    }
}

/// The most levels taken into the rows, and into a run's elements (the kernels' `Nested`).
const FOLDS: usize = 3;

/// A level taken into the rows (or a run's elements): the rows (elements) before it, and where
/// each next block of it lies past where the steps below reach (source, destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Taken {
    per: usize,
    jump: (i64, i64),
}

/// A nested grid as the kernel tiles it: its rows and a run's elements with up to [`FOLDS`]
/// levels taken into each where they continue them (`rows`, `count`; the grid's rows and count
/// the folded ones), the other levels its grids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Folded {
    pub(super) grid: RunGrid,
    rows: [Option<Taken>; FOLDS],
    count: [Option<Taken>; FOLDS],
}

/// The share of the tiles of `side` elements square over `g`'s rows and a run's elements that
/// its elements fill.
pub(super) fn fill(g: &RunGrid, side: usize) -> f64 {
    let filled = |n: usize| n as f64 / n.next_multiple_of(side) as f64;
    filled(g.rows) * filled(g.count)
}

impl Folded {
    /// `g` in tiles of `side` elements square: where its rows are fewer than `side` and a level
    /// continues them on the side where they step by one (its step there the rows so far), that
    /// level taken into them; then more such levels, up to [`FOLDS`], while the rows fill at
    /// most half a tile; a run's elements likewise. (Where the rows fill whole tiles, a fold
    /// would only add arithmetic to every element's address; a second fold's arithmetic cost
    /// more than u8 rows of 25 in tiles of 32 lost, [5, 5, 5, 5, 5000] to F order 0.020 ->
    /// 0.022 ms on an H200, bench/RESULTS.md 2026-11-29.) The rows take their levels first, or
    /// the elements, whichever fills the tiles more (f16 [4, 8, 1024, 64] from F to C order:
    /// rows of 64 taking the 1024 leave elements of 4 x 8 a quarter of a tile of 128; elements
    /// taking the 8 and the 1024 fill it).
    pub(super) fn of(g: &RunGrid, side: usize) -> Folded {
        let rows_first = Folded::in_order(g, side, true);
        let count_first = Folded::in_order(g, side, false);
        if count_first.fill(side) > rows_first.fill(side) {
            count_first
        } else {
            rows_first
        }
    }

    /// The share of its tiles of `side` elements square that the grid's elements fill.
    pub(super) fn fill(&self, side: usize) -> f64 {
        fill(&self.grid, side)
    }

    /// [`Folded::of`], the rows taking their levels first (`rows_first`) or the elements.
    fn in_order(g: &RunGrid, side: usize, rows_first: bool) -> Folded {
        let mut levels: Vec<(usize, (usize, usize))> = std::iter::once((g.first_level(), g.outer))
            .chain(g.more.iter().map(|l| (l.extent, l.step)))
            .filter(|&(n, _)| n > 1)
            .collect();
        let unit = |steps: (usize, usize)| [steps.0, steps.1].iter().position(|&s| s == 1);
        // The levels continuing `len` lines of `steps` on their unit side, taken out.
        let mut take = |len: &mut usize, steps: (usize, usize)| {
            let mut taken = [None; FOLDS];
            let Some(x) = unit(steps) else {
                return taken;
            };
            // The block below the next level taken: its extent and steps.
            let mut below = (*len, steps);
            for (k, t) in taken.iter_mut().enumerate() {
                if *len < 2 || *len >= side || (k > 0 && 2 * *len > side) {
                    break;
                }
                let Some(at) = levels.iter().position(|&(_, s)| [s.0, s.1][x] == *len) else {
                    break;
                };
                // (The kernels divide a folded index in 32 bits, below 2^31.)
                if *len * levels[at].0 >= 1 << 31 {
                    break;
                }
                let (n, s) = levels.remove(at);
                let jump = |to: usize, by: usize| to as i64 - (below.0 * by) as i64;
                *t = Some(Taken {
                    per: *len,
                    jump: (jump(s.0, below.1.0), jump(s.1, below.1.1)),
                });
                below = (n, s);
                *len *= n;
            }
            taken
        };
        let (mut rows, mut count) = (g.rows, g.count);
        let (rows_taken, count_taken) = if rows_first {
            let r = take(&mut rows, g.step);
            (r, take(&mut count, g.strides))
        } else {
            let c = take(&mut count, g.strides);
            (take(&mut rows, g.step), c)
        };
        let mut more = RunGrid::FLAT;
        for (m, &(extent, step)) in more.iter_mut().zip(levels.iter().skip(1)) {
            *m = Level { extent, step };
        }
        let (b1, outer) = levels.first().copied().unwrap_or((1, (0, 0)));
        let grid = RunGrid {
            batches: b1 * more.iter().map(|l| l.extent).product::<usize>(),
            outer,
            rows,
            count,
            more,
            ..*g
        };
        Folded {
            grid,
            rows: rows_taken,
            count: count_taken,
        }
    }

    /// Whether every level taken lies whole `v`-element words further on both sides.
    pub(super) fn jumps_in_words(&self, v: usize) -> bool {
        let v = v as i64;
        (self.rows.iter().chain(&self.count))
            .flatten()
            .all(|t| t.jump.0 % v == 0 && t.jump.1 % v == 0)
    }

    /// The most levels taken into the rows or into the elements: 0 (`copy_nested_<bytes>`), 1
    /// (`copy_nested_folded_<bytes>`), 2 or 3 (`copy_nested_folded2_<bytes>`, `folded3`).
    pub(super) fn folds(&self) -> usize {
        let taken = |t: &[Option<Taken>]| t.iter().flatten().count();
        taken(&self.rows).max(taken(&self.count))
    }

    /// The kernels' `Nested`, by value.
    pub(super) fn arg(&self) -> NestedArg {
        let g = &self.grid;
        let wraps = g.wraps();
        let div = wraps.map(|(every, _)| match every {
            0 => (0, 0),
            n => divider(n as u64),
        });
        // Dividers (multipliers, then shifts) and jumps (source, then destination) of a side's
        // levels taken, 0 where none.
        let taken = |t: [Option<Taken>; FOLDS]| {
            let div = t.map(|t| t.map_or((0, 0), |t| divider(t.per as u64)));
            let jump = t.map(|t| t.map_or((0, 0), |t| t.jump));
            (
                [div.map(|d| d.0 as u32), div.map(|d| d.1 as u32)],
                [jump.map(|j| j.0), jump.map(|j| j.1)],
            )
        };
        let (rows, count) = (taken(self.rows), taken(self.count));
        NestedArg(
            GridArg::of(g),
            div.map(|(mul, _)| mul as u32),
            div.map(|(_, shift)| shift as u32),
            wraps.map(|(_, jump)| jump.0),
            wraps.map(|(_, jump)| jump.1),
            [rows.0, count.0]
                .concat()
                .try_into()
                .expect("four sets of dividers"),
            [rows.1, count.1]
                .concat()
                .try_into()
                .expect("four sets of jumps"),
        )
    }
}

/// A nested [`RunGrid`] as `copy_nested_<bytes>` takes it (the kernels' `Nested`): its
/// [`GridArg`]; the further levels' wraps (see [`RunGrid::wraps`]: the dividers by each level's
/// `every`, multipliers and shifts, 0 where none; source jumps; destination jumps); the folds'
/// dividers (the rows' multipliers and shifts, then the elements') and jumps (the rows' source
/// and destination, then the elements'), [`FOLDS`] of each.
#[repr(C)]
pub(super) struct NestedArg(
    GridArg,
    [u32; MORE_LEVELS],
    [u32; MORE_LEVELS],
    [i64; MORE_LEVELS],
    [i64; MORE_LEVELS],
    [[u32; FOLDS]; 4],
    [[i64; FOLDS]; 4],
);

// SAFETY: eleven u64s, six u32s, six i64s, twelve u32s and twelve i64s, laid out as the
// kernels' `Nested`.
unsafe impl cudarc::driver::DeviceRepr for NestedArg {}

// The kernels' `Nested` holds three levels' wraps and three folds a side.
const _: () = assert!(MORE_LEVELS == 3 && FOLDS == 3);

#[cfg(test)]
mod tests {
    use super::Folded;
    use crate::backend::work::{RunGrid, reversal};

    /// Element (p, q, i) of a folded grid, as the kernel finds it (`Nested::at_s`, `row_s`,
    /// `col_s` and their destination twins), with the taken levels' blocks worked out here by
    /// division.
    fn place(f: &Folded, p: usize, q: usize, i: usize) -> (i64, i64) {
        let g = &f.grid;
        let at = g.grid_at(p);
        let fold = |t: usize, taken: [Option<super::Taken>; super::FOLDS]| {
            (taken.iter().flatten()).fold((0, 0), |(s, d), k| {
                let n = (t / k.per) as i64;
                (s + n * k.jump.0, d + n * k.jump.1)
            })
        };
        let (r, c) = (fold(q, f.rows), fold(i, f.count));
        (
            (g.start.0 + at.0 + q * g.step.0 + i * g.strides.0) as i64 + r.0 + c.0,
            (g.start.1 + at.1 + q * g.step.1 + i * g.strides.1) as i64 + r.1 + c.1,
        )
    }

    #[test]
    fn short_axes_at_both_ends_take_their_neighbours_and_every_element_keeps_its_place() {
        for (shape, side, rows, count) in [
            // Rows of 6 with the 50 after them in the destination, elements of 11 with the 90
            // before them in the source.
            (&[6, 50, 70, 90, 11][..], 64, 300, 990),
            // Only the elements are short of a tile of 64.
            (&[64, 5, 7, 16], 64, 64, 112),
            // Tiles of 32 (elements one at a time) hold 40 rows: no fold of rows.
            (&[40, 9, 10, 30, 70], 32, 40, 70),
            // Rows of 8 take the 8 after them, then the 512 after those (64 rows still short).
            (&[8, 8, 512, 512], 128, 32768, 512),
            // One level into the rows, three into the elements.
            (&[3, 50, 4, 6, 2, 3], 128, 150, 144),
            // One level into the rows, two into the elements (36 fill more than half a tile of
            // 64), one left for the grids.
            (&[3, 50, 4, 6, 2, 3], 64, 150, 36),
            // Rows of 64 taking the 1024 would leave elements of 32: the elements take it.
            (&[64, 1024, 8, 4], 128, 64, 32768),
            // Elements of 2 take three levels (f64 [2, 2, 2, 64, 64, 64] from F to C order).
            (&[64, 64, 64, 2, 2, 2], 64, 64, 512),
            // u8 rows of 5 take one level in tiles of 32, not a second (25 rows fill 78%).
            (&[5, 5, 5, 5, 5000], 32, 25, 5000),
        ] {
            let runs = reversal(shape);
            let g = RunGrid::of(&runs).expect("nested grids");
            let f = Folded::of(&g, side);
            assert_eq!((f.grid.rows, f.grid.count), (rows, count), "{shape:?}");
            let elements: usize = shape.iter().product();
            assert_eq!(f.grid.batches * rows * count, elements, "{shape:?}");
            // Every element of every run, once, where the folded grid puts it.
            let mut named: Vec<(i64, i64)> = Vec::with_capacity(elements);
            for p in 0..f.grid.batches {
                for q in 0..rows {
                    for i in 0..count {
                        named.push(place(&f, p, q, i));
                    }
                }
            }
            let mut given: Vec<(i64, i64)> = (runs.iter())
                .flat_map(|r| {
                    (0..r.count).map(move |i| {
                        (
                            (r.src + i * r.src_stride) as i64,
                            (r.dst + i * r.dst_stride) as i64,
                        )
                    })
                })
                .collect();
            named.sort_unstable();
            given.sort_unstable();
            assert_eq!(named, given, "{shape:?}");
        }
    }

    /// Folded lines are whole words where their lengths are, though the levels taken are not:
    /// u8 [9, 40, 50, 30, 70] from F to C order reads runs of 9 bytes (no words) but lines of
    /// 360 once the 40 is taken into them, and writes lines of 2100 (70 and the 30).
    #[test]
    fn folded_lines_are_words_where_their_jumps_are() {
        let shape = [70, 30, 50, 40, 9];
        let g = RunGrid::of(&reversal(&shape)).expect("nested grids");
        let f = Folded::of(&g, 128);
        assert_eq!((f.grid.rows, f.grid.count), (2100, 9 * 40));
        assert!(f.jumps_in_words(4));
        // Lines of 9 x 41 bytes are not.
        let g = RunGrid::of(&reversal(&[70, 30, 50, 41, 9])).expect("nested grids");
        assert!(!Folded::of(&g, 128).jumps_in_words(4));
    }
}
