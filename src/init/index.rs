//! A rank's local indices mapped to global coordinates, axis by axis.
//!
//! A `partial` tensor of shape S is viewed as the stacked global `[P, *S]` whose rank r holds the
//! local `[1, *S]` at row r; the extra leading axis of extent 1 changes no local offset in
//! either layout.

use crate::dist::Placement;
use crate::plan::resolve::TensorState;
use crate::spec::tensor::{Distribution, Layout};

/// Where each local index of one rank's piece lies in the global tensor.
#[derive(Debug, Clone)]
pub struct IndexMap {
    /// The global shape (`[P, *S]` for partial).
    pub global: Vec<u64>,
    /// The local shape (`[1, *S]` for partial).
    pub local: Vec<u64>,
    /// Per axis: the global coordinate of each local coordinate (increasing).
    pub coords: Vec<Vec<u64>>,
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
        let mut local = placement.local_shape(rank)?;
        let nd = local.len();
        // Every distribution maps each axis on its own, so one axis at a time suffices.
        let mut coords: Vec<Vec<u64>> = (0..nd)
            .map(|a| {
                (0..local[a])
                    .map(|j| {
                        let mut l = vec![0; nd];
                        l[a] = j;
                        placement.to_global(rank, &l)[a]
                    })
                    .collect()
            })
            .collect();
        let mut global = state.shape.clone();
        if state.dist == Distribution::Partial {
            global.insert(0, ranks);
            local.insert(0, 1);
            coords.insert(0, vec![rank]);
        }
        let mut strides = vec![1; global.len()];
        for a in (0..global.len().saturating_sub(1)).rev() {
            strides[a] = strides[a + 1] * global[a + 1];
        }
        let order = match state.layout {
            Layout::C => (0..global.len()).rev().collect(),
            Layout::F => (0..global.len()).collect(),
        };
        Some(IndexMap {
            global,
            local,
            coords,
            layout: state.layout,
            strides,
            order,
        })
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
            .map(|(a, &j)| self.coords[a][j as usize] * self.strides[a])
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
