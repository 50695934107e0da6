//! A 2-D FFT from x-slabs down long columns (see `lands_transposed`), its second phase run
//! column batch by column batch as the exchange lands each: the first phase (along y, every
//! x-row of the rank) runs whole; then, for each batch of every rank's y-columns, each sender
//! tile-transposes its part for every peer (`[columns, planes]`, x contiguous) and puts it into
//! the peer's y-slab piece, which lies in F order (`[columns, n0]`: each column's x values
//! contiguous), or sends it by NCCL; each receiver runs the second phase along those rows as
//! soon as its batch has landed, and tile-transposes them into its C-order y-slab piece. So the
//! second phase, and both transposes, run while the exchange goes on.
//!
//! By puts, a barrier after each batch's puts (on the side queue) says that every peer's part of
//! it has landed; by NCCL, the batch's all-to-all into a receive buffer and its unpacking.

use super::batched::{Put, batch_count, landing, slab_room};
use super::slab_pieces;
use crate::backend::work::{Phase, Run, Runs};
use crate::backend::{Backend, Puts, Rows, puts_of};
use crate::dist::TensorState;
use crate::ops::movement::Route;
use crate::runtime::comm::Parts;
use crate::spec::tensor::DType;
use anyhow::Result;

/// One batch of columns: the sender's part of it, then the receiver's.
struct Batch {
    /// Each peer's columns of this batch, transposed from the first phase's output into the
    /// send buffer (one grid each); this rank's own, straight into its landed piece.
    pack: Vec<Runs>,
    own: Runs,
    /// By puts from the send buffer into each peer's landed piece.
    puts: Vec<Put>,
    /// By NCCL: elements to and from each rank (send and receive buffers), and the unpacking
    /// of the received parts into the landed piece.
    to: Parts,
    from: Parts,
    unpack: Runs,
    /// The second phase on this rank's rows of the batch (None where it has none), their byte
    /// offset in the landed piece, and their transpose into the result.
    phase: Option<Phase>,
    at: usize,
    back: Runs,
}

/// The column-batched exchange and second phase of one rank.
pub struct Columns<B: Backend> {
    batches: Vec<Batch>,
    elem: usize,
    send: B::Buf,
    recv: B::Buf,
    /// This rank's y-slab piece in F order, which the exchange fills (symmetric where puts can
    /// fill it), and the second phase's output (F order too).
    landed: B::Buf,
    after: B::Buf,
    /// The result: this rank's y-slab piece in C order.
    pub out: B::Buf,
    /// How the batches move.
    pub route: Route,
}

/// The batches of one rank, and its buffers' sizes in elements.
struct Plan {
    batches: Vec<Batch>,
    sent: usize,
    received: usize,
    piece: usize,
}

/// How the batches of a transpose from `middle` (2-D x-slabs, C order) to `natural` (y-slabs,
/// C order) go for rank `me`, with `phase` (where given) the second phase on the rank's whole
/// piece (`[columns, n0]`, along axis 1); None where either is no slab.
fn plan(
    middle: &TensorState,
    natural: &TensorState,
    phase: Option<&Phase>,
    (ranks, me): (usize, usize),
    wanted: Option<u32>,
) -> Option<Plan> {
    if ranks < 2 || middle.shape.len() != 2 {
        return None;
    }
    let xs = slab_pieces(middle, 0, ranks)?;
    let ys = slab_pieces(natural, 1, ranks)?;
    let (n0, n1) = (middle.shape[0] as usize, middle.shape[1] as usize);
    let elem = middle.dtype.size() as usize;
    let fewest = ys.iter().map(|y| y.1).min().unwrap_or(0);
    // Split alike by NCCL and by puts, so that the plan sizes the buffers without knowing
    // which: a small last batch gained nothing here (2-D c64 16384^2 on 2 H200s by puts: 3.009
    // ms either way).
    let split = batch_count(&middle.shape, elem, ranks, fewest, (wanted, false));
    let (x0, xw) = xs[me];
    let mine = ys[me].1;
    // Batch k's columns of rank q's piece.
    let cols = |q: usize, k: usize| split.planes(ys[q].1, k);
    let (mut sent, mut received) = (0, 0);
    let mut batches = Vec::with_capacity(split.n);
    for k in 0..split.n {
        let (mut pack, mut puts) = (Vec::new(), Vec::new());
        let mut to = Parts::packed(&vec![0; ranks]);
        let mut from = Parts::packed(&vec![0; ranks]);
        let mut unpack = Vec::new();
        let (mut displ, mut rdispl) = (sent, 0);
        let (lo, hi) = cols(me, k);
        // Peers in ring order from this rank (puts start as a permutation).
        for q in (1..ranks).map(|i| (me + i) % ranks) {
            let (qlo, qhi) = cols(q, k);
            let c = qhi - qlo;
            if c > 0 && xw > 0 {
                let first = ys[q].0 + qlo;
                let runs: Vec<Run> = (0..xw)
                    .map(|x| Run {
                        src: x * n1 + first,
                        dst: displ + x,
                        count: c,
                        src_stride: 1,
                        dst_stride: xw,
                    })
                    .collect();
                pack.push(runs.into());
                puts.push(Put {
                    peer: q,
                    src: displ * elem,
                    dst: (qlo * n0 + x0) * elem,
                    rows: Rows {
                        width: xw * elem,
                        height: c,
                        src_pitch: xw * elem,
                        dst_pitch: n0 * elem,
                    },
                });
            }
            (to.counts[q], to.displs[q]) = (c * xw, displ);
            displ += c * xw;
            // From q: its planes of this rank's columns of the batch, column after column.
            let (qx0, qxw) = xs[q];
            (from.counts[q], from.displs[q]) = ((hi - lo) * qxw, rdispl);
            unpack.extend((lo..hi).map(|y| {
                Run::contiguous(rdispl + (y - lo) * qxw, y * n0 + qx0, qxw)
            }));
            rdispl += (hi - lo) * qxw;
        }
        received = received.max(rdispl);
        let own: Vec<Run> = (0..xw)
            .map(|x| Run {
                src: x * n1 + ys[me].0 + lo,
                dst: lo * n0 + x0 + x,
                count: hi - lo,
                src_stride: 1,
                dst_stride: n0,
            })
            .filter(|r| r.count > 0)
            .collect();
        let back: Vec<Run> = (lo..hi)
            .map(|y| Run {
                src: y * n0,
                dst: y,
                count: n0,
                src_stride: 1,
                dst_stride: mine,
            })
            .collect();
        batches.push(Batch {
            pack,
            own: own.into(),
            puts,
            to,
            from,
            unpack: unpack.into(),
            phase: phase.filter(|_| hi > lo).map(|p| Phase {
                shape: vec![hi - lo, n0],
                ..p.clone()
            }),
            at: lo * n0 * elem,
            back: back.into(),
        });
        sent = displ;
    }
    Some(Plan {
        batches,
        sent,
        received,
        piece: n0 * mine,
    })
}

/// Whether the exchange from `middle` to `natural` goes column batch by column batch (the same
/// on every rank).
pub(super) fn applies(middle: &TensorState, natural: &TensorState, ranks: usize) -> bool {
    plan(middle, natural, None, (ranks, 0), None).is_some()
}

/// Bytes a rank holds for the column-batched exchange and second phase beyond the first
/// phase's output and the result (see [`Columns`]): the send and receive buffers, the landed
/// piece and the second phase's output; 0 where it does not apply.
pub(super) fn workspace(
    middle: &TensorState,
    natural: &TensorState,
    (ranks, me): (usize, usize),
    wanted: Option<u32>,
) -> u64 {
    match plan(middle, natural, None, (ranks, me), wanted) {
        Some(p) => ((p.sent + p.received + 2 * p.piece) * middle.dtype.size() as usize) as u64,
        None => 0,
    }
}

impl<B: Backend> Columns<B> {
    /// How many batches it runs in.
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    /// The exchange from `middle` (the first phase's complex x-slab result, C order) to
    /// `natural` (the y-slabs in C order, either slab's pieces in any order over the ranks)
    /// with `phase`, the second phase on the rank's piece landed in F order (`[columns, n0]`,
    /// along axis 1, with the norm's scale); None where it does not apply (not 2-D slabs).
    pub fn new(
        b: &B,
        middle: &TensorState,
        natural: &TensorState,
        phase: &Phase,
        wanted: Option<u32>,
    ) -> Result<Option<Self>> {
        let (ranks, me) = (b.ranks(), b.rank());
        let elem = middle.dtype.size() as usize;
        let room = slab_room(&middle.shape, elem, ranks, 1);
        let Some(p) = plan(middle, natural, Some(phase), (ranks, me), wanted) else {
            return Ok(None);
        };
        let (landed, can_put) = landing(b, room, p.piece * elem)?;
        Ok(Some(Columns {
            batches: p.batches,
            elem,
            send: b.zeros(p.sent * elem)?,
            recv: b.zeros(p.received * elem)?,
            landed,
            after: b.zeros(p.piece * elem)?,
            out: b.zeros(p.piece * elem)?,
            route: Route::new(can_put),
        }))
    }

    /// Runs the exchange from `first` (the first phase's output) and the second phase, batch
    /// by batch; returns the result.
    pub fn run(&mut self, b: &B, precision: DType, first: &B::Buf) -> Result<&B::Buf> {
        let Columns {
            batches,
            elem,
            send,
            recv,
            landed,
            after,
            out,
            route,
        } = self;
        let (elem, puts) = (*elem, route.puts());
        route.start(b)?;
        let mut marks = Vec::with_capacity(batches.len());
        for batch in batches.iter() {
            for runs in &batch.pack {
                b.copy_runs(first, send, runs, elem)?;
            }
            if !batch.own.is_empty() {
                b.copy_runs(first, landed, &batch.own, elem)?;
            }
            let (send, recv, landed) = (&*send, &mut *recv, &mut *landed);
            marks.push(b.side(&mut || match puts {
                true => {
                    let by = puts_of(b);
                    for p in &batch.puts {
                        by.put((send, p.src), (&*landed, p.dst), p.rows, p.peer)?;
                    }
                    by.put_barrier()
                }
                false => {
                    b.all_to_all_v(send, &batch.to, recv, &batch.from, elem)?;
                    b.copy_runs(recv, landed, &batch.unpack, elem)
                }
            })?);
        }
        for (batch, mark) in batches.iter().zip(&marks) {
            b.wait(mark)?;
            if let Some(phase) = &batch.phase {
                b.fft(precision, phase, (landed, batch.at), (after, batch.at))?;
                b.copy_runs(after, out, &batch.back, elem)?;
            }
        }
        Ok(out)
    }
}
