//! Grids with a short axis that one side packs (the kernels `copy_narrow_<bytes>`): a C-order
//! [3, 5000000] to F order, say, whose destination lines are 3 elements long, one after
//! another. Which grids take them, and the blocks a launch takes.

use super::across::divider;
use super::word_elements;
use crate::backend::work::RunGrid;

/// The elements of a 16-byte word, the kernels' unit on both sides.
fn word(elem: usize) -> usize {
    16 / elem
}

/// The elements of a block's shared tile (`copy_narrow_<bytes>`'s `tile`): 16 rows of 2048
/// bytes and a word more each (a row starts a word on, to lie on words as its line does).
fn tile_elements(elem: usize) -> usize {
    16 * (2048 / elem + word(elem))
}

/// A grid as `copy_narrow_<bytes>` moves it: the short axis (r elements) packed on one side,
/// lines of it one after another; the other side's r lines of n elements, `pitch` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Narrow {
    /// The first element of grid 0 on the packed side and on the lines' side.
    starts: (usize, usize),
    /// From grid to grid on each side (packed, lines), and the grids.
    outer: (usize, usize),
    batches: usize,
    r: usize,
    n: usize,
    pitch: usize,
    /// Whether the destination is the packed side.
    to_packed: bool,
    elem: usize,
}

impl Narrow {
    /// How `g` moves packing or unpacking its short axis, where one side packs it (its other
    /// axis's step the short axis's length) and the other holds it as lines contiguous along
    /// the long axis: 2 elements or more, and fewer than half a side of the square kernels'
    /// tiles (32 words: 128 elements of 1 or 2 bytes, 64 of 4 or 8, 32 of 16), which would
    /// stand more than half empty.
    pub(super) fn of(g: &RunGrid, elem: usize) -> Option<Narrow> {
        if !matches!(elem, 1 | 2 | 4 | 8 | 16) || g.batches > 65535 {
            return None;
        }
        // Each side: (along the short axis, along the long one). The short axis is the runs'
        // index (rows) or a run's elements (count).
        let sides = [
            (g.step, g.strides, g.rows, g.count),
            (g.strides, g.step, g.count, g.rows),
        ];
        sides.into_iter().find_map(|(short, long, r, n)| {
            let packed = |x: usize| pick(short, x) == 1 && pick(long, x) == r;
            let lines = |y: usize| pick(long, y) == 1;
            let to_packed = match (packed(0), packed(1)) {
                (false, true) if lines(0) => true,
                (true, false) if lines(1) => false,
                _ => return None,
            };
            let (x, y) = if to_packed { (1, 0) } else { (0, 1) };
            let side = 32 * word_elements(elem).unwrap_or(1);
            (r >= 2 && 2 * r < side).then_some(Narrow {
                starts: (pick(g.start, x), pick(g.start, y)),
                outer: (pick(g.outer, x), pick(g.outer, y)),
                batches: g.batches,
                r,
                n,
                pitch: pick(short, y),
                to_packed,
                elem,
            })
        })
    }

    /// The elements of each long line a block takes: 2048 bytes' worth (as measured), or the
    /// most, a power of two, whose r rows (a word more each) the shared tile holds.
    fn stretch(&self) -> usize {
        let most = tile_elements(self.elem) / self.r - word(self.elem);
        (2048 / self.elem).min(1 << most.ilog2())
    }

    /// The blocks of a launch: the long axis in stretches, and the grids.
    pub(super) fn blocks(&self) -> (u32, u32) {
        (self.n.div_ceil(self.stretch()) as u32, self.batches as u32)
    }

    /// The kernels' `Narrow`, by value.
    pub(super) fn arg(&self) -> NarrowArg {
        let (mul, shift) = divider(self.r as u64);
        NarrowArg(
            [
                self.starts.0,
                self.starts.1,
                self.outer.0,
                self.outer.1,
                self.batches,
                self.r,
                self.n,
                self.pitch,
            ]
            .map(|v| v as u64),
            [
                mul,
                shift,
                u64::from(self.stretch().ilog2()),
                u64::from(self.to_packed),
            ],
        )
    }
}

/// The side `x` (0 the source, 1 the destination) of a pair.
fn pick(pair: (usize, usize), x: usize) -> usize {
    if x == 0 { pair.0 } else { pair.1 }
}

/// A [`Narrow`] as the kernels take it (twelve u64s, laid out as their `Narrow`).
#[repr(C)]
pub(super) struct NarrowArg([u64; 8], [u64; 4]);

// SAFETY: twelve u64s, laid out as the kernels' `Narrow`.
unsafe impl cudarc::driver::DeviceRepr for NarrowArg {}

#[cfg(test)]
mod tests {
    use super::Narrow;
    use crate::backend::cuda::tests::transpose;

    #[test]
    fn a_short_axis_packed_on_one_side_moves_in_stretches() {
        // [3, 300000] from C to F order: the destination packs the 3 (lines 3 apart), in
        // stretches of 1024 2-byte elements.
        let pack = Narrow::of(&transpose(3, 300_000, 0), 2).expect("narrow");
        assert!(pack.to_packed);
        assert_eq!((pack.r, pack.n, pack.pitch), (3, 300_000, 300_000));
        assert_eq!(pack.blocks(), (293, 1));
        // [300000, 3] from C to F order: the source packs it.
        let unpack = Narrow::of(&transpose(300_000, 3, 0), 4).expect("narrow");
        assert!(!unpack.to_packed);
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
}
