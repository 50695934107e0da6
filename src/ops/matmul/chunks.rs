//! The local GEMM in pieces, each waiting only for its own operand, so that the movement of the
//! next piece overlaps this piece's GEMM (on the GPU the movements run on a second stream; on
//! the CPU they run in order, with the same results).
//!
//! A gathered operand (`ag_gemm`) arrives in ring rounds: in round s every rank receives the
//! piece of rank `me - s`, a block of the product's columns (gathering b) or rows (gathering a);
//! round 0 is the rank's own piece, which needs no movement. With NVSHMEM (`nvshmem` in the
//! spec's backends) each round is a put into the receiver's symmetric buffer, by the copy
//! engines, so the GEMM keeps every SM; otherwise an NCCL exchange.

use super::local::View;
use crate::backend::{Backend, Rows};
use crate::dist::Placement;
use crate::ops::exchange::{Custom, Intervals};
use crate::ops::step::{Movement, Staged};
use crate::plan::TensorState;
use anyhow::Result;

/// How a chunk's piece of the gathered operand arrives.
pub enum Arrival<B: Backend> {
    /// An exchange (NCCL on the GPU, MPI on the CPU).
    Exchange(Box<Staged<B>>),
    /// A put of every rank's own piece into `buf` of rank `to` (symmetric); the first round
    /// first waits for every rank to be done with the buffers.
    Put { buf: B::Buf, to: usize, first: bool },
}

impl<B: Backend> Arrival<B> {
    /// The piece once arrived.
    pub fn piece(&self) -> &B::Buf {
        match self {
            Arrival::Exchange(s) => &s.out,
            Arrival::Put { buf, .. } => buf,
        }
    }

    fn queue(&mut self, b: &B, input: &B::Buf) -> Result<()> {
        match self {
            Arrival::Exchange(s) => s.run(b, input).map(|_| ()),
            Arrival::Put { buf, to, first } => {
                if *first {
                    b.put_barrier()?;
                }
                b.put((input, 0), (buf, 0), Rows::flat(b.len(input)), *to)?;
                b.put_barrier()
            }
        }
    }
}

/// One piece of the GEMM.
pub struct Chunk<B: Backend> {
    /// The piece of a that arrives for this chunk; None: the operand's whole piece.
    pub a: Option<Arrival<B>>,
    /// The piece of b, likewise.
    pub b: Option<Arrival<B>>,
    /// Views of the two operands as this chunk uses them.
    pub va: View,
    pub vb: View,
    /// Row and column of the product where this chunk's block goes.
    pub at: (usize, usize),
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
                s.queue(b, a_in)?;
            }
            if let Some(s) = mb.as_mut() {
                s.queue(b, b_in)?;
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
    // Every rank holds a piece (a root-held operand, say, is gathered in one exchange).
    let one_block = pieces.iter().all(|iv| {
        iv.as_ref()
            .is_some_and(|iv| iv[k] == whole_k && iv[free].len() <= 1)
    });
    if ranks < 2 || state.shape.len() != 2 || !one_block {
        return Ok(None);
    }
    let elem = state.dtype.size() as usize;
    let largest = pieces
        .iter()
        .map(|iv| extent(iv, 0) * extent(iv, 1))
        .max()
        .unwrap_or(0);
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
        } else if let Some(buf) = b.symmetric(largest * elem)? {
            let to = ((rank + s) % ranks) as usize;
            Some(Arrival::Put {
                buf,
                to,
                first: s == 1,
            })
        } else {
            let custom = Custom {
                shape: state.shape.clone(),
                layout: state.layout,
                pieces: (0..ranks).map(|r| pieces[from(r)].clone()).collect(),
            };
            let m = Movement::to(state, &custom, ranks, rank);
            let bytes = view.rows * view.cols * elem;
            Some(Arrival::Exchange(Box::new(Staged::new(b, m, bytes)?)))
        };
        chunks.push(match which {
            Gathered::B => Chunk {
                a: None,
                b: moved,
                va: other,
                vb: view,
                at: (0, start),
            },
            Gathered::A => Chunk {
                a: moved,
                b: None,
                va: view,
                vb: other,
                at: (start, 0),
            },
        });
    }
    Ok(Some(chunks))
}
