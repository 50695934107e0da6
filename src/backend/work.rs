//! The work the [`Backend`](super::Backend) trait is handed, described: strided copies, matrix
//! views of a piece, local FFT phases, and the terms a matmul's epilog adds. The ops build them;
//! each backend carries them out.

use crate::spec::step::BiasPer;
use crate::spec::tensor::Layout;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// A strided copy of `count` elements: element `i` goes from `src + i*src_stride` to
/// `dst + i*dst_stride` (in elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// First source element.
    pub src: usize,
    /// First destination element.
    pub dst: usize,
    /// Elements to copy.
    pub count: usize,
    /// Source step between elements.
    pub src_stride: usize,
    /// Destination step between elements.
    pub dst_stride: usize,
}

impl Run {
    /// `count` consecutive elements from `src` to `dst`.
    pub fn contiguous(src: usize, dst: usize, count: usize) -> Self {
        Run {
            src,
            dst,
            count,
            src_stride: 1,
            dst_stride: 1,
        }
    }
}

/// A list of runs as a plan keeps it: built once, copied every iteration. What a backend derives
/// from the list ([`Derived`]) is worked out on first use and kept, so a copy of tens of
/// thousands of runs costs the host nothing after its first. A list may be made of parts (an
/// exchange's runs for each peer, one after another), which a backend may copy each its own way.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    list: Vec<Run>,
    /// Where each part after the first starts in `list` (none: one part).
    starts: Box<[usize]>,
    derived: OnceLock<Derived>,
    parts: OnceLock<Box<[Part]>>,
}

/// What a backend needs to know of a list of runs beyond the runs themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Derived {
    /// The grids the runs make (see [`RunGrid::of`]).
    pub grid: Option<RunGrid>,
    /// The xxh3 hash of the runs' [`table`] (its bytes in native order): the list's name in a
    /// cache.
    pub key: u64,
    /// The longest run's element count.
    pub longest: usize,
    /// The runs' elements.
    pub elements: usize,
}

impl Derived {
    /// The grids, hash, longest run and elements of `runs`.
    pub fn of(runs: &[Run]) -> Derived {
        // Streamed, the hash of the table's bytes without the table.
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        words(runs).for_each(|x| h.update(&x.to_ne_bytes()));
        Derived {
            grid: RunGrid::of(runs),
            key: h.digest(),
            longest: runs.iter().map(|r| r.count).max().unwrap_or(0),
            elements: runs.iter().map(|r| r.count).sum(),
        }
    }
}

/// One part of a list of runs: where it lies in the list, and what is derived from its runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its runs' places in the list.
    pub range: std::ops::Range<usize>,
    /// Its grids, hash, longest run and elements.
    pub derived: Derived,
}

impl Runs {
    /// `list` as parts starting at each of `starts` (and at 0); empty parts are dropped.
    pub fn in_parts(list: Vec<Run>, starts: &[usize]) -> Self {
        let mut starts: Vec<usize> = (starts.iter().copied())
            .filter(|&s| s > 0 && s < list.len())
            .collect();
        starts.sort_unstable();
        starts.dedup();
        Runs {
            starts: starts.into(),
            ..Runs::from(list)
        }
    }

    /// Bytes the list holds on the host: its runs, and for a list built of parts where they
    /// start and what is derived of each.
    pub fn bytes(&self) -> usize {
        use std::mem::size_of;
        let parts = self.starts.len() + 1;
        self.list.len() * size_of::<Run>()
            + self.starts.len() * size_of::<usize>()
            + if parts > 1 {
                parts * size_of::<Part>()
            } else {
                0
            }
    }

    /// The grids, hash, longest run and elements of the whole list, worked out once.
    pub fn derived(&self) -> Derived {
        *self.derived.get_or_init(|| Derived::of(&self.list))
    }

    /// The list's parts (one where it was not built of parts), each with what is derived of its
    /// runs, worked out once.
    pub fn parts(&self) -> &[Part] {
        self.parts.get_or_init(|| {
            if self.starts.is_empty() {
                return Box::new([Part {
                    range: 0..self.list.len(),
                    derived: self.derived(),
                }]);
            }
            let ends = self.starts.iter().copied().chain([self.list.len()]);
            let mut from = 0;
            ends.map(|to| {
                let range = std::mem::replace(&mut from, to)..to;
                Part {
                    derived: Derived::of(&self.list[range.clone()]),
                    range,
                }
            })
            .collect()
        })
    }
}

/// `runs` as a table of u64s, five a run: source, destination, count, source stride,
/// destination stride.
pub fn table(runs: &[Run]) -> Vec<u64> {
    words(runs).collect()
}

/// The table's u64s, in order.
fn words(runs: &[Run]) -> impl Iterator<Item = u64> + '_ {
    (runs.iter())
        .flat_map(|r| [r.src, r.dst, r.count, r.src_stride, r.dst_stride].map(|x| x as u64))
}

impl From<Vec<Run>> for Runs {
    /// The list as kept: no room beyond its runs (a plan keeps it for the whole run).
    fn from(mut list: Vec<Run>) -> Self {
        list.shrink_to_fit();
        Runs {
            list,
            ..Runs::default()
        }
    }
}

impl From<Run> for Runs {
    fn from(run: Run) -> Self {
        Runs::from(vec![run])
    }
}

impl std::ops::Deref for Runs {
    type Target = [Run];
    fn deref(&self) -> &[Run] {
        &self.list
    }
}

impl PartialEq for Runs {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

impl Eq for Runs {}

/// The most levels of grids a [`RunGrid`] holds beyond its first (a reversal of up to six axes:
/// a run's elements, the runs of a grid, and four levels of grids).
pub const MORE_LEVELS: usize = 3;

/// A level of grids beyond a [`RunGrid`]'s first: `extent` of the blocks of grids below it,
/// `step` apart (source, destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// Blocks of the level below.
    pub extent: usize,
    /// From one block to the next (source, destination).
    pub step: (usize, usize),
}

impl Level {
    /// No level: one block.
    pub const NONE: Level = Level {
        extent: 1,
        step: (0, 0),
    };
}

/// Runs that make a batch of 2-D grids (a transpose is one): run `p * rows + q` starts at
/// `src + p * outer.0 + q * step.0` in the source and `dst + p * outer.1 + q * step.1` in the
/// destination, every run `count` elements `strides` apart. A backend may copy such runs in tiles,
/// reading and writing along whichever axis is contiguous on each side. The grids may nest in
/// further levels (`more`: a layout change of four axes or more), grid `p` then lying where
/// [`RunGrid::grid_at`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunGrid {
    /// The first run's first element in the source and in the destination.
    pub start: (usize, usize),
    /// The number of grids, of every level.
    pub batches: usize,
    /// From one grid to the next within the first level (source, destination).
    pub outer: (usize, usize),
    /// Runs per grid.
    pub rows: usize,
    /// From one run to the next within a grid (source, destination).
    pub step: (usize, usize),
    /// Elements per run.
    pub count: usize,
    /// Between a run's elements (source, destination).
    pub strides: (usize, usize),
    /// The levels of grids beyond the first, innermost first ([`Level::NONE`] where unused):
    /// grid `p = p1 + b1 * (p2 + e2 * (p3 + ...))`, of `b1` grids a first-level block, lies
    /// `p1` outer steps and `p_k` of level k's steps from the first.
    pub more: [Level; MORE_LEVELS],
}

impl RunGrid {
    /// No levels beyond the first.
    pub const FLAT: [Level; MORE_LEVELS] = [Level::NONE; MORE_LEVELS];

    /// The grids `runs` make, where they make some: at least two runs of one length and
    /// strides, with constant steps between runs, between grids and between the blocks of each
    /// further level (up to [`MORE_LEVELS`] of them).
    pub fn of(runs: &[Run]) -> Option<RunGrid> {
        if runs.len() < 2 {
            return None;
        }
        let first = &runs[0];
        let delta = |a: &Run, b: &Run| Some((b.src.checked_sub(a.src)?, b.dst.checked_sub(a.dst)?));
        // Each level: its blocks of the level below (the first, the runs) and their step.
        let mut levels: Vec<(usize, (usize, usize))> = Vec::new();
        let mut block = 1;
        while block < runs.len() {
            if levels.len() == 2 + MORE_LEVELS || !runs.len().is_multiple_of(block) {
                return None;
            }
            let step = delta(first, &runs[block])?;
            let blocks = runs.len() / block;
            let at = |j: usize| &runs[j * block];
            let n = (1..blocks)
                .find(|&j| delta(at(j - 1), at(j)) != Some(step))
                .unwrap_or(blocks);
            levels.push((n, step));
            block *= n;
        }
        let fits = runs.iter().enumerate().all(|(k, r)| {
            let (mut rest, mut at) = (k, (first.src, first.dst));
            for &(n, step) in &levels {
                let i = rest % n;
                rest /= n;
                at = (at.0 + i * step.0, at.1 + i * step.1);
            }
            r.count == first.count
                && (r.src_stride, r.dst_stride) == (first.src_stride, first.dst_stride)
                && (r.src, r.dst) == at
        });
        if !fits {
            return None;
        }
        // The runs within a grid: the level whose steps let more sides step or stride by one
        // element (a reversal whose runs go along its last axis: its tiles must cross the first
        // and last axes, not the last two); the first where none does better. The runs are the
        // same set; only the order a tile kernel takes them in changes.
        let strides = (first.src_stride, first.dst_stride);
        let unit = |(_, step): &(usize, (usize, usize))| {
            [(step.0, strides.0), (step.1, strides.1)]
                .iter()
                .filter(|&&(step, stride)| step == 1 || stride == 1)
                .count()
        };
        let within = (1..levels.len())
            .filter(|&l| unit(&levels[l]) > unit(&levels[0]))
            .max_by_key(|&l| (unit(&levels[l]), std::cmp::Reverse(l)))
            .unwrap_or(0);
        let (rows, step) = levels.remove(within);
        let mut more = Self::FLAT;
        for (m, &(extent, step)) in more.iter_mut().zip(levels.iter().skip(1)) {
            *m = Level { extent, step };
        }
        let outer = levels.first().map_or((0, 0), |&(_, step)| step);
        Some(RunGrid {
            start: (first.src, first.dst),
            batches: runs.len() / rows,
            outer,
            rows,
            step,
            count: first.count,
            strides,
            more,
        })
    }

    /// Whether the grids nest in more than one level.
    pub fn nested(&self) -> bool {
        self.more.iter().any(|l| l.extent > 1)
    }

    /// The grids of a first-level block.
    pub fn first_level(&self) -> usize {
        self.batches / self.more.iter().map(|l| l.extent).product::<usize>()
    }

    /// Where grid `p` starts, past the first grid's start (source, destination).
    pub fn grid_at(&self, p: usize) -> (usize, usize) {
        let b1 = self.first_level();
        let (mut rest, mut at) = (p / b1, (p % b1 * self.outer.0, p % b1 * self.outer.1));
        for l in &self.more {
            let i = rest % l.extent;
            rest /= l.extent;
            at = (at.0 + i * l.step.0, at.1 + i * l.step.1);
        }
        at
    }

    /// The levels beyond the first as a kernel walks them: every `every` grids (0: never) the
    /// next grid lies `jump` elements (source, destination) from where the level below's steps
    /// reach, so that grid p lies at `p * outer + sum of (p / every) * jump`.
    pub fn wraps(&self) -> [(usize, (i64, i64)); MORE_LEVELS] {
        let (mut every, mut below) = (self.first_level(), (self.first_level(), self.outer));
        self.more.map(|l| {
            if l.extent <= 1 {
                return (0, (0, 0));
            }
            let (n, (s, d)) = below;
            let jump = |to: usize, from: usize| to as i64 - (n * from) as i64;
            let wrap = (every, (jump(l.step.0, s), jump(l.step.1, d)));
            every *= l.extent;
            below = (l.extent, l.step);
            wrap
        })
    }
}

/// The runs of a C-order `shape` to F order as a redistribution lists them: along the last
/// axis (contiguous in the source), the odometer over the others (the next-to-last fastest).
#[cfg(test)]
pub(crate) fn reversal(shape: &[usize]) -> Vec<Run> {
    let nd = shape.len();
    let c: Vec<usize> = (0..nd).map(|a| shape[a + 1..].iter().product()).collect();
    let f: Vec<usize> = (0..nd).map(|a| shape[..a].iter().product()).collect();
    let lines: usize = shape[..nd - 1].iter().product();
    (0..lines)
        .map(|mut k| {
            let (mut src, mut dst) = (0, 0);
            for a in (0..nd - 1).rev() {
                (src, dst) = (src + k % shape[a] * c[a], dst + k % shape[a] * f[a]);
                k /= shape[a];
            }
            Run {
                src,
                dst,
                count: shape[nd - 1],
                src_stride: 1,
                dst_stride: f[nd - 1],
            }
        })
        .collect()
}

/// A local piece seen as a matrix: its storage shape and layout, used transposed or not.
#[derive(Debug, Clone, Copy)]
pub struct View {
    /// Rows of the stored piece.
    pub rows: usize,
    /// Columns of the stored piece.
    pub cols: usize,
    /// Storage order.
    pub layout: Layout,
    /// Used transposed.
    pub transpose: bool,
    /// Used conjugated.
    pub conjugate: bool,
}

impl View {
    /// Rows and columns of the matrix as used.
    pub fn dims(&self) -> (usize, usize) {
        if self.transpose {
            (self.cols, self.rows)
        } else {
            (self.rows, self.cols)
        }
    }

    /// The same piece used with the other transpose.
    pub fn transposed(self) -> Self {
        View {
            transpose: !self.transpose,
            ..self
        }
    }

    /// Element strides (row, column) of the matrix as used.
    pub fn strides(&self) -> (isize, isize) {
        let (rs, cs) = match self.layout {
            Layout::C => (self.cols as isize, 1),
            Layout::F => (1, self.rows as isize),
        };
        if self.transpose { (cs, rs) } else { (rs, cs) }
    }
}

/// One transform of a local phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AxisOp {
    /// Complex to complex along an axis.
    C2c {
        /// The axis.
        axis: usize,
        /// e^+i instead of e^-i.
        inverse: bool,
    },
    /// Real to complex along the last axis (n -> n/2 + 1).
    R2c,
    /// Complex to real along the last axis (n/2 + 1 -> n).
    C2r {
        /// The real length.
        n: usize,
    },
}

/// Points from which a c2c down the columns of a C-order matrix runs faster on the columns as
/// contiguous rows: cuFFT's strided transforms of 8192 points or more took 3.5-4.9x its
/// contiguous ones on an H200, while a tile transpose costs about a copy (bench/RESULTS.md,
/// 2026-11-26 fourth session). The GPU backend transposes such columns around the plan, a 2-D
/// FFT's exchange from x-slabs lands them transposed, and one from y-slabs turns them into rows
/// batch by batch on its way to x-slabs.
pub const LONG_COLUMNS: usize = 8192;

/// Whether `n` points are a Bluestein length: one with a prime factor above 127. cuFFT takes
/// such lengths by Bluestein's algorithm (the GPU backend plans some of them apart), and so does
/// the CPU backend (rustfft's planner would take some by Rader's algorithm, which lost
/// precision).
pub fn bluestein(n: usize) -> bool {
    let mut rest = n.max(1);
    for p in 2..=127 {
        while rest.is_multiple_of(p) {
            rest /= p;
        }
    }
    rest > 1
}

/// A local phase: transforms in order on a piece of `shape` (C order, the shape as it enters).
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// The piece's shape as it enters (real shape for an R2c, complex for the others).
    pub shape: Vec<usize>,
    /// The transforms, in order.
    pub ops: Vec<AxisOp>,
    /// Multiply the result by this, if any.
    pub scale: Option<f64>,
    /// Only rows `lo..hi` of axis 1 are transformed, the rest of the output left as it is (one
    /// batch of a phase split by rows: see [`Phase::on_rows`]).
    pub rows: Option<(usize, usize)>,
    /// The input is the step's own scratch, written afresh every run (not a tensor of the spec):
    /// the phase may overwrite it, and a c2r then reads it where it lies instead of a copy.
    pub spent: bool,
}

impl Phase {
    /// This phase on rows `lo..hi` of axis 1 only; None unless its transforms leave axis 1
    /// alone (along axis 0, the trailing axes from 2 on, an r2c of the last) in one direction,
    /// nothing is scaled and no c2r runs: the rows are then independent of each other. An r2c
    /// of one point (a last axis of 1, which cuFFT would squeeze out of a plan) stays whole.
    pub fn on_rows(&self, lo: usize, hi: usize) -> Option<Phase> {
        let nd = self.shape.len();
        let last = nd.saturating_sub(1);
        let axes: Vec<usize> = (self.ops.iter())
            .map(|o| match *o {
                AxisOp::C2c { axis, .. } => axis,
                AxisOp::R2c | AxisOp::C2r { .. } => last,
            })
            .collect();
        let inverse = |o: &AxisOp| matches!(o, AxisOp::C2c { inverse: true, .. });
        let one_way = self.ops.iter().all(|o| inverse(o) == inverse(&self.ops[0]));
        // The axes past 1 a phase transforms: a trailing run, so that cuFFT takes them as one.
        let mut inner: Vec<usize> = axes.iter().copied().filter(|&a| a > 1).collect();
        inner.sort_unstable();
        inner.dedup();
        let trailing = inner
            .first()
            .is_none_or(|&a| inner == (a..=last).collect::<Vec<_>>());
        let real_first = (self.ops.iter().skip(1)).all(|o| matches!(o, AxisOp::C2c { .. }));
        let ok = nd >= 2
            && lo <= hi
            && hi <= self.shape[1]
            && !(self.ops.contains(&AxisOp::R2c) && self.shape[last] == 1)
            && self.scale.is_none()
            && !axes.contains(&1)
            && !self.ops.iter().any(|o| matches!(o, AxisOp::C2r { .. }))
            && one_way
            && trailing
            && real_first;
        ok.then(|| Phase {
            rows: Some((lo, hi)),
            ..self.clone()
        })
    }

    /// Bytes the phase reads and writes, for complex values of `complex_size` bytes (an r2c
    /// reads reals, a c2r writes them).
    pub fn bytes(&self, complex_size: usize) -> (usize, usize) {
        let real = |first: bool| match (first, self.ops.first(), self.ops.last()) {
            (true, Some(AxisOp::R2c), _) | (false, _, Some(AxisOp::C2r { .. })) => complex_size / 2,
            _ => complex_size,
        };
        let count = |s: &[usize]| s.iter().product::<usize>();
        (
            count(&self.shape) * real(true),
            count(&self.out_shape()) * real(false),
        )
    }

    /// The piece's shape after the phase.
    pub fn out_shape(&self) -> Vec<usize> {
        let mut s = self.shape.clone();
        let last = s.len() - 1;
        for op in &self.ops {
            match op {
                AxisOp::R2c => s[last] = s[last] / 2 + 1,
                AxisOp::C2r { n } => s[last] = *n,
                AxisOp::C2c { .. } => {}
            }
        }
        s
    }
}

/// The terms added to the product before the activation, in buffers of type `T`.
pub struct Addends<'a, T: ?Sized = [u8]> {
    /// `beta` and `c`'s piece (out dtype, same placement and layout as the product).
    pub c: Option<(f64, &'a T)>,
    /// The bias.
    pub bias: Option<Bias<'a, T>>,
}

/// A bias vector and where each local element of the product finds its entry.
pub struct Bias<'a, T: ?Sized = [u8]> {
    /// The whole vector (out dtype).
    pub vector: &'a T,
    /// The global row of each local row (a bias per row), or the global column of each local
    /// column (per column).
    pub index: &'a [u64],
    /// Which axis the vector runs along.
    pub per: BiasPer,
}

impl<T: ?Sized> Bias<'_, T> {
    /// The vector's entry for element `i` of a row-major product of `cols` columns.
    pub fn entry(&self, i: usize, cols: usize) -> usize {
        let cols = cols.max(1);
        self.index[match self.per {
            BiasPer::Row => i / cols,
            BiasPer::Column => i % cols,
        }] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::{Run, RunGrid, Runs, bluestein};

    #[test]
    fn bluestein_lengths_have_a_prime_factor_above_127() {
        for n in [131, 4099, 8209, 471405, 2 * 131] {
            assert!(bluestein(n), "{n}");
        }
        for n in [1, 2, 127, 127 * 127, 1024, 3 * 5 * 7 * 11 * 13, 1_000_000] {
            assert!(!bluestein(n), "{n}");
        }
    }

    fn run(src: usize, dst: usize, count: usize, strides: (usize, usize)) -> Run {
        Run {
            src,
            dst,
            count,
            src_stride: strides.0,
            dst_stride: strides.1,
        }
    }

    #[test]
    fn a_list_of_runs_keeps_what_it_derives() {
        let list: Vec<Run> = (0..4).map(|j| run(j, 3 * j, 3, (4, 1))).collect();
        let runs = Runs::from(list.clone());
        let derived = runs.derived();
        assert_eq!(derived.grid, RunGrid::of(&list));
        assert_eq!(derived.longest, 3);
        // The key is the hash of the table's bytes, as a device table of the same values has.
        let bytes: Vec<u8> = super::table(&runs)
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        assert_eq!(derived.key, xxhash_rust::xxh3::xxh3_64(&bytes));
        assert_eq!(super::table(&runs)[5..10], [1, 3, 3, 4, 1]);
        // Another list has another key; the same list, the same.
        let other = Runs::from(run(0, 0, 3, (4, 1)));
        assert_ne!(other.derived().key, derived.key);
        assert_eq!(Runs::from(list).derived().key, derived.key);
        assert_eq!(other.derived().grid, None);
    }

    #[test]
    fn a_list_in_parts_derives_each_part_apart() {
        // Two peers' rows: 3 rows of 5 elements, then 2 of 4, one grid each but none together.
        let mut list: Vec<Run> = (0..3).map(|j| run(10 * j, 5 * j, 5, (1, 1))).collect();
        list.extend((0..2).map(|j| run(100 + 10 * j, 15 + 4 * j, 4, (1, 1))));
        let runs = Runs::in_parts(list.clone(), &[0, 3, 3, 5, 9]);
        assert_eq!(runs.derived().grid, None);
        let parts = runs.parts();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].range.clone(), parts[1].range.clone()),
            (0..3, 3..5)
        );
        assert_eq!(parts[0].derived, super::Derived::of(&list[..3]));
        assert_eq!(parts[1].derived.grid, RunGrid::of(&list[3..]));
        assert_eq!(parts[1].derived.longest, 4);
        // The part's key is the hash of its own table.
        let bytes: Vec<u8> = (super::table(&list[3..]).iter())
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        assert_eq!(parts[1].derived.key, xxhash_rust::xxh3::xxh3_64(&bytes));
        // A list built whole is one part.
        let whole = Runs::from(list);
        assert_eq!(whole.parts().len(), 1);
        assert_eq!(whole.parts()[0].derived, whole.derived());
    }

    #[test]
    fn a_transpose_is_one_grid() {
        // A 3 x 4 matrix from C to F order: one run per column, down the rows.
        let runs: Vec<Run> = (0..4).map(|j| run(j, j * 3, 3, (4, 1))).collect();
        let grid = RunGrid::of(&runs).expect("a grid");
        assert_eq!((grid.batches, grid.rows, grid.count), (1, 4, 3));
        assert_eq!((grid.step, grid.strides), ((1, 3), (4, 1)));
    }

    #[test]
    fn a_three_axis_reversal_is_a_batch_of_grids() {
        // [2, 3, 4] from C to F: runs along axis 0, the odometer over axes 1 (outer) and 2.
        let (d0, d1, d2) = (2, 3, 4);
        let runs: Vec<Run> = (0..d1)
            .flat_map(|i1| (0..d2).map(move |i2| (i1, i2)))
            .map(|(i1, i2)| run(i1 * d2 + i2, i1 * d0 + i2 * d0 * d1, d0, (d1 * d2, 1)))
            .collect();
        let grid = RunGrid::of(&runs).expect("grids");
        assert_eq!((grid.batches, grid.rows), (d1, d2));
        assert_eq!((grid.outer, grid.step), ((d2, d0), (1, d0 * d1)));
        // Every element lands where its run says.
        for (k, r) in runs.iter().enumerate() {
            let (p, q) = (k / grid.rows, k % grid.rows);
            assert_eq!(r.src, grid.start.0 + p * grid.outer.0 + q * grid.step.0);
        }
    }

    #[test]
    fn a_reversal_along_the_last_axis_tiles_across_the_first_and_last() {
        // [4, 3, 5] from C to F with runs along axis 2 (contiguous in the source), the odometer
        // over axes 0 (outer) and 1: taken as given, no side of the runs' order is contiguous in
        // the destination; swapped, the runs step along axis 0, which is.
        let (d0, d1, d2) = (4, 3, 5);
        let runs: Vec<Run> = (0..d0)
            .flat_map(|i0| (0..d1).map(move |i1| (i0, i1)))
            .map(|(i0, i1)| run(i0 * d1 * d2 + i1 * d2, i0 + i1 * d0, d2, (1, d0 * d1)))
            .collect();
        let grid = RunGrid::of(&runs).expect("grids");
        assert_eq!((grid.batches, grid.rows), (d1, d0));
        assert_eq!((grid.outer, grid.step), ((d2, d0), (d1 * d2, 1)));
        // The same runs: each (p, q) names one, and all of them once.
        let mut named: Vec<(usize, usize)> = (0..grid.batches * grid.rows)
            .map(|k| {
                let (p, q) = (k / grid.rows, k % grid.rows);
                (
                    grid.start.0 + p * grid.outer.0 + q * grid.step.0,
                    grid.start.1 + p * grid.outer.1 + q * grid.step.1,
                )
            })
            .collect();
        let mut given: Vec<(usize, usize)> = runs.iter().map(|r| (r.src, r.dst)).collect();
        named.sort_unstable();
        given.sort_unstable();
        assert_eq!(named, given);
    }

    #[test]
    fn reversals_of_four_to_six_axes_are_nested_grids_across_their_first_and_last() {
        for shape in [
            &[3, 4, 5, 6][..],
            &[2, 3, 2, 5, 7],
            &[2, 3, 4, 2, 3, 5],
            &[64, 64, 64, 64],
        ] {
            let runs = super::reversal(shape);
            let g = RunGrid::of(&runs).expect("nested grids");
            assert!(g.nested(), "{shape:?}");
            // Tiles cross the source's contiguous axis (a run's) and the destination's (the
            // first, the runs within a grid).
            assert_eq!(
                (g.strides.0, g.step.1, g.rows),
                (1, 1, shape[0]),
                "{shape:?}"
            );
            // Each (p, q) names one run, and all of them once; the kernels' wraps agree.
            let mut named: Vec<(usize, usize)> = (0..g.batches * g.rows)
                .map(|k| {
                    let (p, q) = (k / g.rows, k % g.rows);
                    let at = g.grid_at(p);
                    let wrapped = g.wraps().iter().fold(
                        ((p * g.outer.0) as i64, (p * g.outer.1) as i64),
                        |(s, d), &(every, jump)| match every {
                            0 => (s, d),
                            n => (s + (p / n) as i64 * jump.0, d + (p / n) as i64 * jump.1),
                        },
                    );
                    assert_eq!(wrapped, (at.0 as i64, at.1 as i64));
                    (
                        g.start.0 + at.0 + q * g.step.0,
                        g.start.1 + at.1 + q * g.step.1,
                    )
                })
                .collect();
            let mut given: Vec<(usize, usize)> = runs.iter().map(|r| (r.src, r.dst)).collect();
            named.sort_unstable();
            given.sort_unstable();
            assert_eq!(named, given, "{shape:?}");
        }
        // Seven axes nest deeper than a grid holds; three make no nesting.
        assert_eq!(RunGrid::of(&super::reversal(&[2, 2, 3, 2, 2, 3, 4])), None);
        assert!(
            !RunGrid::of(&super::reversal(&[3, 4, 5]))
                .expect("grids")
                .nested()
        );
    }

    #[test]
    fn irregular_runs_make_no_grid() {
        assert_eq!(RunGrid::of(&[run(0, 0, 4, (1, 1))]), None);
        let uneven = [
            run(0, 0, 3, (4, 1)),
            run(1, 3, 3, (4, 1)),
            run(3, 6, 3, (4, 1)),
        ];
        assert_eq!(RunGrid::of(&uneven), None);
        let lengths = [run(0, 0, 3, (4, 1)), run(1, 3, 2, (4, 1))];
        assert_eq!(RunGrid::of(&lengths), None);
        let backwards = [run(5, 0, 3, (4, 1)), run(1, 3, 3, (4, 1))];
        assert_eq!(RunGrid::of(&backwards), None);
    }
}
