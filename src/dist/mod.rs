//! Distributions: which rank holds which elements, local shapes, and global <-> local index maps,
//! with nvmath-python's rules (slab sizes, process-grid numbering, ScaLAPACK block-cyclic).

pub mod axis;
mod check;
pub mod whole;

pub use axis::AxisSplit;
pub use check::check;

use crate::spec::tensor::{DType, Distribution, GridLayout, Layout};

/// A `[lower, upper)` region of a global tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// Inclusive lower corner.
    pub lower: Vec<u64>,
    /// Exclusive upper corner.
    pub upper: Vec<u64>,
}

impl Region {
    /// Number of elements.
    pub fn volume(&self) -> u64 {
        self.lower
            .iter()
            .zip(&self.upper)
            .map(|(l, u)| u.saturating_sub(*l))
            .product()
    }

    /// The common part of two regions, if any.
    pub fn intersect(&self, other: &Region) -> Option<Region> {
        let lower: Vec<u64> = self
            .lower
            .iter()
            .zip(&other.lower)
            .map(|(a, b)| *a.max(b))
            .collect();
        let upper: Vec<u64> = self
            .upper
            .iter()
            .zip(&other.upper)
            .map(|(a, b)| *a.min(b))
            .collect();
        lower
            .iter()
            .zip(&upper)
            .all(|(l, u)| l < u)
            .then_some(Region { lower, upper })
    }
}

/// Grid coordinates of `rank` on a process grid.
pub fn grid_coords(rank: u64, grid: &[u32], layout: GridLayout) -> Vec<u64> {
    let mut coords = vec![0; grid.len()];
    let mut r = rank;
    let order: Vec<usize> = match layout {
        GridLayout::ColMajor => (0..grid.len()).collect(),
        GridLayout::RowMajor => (0..grid.len()).rev().collect(),
    };
    for axis in order {
        coords[axis] = r % grid[axis] as u64;
        r /= grid[axis] as u64;
    }
    coords
}

/// The rank at grid coordinates (inverse of [`grid_coords`]).
pub fn grid_rank(coords: &[u64], grid: &[u32], layout: GridLayout) -> u64 {
    let order: Vec<usize> = match layout {
        GridLayout::ColMajor => (0..grid.len()).rev().collect(),
        GridLayout::RowMajor => (0..grid.len()).collect(),
    };
    order
        .into_iter()
        .fold(0, |acc, axis| acc * grid[axis] as u64 + coords[axis])
}

/// The given process grid, or for none the most nearly square grid of `ranks` over `ndim` axes,
/// larger entries first (MPI_Dims_create's rule).
pub fn process_grid(given: &Option<Vec<u32>>, ranks: u64, ndim: usize) -> Vec<u32> {
    if let Some(g) = given {
        return g.clone();
    }
    let mut dims = vec![1u64; ndim.max(1)];
    let mut n = ranks;
    let mut factors = Vec::new();
    let mut f = 2;
    while f * f <= n {
        while n.is_multiple_of(f) {
            factors.push(f);
            n /= f;
        }
        f += 1;
    }
    if n > 1 {
        factors.push(n);
    }
    for &f in factors.iter().rev() {
        let smallest = (0..dims.len()).min_by_key(|&i| dims[i]).unwrap_or(0);
        dims[smallest] *= f;
    }
    dims.sort_unstable_by(|a, b| b.cmp(a));
    dims.into_iter().map(|d| d as u32).collect()
}

/// A tensor's shape, type, layout and distribution at one point of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorState {
    /// Global shape.
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: DType,
    /// Local storage order.
    pub layout: Layout,
    /// Layout over the ranks.
    pub dist: Distribution,
}

/// Whether `rank`'s piece counts in a sum over every rank's piece of a tensor in `dist`: a
/// replicated tensor's on rank 0 only (the others hold copies); a partial tensor's on every rank
/// (its value is the sum of the ranks' pieces).
pub fn counted_on(dist: &Distribution, rank: u64) -> bool {
    *dist != Distribution::Replicated || rank == 0
}

/// A distribution bound to a global shape and a rank count: answers who holds what.
#[derive(Debug, Clone)]
pub struct Placement<'a> {
    dist: &'a Distribution,
    shape: &'a [u64],
    ranks: u64,
    /// The process grid of a block or block-cyclic distribution (given or derived).
    grid: Vec<u32>,
}

impl<'a> Placement<'a> {
    /// Binds a distribution that [`check`] accepted for this shape and rank count.
    pub fn new(dist: &'a Distribution, shape: &'a [u64], ranks: u64) -> Self {
        let grid = match dist {
            Distribution::Block(b) => process_grid(&b.grid, ranks, shape.len()),
            Distribution::BlockCyclic(c) => process_grid(&c.grid, ranks, shape.len()),
            _ => Vec::new(),
        };
        Placement {
            dist,
            shape,
            ranks,
            grid,
        }
    }

    /// The process grid of a block or block-cyclic distribution; empty for the others.
    pub fn grid(&self) -> &[u32] {
        &self.grid
    }

    /// The per-axis splits and the grid position of `rank` on them (None: the rank holds nothing
    /// of a root or box distribution; boxes are handled apart).
    fn splits(&self, rank: u64) -> Option<(Vec<AxisSplit>, Vec<u64>)> {
        let nd = self.shape.len();
        let whole = || (vec![AxisSplit::Whole; nd], vec![0; nd]);
        match self.dist {
            Distribution::Replicated | Distribution::Partial => Some(whole()),
            Distribution::Root(r) => (u64::from(*r) == rank).then(whole),
            Distribution::Slab(axis) => {
                let (mut splits, mut pos) = whole();
                splits[axis.index()] = AxisSplit::Even { parts: self.ranks };
                pos[axis.index()] = rank;
                Some((splits, pos))
            }
            Distribution::Block(b) => Some((
                self.grid
                    .iter()
                    .map(|&p| AxisSplit::Block { parts: p as u64 })
                    .collect(),
                grid_coords(rank, &self.grid, b.grid_layout),
            )),
            Distribution::BlockCyclic(c) => Some((
                (0..nd)
                    .map(|i| AxisSplit::Cyclic {
                        parts: self.grid[i] as u64,
                        block: c.blocks[i],
                        first: c.first.as_ref().map_or(0, |f| f[i] as u64),
                    })
                    .collect(),
                grid_coords(rank, &self.grid, c.grid_layout),
            )),
            Distribution::Boxes(_) => None,
        }
    }

    /// The local shape of `rank`'s piece; None when the rank holds nothing.
    pub fn local_shape(&self, rank: u64) -> Option<Vec<u64>> {
        if let Distribution::Boxes(boxes) = self.dist {
            let [lo, hi] = &boxes[rank as usize];
            return Some(lo.iter().zip(hi).map(|(l, h)| h - l).collect());
        }
        let (splits, pos) = self.splits(rank)?;
        Some(
            (0..self.shape.len())
                .map(|a| splits[a].count(self.shape[a], pos[a]))
                .collect(),
        )
    }

    /// Every rank holding global element `g`, with the element's local index there.
    pub fn owners(&self, g: &[u64]) -> Vec<(u64, Vec<u64>)> {
        match self.dist {
            Distribution::Replicated | Distribution::Partial => {
                (0..self.ranks).map(|r| (r, g.to_vec())).collect()
            }
            Distribution::Root(r) => vec![(u64::from(*r), g.to_vec())],
            Distribution::Boxes(boxes) => boxes
                .iter()
                .enumerate()
                .filter(|(_, [lo, hi])| (0..g.len()).all(|a| lo[a] <= g[a] && g[a] < hi[a]))
                .map(|(r, [lo, _])| (r as u64, g.iter().zip(lo).map(|(x, l)| x - l).collect()))
                .collect(),
            Distribution::Slab(axis) => {
                let (part, l) = AxisSplit::Even { parts: self.ranks }
                    .owner(self.shape[axis.index()], g[axis.index()]);
                let mut local = g.to_vec();
                local[axis.index()] = l;
                vec![(part, local)]
            }
            Distribution::Block(b) => self.grid_owner(g, b.grid_layout),
            Distribution::BlockCyclic(c) => self.grid_owner(g, c.grid_layout),
        }
    }

    fn grid_owner(&self, g: &[u64], layout: GridLayout) -> Vec<(u64, Vec<u64>)> {
        let (splits, _) = self.splits(0).expect("grid distributions cover every rank");
        let (coords, local): (Vec<u64>, Vec<u64>) = (0..g.len())
            .map(|a| splits[a].owner(self.shape[a], g[a]))
            .unzip();
        vec![(grid_rank(&coords, &self.grid, layout), local)]
    }

    /// The global index of local index `l` on `rank`.
    pub fn to_global(&self, rank: u64, l: &[u64]) -> Vec<u64> {
        if let Distribution::Boxes(boxes) = self.dist {
            return l
                .iter()
                .zip(&boxes[rank as usize][0])
                .map(|(x, lo)| x + lo)
                .collect();
        }
        let (splits, pos) = self.splits(rank).unwrap_or_else(|| {
            (
                vec![AxisSplit::Whole; self.shape.len()],
                vec![0; self.shape.len()],
            )
        });
        (0..l.len())
            .map(|a| splits[a].to_global(self.shape[a], pos[a], l[a]))
            .collect()
    }

    /// Per axis, the `[lo, hi)` global intervals `rank` holds, in local order: the rank holds
    /// their Cartesian product. None when it holds nothing.
    pub fn intervals(&self, rank: u64) -> Option<Vec<Vec<(u64, u64)>>> {
        if let Distribution::Boxes(boxes) = self.dist {
            let [lo, hi] = &boxes[rank as usize];
            return Some(lo.iter().zip(hi).map(|(l, h)| vec![(*l, *h)]).collect());
        }
        let (splits, pos) = self.splits(rank)?;
        Some(
            (0..self.shape.len())
                .map(|a| splits[a].intervals(self.shape[a], pos[a]))
                .collect(),
        )
    }

    /// The global regions `rank` holds (one per block for block-cyclic), in local order.
    pub fn regions(&self, rank: u64) -> Vec<Region> {
        let Some(per_axis) = self.intervals(rank) else {
            return vec![];
        };
        let mut out = vec![Region {
            lower: vec![],
            upper: vec![],
        }];
        for intervals in per_axis {
            out = out
                .into_iter()
                .flat_map(|r| {
                    intervals.iter().map(move |(lo, hi)| {
                        let mut r = r.clone();
                        r.lower.push(*lo);
                        r.upper.push(*hi);
                        r
                    })
                })
                .filter(|r| r.volume() > 0)
                .collect();
        }
        out
    }
}

/// Row-major (C) or column-major (F) linear offset of a local index in a local shape (the
/// tests' independent reference for the init and exchange maps).
#[cfg(test)]
pub fn linear_offset(index: &[u64], shape: &[u64], layout: crate::spec::tensor::Layout) -> u64 {
    let fold = |acc: u64, (i, n): (&u64, &u64)| acc * n + i;
    match layout {
        crate::spec::tensor::Layout::C => index.iter().zip(shape).fold(0, fold),
        crate::spec::tensor::Layout::F => index.iter().zip(shape).rev().fold(0, fold),
    }
}

#[cfg(test)]
pub(crate) mod tests;
