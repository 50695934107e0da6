//! Grids nested in levels (a layout change of four axes or more, see [`RunGrid::more`]) as
//! `copy_nested_<bytes>` takes them: a level taken into the rows where it continues them on the
//! side they run along, one into a run's elements likewise, so that the square tiles fill where
//! the axes at both ends are short; and the kernels' argument.

use super::{GridArg, divider};
use crate::backend::work::{Level, MORE_LEVELS, RunGrid};

/// A level taken into the rows (or a run's elements): the rows (elements) a block of it held,
/// and where each next block lies past where their steps reach (source, destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Taken {
    per: usize,
    jump: (i64, i64),
}

/// A nested grid as the kernel tiles it: its rows and a run's elements with a level taken into
/// each where one continues them (`rows`, `count`; the grid's rows and count the folded ones),
/// the other levels its grids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Folded {
    pub(super) grid: RunGrid,
    rows: Option<Taken>,
    count: Option<Taken>,
}

impl Folded {
    /// `g` in tiles of `side` elements square: a level taken into its rows where they are fewer
    /// than `side` and one continues them on the side where they step by one (its step there
    /// the rows'), and one into a run's elements likewise. (Where the rows fill whole tiles,
    /// a fold would only add arithmetic to every element's address.)
    pub(super) fn of(g: &RunGrid, side: usize) -> Folded {
        let mut levels: Vec<(usize, (usize, usize))> = std::iter::once((g.first_level(), g.outer))
            .chain(g.more.iter().map(|l| (l.extent, l.step)))
            .filter(|&(n, _)| n > 1)
            .collect();
        let unit = |steps: (usize, usize)| [steps.0, steps.1].iter().position(|&s| s == 1);
        // The level continuing `len` lines of `steps` on their unit side, taken out.
        let mut take = |len: usize, steps: (usize, usize)| {
            if !(2..side).contains(&len) {
                return None;
            }
            let x = unit(steps)?;
            let k = levels.iter().position(|&(_, s)| [s.0, s.1][x] == len)?;
            // (The kernels divide a folded index in 32 bits, below 2^31.)
            if len * levels[k].0 >= 1 << 31 {
                return None;
            }
            let (n, s) = levels.remove(k);
            let jump = |to: usize, by: usize| to as i64 - (len * by) as i64;
            Some((
                n,
                Taken {
                    per: len,
                    jump: (jump(s.0, steps.0), jump(s.1, steps.1)),
                },
            ))
        };
        let rows = take(g.rows, g.step);
        let count = take(g.count, g.strides);
        let mut more = RunGrid::FLAT;
        for (m, &(extent, step)) in more.iter_mut().zip(levels.iter().skip(1)) {
            *m = Level { extent, step };
        }
        let (b1, outer) = levels.first().copied().unwrap_or((1, (0, 0)));
        let grid = RunGrid {
            batches: b1 * more.iter().map(|l| l.extent).product::<usize>(),
            outer,
            rows: g.rows * rows.map_or(1, |(n, _)| n),
            count: g.count * count.map_or(1, |(n, _)| n),
            more,
            ..*g
        };
        Folded {
            grid,
            rows: rows.map(|(_, t)| t),
            count: count.map(|(_, t)| t),
        }
    }

    /// Whether a level was taken into the rows or the elements (`copy_nested_folded_<bytes>`).
    pub(super) fn folds(&self) -> bool {
        self.rows.is_some() || self.count.is_some()
    }

    /// The kernels' `Nested`, by value.
    pub(super) fn arg(&self) -> NestedArg {
        let g = &self.grid;
        let wraps = g.wraps();
        let div = wraps.map(|(every, _)| match every {
            0 => (0, 0),
            n => divider(n as u64),
        });
        let taken = |t: Option<Taken>| match t {
            Some(Taken { per, jump }) => {
                let (mul, shift) = divider(per as u64);
                ([mul as u32, shift as u32], [jump.0, jump.1])
            }
            None => ([0, 0], [0, 0]),
        };
        let (rows, count) = (taken(self.rows), taken(self.count));
        NestedArg(
            GridArg::of(g),
            div.map(|(mul, _)| mul as u32),
            div.map(|(_, shift)| shift as u32),
            wraps.map(|(_, jump)| jump.0),
            wraps.map(|(_, jump)| jump.1),
            [rows.0[0], rows.0[1], count.0[0], count.0[1]],
            [rows.1[0], rows.1[1], count.1[0], count.1[1]],
        )
    }
}

/// A nested [`RunGrid`] as `copy_nested_<bytes>` takes it (the kernels' `Nested`): its
/// [`GridArg`]; the further levels' wraps (see [`RunGrid::wraps`]: the dividers by each level's
/// `every`, multipliers and shifts, 0 where none; source jumps; destination jumps); the folds'
/// dividers (rows, then elements) and jumps (rows' source and destination, then the elements').
#[repr(C)]
pub(super) struct NestedArg(
    GridArg,
    [u32; MORE_LEVELS],
    [u32; MORE_LEVELS],
    [i64; MORE_LEVELS],
    [i64; MORE_LEVELS],
    [u32; 4],
    [i64; 4],
);

// SAFETY: eleven u64s, six u32s, six i64s, four u32s and four i64s, laid out as the kernels'
// `Nested`.
unsafe impl cudarc::driver::DeviceRepr for NestedArg {}

// The kernels' `Nested` holds three levels' wraps.
const _: () = assert!(MORE_LEVELS == 3);

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
        let fold = |t: usize, taken: Option<super::Taken>| {
            taken.map_or((0, 0), |k| {
                ((t / k.per) as i64 * k.jump.0, (t / k.per) as i64 * k.jump.1)
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
}
