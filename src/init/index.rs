//! A rank's local indices mapped to global coordinates, axis by axis.
//!
//! A `partial` tensor of shape S is viewed as the stacked global `[P, *S]` whose rank r holds the
//! local `[1, *S]` at row r; the extra leading axis of extent 1 changes no local offset in
//! either layout.

use crate::dist::Placement;
use crate::dist::TensorState;
use crate::spec::tensor::{Distribution, Layout};

/// The global coordinates of one axis's local coordinates `0, 1, ...` (increasing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coords {
    /// Consecutive: local `j` is global `start + j` (every distribution but block-cyclic; no
    /// memory per element, however long the axis).
    Range {
        /// The global coordinate of local 0.
        start: u64,
        /// How many coordinates.
        len: u64,
    },
    /// One global coordinate per local one (block-cyclic axes).
    List(Vec<u64>),
}

impl Coords {
    /// The coordinates of the `[lo, hi)` intervals, in order.
    fn new(intervals: &[(u64, u64)]) -> Self {
        match intervals {
            [] => Coords::Range { start: 0, len: 0 },
            [(lo, hi)] => Coords::Range {
                start: *lo,
                len: hi - lo,
            },
            _ => Coords::List(intervals.iter().flat_map(|&(lo, hi)| lo..hi).collect()),
        }
    }

    /// The global coordinate of local `j`.
    pub fn at(&self, j: u64) -> u64 {
        match self {
            Coords::Range { start, .. } => start + j,
            Coords::List(list) => list[j as usize],
        }
    }

    /// The local coordinates whose global ones lie in `[lo, hi)` (a range: the global ones
    /// increase).
    pub fn within(&self, lo: u64, hi: u64) -> std::ops::Range<u64> {
        match self {
            Coords::Range { start, len } => {
                lo.saturating_sub(*start).min(*len)..hi.saturating_sub(*start).min(*len)
            }
            Coords::List(list) => {
                let at = |x: u64| list.partition_point(|&g| g < x) as u64;
                at(lo)..at(hi)
            }
        }
    }

    /// The runs of consecutive global coordinates: (first local, first global, length).
    pub fn runs(&self) -> Vec<(u64, u64, u64)> {
        match self {
            Coords::Range { start, len } => vec![(0, *start, *len)],
            Coords::List(list) => {
                let mut out: Vec<(u64, u64, u64)> = Vec::new();
                for (j, &g) in list.iter().enumerate() {
                    match out.last_mut() {
                        Some((_, g0, len)) if *g0 + *len == g => *len += 1,
                        _ => out.push((j as u64, g, 1)),
                    }
                }
                out
            }
        }
    }
}

/// Where each local index of one rank's piece lies in the global tensor.
#[derive(Debug, Clone)]
pub struct IndexMap {
    /// The global shape (`[P, *S]` for partial).
    pub global: Vec<u64>,
    /// The local shape (`[1, *S]` for partial).
    pub local: Vec<u64>,
    /// Per axis: the global coordinate of each local coordinate (increasing).
    pub coords: Vec<Coords>,
    /// The local storage order.
    pub layout: Layout,
    /// C-order strides of `global`.
    strides: Vec<u64>,
    /// The local axes, fastest varying first.
    order: Vec<usize>,
}

impl IndexMap {
    /// The map of `rank`'s piece; None when the rank holds nothing.
    pub fn new(state: &TensorState, ranks: u64, rank: u64) -> Option<Self> {
        let placement = Placement::new(&state.dist, &state.shape, ranks);
        let local = placement.local_shape(rank)?;
        // Every distribution maps each axis on its own, so one axis at a time suffices.
        let coords: Vec<Coords> = placement
            .intervals(rank)?
            .iter()
            .map(|intervals| Coords::new(intervals))
            .collect();
        let map = IndexMap::assemble(state.shape.clone(), local, coords, state.layout);
        Some(if state.dist == Distribution::Partial {
            map.in_row(rank, ranks)
        } else {
            map
        })
    }

    /// The same piece within row `row` of the stacked `[rows, *S]` (a partial tensor's rows).
    pub fn in_row(mut self, row: u64, rows: u64) -> Self {
        self.global.insert(0, rows);
        self.local.insert(0, 1);
        self.coords.insert(0, Coords::Range { start: row, len: 1 });
        IndexMap::assemble(self.global, self.local, self.coords, self.layout)
    }

    fn assemble(global: Vec<u64>, local: Vec<u64>, coords: Vec<Coords>, layout: Layout) -> Self {
        let mut strides = vec![1; global.len()];
        for a in (0..global.len().saturating_sub(1)).rev() {
            strides[a] = strides[a + 1] * global[a + 1];
        }
        let order = match layout {
            Layout::C => (0..global.len()).rev().collect(),
            Layout::F => (0..global.len()).collect(),
        };
        IndexMap {
            global,
            local,
            coords,
            layout,
            strides,
            order,
        }
    }

    /// Number of local elements.
    pub fn len(&self) -> u64 {
        self.local.iter().product()
    }

    /// True when the piece has no elements (an axis of extent 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// C-order strides of the global shape: `global_linear` is `sum(coords[a][idx[a]] *
    /// strides[a])`.
    pub fn strides(&self) -> &[u64] {
        &self.strides
    }

    /// The local axes in storage order, fastest varying first (C: last axis first; F: first
    /// axis first): local offset `k` has `idx[order[0]] = k % local[order[0]]`, and so on.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The C-order global linear index of local index `idx`.
    pub fn global_linear(&self, idx: &[u64]) -> u64 {
        idx.iter()
            .enumerate()
            .map(|(a, &j)| self.coords[a].at(j) * self.strides[a])
            .sum()
    }

    /// The local index at local offset `k`.
    pub fn unravel(&self, mut k: u64) -> Vec<u64> {
        let mut idx = vec![0; self.local.len()];
        for &a in &self.order {
            idx[a] = k % self.local[a];
            k /= self.local[a];
        }
        idx
    }

    /// Steps `idx` to the next local offset (wrapping to zeros after the last).
    pub fn advance(&self, idx: &mut [u64]) {
        for &a in &self.order {
            idx[a] += 1;
            if idx[a] < self.local[a] {
                return;
            }
            idx[a] = 0;
        }
    }
}
