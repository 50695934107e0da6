//! Data-movement steps (redistribute and the collectives) prepared once and run many times over a
//! backend: plans and scratch buffers are made before the timed iterations.

use super::exchange::{self, Exchange, Side};
use crate::backend::{Backend, Rows};
use crate::dist::Placement;
use crate::dist::TensorState;
use crate::runtime::comm::Parts;
use crate::spec::model::CommBackend;
use crate::spec::step::{ReduceOp, SendRecvPattern, Step};
use crate::spec::tensor::{DType, Distribution};
use anyhow::{Result, bail};

/// Bytes of `rank`'s piece of a tensor in a state.
pub fn local_bytes(state: &TensorState, ranks: u64, rank: u64) -> usize {
    Placement::new(&state.dist, &state.shape, ranks)
        .local_shape(rank)
        .map_or(0, |s| {
            s.iter().product::<u64>() as usize * state.dtype.size() as usize
        })
}

/// A reduce_scatter's packing (every rank's block, in rank order, from the input's layout) and
/// each rank's block's elements (its slab, which may differ by a row from its neighbours').
pub fn reduce_scatter_blocks(
    input: &TensorState,
    output: &TensorState,
    ranks: u64,
) -> (Vec<exchange::Run>, Vec<usize>) {
    let to = Side {
        dist: &output.dist,
        shape: &output.shape,
        layout: output.layout,
    };
    let elem = output.dtype.size() as usize;
    let counts = (0..ranks)
        .map(|r| local_bytes(output, ranks, r) / elem)
        .collect();
    (exchange::blocks(input.layout, to, ranks), counts)
}

/// Whether `runs` take all `n` elements in place, in order (splitting along the slowest axis of
/// the layout): then nothing needs packing.
pub fn in_rank_order(runs: &[exchange::Run], n: usize) -> bool {
    runs.iter()
        .all(|r| r.src == r.dst && (r.count <= 1 || (r.src_stride == 1 && r.dst_stride == 1)))
        && runs.iter().map(|r| r.count).sum::<usize>() == n
}

/// Where rank `me`'s part for each rank lands in that rank's result, from every rank's
/// `[receives straight into its result (0 or 1), where each sender's part lands...]`; None
/// when some rank receives through a receive buffer (puts cannot reach it).
fn landings(all: &[Vec<usize>], me: usize) -> Option<Vec<usize>> {
    all.iter().map(|r| (r[0] == 1).then(|| r[1 + me])).collect()
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

    /// Where this rank's part for each peer lands in that peer's result (elements), so that
    /// puts into a symmetric result can replace the exchange; None where some rank receives
    /// through a receive buffer (its parts not contiguous in its result). Collective.
    pub fn puts<B: Backend>(&self, b: &B) -> Result<Option<Vec<usize>>> {
        if b.ranks() < 2 {
            return Ok(None);
        }
        let direct = self.ex.direct_recv.is_some();
        let mine: Vec<u8> = std::iter::once(u64::from(direct))
            .chain(self.from.displs.iter().map(|&d| d as u64))
            .flat_map(u64::to_le_bytes)
            .collect();
        let all: Vec<Vec<usize>> = b
            .all_gather_bytes(&mine)?
            .iter()
            .map(|r| {
                r.chunks_exact(8)
                    .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")) as usize)
                    .collect()
            })
            .collect();
        Ok(landings(&all, b.rank()))
    }

    /// Moves `src` into the symmetric `out` by puts: this rank's part for each peer (packed
    /// into `send` first where not contiguous) goes straight into the peer's result at `at`,
    /// peers in ring order; the own part by a local copy. Barriers before (every rank is done
    /// with its result) and after (every put has landed).
    pub fn run_puts<B: Backend>(
        &self,
        b: &B,
        src: &B::Buf,
        send: &mut B::Buf,
        out: &mut B::Buf,
        at: &[usize],
    ) -> Result<()> {
        let (ex, elem) = (&self.ex, self.elem);
        let (ranks, me) = (b.ranks(), b.rank());
        b.put_barrier()?;
        let source = if ex.direct_send.is_some() {
            src
        } else {
            b.copy_runs(src, send, &ex.pack, elem)?;
            &*send
        };
        for q in (1..ranks).map(|k| (me + k) % ranks) {
            let bytes = self.to.counts[q] * elem;
            let put = ((source, self.to.displs[q] * elem), (&*out, at[q] * elem));
            b.put(put.0, put.1, Rows::flat(bytes), q)?;
        }
        // The own part: as the exchange would have carried it, or by its local runs.
        if self.own_in_exchange {
            let own = exchange::Run::contiguous(
                self.to.displs[me],
                self.from.displs[me],
                self.to.counts[me],
            );
            b.copy_runs(source, out, &[own], elem)?;
        } else {
            b.copy_runs(src, out, &ex.local, elem)?;
        }
        b.put_barrier()
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

    /// Scratch send and receive buffers sized for this movement.
    pub fn buffers<B: Backend>(&self, b: &B) -> Result<(B::Buf, B::Buf)> {
        let [send, recv] = self.scratch_bytes();
        Ok((b.zeros(send)?, b.zeros(recv)?))
    }
}

/// Rank counts up to which the plan sizes an exchange's scratch exactly (planning every rank's
/// exchange takes time that grows with the square of the ranks, and with the runs it copies);
/// above, or for a tensor of more than [`EXACT_ELEMENTS`], it counts each scratch buffer at its
/// largest: the rank's whole piece sent, its whole piece received.
pub const EXACT_RANKS: u64 = 64;

/// Elements up to which the plan sizes an exchange's scratch exactly (see [`EXACT_RANKS`]).
pub const EXACT_ELEMENTS: u64 = 1 << 20;

/// Bytes a [`Staged`] movement from `from` to `to` holds on `rank`: its scratch buffers and the
/// piece it lands (see [`EXACT_RANKS`] and [`EXACT_ELEMENTS`]).
pub fn staged_bytes(from: &TensorState, to: &dyn exchange::Holdings, ranks: u64, rank: u64) -> u64 {
    let elem = from.dtype.size();
    let landed = to.extents(rank, ranks).iter().product::<u64>() * elem;
    let elements = from.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    let exact = ranks <= EXACT_RANKS && elements.is_some_and(|n| n <= EXACT_ELEMENTS);
    // One rank exchanges nothing: what it keeps is copied straight into place.
    let scratch = if ranks == 1 {
        0
    } else if exact {
        let [send, recv] = Movement::to(from, to, ranks, rank).scratch_bytes();
        (send + recv) as u64
    } else {
        local_bytes(from, ranks, rank) as u64 + landed
    };
    scratch + landed
}

/// Bytes a prepared movement step holds on a rank beyond its input and result (by rank: what
/// every rank shares is worked out once): the exchange's scratch, a reduce_scatter's packed
/// blocks, a send_recv's staged rows, the result in the input's layout before a change of layout.
pub fn workspace<'a>(
    step: &'a Step,
    input: &'a TensorState,
    output: &'a TensorState,
    ranks: u64,
) -> impl Fn(u64) -> u64 + 'a {
    // A reduce_scatter packs every rank's block (the whole input) unless it holds them in order.
    let packed = match step {
        Step::ReduceScatter(_) => {
            let (runs, counts) = reduce_scatter_blocks(input, output, ranks);
            let elem = input.dtype.size() as usize;
            match in_rank_order(&runs, local_bytes(input, ranks, 0) / elem) {
                true => 0,
                false => (counts.iter().sum::<usize>() * elem) as u64,
            }
        }
        _ => 0,
    };
    move |rank| movement_workspace(step, input, output, (ranks, rank), packed)
}

fn movement_workspace(
    step: &Step,
    input: &TensorState,
    output: &TensorState,
    (ranks, rank): (u64, u64),
    packed: u64,
) -> u64 {
    let piece = |s: &TensorState| local_bytes(s, ranks, rank) as u64;
    let relayout = || {
        let same = TensorState {
            layout: input.layout,
            ..output.clone()
        };
        if input.layout == output.layout {
            0
        } else {
            piece(&same)
        }
    };
    // The CPU reduces half types in f32: both sides widened.
    let widened = || match input.dtype {
        DType::F16 | DType::Bf16 => 2 * (piece(input) + piece(output)),
        _ => 0,
    };
    match step {
        Step::Redistribute(_)
        | Step::AllGather(_)
        | Step::Gather(_)
        | Step::Scatter(_)
        | Step::AllToAll(_) => staged_bytes(input, &Side::of(output), ranks, rank) - piece(output),
        Step::AllReduce(_) | Step::Reduce(_) => relayout() + widened(),
        Step::Broadcast(_) => relayout(),
        // MPI's reduce_scatter reduces through a buffer of the whole input.
        Step::ReduceScatter(_) => packed + piece(input) + widened(),
        Step::SendRecv(s) => {
            let sends = match &s.pairs {
                Some(pairs) => pairs
                    .iter()
                    .filter(|[a, b]| u64::from(*a) == rank && a != b)
                    .count(),
                None => usize::from(ranks > 1),
            };
            sends as u64 * piece(input) + relayout()
        }
        Step::Barrier(_) | Step::Matmul(_) | Step::Fft(_) => 0,
    }
}

/// A movement with its scratch buffers and its destination.
pub struct Staged<B: Backend> {
    movement: Movement,
    send: B::Buf,
    recv: B::Buf,
    /// Where the moved piece lands.
    pub out: B::Buf,
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
        })
    }

    /// Moves `src` and returns the moved piece.
    pub fn run(&mut self, b: &B, src: &B::Buf) -> Result<&B::Buf> {
        self.movement
            .run(b, src, &mut self.send, &mut self.recv, &mut self.out)?;
        Ok(&self.out)
    }
}

enum Kernel {
    /// An exchange (redistribute, all_gather, gather, scatter, all_to_all).
    Move(Box<Movement>),
    AllReduce(ReduceOp),
    Reduce(ReduceOp, usize),
    /// The send buffer packing (rank q's block after those of the ranks before it; None where
    /// the input holds the blocks in that order already), then the reduction of blocks of
    /// `counts[q]` elements.
    ReduceScatter {
        runs: Option<Vec<exchange::Run>>,
        counts: Vec<usize>,
        op: ReduceOp,
    },
    Broadcast(usize),
    /// Element counts to send to and receive from each rank; `keep` copies the rank's own row.
    SendRecv {
        send: Vec<usize>,
        recv: Vec<usize>,
        keep: bool,
    },
    Barrier,
}

/// A step ready to run: its plan, scratch buffers and output buffer.
pub struct Prepared<B: Backend> {
    kernel: Kernel,
    dtype: crate::spec::tensor::DType,
    scratch: Vec<B::Buf>,
    out: B::Buf,
    /// A local change of layout applied after the kernel, when the output's layout differs.
    relayout: Option<(Movement, B::Buf)>,
    /// Bytes this rank sends to others per run (for bus bandwidth).
    pub sent_bytes: usize,
    /// For a movement into a symmetric result: where this rank's part for each peer lands in
    /// the peer's result (elements).
    puts: Option<Vec<usize>>,
    /// How a movement travels.
    route: Route,
}

impl<B: Backend> Prepared<B> {
    /// Prepares a data-movement step from its input's state to its output's, its result in
    /// `dest` where given (a symmetric tensor's place on the heap: a movement may then go by
    /// puts; collective where it is given).
    pub fn new(
        b: &B,
        step: &Step,
        input: &TensorState,
        output: &TensorState,
        dest: Option<B::Buf>,
    ) -> Result<Self> {
        let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
        let elem = input.dtype.size() as usize;
        let out_bytes = local_bytes(output, ranks, rank);
        // Kernels that leave the input's layout; a relayout follows when the output wants another.
        let same_layout = TensorState {
            layout: input.layout,
            ..output.clone()
        };
        let relayout = || {
            (input.layout != output.layout)
                .then(|| Movement::new(&same_layout, output, ranks, rank))
        };
        let (mut scratch, mut puts) = (Vec::new(), None);
        let (kernel, relayout) = match step {
            Step::Redistribute(_)
            | Step::AllGather(_)
            | Step::Gather(_)
            | Step::Scatter(_)
            | Step::AllToAll(_) => {
                let m = Movement::new(input, output, ranks, rank);
                if dest.is_some() {
                    puts = m.puts(b)?;
                }
                let (send, recv) = m.buffers(b)?;
                scratch.extend([send, recv]);
                (Kernel::Move(Box::new(m)), None)
            }
            Step::AllReduce(s) => (Kernel::AllReduce(s.reduce), relayout()),
            Step::Reduce(s) => (Kernel::Reduce(s.reduce, s.root as usize), relayout()),
            Step::Broadcast(_) => {
                let Distribution::Root(root) = input.dist else {
                    bail!("broadcast of a tensor no root holds");
                };
                (Kernel::Broadcast(root as usize), relayout())
            }
            Step::ReduceScatter(s) => {
                let (runs, counts) = reduce_scatter_blocks(input, output, ranks);
                let packs = !in_rank_order(&runs, local_bytes(input, ranks, rank) / elem);
                if packs {
                    scratch.push(b.zeros(counts.iter().sum::<usize>() * elem)?);
                }
                (
                    Kernel::ReduceScatter {
                        runs: packs.then_some(runs),
                        counts,
                        op: s.reduce,
                    },
                    None,
                )
            }
            Step::SendRecv(s) => {
                let row = out_bytes / elem;
                let p = ranks as usize;
                let me = rank as usize;
                let pairs: Vec<(usize, usize)> = match &s.pairs {
                    Some(pairs) => pairs
                        .iter()
                        .map(|[a, b]| (*a as usize, *b as usize))
                        .collect(),
                    None => match s.pattern {
                        SendRecvPattern::Ring => (0..p).map(|r| (r, (r + 1) % p)).collect(),
                    },
                };
                let mut send = vec![0; p];
                let mut recv = vec![0; p];
                let mut keep = false;
                for &(src, dst) in &pairs {
                    if src == me && dst == me {
                        keep = true;
                    } else if src == me {
                        send[dst] = row;
                    } else if dst == me {
                        recv[src] = row;
                    }
                }
                let sends = send.iter().filter(|&&c| c > 0).count();
                scratch.extend([b.zeros(sends * row * elem)?]);
                (Kernel::SendRecv { send, recv, keep }, relayout())
            }
            Step::Barrier(_) => (Kernel::Barrier, None),
            Step::Matmul(_) | Step::Fft(_) => bail!("{} is not a data-movement step", step.op()),
        };
        let sent_bytes = match &kernel {
            Kernel::Move(m) => m.ex.sent() * elem,
            Kernel::SendRecv { send, .. } => send.iter().sum::<usize>() * elem,
            _ => 0,
        };
        let kernel_out = match (&kernel, &relayout) {
            (Kernel::Barrier, _) => 0,
            (_, Some(_)) => local_bytes(&same_layout, ranks, rank),
            _ => out_bytes,
        };
        // The result lands in `dest` where one is given.
        let mut dest = dest;
        let relayout = match relayout {
            Some(m) => Some((m, dest.take().map_or_else(|| b.zeros(out_bytes), Ok)?)),
            None => None,
        };
        Ok(Prepared {
            kernel,
            dtype: input.dtype,
            scratch,
            out: dest.map_or_else(|| b.zeros(kernel_out), Ok)?,
            relayout,
            sent_bytes,
            route: Route::new(puts.is_some()),
            puts,
        })
    }

    /// Whether puts can move this step (see [`Prepared::set_via`]).
    pub fn can_put(&self) -> bool {
        self.route.can_put()
    }

    /// Moves the step's data by NCCL's exchange or, where [`Prepared::can_put`], by NVSHMEM
    /// puts.
    pub fn set_via(&mut self, via: CommBackend) {
        self.route.set(via);
    }

    /// Runs the step once on `input`.
    pub fn run(&mut self, b: &B, input: &B::Buf) -> Result<()> {
        let dtype = self.dtype;
        let elem = dtype.size() as usize;
        match &self.kernel {
            Kernel::Move(m) => {
                let [send, recv] = &mut self.scratch[..] else {
                    unreachable!("a movement has two scratch buffers")
                };
                match &self.puts {
                    Some(at) if self.route.puts() => {
                        m.run_puts(b, input, send, &mut self.out, at)?
                    }
                    _ => m.run(b, input, send, recv, &mut self.out)?,
                }
            }
            Kernel::AllReduce(op) => b.all_reduce(input, &mut self.out, dtype, *op)?,
            Kernel::Reduce(op, root) => b.reduce(input, &mut self.out, dtype, *op, *root)?,
            Kernel::ReduceScatter { runs, counts, op } => match runs {
                None => b.reduce_scatter(input, &mut self.out, counts, dtype, *op)?,
                Some(runs) => {
                    let send = &mut self.scratch[0];
                    b.copy_runs(input, send, runs, elem)?;
                    b.reduce_scatter(send, &mut self.out, counts, dtype, *op)?;
                }
            },
            Kernel::Broadcast(root) => b.broadcast(Some(input), &mut self.out, *root)?,
            Kernel::SendRecv { send, recv, keep } => {
                let row = send.iter().chain(recv).copied().max().unwrap_or(0);
                let staged = &mut self.scratch[0];
                let copies: Vec<exchange::Run> = (0..send.iter().filter(|&&c| c > 0).count())
                    .map(|k| exchange::Run::contiguous(0, k * row, row))
                    .collect();
                b.copy_runs(input, staged, &copies, elem)?;
                b.all_to_all_v(
                    staged,
                    &Parts::packed(send),
                    &mut self.out,
                    &Parts::packed(recv),
                    elem,
                )?;
                if *keep {
                    let n = b.len(input) / elem;
                    b.copy_runs(
                        input,
                        &mut self.out,
                        &[exchange::Run::contiguous(0, 0, n)],
                        elem,
                    )?;
                }
            }
            Kernel::Barrier => b.barrier()?,
        }
        if let Some((m, out)) = &mut self.relayout {
            let mut none = (b.zeros(0)?, b.zeros(0)?);
            m.run(b, &self.out, &mut none.0, &mut none.1, out)?;
        }
        Ok(())
    }

    /// The output of the last run.
    pub fn into_output(self) -> B::Buf {
        match self.relayout {
            Some((_, out)) => out,
            None => self.out,
        }
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
    use super::landings;

    #[test]
    fn puts_land_where_each_receiver_expects_the_sender() {
        // Three ranks receiving straight into their results; rank r's entry k says where
        // rank k's part starts in r's result.
        let all = vec![vec![1, 0, 10, 20], vec![1, 5, 0, 25], vec![1, 7, 17, 0]];
        assert_eq!(landings(&all, 0), Some(vec![0, 5, 7]));
        assert_eq!(landings(&all, 1), Some(vec![10, 0, 17]));
        assert_eq!(landings(&all, 2), Some(vec![20, 25, 0]));
        // One rank unpacks from a receive buffer: no puts for anyone.
        let mut packed = all.clone();
        packed[1][0] = 0;
        assert_eq!(landings(&packed, 0), None);
    }
}
