//! A slab FFT's phase run batch by batch of x-planes, each batch moving to the y-slab owners on
//! the side queue ([`Backend::side`]) while the next batch's FFT runs: the first phase of an FFT
//! from x-slabs (the transpose between its phases), and the second phase of one from y-slabs on
//! its way back to them (`reshape = true`, along y).
//!
//! From x-slabs (C order, planes outermost) to y-slabs: the part of plane x for rank q is its
//! rows `y0_q..y0_q + s1_q`, one contiguous run; at q it lands, contiguous, at plane `x0_r + x`.
//! Every rank splits its own planes into the same number of batches, so each side of a pair knows
//! the other's batch bounds. A batch moves either by an all-to-all (NCCL: packed first into a
//! send buffer), or, where the spec's backends name `nvshmem` (the result is then symmetric),
//! by puts: one strided copy per peer from the first phase's output straight into the peer's
//! symmetric result, by the copy engines, so the SMs stay with cuFFT and nothing is packed.
//! Both are ready; the step's trial runs pick one ([`Route`]; bench/RESULTS.md).

use crate::backend::work::{AxisOp, Phase};
use crate::backend::{Backend, Puts, Rows, puts_of};
use crate::dist::Placement;
use crate::dist::TensorState;
use crate::backend::work::{Run, Runs};
use crate::ops::movement::Route;
use super::slab_pieces;
use crate::runtime::comm::Parts;
use crate::spec::tensor::{DType, Distribution};
use anyhow::Result;

/// How a transpose of `shape` (`elem` bytes a value) over `ranks` splits into batches: in the
/// step's `batches` where it names them; else, where the FFTs set the pace (`ffts_lead`: see
/// [`ffts_lead()`]), 3-D transforms in one per 256 MiB a rank holds, 8 to 12, and the others in
/// one per 512 MiB, 4 to 8; no more than `planes` (the fewest any rank splits). Each batch
/// costs its own launches and a smaller cuFFT and copy, while the first batch's FFT runs before
/// anything moves and the last one's move after every FFT. On 4 H200s (bench/RESULTS.md,
/// 2026-11-22 sixth; 2026-11-27 ninth) c64 1024^3 ran fastest in 4 batches (2 GiB a rank) and
/// c128 512^3 in 4; on 2 by puts, c64 1024^3 (4 GiB a rank) in 12 or 16, c128 512^3 and r2c f32
/// 1024^3 in 8 to 12 (4% less than 4 or 5), the 2-D c64 16384^2 in 4. The count depends on
/// global sizes only, so every rank takes the same.
pub(super) fn batch_count(
    shape: &[u64],
    elem: usize,
    ranks: usize,
    planes: usize,
    (wanted, ffts_lead): (Option<u32>, bool),
) -> Split {
    let bytes = shape.iter().fold(elem as u64, |b, &n| b.saturating_mul(n));
    let per_rank = bytes / ranks.max(1) as u64;
    let chosen = match ffts_lead && shape.len() > 2 {
        true => per_rank.div_ceil(256 << 20).clamp(8, 12),
        false => per_rank.div_ceil(512 << 20).clamp(4, 8),
    };
    let n = wanted.map_or(chosen as usize, |n| n as usize).min(planes).max(1);
    Split {
        n,
        taper: ffts_lead,
    }
}

/// Whether a batched transpose over `ranks` waits on its FFTs more than on its moves: by puts
/// (the copy engines, no SM taken from cuFFT) at two ranks, where each batch's move carries half
/// of it (on 4 H200s a batch's move took about 1.5x its FFT, carrying three quarters). Not by
/// NCCL, whose kernels share the SMs with cuFFT (on 2 H200s c64 1024^3 took 15.2 ms split as at
/// 4 ranks and 15.9 split so), nor at three ranks (7.45 against 8.35 ms).
pub(super) fn ffts_lead(ranks: usize, puts: bool) -> bool {
    puts && ranks == 2
}

/// The batches of a transpose: how many, and whether the last is small ([`GROWTH`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Split {
    pub n: usize,
    taper: bool,
}

/// One batch: its first-phase FFT and its share of the move, ready to go either way.
struct Batch {
    /// The first phase on this batch's planes, and where they start in its input and output.
    phase: Phase,
    at: (usize, usize),
    /// The rank's own part, straight into the result.
    own: Runs,
    /// By NCCL: packing into the send buffer, then an all-to-all: elements to each rank (in
    /// the send buffer) and from each rank (in the result).
    pack: Runs,
    to: Parts,
    from: Parts,
    /// By puts from the first phase's output into each peer's result (where it is symmetric).
    puts: Vec<Put>,
}

/// A put of one batch's rows for one peer (bytes).
pub(super) struct Put {
    pub peer: usize,
    pub src: usize,
    pub dst: usize,
    pub rows: Rows,
}

/// The batched transpose of one rank.
pub struct Batched<B: Backend> {
    batches: Vec<Batch>,
    elem: usize,
    /// The send buffer of all-to-all batches.
    send: B::Buf,
    /// The y-slab piece the transpose fills (symmetric where puts can fill it: as large as the
    /// largest).
    pub out: B::Buf,
    /// How the batches move.
    pub route: Route,
}

// The batched transposes' use of a route: before a run, after it, and one batch.
impl Route {
    /// Before a run's batches: with puts, every peer is done reading its result of the last
    /// run before puts overwrite it.
    pub(super) fn start<B: Backend>(self, b: &B) -> Result<()> {
        if self.puts() {
            puts_of(b).put_barrier()?;
        }
        Ok(())
    }

    /// After a run's batches: the main queue waits for the last batch's move (`last`) and, with
    /// puts, for every peer's puts to land.
    pub(super) fn finish<B: Backend>(self, b: &B, last: Option<B::Mark>) -> Result<()> {
        if let Some(mark) = &last {
            b.wait(mark)?;
        }
        if self.puts() {
            puts_of(b).put_barrier()?;
        }
        Ok(())
    }

    /// Queues one batch's move from `src` into `out` (its own part, and its parts for the
    /// peers) and returns its mark: with puts, one put per peer on the side queue, then the own
    /// part copied on the main queue (the puts do not wait for it); otherwise the own part and
    /// `nccl` (given `out`) on the side queue.
    fn move_batch<B: Backend>(
        self,
        b: &B,
        src: &B::Buf,
        out: &mut B::Buf,
        (own, puts): (&Runs, &[Put]),
        elem: usize,
        nccl: &mut dyn FnMut(&mut B::Buf) -> Result<()>,
    ) -> Result<B::Mark> {
        if self.puts() {
            let mark = b.side(&mut || {
                let by = puts_of(b);
                puts.iter()
                    .try_for_each(|p| by.put((src, p.src), (&*out, p.dst), p.rows, p.peer))
            })?;
            b.copy_runs(src, out, own, elem)?;
            return Ok(mark);
        }
        b.side(&mut || {
            b.copy_runs(src, out, own, elem)?;
            nccl(out)
        })
    }

    /// Runs a phase batch by batch, each batch's move into `out` queued as soon as its FFT
    /// (`fft`, into `after`) is: by puts, or by NCCL (`nccl`, from `after` into `out`; see
    /// [`Route::move_batch`]). Returns once the main queue waits for every move.
    pub(super) fn run_batches<B: Backend, T: Moves>(
        self,
        b: &B,
        batches: &[T],
        (after, out): (&mut B::Buf, &mut B::Buf),
        elem: usize,
        fft: &mut dyn FnMut(&T, &mut B::Buf) -> Result<()>,
        nccl: &mut ByNccl<'_, B, T>,
    ) -> Result<()> {
        self.start(b)?;
        let mut last = None;
        for batch in batches {
            fft(batch, after)?;
            let after = &*after;
            let parts = batch.parts();
            let mut by_nccl = |out: &mut B::Buf| nccl(batch, after, out);
            last = Some(self.move_batch(b, after, out, parts, elem, &mut by_nccl)?);
        }
        self.finish(b, last)
    }
}

/// A batch's move by NCCL from the phase's output into the result (see [`Route::run_batches`]).
pub(super) type ByNccl<'a, B, T> =
    dyn FnMut(&T, &<B as Backend>::Buf, &mut <B as Backend>::Buf) -> Result<()> + 'a;

/// A batch's own part (copied) and its parts for the peers (put), as [`Route::run_batches`]
/// moves them.
pub(super) trait Moves {
    fn parts(&self) -> (&Runs, &[Put]);
}

impl Moves for Batch {
    fn parts(&self) -> (&Runs, &[Put]) {
        (&self.own, &self.puts)
    }
}

/// (first, count) of each rank's slab of `n` along any axis.
pub(super) fn split(n: usize, ranks: usize) -> Vec<(usize, usize)> {
    let x_slab = Distribution::slab(0);
    let whole = [n as u64];
    let p = Placement::new(&x_slab, &whole, ranks as u64);
    (0..ranks as u64)
        .map(|r| {
            p.intervals(r)
                .and_then(|iv| iv[0].first().copied())
                .map_or((0, 0), |(lo, hi)| (lo as usize, (hi - lo) as usize))
        })
        .collect()
}

/// Bytes of the largest piece over `ranks` of a tensor of `shape` in slabs along `axis`: what
/// every rank reserves on the symmetric heap for a slab that puts fill.
pub fn slab_room(shape: &[u64], elem: usize, ranks: usize, axis: usize) -> usize {
    if shape.len() < 2 {
        return 0;
    }
    let largest = split(shape[axis] as usize, ranks)
        .iter()
        .map(|s| s.1)
        .max()
        .unwrap_or(0);
    let others: u64 = (0..shape.len())
        .filter(|&a| a != axis)
        .map(|a| shape[a])
        .product();
    largest * others as usize * elem
}

/// The piece a batched move fills, `piece` bytes: symmetric (reserving `room`, the largest
/// piece) where the backend has puts, which may then fill it, else a plain buffer; and whether
/// puts can.
pub(super) fn landing<B: Backend>(b: &B, room: usize, piece: usize) -> Result<(B::Buf, bool)> {
    match b.puts() {
        Some(p) => Ok((p.symmetric(room, piece)?, true)),
        None => Ok((b.zeros(piece)?, false)),
    }
}

/// Relative sizes of the batches: the first small, so that the first move starts soon, then
/// each half again as large as the one before up to a steady size; and where the FFTs are the
/// slower part ([`ffts_lead`]: the step then takes every FFT and the last move), the last small
/// again (of three or more), so that little is left to move once the last FFT is done. Where
/// the moves are (the step takes the first FFT and every move), a small last batch would only
/// make the first larger (4 H200s: c64 1024^3 6.11 -> 6.23 ms, r2c 3.17 -> 3.29).
const GROWTH: [usize; 4] = [4, 6, 9, 12];

impl Split {
    fn weight(&self, j: usize) -> usize {
        match self.taper && j + 1 == self.n && self.n > 2 {
            true => GROWTH[0],
            false => GROWTH[j.min(GROWTH.len() - 1)],
        }
    }

    /// Rank r's planes of batch j, of its `s` planes: batches as [`GROWTH`] says, or even ones
    /// where `s` is too small for every batch to hold a plane.
    pub(super) fn planes(&self, s: usize, j: usize) -> (usize, usize) {
        let n = self.n;
        let total: usize = (0..n).map(|i| self.weight(i)).sum();
        if s * GROWTH[0] < total {
            return (s * j / n, s * (j + 1) / n);
        }
        let bound = |j: usize| s * (0..j).map(|i| self.weight(i)).sum::<usize>() / total;
        (bound(j), bound(j + 1))
    }
}

/// How the slabs split over the ranks, as the transpose sees them.
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
    inner: usize,
    /// Bytes per complex element.
    elem: usize,
    /// Batches.
    split: Split,
    /// Bytes of one x-plane of the first phase's input.
    in_plane: usize,
    /// Where each peer's part starts in the send buffer (elements).
    displ: Vec<usize>,
}

impl Grid {
    /// Batch `j`: the first phase on its planes, and their parts for the peers (packed, or put
    /// where `can_put`) and this rank's own.
    fn batch(&self, j: usize, phase1: &Phase, can_put: bool) -> Batch {
        let (xs, ys, displ) = (&self.xs, &self.ys, &self.displ);
        let (me, n1, inner, elem) = (self.me, self.n1, self.inner, self.elem);
        let ranks = xs.len();
        let (lo, hi) = self.split.planes(xs[me].1, j);
        let mut phase = phase1.clone();
        phase.shape[0] = hi - lo;
        let (mut pack, mut own, mut put) = (Vec::new(), Vec::new(), Vec::new());
        let mut to = Parts::packed(&vec![0; ranks]);
        let mut from = Parts::packed(&vec![0; ranks]);
        // Peers in ring order from this rank: the puts start as a permutation (not every rank
        // putting to rank 0 first, which measured far slower on 4 GPUs).
        for q in (0..ranks).map(|k| (me + k) % ranks) {
            let line = ys[q].1 * inner;
            let run = |src, dst| Run::contiguous(src, dst, line);
            let src = |x: usize| x * n1 * inner + ys[q].0 * inner;
            if q == me {
                own.extend((lo..hi).map(|x| run(src(x), (xs[me].0 + x) * line)));
                continue;
            }
            if can_put {
                put.push(Put {
                    peer: q,
                    src: src(lo) * elem,
                    dst: (xs[me].0 + lo) * line * elem,
                    rows: Rows {
                        width: line * elem,
                        height: hi - lo,
                        src_pitch: n1 * inner * elem,
                        dst_pitch: line * elem,
                    },
                });
            }
            pack.extend((lo..hi).map(|x| run(src(x), displ[q] + x * line)));
            (to.counts[q], to.displs[q]) = ((hi - lo) * line, displ[q] + lo * line);
            let (rlo, rhi) = self.split.planes(xs[q].1, j);
            let mine = ys[me].1 * inner;
            (from.counts[q], from.displs[q]) = ((rhi - rlo) * mine, (xs[q].0 + rlo) * mine);
        }
        Batch {
            phase,
            at: (lo * self.in_plane, lo * n1 * inner * elem),
            own: own.into(),
            pack: pack.into(),
            to,
            from,
            puts: put,
        }
    }
}

impl<B: Backend> Batched<B> {
    /// How many batches it runs in.
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    /// `phase1` by planes into `middle` (its complex x-slab result, C order), then to `to`,
    /// the y-slabs in C order (either slab's pieces in any order over the ranks: see
    /// `Slabs`); None where it does not apply (one rank, a transform along x, which splits no
    /// planes, or planes cuFFT would find misaligned).
    pub fn new(
        b: &B,
        middle: &TensorState,
        to: &TensorState,
        phase1: &Phase,
        wanted: Option<u32>,
    ) -> Result<Option<Self>> {
        let (ranks, me) = (b.ranks(), b.rank());
        let along_x = (phase1.ops.iter()).any(|o| matches!(o, AxisOp::C2c { axis: 0, .. }));
        // (first, count) of each rank's x-planes and y-rows.
        let pieces = (slab_pieces(middle, 0, ranks), slab_pieces(to, 1, ranks));
        let (Some(xs), Some(ys)) = pieces else {
            return Ok(None);
        };
        if ranks < 2 || along_x {
            return Ok(None);
        }
        let shape: Vec<usize> = middle.shape.iter().map(|&n| n as usize).collect();
        let (n1, inner) = (shape[1], shape[2..].iter().product::<usize>());
        let elem = middle.dtype.size() as usize;
        let fewest = xs.iter().map(|x| x.1).min().unwrap_or(0);
        let in_plane = phase1.shape[1..].iter().product::<usize>();
        // Bytes per input value: an r2c reads reals (the same on every rank, so every rank
        // takes the same decision below).
        let in_elem = match phase1.ops.first() {
            Some(AxisOp::R2c) => elem / 2,
            _ => elem,
        };
        // cuFFT wants its pointers aligned to the complex type (an r2c's reals too; cupy's
        // issue 9229): planes of other sizes go in one exchange.
        if !(in_plane * in_elem).is_multiple_of(elem) {
            return Ok(None);
        }
        let room = slab_room(&middle.shape, elem, ranks, 1);
        let piece = shape[0] * ys[me].1 * inner * elem;
        let (out, can_put) = landing(b, room, piece)?;
        let split = batch_count(&middle.shape, elem, ranks, fewest, (wanted, ffts_lead(ranks, can_put)));
        // The send buffer holds each peer's part whole, peers in rank order (not this rank).
        let mut displ = vec![0; ranks];
        for q in 1..ranks {
            let before = if q - 1 == me { 0 } else { ys[q - 1].1 };
            displ[q] = displ[q - 1] + xs[me].1 * before * inner;
        }
        let grid = Grid {
            xs,
            ys,
            me,
            n1,
            inner,
            elem,
            split,
            in_plane: in_plane * in_elem,
            displ,
        };
        let batches = (0..split.n).map(|j| grid.batch(j, phase1, can_put)).collect();
        let Grid { xs, ys, .. } = grid;
        let sent = (0..ranks)
            .filter(|&q| q != me)
            .map(|q| xs[me].1 * ys[q].1 * inner)
            .sum::<usize>();
        Ok(Some(Batched {
            batches,
            elem,
            send: b.zeros(sent * elem)?,
            out,
            route: Route::new(can_put),
        }))
    }

    /// Runs the first phase from `work` into `after1` and the transpose, batch by batch;
    /// returns the y-slab piece.
    pub fn run(
        &mut self,
        b: &B,
        precision: DType,
        work: &B::Buf,
        after1: &mut B::Buf,
    ) -> Result<&B::Buf> {
        let (send, elem) = (&mut self.send, self.elem);
        self.route.run_batches(
            b,
            &self.batches,
            (after1, &mut self.out),
            elem,
            &mut |batch, after1| match batch.phase.shape[0] {
                0 => Ok(()),
                _ => {
                    let (at_in, at_out) = batch.at;
                    b.fft(precision, &batch.phase, (work, at_in), (after1, at_out))
                }
            },
            &mut |batch, after1, out| {
                b.copy_runs(after1, send, &batch.pack, elem)?;
                b.all_to_all_v(send, &batch.to, out, &batch.from, elem)
            },
        )?;
        Ok(&self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::{Split, batch_count, ffts_lead};

    #[test]
    fn batches_cover_every_plane_once() {
        for s in 1..300 {
            for (n, taper) in (1..=12.min(s)).flat_map(|n| [(n, false), (n, true)]) {
                let split = Split { n, taper };
                let mut next = 0;
                for j in 0..n {
                    let (lo, hi) = split.planes(s, j);
                    assert_eq!(lo, next);
                    assert!(hi > lo, "no empty batch when n <= s");
                    next = hi;
                }
                assert_eq!(next, s);
            }
        }
    }

    #[test]
    fn a_batch_holds_256_to_512_mib_of_a_rank() {
        let (c64, c128) = (8, 16);
        let n = |shape: &[u64], elem, ranks, planes, wanted| {
            batch_count(shape, elem, ranks, planes, (wanted, ffts_lead(ranks, true))).n
        };
        // 4 ranks: one per 512 MiB, 4 to 8.
        assert_eq!(n(&[1024; 3], c64, 4, 256, None), 4);
        assert_eq!(n(&[512; 3], c64, 4, 128, None), 4);
        assert_eq!(n(&[2048; 3], c64, 4, 512, None), 8);
        // 3-D on 2 ranks by puts: one per 256 MiB, 8 to 12; by NCCL as on 4, and on 3 ranks.
        assert_eq!(n(&[1024; 3], c64, 2, 512, None), 12);
        assert_eq!(n(&[512; 3], c128, 2, 256, None), 8);
        assert_eq!(batch_count(&[1024; 3], c64, 2, 512, (None, false)).n, 8);
        assert_eq!(n(&[1024; 3], c64, 3, 341, None), 6);
        // 2-D on 2 ranks by puts: as on 4.
        assert_eq!(n(&[16384; 2], c64, 2, 8192, None), 4);
        // Never more batches than the fewest planes a rank holds.
        assert_eq!(n(&[30, 27, 33], c64, 4, 7, None), 4);
        assert_eq!(n(&[30, 27, 33], c64, 2, 7, None), 7);
        assert_eq!(n(&[5, 27, 33], c64, 4, 1, None), 1);
        // A count the step names, within the planes.
        assert_eq!(n(&[1024; 3], c64, 4, 256, Some(12)), 12);
        assert_eq!(n(&[1024; 3], c64, 4, 256, Some(1)), 1);
        assert_eq!(n(&[30, 27, 33], c64, 4, 7, Some(16)), 7);
    }

    #[test]
    fn batches_grow_from_a_small_first_and_end_small_where_the_ffts_are_slower() {
        let sizes = |ranks: usize| -> Vec<usize> {
            let split = batch_count(&[2048; 3], 8, ranks, 256, (Some(8), ffts_lead(ranks, true)));
            (0..8).map(|j| split.planes(256, j)).map(|(lo, hi)| hi - lo).collect()
        };
        for ranks in [2, 4] {
            let sizes = sizes(ranks);
            assert_eq!(sizes.iter().sum::<usize>(), 256);
            assert!(sizes[0] * 3 <= sizes[6], "{sizes:?}");
            assert!(
                sizes[..7].windows(2).all(|w| w[1] * 2 <= w[0] * 3 + 4),
                "{sizes:?}"
            );
        }
        // On 2 ranks the last is small again; on 4 as large as the one before.
        assert!(sizes(2)[7] * 2 < sizes(2)[6], "{:?}", sizes(2));
        assert!(sizes(4)[7] + 1 >= sizes(4)[6], "{:?}", sizes(4));
    }
}
