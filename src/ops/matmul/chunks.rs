//! The local GEMM in pieces, each waiting only for its own operands, so that the movement of the
//! next piece's operands overlaps this piece's GEMM (on the GPU the movements run on a second
//! stream; on the CPU they run in order, with the same results).
//!
//! - A gathered operand (`ag_gemm`) arrives in ring rounds: in round s every rank receives the
//!   piece of rank `me - s`, a block of the product's columns (gathering b) or rows (gathering
//!   a); round 0 is the rank's own piece, which needs no movement.
//! - SUMMA's panels arrive in slices of k: slice j brings `a[my rows, kj]` and `b[kj, my cols]`
//!   and its GEMM adds to the product.

use super::local::View;
use crate::backend::Backend;
use crate::dist::Placement;
use crate::ops::exchange::{Custom, Intervals};
use crate::ops::step::{Movement, Staged};
use crate::plan::TensorState;
use anyhow::Result;

/// Slices of k SUMMA's panels arrive in.
const K_SLICES: u64 = 8;

/// One piece of the GEMM.
pub struct Chunk<B: Backend> {
    /// The piece of a, moved for this chunk; None: the operand's whole piece.
    pub a: Option<Staged<B>>,
    /// The piece of b, likewise.
    pub b: Option<Staged<B>>,
    /// Views of the two operands as this chunk uses them.
    pub va: View,
    pub vb: View,
    /// Row and column of the product where this chunk's block goes.
    pub at: (usize, usize),
    /// Adds to the product (a later slice of k).
    pub accumulate: bool,
}

impl<B: Backend> Chunk<B> {
    /// Queues the moves this chunk's operands need (a and b as the step's inputs); None when
    /// it needs none.
    pub fn fetch(&mut self, b: &B, a_in: &B::Buf, b_in: &B::Buf) -> Result<Option<B::Mark>> {
        if self.a.is_none() && self.b.is_none() {
            return Ok(None);
        }
        let (ma, mb) = (&mut self.a, &mut self.b);
        b.side(&mut || {
            if let Some(s) = ma.as_mut() {
                s.run(b, a_in)?;
            }
            if let Some(s) = mb.as_mut() {
                s.run(b, b_in)?;
            }
            Ok(())
        })
        .map(Some)
    }
}

/// Which operand a ring gathers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gathered {
    A,
    B,
}

/// Elements an axis of a piece spans.
fn extent(iv: &Option<Intervals>, axis: usize) -> usize {
    iv.as_ref().map_or(0, |iv| {
        iv[axis].iter().map(|(lo, hi)| (hi - lo) as usize).sum()
    })
}

fn view_of(iv: &Option<Intervals>, state: &TensorState, transpose: bool, conjugate: bool) -> View {
    View {
        rows: extent(iv, 0),
        cols: extent(iv, 1),
        layout: state.layout,
        transpose,
        conjugate,
    }
}

/// The ring rounds gathering operand `which` (in `state`, used transposed or not) beside the
/// other operand's whole piece (`other`); None when some rank's piece is not one block of the
/// product's free axis with the whole of k (then the operand is gathered in one exchange).
pub fn ring<B: Backend>(
    b: &B,
    which: Gathered,
    state: &TensorState,
    (transpose, conjugate): (bool, bool),
    other: View,
) -> Result<Option<Vec<Chunk<B>>>> {
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    // The storage axis along the product's free axis: op(b)'s columns, or op(a)'s rows.
    let free = match which {
        Gathered::B => usize::from(!transpose),
        Gathered::A => usize::from(transpose),
    };
    let k = 1 - free;
    let placement = Placement::new(&state.dist, &state.shape, ranks);
    let pieces: Vec<Option<Intervals>> = (0..ranks).map(|q| placement.intervals(q)).collect();
    let whole_k = vec![(0, state.shape[k])];
    let one_block = pieces
        .iter()
        .flatten()
        .all(|iv| iv[k] == whole_k && iv[free].len() <= 1);
    if ranks < 2 || state.shape.len() != 2 || !one_block {
        return Ok(None);
    }
    let mut chunks = Vec::new();
    for s in 0..ranks {
        let from = |r: u64| ((r + ranks - s) % ranks) as usize;
        let mine = &pieces[from(rank)];
        let view = view_of(mine, state, transpose, conjugate);
        let start = mine
            .as_ref()
            .and_then(|iv| iv[free].first())
            .map_or(0, |&(lo, _)| lo as usize);
        let moved = if s == 0 {
            None
        } else {
            let custom = Custom {
                shape: state.shape.clone(),
                layout: state.layout,
                pieces: (0..ranks).map(|r| pieces[from(r)].clone()).collect(),
            };
            let m = Movement::to(state, &custom, ranks, rank);
            let bytes = view.rows * view.cols * state.dtype.size() as usize;
            Some(Staged::new(b, m, bytes)?)
        };
        chunks.push(match which {
            Gathered::B => Chunk {
                a: None,
                b: moved,
                va: other,
                vb: view,
                at: (0, start),
                accumulate: false,
            },
            Gathered::A => Chunk {
                a: moved,
                b: None,
                va: view,
                vb: other,
                at: (start, 0),
                accumulate: false,
            },
        });
    }
    Ok(Some(chunks))
}

/// SUMMA's panels in slices of k: a's rows of this rank's grid row and b's columns of its grid
/// column, slice by slice (untransposed operands).
pub fn summa<B: Backend>(b: &B, sa: &TensorState, sb: &TensorState) -> Result<Vec<Chunk<B>>> {
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let kk = sa.shape[1];
    let slices = std::env::var("DISTRUN_K_SLICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(K_SLICES);
    let step = kk.div_ceil(slices).max(1);
    let (pa, pb) = (
        Placement::new(&sa.dist, &sa.shape, ranks),
        Placement::new(&sb.dist, &sb.shape, ranks),
    );
    let slice = |p: &Placement, axis: usize, k: (u64, u64), r: u64| {
        p.intervals(r).map(|mut iv| {
            iv[axis] = vec![k];
            iv
        })
    };
    let mut chunks = Vec::new();
    let mut k0 = 0;
    while k0 < kk {
        let k = (k0, (k0 + step).min(kk));
        let moved = |state: &TensorState, p: &Placement, axis: usize| -> Result<_> {
            let custom = Custom {
                shape: state.shape.clone(),
                layout: state.layout,
                pieces: (0..ranks).map(|r| slice(p, axis, k, r)).collect(),
            };
            let view = view_of(&custom.pieces[rank as usize], state, false, false);
            let m = Movement::to(state, &custom, ranks, rank);
            let bytes = view.rows * view.cols * state.dtype.size() as usize;
            Ok((Some(Staged::new(b, m, bytes)?), view))
        };
        let (a, va) = moved(sa, &pa, 1)?;
        let (bm, vb) = moved(sb, &pb, 0)?;
        chunks.push(Chunk {
            a,
            b: bm,
            va,
            vb,
            at: (0, 0),
            accumulate: k0 > 0,
        });
        k0 = k.1;
    }
    Ok(chunks)
}
