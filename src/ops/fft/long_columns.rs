//! A 2-D FFT's first phase from y-slabs down columns of [`LONG_COLUMNS`] points or more, with
//! the move to x-slabs, batch by batch of the rank's columns: each batch is turned into rows
//! (a tile transpose into a scratch of one batch, x contiguous), transformed along them by one
//! contiguous plan into the rank's piece seen in F order (`[columns, n0]`), and turned back on
//! its way: each peer's part tile-transposed into the send buffer (`[planes, columns]`, y
//! contiguous as the peer's x-slab piece holds it) and put there or sent by NCCL, the rank's
//! own part straight into its x-slab piece. Down the columns as they lie, the GPU would run the
//! same plan between a transpose and one back into the piece, and the move then copy from there
//! ([`super::by_rows`]): one pass over the rank's own part fewer here, and by NCCL over the
//! peers' parts too.
//!
//! The batches split and move as [`super::by_rows`]'s do (the same bounds on every rank, a
//! small last batch where the FFTs set the pace); the send buffer holds every batch, so that a
//! batch is packed on the main queue while the ones before it still move on the side queue.

use super::batched::{Put, Split, batch_count, ffts_lead, landing, slab_room};
use super::slab_pieces;
use crate::backend::work::{AxisOp, LONG_COLUMNS, Phase, Run, Runs};
use crate::backend::{Backend, Puts, Rows, puts_of};
use crate::dist::TensorState;
use crate::ops::movement::{Route, local_bytes};
use crate::runtime::comm::Parts;
use crate::spec::tensor::DType;
use anyhow::Result;

/// One batch of columns: its turn into rows and their FFT, then its way to the x-slabs.
struct Batch {
    /// The FFT along the batch's rows (None where this rank has no columns in it), the runs
    /// turning its columns into the scratch first, and where its output starts in the F-order
    /// piece (bytes).
    phase: Option<Phase>,
    turn: Runs,
    at: usize,
    /// Each peer's part turned back into the send buffer (one grid each), and this rank's own
    /// straight into its x-slab piece.
    pack: Vec<Runs>,
    own: Runs,
    /// By puts from the send buffer into each peer's x-slab piece.
    puts: Vec<Put>,
    /// By NCCL: elements to and from each rank (send and receive buffers), and the unpacking
    /// of the received parts into the x-slab piece.
    to: Parts,
    from: Parts,
    unpack: Runs,
}

/// The first phase down long columns and the move to x-slabs of one rank.
pub struct LongColumns<B: Backend> {
    batches: Vec<Batch>,
    elem: usize,
    /// One batch's columns turned into rows.
    rows: B::Buf,
    send: B::Buf,
    recv: B::Buf,
    /// The x-slab piece the move fills (symmetric where puts can fill it: as large as the
    /// largest).
    pub out: B::Buf,
    /// How the batches move.
    pub route: Route,
}

/// The batches of one rank, and its buffers' sizes in elements.
struct Plan {
    batches: Vec<Batch>,
    rows: usize,
    sent: usize,
    received: usize,
    piece: usize,
}

/// Whether a 2-D FFT's first phase on slab `s0` of `middle` (its complex input) runs down long
/// columns this way: from y-slabs (a c2c's or a c2r's; an r2c starts from x-slabs) of
/// [`LONG_COLUMNS`] points or more along x, over several ranks.
pub(super) fn applies(middle: &TensorState, s0: usize, ranks: usize) -> bool {
    middle.shape.len() == 2 && s0 == 1 && middle.shape[0] >= LONG_COLUMNS as u64 && ranks > 1
}

/// The fewest columns any rank holds of `natural`'s y-slabs (None where they are no slab): no
/// more batches than that.
fn fewest(natural: &TensorState, ranks: usize) -> Option<usize> {
    slab_pieces(natural, 1, ranks)?.iter().map(|y| y.1).min()
}

/// How the batches from `natural` (the y-slabs, C order) to `to` (the x-slabs, C order) go for
/// rank `me`, split as `split`, with `inverse` the direction of the FFT along x; None where
/// either is no slab. Runs count elements; puts and phase outputs, bytes.
fn plan(
    natural: &TensorState,
    to: &TensorState,
    inverse: bool,
    (ranks, me): (usize, usize),
    split: Split,
) -> Option<Plan> {
    let elem = natural.dtype.size() as usize;
    let (xs, ys) = (slab_pieces(to, 0, ranks)?, slab_pieces(natural, 1, ranks)?);
    let (n0, n1) = (natural.shape[0] as usize, natural.shape[1] as usize);
    let ((y0, mine), (x0, planes)) = (ys[me], xs[me]);
    let (mut sent, mut received, mut rows) = (0, 0, 0);
    let mut batches = Vec::with_capacity(split.n);
    for k in 0..split.n {
        let (lo, hi) = split.planes(mine, k);
        let c = hi - lo;
        rows = rows.max(c * n0);
        let mut batch = Batch {
            phase: (c > 0).then(|| Phase {
                shape: vec![c, n0],
                ops: vec![AxisOp::C2c { axis: 1, inverse }],
                scale: None,
                rows: None,
                spent: true,
            }),
            // Column y of the piece, down its n0 elements, to row y - lo of the scratch.
            turn: (lo..hi)
                .map(|y| Run {
                    src: y,
                    dst: (y - lo) * n0,
                    count: n0,
                    src_stride: mine,
                    dst_stride: 1,
                })
                .collect::<Vec<_>>()
                .into(),
            at: lo * n0 * elem,
            pack: Vec::new(),
            own: Runs::default(),
            puts: Vec::new(),
            to: Parts::packed(&vec![0; ranks]),
            from: Parts::packed(&vec![0; ranks]),
            unpack: Runs::default(),
        };
        // Planes x0_q.. of the batch's rows (x contiguous) to `[planes_q, c]` from `dst`, each
        // plane's run `pitch` apart.
        let turn_back = |(xq, wq): (usize, usize), dst: usize, pitch: usize| -> Runs {
            (lo..hi)
                .filter(|_| wq > 0)
                .map(|y| Run {
                    src: y * n0 + xq,
                    dst: dst + (y - lo),
                    count: wq,
                    src_stride: 1,
                    dst_stride: pitch,
                })
                .collect::<Vec<_>>()
                .into()
        };
        batch.own = turn_back((x0, planes), y0 + lo, n1);
        let (mut unpack, mut rdispl) = (Vec::new(), 0);
        // Peers in ring order from this rank (puts start as a permutation).
        for q in (1..ranks).map(|i| (me + i) % ranks) {
            let (xq, wq) = xs[q];
            if c > 0 && wq > 0 {
                batch.pack.push(turn_back((xq, wq), sent, c));
                batch.puts.push(Put {
                    peer: q,
                    src: sent * elem,
                    dst: (y0 + lo) * elem,
                    rows: Rows {
                        width: c * elem,
                        height: wq,
                        src_pitch: c * elem,
                        dst_pitch: n1 * elem,
                    },
                });
            }
            (batch.to.counts[q], batch.to.displs[q]) = (wq * c, sent);
            sent += wq * c;
            // From q: this rank's planes of q's columns of the batch, plane after plane.
            let (qlo, qhi) = split.planes(ys[q].1, k);
            let line = qhi - qlo;
            (batch.from.counts[q], batch.from.displs[q]) = (planes * line, rdispl);
            unpack.extend((0..planes).map(|x| {
                Run::contiguous(rdispl + x * line, x * n1 + ys[q].0 + qlo, line)
            }));
            rdispl += planes * line;
        }
        batch.unpack = unpack.into();
        received = received.max(rdispl);
        batches.push(batch);
    }
    Some(Plan {
        batches,
        rows,
        sent,
        received,
        piece: planes * n1,
    })
}

/// Bytes a rank holds for the first phase down long columns and the move beyond the phase's
/// output and input (see [`LongColumns`]): the scratch of one batch's rows, the send and
/// receive buffers and the x-slab piece, the most either split takes (a small last batch or
/// not: which one runs depends on the backend's puts); 0 where it does not apply.
pub(super) fn workspace(
    natural: &TensorState,
    to: &TensorState,
    (ranks, me): (usize, usize),
    wanted: Option<u32>,
) -> u64 {
    let elem = natural.dtype.size() as usize;
    let fewest = fewest(natural, ranks).unwrap_or(0);
    [false, true]
        .into_iter()
        .filter_map(|lead| {
            let split = batch_count(&natural.shape, elem, ranks, fewest, (wanted, lead));
            let p = plan(natural, to, false, (ranks, me), split)?;
            Some(((p.rows + p.sent + p.received + p.piece) * elem) as u64)
        })
        .max()
        .unwrap_or(0)
}

impl<B: Backend> LongColumns<B> {
    /// How many batches it runs in.
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    /// `phase` (along x only, on the rank's y-slab piece of `natural`, C order) by batches of
    /// columns turned into rows, then to `to`, the x-slabs in C order (either slab's pieces in
    /// any order over the ranks); None where it does not apply ([`applies`], or a phase that
    /// is not one transform along x).
    pub fn new(
        b: &B,
        natural: &TensorState,
        to: &TensorState,
        phase: &Phase,
        wanted: Option<u32>,
    ) -> Result<Option<Self>> {
        let (ranks, me) = (b.ranks(), b.rank());
        let inverse = match phase.ops[..] {
            [AxisOp::C2c { axis: 0, inverse }] if phase.scale.is_none() => inverse,
            _ => return Ok(None),
        };
        let Some(fewest) = fewest(natural, ranks) else {
            return Ok(None);
        };
        if !applies(natural, 1, ranks) || slab_pieces(to, 0, ranks).is_none() {
            return Ok(None);
        }
        let elem = natural.dtype.size() as usize;
        let room = slab_room(&natural.shape, elem, ranks, 0);
        let piece = local_bytes(to, ranks as u64, me as u64);
        let (out, can_put) = landing(b, room, piece)?;
        let split = batch_count(&natural.shape, elem, ranks, fewest, (wanted, ffts_lead(ranks, can_put)));
        let Some(p) = plan(natural, to, inverse, (ranks, me), split) else {
            return Ok(None);
        };
        Ok(Some(LongColumns {
            batches: p.batches,
            elem,
            rows: b.zeros(p.rows * elem)?,
            send: b.zeros(p.sent * elem)?,
            recv: b.zeros(p.received * elem)?,
            out,
            route: Route::new(can_put),
        }))
    }

    /// Runs the phase from `input` (into `after`, the rank's piece in F order) and the move to
    /// x-slabs, batch by batch; returns the x-slab piece.
    pub fn run(
        &mut self,
        b: &B,
        precision: DType,
        input: &B::Buf,
        after: &mut B::Buf,
    ) -> Result<&B::Buf> {
        let LongColumns {
            batches,
            elem,
            rows,
            send,
            recv,
            out,
            route,
        } = self;
        let (elem, route) = (*elem, *route);
        route.start(b)?;
        let mut last = None;
        for batch in batches.iter() {
            if let Some(phase) = &batch.phase {
                b.copy_runs(input, rows, &batch.turn, elem)?;
                b.fft(precision, phase, (rows, 0), (after, batch.at))?;
                for runs in &batch.pack {
                    b.copy_runs(after, send, runs, elem)?;
                }
            }
            let (send, recv, landed) = (&*send, &mut *recv, &mut *out);
            last = Some(b.side(&mut || match route.puts() {
                true => {
                    let by = puts_of(b);
                    (batch.puts.iter())
                        .try_for_each(|p| by.put((send, p.src), (&*landed, p.dst), p.rows, p.peer))
                }
                false => {
                    b.all_to_all_v(send, &batch.to, recv, &batch.from, elem)?;
                    b.copy_runs(recv, landed, &batch.unpack, elem)
                }
            })?);
            if !batch.own.is_empty() {
                b.copy_runs(after, out, &batch.own, elem)?;
            }
        }
        route.finish(b, last)?;
        Ok(out)
    }
}
