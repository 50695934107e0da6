//! A slab FFT's phase run batch by batch of y-rows, each batch moving to the x-slab owners on
//! the side queue ([`Backend::side`]) while the next batch's FFT runs: the first phase of an FFT
//! from y-slabs on its way to x-slabs (along x and z, independent for each row; a 2-D one down
//! long columns goes by `long_columns.rs` instead), and the second
//! phase of one from x-slabs on its way back to them (`reshape = true`, along x).
//!
//! The y-slab piece is `[X, s1, rest]` in C order. Rows `lo..hi` of it, for the planes of rank
//! q's x-slab, land in q's piece `[s0_q, n1, rest]` at rows `y0 + lo..y0 + hi`: one run per
//! plane. Every rank splits its own rows into the same number of batches, so each side of a pair
//! knows the other's batch bounds. A batch moves by an all-to-all (NCCL: packed, then unpacked
//! into the result), or, where the result is symmetric, by one strided put per peer (the copy
//! engines); the step's trial runs choose ([`Route`]).

use super::batched::{Moves, Put, Split, batch_count, ffts_lead, landing, slab_room};
use super::slab_pieces;
use crate::backend::work::{AxisOp, Phase};
use crate::backend::{Backend, Rows};
use crate::dist::TensorState;
use crate::backend::work::{Run, Runs};
use crate::ops::movement::Route;
use crate::runtime::comm::Parts;
use crate::spec::tensor::DType;
use anyhow::Result;

/// One batch of rows: its FFT and its share of the move, ready to go either way.
struct Batch {
    /// The phase on this batch's rows (None for a rank with none).
    phase: Option<Phase>,
    /// The rank's own part, straight into the result.
    own: Runs,
    /// By NCCL: packing, the all-to-all (elements to and from each rank in the send and receive
    /// buffers), unpacking into the result.
    pack: Runs,
    to: Parts,
    from: Parts,
    unpack: Runs,
    /// By puts from the second phase's output into each peer's result (where it is symmetric).
    puts: Vec<Put>,
}

/// The phase by rows and the move to x-slabs of one rank.
pub struct ByRows<B: Backend> {
    batches: Vec<Batch>,
    elem: usize,
    send: B::Buf,
    recv: B::Buf,
    /// The x-slab piece the move fills (symmetric where puts can fill it: as large as the
    /// largest).
    pub out: B::Buf,
    /// How the batches move.
    pub route: Route,
}

/// How the slabs split over the ranks, as the move to x-slabs sees them.
struct Grid {
    /// (first, count) of each rank's x-planes.
    xs: Vec<(usize, usize)>,
    /// (first, count) of each rank's y-rows.
    ys: Vec<(usize, usize)>,
    /// This rank.
    me: usize,
    /// Rows along y.
    n1: usize,
    /// Elements of one (x, y) line.
    rest: usize,
    /// Bytes per element.
    elem: usize,
    /// Batches.
    split: Split,
}

impl Grid {
    /// Batch `k`: the phase on its rows, and their way to the peers' x-slabs (packed, or put
    /// where `can_put`) and this rank's own.
    fn batch(&self, k: usize, phase: &Phase, can_put: bool) -> Batch {
        let (xs, ys) = (&self.xs, &self.ys);
        let (me, n1, rest, elem) = (self.me, self.n1, self.rest, self.elem);
        let ranks = xs.len();
        let (s1, y0) = (ys[me].1, ys[me].0);
        let (lo, hi) = self.split.planes(s1, k);
        let run = |src, dst, rows: usize| Run::contiguous(src, dst, rows * rest);
        let mut batch = Batch {
            phase: (hi > lo).then(|| phase.on_rows(lo, hi)).flatten(),
            own: Runs::default(),
            pack: Runs::default(),
            to: Parts::packed(&vec![0; ranks]),
            from: Parts::packed(&vec![0; ranks]),
            unpack: Runs::default(),
            puts: Vec::new(),
        };
        let (mut pack, mut unpack) = (Vec::new(), Vec::new());
        let (mut sent, mut received) = (0, 0);
        // Peers in ring order from this rank (puts start as a permutation).
        for q in (0..ranks).map(|i| (me + i) % ranks) {
            let (x0, planes_q) = xs[q];
            let src = |x: usize| (x * s1 + lo) * rest;
            if q == me {
                batch.own = (x0..x0 + planes_q)
                    .map(|x| run(src(x), ((x - x0) * n1 + y0 + lo) * rest, hi - lo))
                    .collect::<Vec<_>>()
                    .into();
                continue;
            }
            if can_put && hi > lo {
                batch.puts.push(Put {
                    peer: q,
                    src: src(x0) * elem,
                    dst: (y0 + lo) * rest * elem,
                    rows: Rows {
                        width: (hi - lo) * rest * elem,
                        height: planes_q,
                        src_pitch: s1 * rest * elem,
                        dst_pitch: n1 * rest * elem,
                    },
                });
            }
            // To q: its planes of this batch's rows, plane after plane.
            let line = (hi - lo) * rest;
            pack.extend((0..planes_q).map(|i| run(src(x0 + i), sent + i * line, hi - lo)));
            (batch.to.counts[q], batch.to.displs[q]) = (planes_q * line, sent);
            sent += planes_q * line;
            // From q: this rank's planes of q's batch rows, into q's rows here.
            let (qlo, qhi) = self.split.planes(ys[q].1, k);
            let line = (qhi - qlo) * rest;
            let my_planes = xs[me].1;
            unpack.extend((0..my_planes).map(|x| {
                let dst = (x * n1 + ys[q].0 + qlo) * rest;
                run(received + x * line, dst, qhi - qlo)
            }));
            (batch.from.counts[q], batch.from.displs[q]) = (my_planes * line, received);
            received += my_planes * line;
        }
        (batch.pack, batch.unpack) = (pack.into(), unpack.into());
        batch
    }
}

impl<B: Backend> ByRows<B> {
    /// How many batches it runs in.
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    /// `phase` by rows into `natural` (its complex y-slab result, C order), then to `to`, the
    /// x-slabs in C order (either slab's pieces in any order over the ranks: see `Slabs`); None
    /// where the phase does not split by rows ([`Phase::on_rows`]: a scale, a
    /// c2r, or a transform along y) or cuFFT would find the rows misaligned (an r2c's of an
    /// odd length).
    pub fn new(
        b: &B,
        natural: &TensorState,
        to: &TensorState,
        phase: &Phase,
        wanted: Option<u32>,
    ) -> Result<Option<Self>> {
        let (ranks, me) = (b.ranks(), b.rank());
        // (first, count) of each rank's x-planes and y-rows.
        let pieces = (slab_pieces(to, 0, ranks), slab_pieces(natural, 1, ranks));
        let (Some(xs), Some(ys)) = pieces else {
            return Ok(None);
        };
        if ranks < 2 || phase.on_rows(0, 0).is_none() {
            return Ok(None);
        }
        let shape: Vec<usize> = natural.shape.iter().map(|&n| n as usize).collect();
        let (n1, rest) = (shape[1], shape[2..].iter().product::<usize>());
        let elem = natural.dtype.size() as usize;
        // cuFFT wants its pointers aligned to the complex type (cupy's issue 9229): a row
        // entering the phase (an r2c's of reals) must be whole complex values. Global sizes,
        // so every rank decides alike.
        let in_elem = match phase.ops.first() {
            Some(AxisOp::R2c) => elem / 2,
            _ => elem,
        };
        let row_in = phase.shape[2..].iter().product::<usize>() * in_elem;
        if !row_in.is_multiple_of(elem) {
            return Ok(None);
        }
        let fewest = ys.iter().map(|y| y.1).min().unwrap_or(0);
        let room = slab_room(&natural.shape, elem, ranks, 0);
        let piece = xs[me].1 * n1 * rest * elem;
        let (out, can_put) = landing(b, room, piece)?;
        let pace = (wanted, ffts_lead(ranks, can_put));
        let split = batch_count(&natural.shape, elem, ranks, fewest, pace);
        let grid = Grid {
            xs,
            ys,
            me,
            n1,
            rest,
            elem,
            split,
        };
        let batches: Vec<Batch> = (0..split.n).map(|k| grid.batch(k, phase, can_put)).collect();
        let most = |f: fn(&Batch) -> &Parts| {
            let each = batches.iter().map(|b| f(b).counts.iter().sum::<usize>());
            each.max().unwrap_or(0)
        };
        let (most_sent, most_received) = (most(|b| &b.to), most(|b| &b.from));
        Ok(Some(ByRows {
            batches,
            elem,
            send: b.zeros(most_sent * elem)?,
            recv: b.zeros(most_received * elem)?,
            out,
            route: Route::new(can_put),
        }))
    }

    /// Runs the phase from `input` into `after` and the move to x-slabs, batch by batch;
    /// returns the x-slab piece.
    pub fn run(
        &mut self,
        b: &B,
        precision: DType,
        input: &B::Buf,
        after: &mut B::Buf,
    ) -> Result<&B::Buf> {
        let (send, recv, elem) = (&mut self.send, &mut self.recv, self.elem);
        self.route.run_batches(
            b,
            &self.batches,
            (after, &mut self.out),
            elem,
            &mut |batch, after| match &batch.phase {
                Some(phase) => b.fft(precision, phase, (input, 0), (after, 0)),
                None => Ok(()),
            },
            &mut |batch, after, out| {
                b.copy_runs(after, send, &batch.pack, elem)?;
                b.all_to_all_v(send, &batch.to, recv, &batch.from, elem)?;
                b.copy_runs(recv, out, &batch.unpack, elem)
            },
        )?;
        Ok(&self.out)
    }
}

impl Moves for Batch {
    fn parts(&self) -> (&Runs, &[Put]) {
        (&self.own, &self.puts)
    }
}
