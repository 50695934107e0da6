//! Grids whose two axes are both short, each continued by a third axis on one side (the
//! kernels `copy_ends_<bytes>`): a three-axis reversal with both end axes short, such as an f32
//! [3, 230013, 16] from F to C order, whose source runs along the 3 and then the middle axis and
//! whose destination along the 16 and then the middle axis. Square tiles over such grids stand
//! mostly empty (16 by 3 of 32 by 32); a block here holds many whole grids, read as the source
//! lays them out and written as the destination does.

use super::across::divider;
use super::words_side;
use crate::backend::work::RunGrid;
use cudarc::driver::LaunchConfig;

/// Bytes of a block's tile (`copy_ends_<bytes>`'s `tile`).
const TILE_BYTES: usize = 32 << 10;

/// The most blocks a launch takes; blocks loop over the rest.
const MOST_BLOCKS: usize = 1 << 20;

/// A grid as `copy_ends_<bytes>` moves it, its three axes (batches, runs, a run's elements)
/// named anew: x runs along the source (step 1) and y along the destination; the third, m,
/// continues x on the source (`nx` apart) and y on the destination (`ny` apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ends {
    start: (usize, usize),
    /// m's extent.
    m: usize,
    /// x's extent and destination step, y's extent and source step.
    x: (usize, usize),
    y: (usize, usize),
    /// Steps of m a block's tile holds (each a grid of x by y).
    per: usize,
}

impl Ends {
    /// How `g` moves through `copy_ends_<bytes>`, if it does: of its three axes (not nested
    /// further), x contiguous in the source and y in the destination, both shorter than half a
    /// side of the square kernels' tiles ([`words_side`]: those would stand less than a quarter
    /// full),
    /// and the third, m, of two steps or more, continuing x on the source and y on the
    /// destination.
    pub(super) fn of(g: &RunGrid, elem: usize) -> Option<Ends> {
        if g.nested() || !matches!(elem, 1 | 2 | 4 | 8 | 16) {
            return None;
        }
        let axes = [(g.batches, g.outer), (g.rows, g.step), (g.count, g.strides)];
        let short = |n: usize| (2..words_side(elem).div_ceil(2)).contains(&n);
        let x = axes.iter().position(|&(n, s)| s.0 == 1 && short(n))?;
        let y = axes.iter().position(|&(n, s)| s.1 == 1 && short(n))?;
        if x == y {
            return None;
        }
        let ((nx, xs), (ny, ys), (m, ms)) = (axes[x], axes[y], axes[3 - x - y]);
        let cap = TILE_BYTES / elem;
        if m < 2 || ms != (nx, ny) || ny * (nx + 1) > cap {
            return None;
        }
        // As many grids as the tile holds (its rows padded to an odd length), but enough
        // blocks to fill the GPU where m allows.
        let fits = (cap / ny - 1) / nx;
        let per = fits.min(m.div_ceil(1024)).max(1);
        Some(Ends {
            start: g.start,
            m,
            x: (nx, xs.1),
            y: (ny, ys.0),
            per,
        })
    }

    /// The kernel's argument (its `Ends`): starts, m's extent, y's source step, x's
    /// destination step; the extents, the grids a tile holds and its rows' length; the
    /// dividers by a source stretch's elements, a destination stretch's and y's extent.
    pub(super) fn arg(&self) -> EndsArg {
        let (nx, ny, per) = (self.x.0, self.y.0, self.per);
        let row = (per * nx) | 1;
        let div = [per * nx, per * ny, ny].map(|n| divider(n as u64));
        EndsArg(
            [self.start.0, self.start.1, self.m, self.y.1, self.x.1].map(|v| v as u64),
            [nx, ny, per, row].map(|v| v as u32),
            div.map(|d| d.0 as u32),
            div.map(|d| d.1 as u32),
        )
    }

    /// Blocks of 256 threads, one per `per` grids (at most [`MOST_BLOCKS`]).
    pub(super) fn launch(&self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (self.m.div_ceil(self.per).min(MOST_BLOCKS) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// [`Ends::arg`]'s fields, laid out as the kernels' `Ends`.
#[repr(C)]
pub(super) struct EndsArg([u64; 5], [u32; 4], [u32; 3], [u32; 3]);

// SAFETY: five u64s and ten u32s, laid out as the kernels' `Ends`.
unsafe impl cudarc::driver::DeviceRepr for EndsArg {}

#[cfg(test)]
mod tests {
    use super::Ends;
    use crate::backend::cuda::tests::reversal;
    use crate::backend::work::RunGrid;

    #[test]
    fn both_short_end_axes_take_whole_grids_in_a_tile() {
        // [3, 230013, 16] from C to F order: x a run's elements along 16, y the runs along 3, m
        // the grids.
        let g = reversal(&[3, 230013, 16]);
        let ends = Ends::of(&g, 4).expect("both ends short");
        assert_eq!(
            (ends.x, ends.y, ends.m),
            ((16, 690039), (3, 3680208), 230013)
        );
        // 32 KiB of f32 hold 170 grids of 48 (rows of 170 * 16 + 1); enough blocks remain.
        assert_eq!(ends.per, 170);
        assert!(ends.launch().grid_dim.0 >= 1024);
        // A long end (a 2-D transpose's axis) or one of a single element: not.
        assert_eq!(Ends::of(&reversal(&[3, 2000, 64]), 4), None);
        assert_eq!(Ends::of(&reversal(&[1, 2000, 16]), 4), None);
        // Gaps between the grids on a side: m does not continue its axis.
        let gapped = RunGrid {
            outer: (g.outer.0 + 1, g.outer.1),
            ..g
        };
        assert_eq!(Ends::of(&gapped, 4), None);
        // Ends short for bytes (tiles of 128) but not for c128 (tiles of 32).
        assert!(Ends::of(&reversal(&[20, 900, 24]), 1).is_some());
        assert_eq!(Ends::of(&reversal(&[20, 900, 24]), 16), None);
        // Few batches: a grid a block.
        assert_eq!(Ends::of(&reversal(&[5, 700, 7]), 8).map(|e| e.per), Some(1));
    }
}
