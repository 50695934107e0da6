//! Movements of a tensor's pieces from one distribution or layout to another over a backend,
//! planned once and run many times (the data-movement ops, a matmul's operands, an FFT's
//! transposes, the checks), and the memory they take.

use super::exchange::{self, Exchange, Side};
use super::rounds;
use crate::backend::work::Run;
use crate::backend::{Backend, Puts, Rows, puts_of};
use crate::dist::Placement;
use crate::dist::TensorState;
use crate::runtime::comm::Parts;
use crate::spec::model::CommBackend;
use anyhow::Result;

/// Bytes of `rank`'s piece of a tensor in a state.
pub fn local_bytes(state: &TensorState, ranks: u64, rank: u64) -> usize {
    Placement::new(&state.dist, &state.shape, ranks)
        .local_shape(rank)
        .map_or(0, |s| {
            s.iter().product::<u64>() as usize * state.dtype.size() as usize
        })
}

/// Bytes from which rows of a strided put go as they lie: a part in narrower rows is packed
/// first, or (landing so) not put at all (the copy engines move short rows of a 2-D copy
/// slowly).
const PUT_ROW: usize = 2048;

/// A part of a movement as one side of a put sees it: `height` rows of `width` elements,
/// `pitch` apart, from element `first` of a piece (one row where the part is contiguous).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    first: usize,
    width: usize,
    height: usize,
    pitch: usize,
}

impl Span {
    /// `count` contiguous elements from `first`.
    fn flat(first: usize, count: usize) -> Self {
        Span {
            first,
            width: count,
            height: 1,
            pitch: count,
        }
    }

    /// The words a rank publishes for it (none: four zeros).
    fn words(span: Option<Span>) -> [usize; 4] {
        span.map_or([0; 4], |s| [s.first, s.width, s.height, s.pitch])
    }
}

/// Each rank's part of `runs` (in rank order, `counts` elements each, back to back in a
/// packed buffer: the runs' destination where `unpacking` is false, their source where it is
/// true) as rows of the piece on the runs' other side: runs of one length (of at least
/// [`PUT_ROW`] bytes, unless the part is one run) and unit strides, following each other in the
/// buffer and a constant pitch apart in the piece. None where some part makes no such rows; a
/// rank with no part has none.
fn spans(
    runs: &[Run],
    counts: &[usize],
    elem: usize,
    unpacking: bool,
) -> Option<Vec<Option<Span>>> {
    // (buffer side, piece side) of a run.
    let sides = |r: &Run| match unpacking {
        true => (r.src, r.dst),
        false => (r.dst, r.src),
    };
    let mut runs = runs.iter().peekable();
    let mut at = 0;
    let mut out = Vec::with_capacity(counts.len());
    for &count in counts {
        let end = at + count;
        let part: Vec<Run> = std::iter::from_fn(|| runs.next_if(|r| sides(r).0 < end))
            .copied()
            .collect();
        let Some(first) = part.first() else {
            out.push(None);
            continue;
        };
        let (w, n, start) = (first.count, part.len(), sides(first).1);
        let pitch = part.get(1).map_or(w, |r| sides(r).1.wrapping_sub(start));
        let rows = part.iter().enumerate().all(|(k, r)| {
            (r.count, r.src_stride, r.dst_stride) == (w, 1, 1)
                && sides(r) == (at + k * w, start + k * pitch)
        });
        if !rows || n * w != count || (n > 1 && w * elem < PUT_ROW) {
            return None;
        }
        out.push(Some(Span {
            first: start,
            width: w,
            height: n,
            pitch,
        }));
        at = end;
    }
    Some(out)
}

/// The rows of one put from a part lying as `src` to where it lands as `dst` (bytes of
/// `elem`-byte elements); None where both are rows of different widths.
fn put_rows(src: Span, dst: Span, elem: usize) -> Option<Rows> {
    let (width, height, src_pitch, dst_pitch) = if src.height == 1 {
        (dst.width, dst.height, dst.width, dst.pitch)
    } else if dst.height == 1 {
        (src.width, src.height, src.pitch, src.width)
    } else if src.width == dst.width {
        (src.width, src.height, src.pitch, dst.pitch)
    } else {
        return None;
    };
    Some(Rows {
        width: width * elem,
        height,
        src_pitch: src_pitch * elem,
        dst_pitch: dst_pitch * elem,
    })
}

/// A movement by puts, as this rank sends it: for each peer (None where it sends it nothing)
/// where its part starts (elements: in the source piece, or in the send buffer where
/// `packed`), where it starts in the peer's result, and its rows (bytes); and the order of the
/// peers ([`rounds::order`]).
pub struct PutPlan {
    packed: bool,
    parts: Vec<Option<(usize, usize, Rows)>>,
    order: Vec<usize>,
}

/// How a movement goes: by NCCL's exchange (MPI's on the CPU), or by NVSHMEM puts where its
/// result is symmetric (the step's trial runs choose: a movement step, an FFT's transposes).
#[derive(Debug, Clone, Copy)]
pub struct Route {
    can_put: bool,
    via: CommBackend,
}

impl Route {
    /// By NCCL until set otherwise; puts allowed where `can_put`.
    pub fn new(can_put: bool) -> Self {
        Route {
            can_put,
            via: CommBackend::Nccl,
        }
    }

    /// Whether puts can make the move (the result is symmetric: `nvshmem` in the backends).
    pub fn can_put(self) -> bool {
        self.can_put
    }

    /// Moves by `via` from now on (NCCL where puts cannot).
    pub fn set(&mut self, via: CommBackend) {
        self.via = if self.can_put { via } else { CommBackend::Nccl };
    }

    /// Whether the move goes by puts now.
    pub fn puts(self) -> bool {
        self.via == CommBackend::Nvshmem
    }
}

/// One exchange, planned for this rank.
pub struct Movement {
    ex: Exchange,
    elem: usize,
    /// Where each peer's part lies in what is sent (the source piece when direct, else the
    /// packed send buffer) and in what receives (the destination piece or the receive buffer).
    to: Parts,
    from: Parts,
    /// The rank's own part travels with the others (both ends direct and contiguous).
    own_in_exchange: bool,
}

impl Movement {
    /// A movement from one state of a tensor to another.
    pub fn new(from: &TensorState, to: &TensorState, ranks: u64, rank: u64) -> Self {
        Movement::to(from, &Side::of(to), ranks, rank)
    }

    /// A movement from a tensor's state to any holdings of the same tensor.
    pub fn to(from: &TensorState, to: &dyn exchange::Holdings, ranks: u64, rank: u64) -> Self {
        let elem = from.dtype.size() as usize;
        let ex = exchange::plan(Side::of(from), to, ranks, rank);
        let parts = |counts: &[usize], direct: &Option<Vec<usize>>| match direct {
            Some(displs) => Parts {
                counts: counts.to_vec(),
                displs: displs.clone(),
            },
            None => Parts::packed(counts),
        };
        let mut to = parts(&ex.send_counts, &ex.direct_send);
        let mut from = parts(&ex.recv_counts, &ex.direct_recv);
        let own = match (&ex.direct_send, &ex.direct_recv, ex.direct_local) {
            (Some(_), Some(_), Some(own)) if ranks > 1 => Some(own),
            _ => None,
        };
        if let Some((s, d, n)) = own {
            let me = rank as usize;
            (
                to.counts[me],
                to.displs[me],
                from.counts[me],
                from.displs[me],
            ) = (n, s, n, d);
        }
        Movement {
            elem,
            ex,
            to,
            from,
            own_in_exchange: own.is_some(),
        }
    }

    /// Moves `src` into `out` through the scratch buffers `send` and `recv` (skipped where a
    /// peer's elements are contiguous already: they travel straight from `src` or into `out`).
    pub fn run<B: Backend>(
        &self,
        b: &B,
        src: &B::Buf,
        send: &mut B::Buf,
        recv: &mut B::Buf,
        out: &mut B::Buf,
    ) -> Result<()> {
        let ex = &self.ex;
        if b.ranks() > 1 {
            let source = if ex.direct_send.is_some() {
                src
            } else {
                b.copy_runs(src, send, &ex.pack, self.elem)?;
                &*send
            };
            if ex.direct_recv.is_some() {
                b.all_to_all_v(source, &self.to, out, &self.from, self.elem)?;
            } else {
                b.all_to_all_v(source, &self.to, recv, &self.from, self.elem)?;
                b.copy_runs(recv, out, &ex.unpack, self.elem)?;
            }
        }
        if !self.own_in_exchange {
            b.copy_runs(src, out, &ex.local, self.elem)?;
        }
        Ok(())
    }

    /// How this rank's part for each peer goes by puts into the peer's symmetric result: from
    /// the source piece as it lies (contiguous, or in rows) or packed first, into the peer's
    /// result where it lands contiguously or in rows ([`spans`]); None where some rank's parts
    /// land otherwise (in narrow rows, or scattered), which puts cannot reach. Collective.
    pub fn puts<B: Backend>(&self, b: &B) -> Result<Option<PutPlan>> {
        if b.ranks() < 2 {
            return Ok(None);
        }
        let mine: Vec<u8> = (self.landing().iter())
            .flat_map(|&w| (w as u64).to_le_bytes())
            .collect();
        let all: Vec<Vec<usize>> = (b.all_gather_bytes(&mine)?.iter())
            .map(|r| {
                r.chunks_exact(8)
                    .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")) as usize)
                    .collect()
            })
            .collect();
        Ok(self.put_plan(&all, b.rank()))
    }

    /// Where each source's part lands in this rank's result, as the rank publishes it for
    /// puts: `[lands (0 or 1), then first, width, height, pitch of each source's part]`
    /// (zeros for a source that sends nothing, and where the parts do not land in rows).
    fn landing(&self) -> Vec<usize> {
        let ex = &self.ex;
        let spans = match &ex.direct_recv {
            Some(_) => Some(
                (self.from.displs.iter().zip(&self.from.counts))
                    .map(|(&d, &n)| (n > 0).then(|| Span::flat(d, n)))
                    .collect(),
            ),
            None => spans(&ex.unpack, &ex.recv_counts, self.elem, true),
        };
        let lands = usize::from(spans.is_some());
        let words = (spans
            .unwrap_or_else(|| vec![None; ex.recv_counts.len()])
            .into_iter())
        .flat_map(Span::words);
        std::iter::once(lands).chain(words).collect()
    }

    /// This rank's puts (see [`Movement::puts`]) from every rank's [`Movement::landing`].
    fn put_plan(&self, all: &[Vec<usize>], me: usize) -> Option<PutPlan> {
        let landing = |q: usize| -> Option<Option<Span>> {
            let r = &all[q];
            if r[0] != 1 {
                return None;
            }
            let w = &r[1 + 4 * me..5 + 4 * me];
            Some((w[2] > 0).then(|| Span {
                first: w[0],
                width: w[1],
                height: w[2],
                pitch: w[3],
            }))
        };
        let lands: Vec<Option<Span>> = (0..all.len()).map(landing).collect::<Option<_>>()?;
        let ranks = all.len();
        // What each rank sends each other, from where the parts land.
        let load: Vec<Vec<usize>> = (0..ranks)
            .map(|s| (all.iter()).map(|r| r[2 + 4 * s] * r[3 + 4 * s]).collect())
            .collect();
        let order = rounds::order(&load, me);
        let plan = |from: &dyn Fn(usize) -> Span, packed| -> Option<PutPlan> {
            let parts = (0..ranks)
                .map(|q| match (q != me).then_some(lands[q]).flatten() {
                    Some(dst) if self.to.counts[q] > 0 => {
                        let src = from(q);
                        put_rows(src, dst, self.elem).map(|rows| Some((src.first, dst.first, rows)))
                    }
                    _ => Some(None),
                })
                .collect::<Option<_>>()?;
            Some(PutPlan {
                packed,
                parts,
                order: order.clone(),
            })
        };
        let contiguous = |q: usize| Span::flat(self.to.displs[q], self.to.counts[q]);
        // Where the parts are not contiguous in the source, the rows they make there.
        let ex = &self.ex;
        let unpacked = match &ex.direct_send {
            Some(_) => plan(&contiguous, false),
            None => spans(&ex.pack, &ex.send_counts, self.elem, false)
                .and_then(|rows| plan(&|q| rows[q].unwrap_or(contiguous(q)), false)),
        };
        // Packed, each part is contiguous in the send buffer: it lands however the peer takes it.
        unpacked.or_else(|| plan(&contiguous, ex.direct_send.is_none()))
    }

    /// Moves `src` into the symmetric `out` by puts as `plan` says ([`Movement::puts`]): this
    /// rank's part for each peer (packed into `send` first where the plan says so) straight
    /// into the peer's result, peers in the plan's order, on the side stream (the copy
    /// engines); meanwhile the own part by a local copy. Barriers before (every rank is done
    /// with its result) and after (every put has landed).
    pub fn run_puts<B: Backend>(
        &self,
        b: &B,
        src: &B::Buf,
        send: &mut B::Buf,
        out: &mut B::Buf,
        plan: &PutPlan,
    ) -> Result<()> {
        let (ex, elem) = (&self.ex, self.elem);
        let me = b.rank();
        let puts = puts_of(b);
        puts.put_barrier()?;
        let source = if plan.packed {
            b.copy_runs(src, send, &ex.pack, elem)?;
            &*send
        } else {
            src
        };
        let sent = b.side(&mut || {
            for &q in &plan.order {
                if let Some((from, to, rows)) = plan.parts[q] {
                    puts.put((source, from * elem), (&*out, to * elem), rows, q)?;
                }
            }
            Ok(())
        })?;
        // The own part: as the exchange would have carried it, or by its local runs.
        if self.own_in_exchange {
            let own = Run::contiguous(self.to.displs[me], self.from.displs[me], self.to.counts[me]);
            b.copy_runs(source, out, &own.into(), elem)?;
        } else {
            b.copy_runs(src, out, &ex.local, elem)?;
        }
        b.wait(&sent)?;
        puts.put_barrier()
    }

    /// Bytes this rank sends to others per run.
    pub fn sent_bytes(&self) -> usize {
        self.ex.sent() * self.elem
    }

    /// Bytes of the scratch send and receive buffers this movement needs (none where a peer's
    /// elements travel straight from the source or into the destination).
    pub fn scratch_bytes(&self) -> [usize; 2] {
        let send = match self.ex.direct_send {
            Some(_) => 0,
            None => self.ex.sent(),
        };
        let recv = match self.ex.direct_recv {
            Some(_) => 0,
            None => self.ex.recv_counts.iter().sum(),
        };
        [send * self.elem, recv * self.elem]
    }

    /// Bytes of this movement's lists of runs (packing, unpacking, the own part) on the host:
    /// a plan keeps them for every run, and a GPU a copy of each.
    pub fn runs_bytes(&self) -> usize {
        let ex = &self.ex;
        [&ex.pack, &ex.unpack, &ex.local]
            .map(|r| r.bytes())
            .iter()
            .sum()
    }

    /// Scratch send and receive buffers sized for this movement.
    pub fn buffers<B: Backend>(&self, b: &B) -> Result<(B::Buf, B::Buf)> {
        let [send, recv] = self.scratch_bytes();
        Ok((b.zeros(send)?, b.zeros(recv)?))
    }
}

/// Rank counts up to which the plan sizes an exchange's scratch exactly (planning every rank's
/// exchange takes time that grows with the square of the ranks, and with the rows it visits);
/// above, or where the ranks' exchanges visit more than [`EXACT_ROWS`], it counts each
/// scratch buffer at its largest: the rank's whole piece sent, its whole piece received.
pub const EXACT_RANKS: u64 = 64;

/// Rows (runs before joining, see [`exchange::rows`]) of every rank's exchange (one rank's
/// times the ranks) up to which the plan sizes it exactly (see [`EXACT_RANKS`]): a 1024^3
/// tensor from slabs along x to slabs along y visits 7 x 2^16 a rank over 4 ranks, 2^15 over 64;
/// small blocks of a large matrix, or many ranks of a larger tensor, more.
pub const EXACT_ROWS: u64 = 1 << 22;

/// Bytes a [`Staged`] movement from `from` to `to` holds on `rank`: its scratch buffers, its
/// lists of runs (where sized exactly) and the piece it lands (see [`EXACT_RANKS`] and
/// [`EXACT_ROWS`]).
pub fn staged_bytes(from: &TensorState, to: &dyn exchange::Holdings, ranks: u64, rank: u64) -> u64 {
    let elem = from.dtype.size();
    let landed = to.extents(rank, ranks).iter().product::<u64>() * elem;
    // (The rows are counted only for rank counts that may plan exactly: counting them visits
    // every rank.)
    let exact = ranks <= EXACT_RANKS
        && exchange::rows(Side::of(from), to, ranks, rank).saturating_mul(ranks) <= EXACT_ROWS;
    // One rank exchanges nothing: what it keeps is copied straight into place.
    let scratch = if ranks == 1 {
        0
    } else if exact {
        let m = Movement::to(from, to, ranks, rank);
        let [send, recv] = m.scratch_bytes();
        (send + recv + m.runs_bytes()) as u64
    } else {
        local_bytes(from, ranks, rank) as u64 + landed
    };
    scratch + landed
}

/// A movement with its scratch buffers and its destination, by NCCL's exchange or, where its
/// destination is symmetric and puts reach it ([`Staged::routed`]), by puts as its route says.
pub struct Staged<B: Backend> {
    movement: Movement,
    send: B::Buf,
    recv: B::Buf,
    /// Where the moved piece lands.
    pub out: B::Buf,
    puts: Option<PutPlan>,
    /// By NCCL or by puts (the step's trial runs choose, where puts can).
    pub route: Route,
}

impl<B: Backend> Staged<B> {
    /// Allocates the buffers of a movement whose destination piece has `out_bytes`.
    pub fn new(b: &B, movement: Movement, out_bytes: usize) -> Result<Self> {
        let (send, recv) = movement.buffers(b)?;
        Ok(Staged {
            movement,
            send,
            recv,
            out: b.zeros(out_bytes)?,
            puts: None,
            route: Route::new(false),
        })
    }

    /// As [`Staged::new`], but where the backend has puts the destination lies on the
    /// symmetric heap, `room` bytes reserved on every rank (the largest piece; collective), so
    /// that puts may make the move ([`Movement::puts`]).
    pub fn routed(b: &B, movement: Movement, out_bytes: usize, room: usize) -> Result<Self> {
        let Some(p) = b.puts() else {
            return Self::new(b, movement, out_bytes);
        };
        let (send, recv) = movement.buffers(b)?;
        let out = p.symmetric(room, out_bytes)?;
        let puts = movement.puts(b)?;
        Ok(Staged {
            route: Route::new(puts.is_some()),
            movement,
            send,
            recv,
            out,
            puts,
        })
    }

    /// Moves `src` and returns the moved piece.
    pub fn run(&mut self, b: &B, src: &B::Buf) -> Result<&B::Buf> {
        match (&self.puts, self.route.puts()) {
            (Some(plan), true) => {
                (self.movement).run_puts(b, src, &mut self.send, &mut self.out, plan)?
            }
            _ => (self.movement).run(b, src, &mut self.send, &mut self.recv, &mut self.out)?,
        }
        Ok(&self.out)
    }
}

/// A tensor's piece moved to another distribution or layout on every rank (outside any timed
/// step: gathering for checksums and whole-tensor files).
pub fn regather<B: Backend>(
    b: &B,
    from: &TensorState,
    buf: &B::Buf,
    to: &TensorState,
) -> Result<B::Buf> {
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let m = Movement::new(from, to, ranks, rank);
    let (mut send, mut recv) = m.buffers(b)?;
    let mut out = b.zeros(local_bytes(to, ranks, rank))?;
    m.run(b, buf, &mut send, &mut recv, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{Movement, PutPlan, Rows};
    use crate::dist::TensorState;
    use crate::init::tests::state;
    use crate::spec::tensor::{DType, Distribution, Layout};

    /// Rank `me`'s puts for a move from `from` to `to` over `ranks` ranks, from every rank's
    /// landing as [`Movement::puts`] gathers them.
    fn plan(from: &TensorState, to: &TensorState, ranks: u64, me: u64) -> Option<PutPlan> {
        let moves: Vec<Movement> = (0..ranks)
            .map(|r| Movement::new(from, to, ranks, r))
            .collect();
        let all: Vec<Vec<usize>> = moves.iter().map(Movement::landing).collect();
        moves[me as usize].put_plan(&all, me as usize)
    }

    fn slab(shape: &[u64], axis: usize) -> TensorState {
        state(shape, DType::F32, Layout::C, Distribution::slab(axis))
    }

    #[test]
    fn puts_carry_rows_of_the_source_unpacked_where_they_are_wide() {
        // f32 [8, 4096] from x-slabs to y-slabs over 4 ranks: rank 1 holds rows 2 and 3 and
        // sends each peer its 1024 columns of both (4 KiB rows, 16 KiB apart), which land
        // contiguous at the peer's rows 2 and 3.
        let p = plan(&slab(&[8, 4096], 0), &slab(&[8, 4096], 1), 4, 1).expect("puts");
        let rows = Rows {
            width: 4096,
            height: 2,
            src_pitch: 16384,
            dst_pitch: 4096,
        };
        assert!(!p.packed);
        let parts = [
            Some((0, 2048, rows)),
            None,
            Some((2048, 2048, rows)),
            Some((3072, 2048, rows)),
        ];
        assert_eq!(p.parts, parts);
        // Rows of 1 KiB are packed first: each part then goes flat, from the send buffer.
        let p = plan(&slab(&[8, 1024], 0), &slab(&[8, 1024], 1), 4, 1).expect("puts");
        assert!(p.packed);
        assert_eq!(p.parts[0], Some((0, 512, Rows::flat(2048))));
    }

    #[test]
    fn puts_land_in_rows_of_the_peers_result() {
        // f32 [4, 4, 1024] from y-slabs to x-slabs over 2 ranks: rank 0's part for rank 1
        // (its planes 2 and 3) is contiguous, and lands in rank 1's two planes at rows 0 and 1
        // (8 KiB of each 16 KiB plane).
        let shape = [4, 4, 1024];
        let p = plan(&slab(&shape, 1), &slab(&shape, 0), 2, 0).expect("puts");
        let rows = Rows {
            width: 8192,
            height: 2,
            src_pitch: 8192,
            dst_pitch: 16384,
        };
        assert_eq!(p.parts, [None, Some((4096, 0, rows))]);
        assert!(!p.packed);
        // Landing in rows of 16 bytes (4 columns of each row of an x-slab), puts cannot go.
        assert!(plan(&slab(&[8, 8], 1), &slab(&[8, 8], 0), 2, 0).is_none());
    }

    #[test]
    fn puts_from_pencils_go_so_that_no_rank_takes_two_at_once() {
        // f32 [8, 8, 512] from 2 x 2 pencils (rank r at (r % 2, r / 2)) to x-slabs: ranks 1
        // and 2 send halves of their box to two peers, 0 and 3 one half to one. Ring order
        // would have 1 and 3 put into 2 first; here each rank first takes one part, then 1
        // and 2 swap their second halves.
        let boxes = (0..4u64)
            .map(|r| {
                let (i, j) = (r % 2 * 4, r / 2 * 4);
                [vec![i, j, 0], vec![i + 4, j + 4, 512]]
            })
            .collect();
        let pencils = state(
            &[8, 8, 512],
            DType::F32,
            Layout::C,
            Distribution::Boxes(boxes),
        );
        let to = slab(&[8, 8, 512], 0);
        let orders: Vec<Vec<usize>> = (0..4)
            .map(|r| plan(&pencils, &to, 4, r).expect("puts").order)
            .collect();
        assert_eq!(orders, [vec![1], vec![3, 2], vec![0, 1], vec![2]]);
    }
}
