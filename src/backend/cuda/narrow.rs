//! Grids with a short axis that one side packs (the kernels `copy_narrow_<bytes>`): a C-order
//! [3, 5000000] to F order, say, whose destination lines are 3 elements long, one after
//! another; or that both sides pack, as an exchange packs 3 of a C-order [N, 6]'s columns; or
//! two short axes folded into one, as an [N, 3, 3] from F to C order packs 9 elements after each
//! of the N (`copy_narrow_folded_<bytes>`). Which grids take them, and the blocks a launch takes.

use super::across::divider;
use super::words_side;
use crate::backend::work::RunGrid;

/// The elements of a 16-byte word, the kernels' unit on both sides.
fn word(elem: usize) -> usize {
    16 / elem
}

/// The elements of a block's shared tile (`copy_narrow_<bytes>`'s `tile`): 16 rows of 2048
/// bytes and a word more each (a row starts a word on, to lie on words as its line does); the
/// shifted kernel's has 16 words more, past the rows, for their shifts between banks.
fn tile_elements(elem: usize) -> usize {
    16 * (2048 / elem + word(elem))
}

/// A grid as `copy_narrow_<bytes>` moves it: the short axis (r elements) packed on one side,
/// lines of it one after another, `step` apart (r, or more with gaps between); the other
/// side's r lines of n elements, `pitch` apart (or, repacking, its packed lines `pitch`
/// apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Narrow {
    /// The first element of grid 0 on the packed side and on the other.
    starts: (usize, usize),
    /// From grid to grid on each side (packed, other), and the grids.
    outer: (usize, usize),
    batches: usize,
    r: usize,
    n: usize,
    pitch: usize,
    step: usize,
    /// The long lines of a group and the step between groups, where the short axis is two
    /// folded into one (see [`Narrow::grouped`]); `fold` r where it is one.
    fold: usize,
    pitch2: usize,
    way: Way,
    elem: usize,
    /// Whether the tile's rows shift between banks ([`Narrow::shifts_rows`]).
    shifted: bool,
}

/// Which side packs the short axis (the kernels' `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// The source packs it, the destination holds its lines.
    Unpacks = 0,
    /// The source holds its lines, the destination packs it.
    Packs = 1,
    /// Both pack it (the destination's lines `pitch` apart).
    Repacks = 2,
}

/// Whether packed lines of r elements `step` apart move in words, gaps and all: at most twice
/// r, or within 64 bytes.
fn packs(r: usize, step: usize, elem: usize) -> bool {
    step >= r && (step <= 2 * r || step * elem <= 64)
}

impl Narrow {
    /// How `g` moves through `copy_narrow_<bytes>`, if it does: packing or unpacking its
    /// short axis ([`Narrow::across`]), or from one packing to another
    /// ([`Narrow::repacked`]).
    pub(super) fn of(g: &RunGrid, elem: usize) -> Option<Narrow> {
        if !matches!(elem, 1 | 2 | 4 | 8 | 16) || g.batches > 65535 {
            return None;
        }
        let narrow = (Self::grouped(g, elem))
            .or_else(|| Self::across(g, elem))
            .or_else(|| Self::repacked(g, elem))?;
        Some(Narrow {
            shifted: narrow.shifts_rows(),
            ..narrow
        })
    }

    /// Whether the short axis is two folded into one (`copy_narrow_folded_<bytes>`).
    pub(super) fn folded(&self) -> bool {
        self.fold < self.r
    }

    /// The short axis's lines and those of a group (`r` where nothing is folded).
    #[cfg(test)]
    pub(super) fn lines(&self) -> (usize, usize) {
        (self.r, self.fold)
    }

    /// Every element the kernels move, as (source, destination), by their contract: of grid p,
    /// element i of packed line j at `i * step + j` on the packed side, and on the other at
    /// `(j % fold) * pitch + (j / fold) * pitch2 + i` (repacking, `i * pitch + j`).
    #[cfg(test)]
    pub(super) fn places(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for p in 0..self.batches {
            let (x, y) = (
                self.starts.0 + p * self.outer.0,
                self.starts.1 + p * self.outer.1,
            );
            for i in 0..self.n {
                for j in 0..self.r {
                    let packed = x + i * self.step + j;
                    let other = match self.way {
                        Way::Repacks => y + i * self.pitch + j,
                        Way::Packs | Way::Unpacks => {
                            y + (j % self.fold) * self.pitch + (j / self.fold) * self.pitch2 + i
                        }
                    };
                    out.push(match self.way {
                        Way::Packs => (other, packed),
                        Way::Unpacks | Way::Repacks => (packed, other),
                    });
                }
            }
        }
        out
    }

    /// Whether the tile's rows shift between banks: `copy_narrow_shifted_<bytes>`.
    pub(super) fn shifted(&self) -> bool {
        self.shifted
    }

    /// Where one side packs the short axis (its other axis's step the short axis's length, or
    /// up to twice that or 64 bytes: gaps a word read takes along) and the other holds it as
    /// lines contiguous along the long axis: 2 elements or more, and fewer than half a side of
    /// the square kernels' tiles (32 words: 128 elements of 1 or 2 bytes, 64 of 4 or 8, 32 of
    /// 16), which would stand more than half empty.
    fn across(g: &RunGrid, elem: usize) -> Option<Narrow> {
        // Each side: (along the short axis, along the long one). The short axis is the runs'
        // index (rows) or a run's elements (count).
        let sides = [
            (g.step, g.strides, g.rows, g.count),
            (g.strides, g.step, g.count, g.rows),
        ];
        sides.into_iter().find_map(|(short, long, r, n)| {
            let packed = |x: usize| pick(short, x) == 1 && packs(r, pick(long, x), elem);
            let lines = |y: usize| pick(long, y) == 1;
            // The packed side x, the lines' side y.
            let (way, x, y) = match (packed(0), packed(1)) {
                (false, true) if lines(0) => (Way::Packs, 1, 0),
                (true, false) if lines(1) => (Way::Unpacks, 0, 1),
                _ => return None,
            };
            let side = words_side(elem);
            (r >= 2 && 2 * r < side).then_some(Narrow {
                starts: (pick(g.start, x), pick(g.start, y)),
                outer: (pick(g.outer, x), pick(g.outer, y)),
                batches: g.batches,
                r,
                n,
                pitch: pick(short, y),
                step: pick(long, x),
                fold: r,
                pitch2: 0,
                way,
                elem,
                shifted: false,
            })
        })
    }

    /// Where the grids continue the packed short axis (grid b's lines packed right after grid
    /// b - 1's, as an [N, a, b] from F to C order packs the b elements of each of the a grids
    /// one group after another), all of them one narrow grid of r x batches lines, in groups of
    /// r: the packed side then writes (or reads) whole lines with no gaps, where each grid
    /// alone would leave gaps of the others' (u8 [16777216, 3, 5] to C order moved at 8% of the
    /// copy bandwidth on an H200, five bytes of every fifteen a grid).
    fn grouped(g: &RunGrid, elem: usize) -> Option<Narrow> {
        if g.batches < 2 {
            return None;
        }
        // The short axis along the runs (`rows`) or along a run's elements.
        [true, false].into_iter().find_map(|rows| {
            let (inner, step) = if rows {
                (g.rows, g.step)
            } else {
                (g.count, g.strides)
            };
            // The packed side x: unit steps within a grid, the grids `inner` apart.
            let x = [0, 1]
                .into_iter()
                .find(|&x| pick(step, x) == 1 && pick(g.outer, x) == inner)?;
            // The grids as one, of r lines.
            let r = g.batches.checked_mul(inner)?;
            let mut one = RunGrid {
                batches: 1,
                outer: (0, 0),
                ..*g
            };
            if rows {
                one.rows = r;
            } else {
                one.count = r;
            }
            let narrow = Self::across(&one, elem)?;
            (inner >= 2 && narrow.way as usize == x).then_some(Narrow {
                fold: inner,
                pitch2: pick(g.outer, 1 - x),
                ..narrow
            })
        })
    }

    /// Where both sides pack the short axis, rows of up to 256 bytes: an exchange's pack of a
    /// few of a wider C-order array's columns (the kernel runs [`packs`]' words through the
    /// tile, where a block a row would move a few bytes each).
    fn repacked(g: &RunGrid, elem: usize) -> Option<Narrow> {
        let (r, (qs, qd)) = (g.count, g.step);
        (g.strides == (1, 1)
            && r >= 2
            && r * elem <= 256
            && packs(r, qs, elem)
            && packs(r, qd, elem))
        .then_some(Narrow {
            starts: g.start,
            outer: g.outer,
            batches: g.batches,
            r,
            n: g.rows,
            pitch: qd,
            step: qs,
            fold: r,
            pitch2: 0,
            way: Way::Repacks,
            elem,
            shifted: false,
        })
    }

    /// The elements of each long line a block takes: 2048 bytes' worth (as measured), or the
    /// most, a power of two, whose r rows (a word more each) the shared tile holds.
    fn stretch(&self) -> usize {
        let most = tile_elements(self.elem) / self.r - word(self.elem);
        (2048 / self.elem).min(1 << most.ilog2())
    }

    /// Whether the tile's rows shift between banks (`copy_narrow_shifted_<bytes>`, the kernels'
    /// `Words::row`): 1- and 2-byte elements where the packed side's first warp meets 6 words
    /// or more in one bank on average, unshifted (u8 lines of 60: 8, 2 shifted; 0.052 -> 0.040
    /// ms on an H200; f16 lines of 60 0.065 -> 0.051). With fewer the shift's arithmetic costs
    /// about what it saves (u8 lines of 28 and 40, 4 and 5 words a bank, ran 3-9% slower).
    fn shifts_rows(&self) -> bool {
        matches!(self.elem, 1 | 2) && self.bank_words() >= 6 * word(self.elem) / 4
    }

    /// The packed side's first warp's accesses to the tile, rows unshifted (each of its 32
    /// threads a word of V elements, element i of each at once), summed over every 4th i (a
    /// launch asks, so a quarter of the work): the most 4-byte words any one bank holds among
    /// the 32 (a bank serves one word at a time).
    fn bank_words(&self) -> usize {
        let (v, q, elem) = (word(self.elem), self.step, self.elem);
        let p = self.stretch() + v;
        (0..v)
            .step_by(4)
            .map(|i| {
                let mut words = [usize::MAX; 32];
                for (w, word) in words.iter_mut().enumerate() {
                    let e = w * v + i;
                    if e % q < self.r {
                        *word = ((e % q) * p + e / q) * elem / 4;
                    }
                }
                words.sort_unstable();
                let mut held = [0; 32];
                for (k, &word) in words.iter().enumerate() {
                    if word != usize::MAX && (k == 0 || words[k - 1] != word) {
                        held[word % 32] += 1;
                    }
                }
                held.into_iter().max().unwrap_or(0)
            })
            .sum()
    }

    /// The blocks of a launch: the long axis in stretches, and the grids.
    pub(super) fn blocks(&self) -> (u32, u32) {
        (self.n.div_ceil(self.stretch()) as u32, self.batches as u32)
    }

    /// The kernels' `Narrow`, by value.
    pub(super) fn arg(&self) -> NarrowArg {
        let (mul, shift) = divider(self.step as u64);
        let (mul_o, shift_o) = match self.way {
            Way::Repacks => divider(self.pitch as u64),
            Way::Unpacks | Way::Packs => (0, 0),
        };
        let (mul_f, shift_f) = divider(self.fold as u64);
        let small = |v: usize| u32::try_from(v).expect("a narrow grid's short axis");
        NarrowArg(
            [
                self.starts.0,
                self.starts.1,
                self.outer.0,
                self.outer.1,
                self.batches,
                self.n,
                self.pitch,
                self.pitch2,
            ]
            .map(|v| v as u64),
            [
                small(self.r),
                small(self.step),
                small(self.fold),
                mul as u32,
                shift as u32,
                self.stretch().ilog2(),
                self.way as u32,
                mul_o as u32,
                shift_o as u32,
                mul_f as u32,
                shift_f as u32,
                0,
            ],
        )
    }
}

/// The side `x` (0 the source, 1 the destination) of a pair.
fn pick(pair: (usize, usize), x: usize) -> usize {
    if x == 0 { pair.0 } else { pair.1 }
}

/// A [`Narrow`] as the kernels take it (eight u64s, then eleven u32s and padding, laid out as
/// their `Narrow`).
#[repr(C)]
pub(super) struct NarrowArg([u64; 8], [u32; 12]);

// SAFETY: eight u64s and twelve u32s, laid out as the kernels' `Narrow`.
unsafe impl cudarc::driver::DeviceRepr for NarrowArg {}

#[cfg(test)]
mod tests {
    use super::{Narrow, Way};
    use crate::backend::cuda::tests::transpose;
    use crate::backend::work::{Run, RunGrid};

    /// The first r of a C-order [n, step]'s columns to an [n, r] in F order (`f_order`) or C
    /// order: a slab of columns as an exchange unpacks or packs it, source rows `step` apart.
    fn columns(n: usize, r: usize, step: usize, f_order: bool) -> RunGrid {
        let runs: Vec<Run> = (0..n)
            .map(|i| Run {
                src: i * step,
                dst: if f_order { i } else { i * r },
                count: r,
                src_stride: 1,
                dst_stride: if f_order { n } else { 1 },
            })
            .collect();
        RunGrid::of(&runs).expect("a grid")
    }

    #[test]
    fn a_short_axis_packed_on_one_side_moves_in_stretches() {
        // [3, 300000] from C to F order: the destination packs the 3 (lines 3 apart), in
        // stretches of 1024 2-byte elements.
        let pack = Narrow::of(&transpose(3, 300_000, 0), 2).expect("narrow");
        assert_eq!(pack.way, Way::Packs);
        assert_eq!((pack.r, pack.n, pack.pitch), (3, 300_000, 300_000));
        assert_eq!(pack.blocks(), (293, 1));
        // [300000, 3] from C to F order: the source packs it.
        let unpack = Narrow::of(&transpose(300_000, 3, 0), 4).expect("narrow");
        assert_eq!(unpack.way, Way::Unpacks);
        assert_eq!((unpack.r, unpack.n, unpack.pitch), (3, 300_000, 300_000));
        // Up to 63 bytes (tiles of 128 at most half full), in stretches that fill the tile:
        // 17 rows of 1024 bytes (16 of 2048 before the tile's last row), 63 of 256.
        let bytes = Narrow::of(&transpose(17, 300_000, 0), 1).expect("narrow");
        assert_eq!((bytes.stretch(), bytes.blocks()), (1024, (293, 1)));
        let most = Narrow::of(&transpose(63, 300_000, 0), 1).expect("narrow");
        assert_eq!(most.stretch(), 256);
        let sixteen = Narrow::of(&transpose(15, 300_000, 0), 16).expect("narrow");
        assert_eq!(sixteen.stretch(), 128);
        assert!(Narrow::of(&transpose(63, 300_000, 0), 1).is_some());
        assert!(Narrow::of(&transpose(64, 300_000, 0), 1).is_none());
        // 4-byte elements up to 31, 16-byte up to 15; a single line is a plain copy.
        assert!(Narrow::of(&transpose(31, 300_000, 0), 4).is_some());
        assert!(Narrow::of(&transpose(32, 300_000, 0), 4).is_none());
        assert!(Narrow::of(&transpose(15, 300_000, 0), 16).is_some());
        assert!(Narrow::of(&transpose(16, 300_000, 0), 16).is_none());
        assert!(Narrow::of(&transpose(1, 300_000, 0), 1).is_none());
    }

    #[test]
    fn rows_shift_between_banks_only_where_a_bank_holds_six_words_or_more() {
        // u8 lines of 60: a warp's threads take every 16th line, 8 words in one bank
        // (16 lines of 528 bytes apart is 0 banks).
        let sixty = Narrow::of(&transpose(60, 500_000, 0), 1).expect("narrow");
        assert_eq!(sixty.bank_words(), 8 * 4);
        assert!(sixty.shifted());
        // Lines of 7 to 40 bytes, 9 to 17 f16, or 4-byte elements: no shift.
        for (r, elem) in [
            (7, 1),
            (17, 1),
            (28, 1),
            (33, 1),
            (40, 1),
            (9, 2),
            (17, 2),
            (7, 4),
        ] {
            let n = Narrow::of(&transpose(r, 500_000, 0), elem).expect("narrow");
            assert!(!n.shifted(), "{r} x {elem} bytes");
        }
        // f16 lines of 25: 6.25 words a bank (a warp's mean).
        assert!(Narrow::of(&transpose(25, 500_000, 0), 2).unwrap().shifted());
    }

    #[test]
    fn packed_lines_with_gaps_between_move_in_stretches_too() {
        // Three of a C-order [300000, 6]'s columns to F order: the source's lines of 3 are 6
        // apart (a word read takes the gaps along).
        let half = Narrow::of(&columns(300_000, 3, 6, true), 2).expect("narrow");
        assert_eq!(half.way, Way::Unpacks);
        assert_eq!(
            (half.r, half.step, half.n, half.pitch),
            (3, 6, 300_000, 300_000)
        );
        // Up to twice the lines' length, or 64 bytes.
        assert!(Narrow::of(&columns(300_000, 3, 32, true), 2).is_some());
        assert!(Narrow::of(&columns(300_000, 3, 33, true), 2).is_none());
        assert!(Narrow::of(&columns(300_000, 40, 80, true), 1).is_some());
        assert!(Narrow::of(&columns(300_000, 40, 81, true), 1).is_none());
    }

    #[test]
    fn rows_both_sides_pack_move_through_the_tile_too() {
        // Three of a C-order [300000, 6]'s columns: rows of 3, 6 apart in the source and 3 in
        // the destination.
        let repack = Narrow::of(&columns(300_000, 3, 6, false), 2).expect("narrow");
        assert_eq!(repack.way, Way::Repacks);
        assert_eq!((repack.r, repack.step, repack.pitch), (3, 6, 3));
        assert_eq!(repack.blocks(), (293, 1));
        // Rows of 256 bytes at most, gaps as for one packed side.
        assert!(Narrow::of(&columns(1000, 64, 128, false), 4).is_some());
        assert!(Narrow::of(&columns(1000, 65, 130, false), 4).is_none());
        assert!(Narrow::of(&columns(1000, 3, 100, false), 4).is_none());
    }
}
