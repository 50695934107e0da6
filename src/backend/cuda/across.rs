//! Grids moved across in whole destination sectors (the kernels `copy_grid_1t`, `copy_grid_2t`
//! and, folded, `copy_grid_4tr` and `4tc`): which grids take them, how a batch of grids is
//! swept (as one grid where each grid's lines, or their elements, continue the last's), and
//! the blocks a launch takes.

use super::{along_runs, shifted_words, word_elements};
use crate::backend::work::RunGrid;

/// The bytes from which a shifted grid of 1- or 2-byte elements across moves in whole
/// destination sectors: a grid the L2 cannot hold (50-60 MB on an H100 or H200), where partly
/// written sectors cost; a smaller one runs faster in the shifted tiles (u8 3001 x 4097 on an
/// H200: 0.014 ms shifted, 0.019 in sectors).
const ACROSS_BYTES: usize = 32 << 20;

/// Fewer bands than this, and the blocks go in strips of [`STRIP`] tiles along the lines, each
/// strip's bands in turn (the kernels' `strip_order`). On an H200, f16 1023 x 131327 to F order
/// (17 bands) 0.239 -> 0.195 ms and u8 2049 x 131967 (9 bands) 0.231 -> 0.196 ms, whatever the
/// strip from 8 to 64 tiles; with 129 bands or more strips ran up to 1.03x slower.
const FEW_BANDS: usize = 32;

/// The tiles along the lines of a strip (see [`FEW_BANDS`]).
const STRIP: usize = 16;

/// The share of a grid the other kernels' tiles (32 words square: 64 4-byte elements, 128 of 1
/// or 2 bytes) must hold for them to keep it where these kernels could fold it. On an H200, to F
/// order: f32 [7, 2049, 4097] (tiles 11% full) 0.843 -> 0.170 ms folded, [16, 1024, 2048] (25%)
/// 0.175 -> 0.096, u8 [8, 2048, 4096] in words (6%) 0.625 -> 0.049; but f32 [129, 1023, 1025]
/// (63%) 0.394 -> 0.397 and [1025, 1023, 129] 0.386 -> 0.444.
const FILLED: f64 = 0.5;

/// The fewest blocks a grid the other kernels would leave mostly empty moves in folded: fewer,
/// larger tiles would leave SMs idle (the other kernels' 512 tiles, `tiles_enough`).
const MANY: usize = 512;

/// Which of a grid's axes a batch of grids continues, swept as one grid (the kernels' FOLD, and
/// the index of their kernel: `copy_grid_<bytes>t`, `tr`, `tc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fold {
    /// Grids launched apart.
    None,
    /// Each grid's source lines follow the last's: every grid's destination lines continue the
    /// last's (the destination's outer step is a grid's lines).
    Rows,
    /// Each source line continues the last grid's (the source's outer step is a line's length):
    /// the destination lines of the grids follow one another.
    Cols,
}

/// A grid as the across kernels sweep it: the source's lines in each grid and their length, the
/// grids, the fold that takes them as one, the element's bytes, and (source, destination) the
/// steps between lines and between grids, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sweep {
    lines: usize,
    len: usize,
    batches: usize,
    fold: Fold,
    elem: usize,
    steps: (usize, usize),
    outer: (usize, usize),
}

impl Sweep {
    /// How `g` moves across in whole destination sectors, where it does: grids of 1-, 2- or
    /// 4-byte elements read along one axis and written along the other, either [`ACROSS_BYTES`]
    /// or more whose lines start anywhere in a word (not `wide`, [`super::wide_words`]; 1- and
    /// 2-byte elements), or of any size whose grids the other kernels' tiles would leave mostly
    /// empty (less than [`FILLED`] held; then only folded, and in [`MANY`] blocks or more).
    /// Folded where that takes fewer blocks, within what a launch takes (65535 a dimension).
    pub(super) fn of(g: &RunGrid, elem: usize, wide: bool) -> Option<Sweep> {
        let load_q = along_runs(g.step.0, g.strides.0);
        let side = 32 * word_elements(elem)?;
        let filled = |n: usize| n as f64 / n.next_multiple_of(side) as f64;
        let sparse = filled(g.rows) * filled(g.count) < FILLED;
        let apart_too =
            matches!(elem, 1 | 2) && !wide && g.rows * g.count * g.batches * elem >= ACROSS_BYTES;
        if !matches!(elem, 1 | 2 | 4)
            || !(apart_too || sparse)
            || load_q == along_runs(g.step.1, g.strides.1)
            || !shifted_words(g, elem)
        {
            return None;
        }
        let (lines, len, steps) = if load_q {
            (g.count, g.rows, (g.strides.0, g.step.1))
        } else {
            (g.rows, g.count, (g.step.0, g.strides.1))
        };
        let sweep = |fold| Sweep {
            lines,
            len,
            batches: g.batches,
            fold,
            elem,
            steps,
            outer: g.outer,
        };
        let cost = |s: &Sweep| s.blocks().iter().product::<usize>();
        let apart = cost(&sweep(Fold::None));
        // Across, each destination line runs along the source's lines (step 1): the grids'
        // destination lines continue each other where the outer step is a grid's lines, the
        // source's where it is a line's length. Rows fold wherever that takes fewer blocks;
        // columns where it saves a quarter (on an H200, f16 [1023, 511, 257] to F order in a
        // fifth fewer blocks ran 1.03x slower, u8 [2049, 1023, 129] in half as many 1.56x
        // faster).
        let many = g.batches > 1;
        [
            (Fold::None, true),
            (Fold::Rows, many && lines > 1 && g.outer.1 == lines),
            (Fold::Cols, many && len > 1 && g.outer.0 == len),
        ]
        .into_iter()
        .filter(|&(_, fits)| fits)
        .map(|(fold, _)| sweep(fold))
        .filter(|s| s.blocks().iter().all(|&n| n <= 65535))
        .filter(|s| s.fold != Fold::Cols || 4 * cost(s) <= 3 * apart)
        .filter(|s| apart_too || (s.fold != Fold::None && cost(s) >= MANY))
        .min_by_key(cost)
    }

    /// The lines, their length and the grids as swept.
    fn swept(&self) -> (usize, usize, usize) {
        match self.fold {
            Fold::None => (self.lines, self.len, self.batches),
            Fold::Rows => (self.lines * self.batches, self.len, 1),
            Fold::Cols => (self.lines, self.len * self.batches, 1),
        }
    }

    /// The blocks of a launch, a tile each: along the source's lines (128 bytes of each), over
    /// its bands of lines (256 lines of bytes, 64 of wider elements, and the 32 bytes' worth of
    /// lines before the first band's sectors), and the grids.
    pub(super) fn blocks(&self) -> [usize; 3] {
        let (lines, len, batches) = self.swept();
        let band = if self.elem == 1 { 256 } else { 64 };
        [
            len.div_ceil(128 / self.elem),
            (lines + 32 / self.elem).div_ceil(band),
            batches,
        ]
    }

    /// The fold, which picks the kernel.
    pub(super) fn fold(&self) -> Fold {
        self.fold
    }

    /// The kernels' `Sweep`, by value: the swept lines, length and grids; the fold's lines a
    /// grid (or their length), its divider, and the bytes each grid jumps beyond its lines'
    /// steps; the strip.
    pub(super) fn arg(&self) -> SweepArg {
        let (lines, len, batches) = self.swept();
        let (per, outer, step) = match self.fold {
            Fold::None => (0, 0, 0),
            Fold::Rows => (self.lines, self.outer.0, self.steps.0),
            Fold::Cols => (self.len, self.outer.1, self.steps.1),
        };
        let (mul, shift) = if per > 1 { divider(per as u64) } else { (0, 0) };
        let jump = (outer as i64 - (per * step) as i64) * self.elem as i64;
        let [tiles, bands, _] = self.blocks();
        let strip = if bands < FEW_BANDS && tiles > STRIP {
            STRIP
        } else {
            0
        };
        SweepArg(
            [lines, len, batches, per].map(|n| n as u64),
            [mul, shift],
            jump,
            strip as u64,
        )
    }
}

/// A [`Sweep`] as the kernels take it, laid out as their `Sweep`: lines, length, grids and
/// the fold's lines a grid; its divider; its jump; the strip.
#[repr(C)]
pub(super) struct SweepArg([u64; 4], [u64; 2], i64, u64);

// SAFETY: eight 8-byte integers, laid out as the kernels' `Sweep`.
unsafe impl cudarc::driver::DeviceRepr for SweepArg {}

/// The multiplier and shift that divide by `per` (2 or more) any index below 2^31 on the
/// GPU: i / per = umulhi(i, mul) >> shift, with mul = ceil(2^(32 + shift) / per) and
/// shift = ceil(log2 per) - 1, so that mul < 2^32. Exact: mul * per = 2^(32 + shift) + e with
/// e < per <= 2^(shift + 1), so i * e < 2^(32 + shift) and the error never reaches the next
/// integer.
pub(super) fn divider(per: u64) -> (u64, u64) {
    let log = u64::BITS - (per - 1).leading_zeros();
    let shift = u64::from(log) - 1;
    ((1u64 << (32 + shift)).div_ceil(per), shift)
}

#[cfg(test)]
mod tests {
    use super::{Fold, Sweep, divider};
    use crate::backend::cuda::tests::{reversal, transpose};
    use crate::backend::work::{Run, RunGrid};

    #[test]
    fn only_large_grids_of_narrow_elements_across_move_in_whole_sectors() {
        // u8 16385 x 16383 (256 MiB), lines odd on both sides: across.
        assert!(Sweep::of(&transpose(16385, 16383, 3), 1, false).is_some());
        // f16 8191 x 12289 too, a tile a block: 2-byte lines in bands of 64; under 32 MiB,
        // 4-byte elements, or read and written along the same axis: not.
        let f16 = Sweep::of(&transpose(8191, 12289, 3), 2, false).expect("across");
        assert_eq!(f16.blocks(), [193, 129, 1]);
        assert!(Sweep::of(&transpose(3001, 4097, 3), 1, false).is_none());
        assert!(Sweep::of(&transpose(8191, 8193, 3), 4, false).is_none());
        // At most 65535 bands.
        assert!(Sweep::of(&transpose(5_000_000, 7, 3), 2, false).is_none());
        let alongside: Vec<Run> = (0..16383)
            .map(|j| Run {
                src: 3 + j * 16385,
                dst: j * 16387,
                count: 16385,
                src_stride: 1,
                dst_stride: 1,
            })
            .collect();
        let alongside = RunGrid::of(&alongside).expect("a grid");
        assert!(super::shifted_words(&alongside, 1));
        assert!(Sweep::of(&alongside, 1, false).is_none());
    }

    #[test]
    fn a_reversal_sweeps_its_grids_as_one_along_the_axis_that_wastes_least() {
        // Few lines (129) a grid: the grids' lines follow one another, in 516 bands of 256
        // rather than 1023 bands with 129 lines of 256 each.
        let few = Sweep::of(&reversal(&[129, 1023, 2049]), 1, false).expect("across");
        assert_eq!((few.fold, few.blocks()), (Fold::Rows, [17, 516, 1]));
        // Short lines (129 bytes): each continues the last grid's, 1031 tiles along them
        // rather than 2 a grid (the second holding one byte).
        let short = Sweep::of(&reversal(&[2049, 1023, 129]), 1, false).expect("across");
        assert_eq!((short.fold, short.blocks()), (Fold::Cols, [1031, 9, 1]));
        // Short lines in a fifth fewer blocks, across the grids: rows folded rather.
        let f16 = Sweep::of(&reversal(&[1023, 511, 257]), 2, false).expect("across");
        assert_eq!((f16.fold, f16.blocks()), (Fold::Rows, [5, 8169, 1]));
        let f16 = Sweep::of(&reversal(&[257, 511, 1023]), 2, false).expect("across");
        assert_eq!((f16.fold, f16.blocks()), (Fold::Rows, [16, 2053, 1]));
        // The kernel's view: folded rows wrap at each grid's lines (257); each grid starts
        // 1023 elements on in the source, where its lines' steps (511 x 1023) would reach
        // 257 x 511 x 1023. 2053 bands: no strips.
        let arg = f16.arg();
        assert_eq!(arg.0, [257 * 511, 1023, 1, 257]);
        assert_eq!((arg.2, arg.3), ((1023 - 257 * 511 * 1023) * 2, 0));
        // Columns folded: each grid's destination lines start 1023 elements on, where their
        // steps (1023 x 511) would reach 129 x 1023 x 511. 9 bands: strips of 16 tiles.
        let arg = short.arg();
        assert_eq!(arg.0, [2049, 129 * 1023, 1, 129]);
        assert_eq!((arg.2, arg.3), (2049 - 129 * 2049 * 1023, 16));
        // 4-byte elements, and lines that start on words, only folded and only where the other
        // kernels' tiles would stand mostly empty: f32 [7, 2049, 4097] (tiles of 64 holding 7
        // lines), u8 [8, 2048, 4096] in words; not f32 [1023, 511, 257] or [129, 1023, 1025]
        // (tiles 80% and 63% full) or an aligned u8 16384 x 16384.
        let f32 = Sweep::of(&reversal(&[7, 2049, 4097]), 4, false).expect("folded");
        assert_eq!((f32.fold, f32.blocks()), (Fold::Rows, [129, 225, 1]));
        let words = Sweep::of(&reversal(&[8, 2048, 4096]), 1, true).expect("folded");
        assert_eq!((words.fold, words.blocks()), (Fold::Rows, [32, 65, 1]));
        assert!(Sweep::of(&reversal(&[1023, 511, 257]), 4, false).is_none());
        assert!(Sweep::of(&reversal(&[129, 1023, 1025]), 4, false).is_none());
        assert!(Sweep::of(&transpose(16384, 16384, 0), 1, true).is_none());
        // Under 32 MiB too (the pieces an exchange packs), but not in fewer than 512 blocks.
        let small = Sweep::of(&reversal(&[8, 1024, 2048]), 1, true).expect("folded");
        assert_eq!((small.fold, small.blocks()), (Fold::Rows, [16, 33, 1]));
        assert!(super::shifted_words(&reversal(&[8, 1024, 256]), 1));
        assert!(Sweep::of(&reversal(&[8, 1024, 256]), 1, true).is_none());
        // Grids that continue neither way launch apart (a transpose of each of 3 planes, each
        // plane's lines padded by one element on both sides).
        let runs: Vec<Run> = (0..3 * 4097)
            .map(|n| Run {
                src: n / 4097 * 4097 * 4098 + n % 4097,
                dst: n / 4097 * 4097 * 4098 + n % 4097 * 4098,
                count: 4097,
                src_stride: 4098,
                dst_stride: 1,
            })
            .collect();
        let planes = Sweep::of(&RunGrid::of(&runs).expect("grids"), 1, false).expect("across");
        assert_eq!((planes.fold, planes.blocks()), (Fold::None, [33, 17, 3]));
    }

    #[test]
    fn the_divider_divides_exactly_below_2_pow_31() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let randoms: Vec<u64> = (0..200).map(|_| 2 + next() % (1 << 31)).collect();
        let pers = (2..=300).chain([1023, 1024, 1025, 65535, 131327, 2049 * 1023, (1 << 31) - 1]);
        for per in pers.chain(randoms) {
            let (mul, shift) = divider(per);
            assert!(mul < 1 << 32, "{per}");
            let edges = [
                0,
                1,
                per - 1,
                per,
                per + 1,
                (1 << 31) - 1,
                (1 << 31) / per * per,
            ];
            let indices: Vec<u64> = (0..200).map(|_| next() % (1 << 31)).collect();
            for i in edges.into_iter().chain(indices) {
                let i = i.min((1 << 31) - 1);
                assert_eq!((i * mul) >> 32 >> shift, i / per, "{i} / {per}");
            }
        }
    }
}
