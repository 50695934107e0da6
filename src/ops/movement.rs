//! Movements of a tensor's pieces from one distribution or layout to another over a backend,
//! planned once and run many times (the data-movement ops, a matmul's operands, an FFT's
//! transposes, the checks), and the memory they take.

use super::exchange::{self, Exchange, Side};
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
        let puts = puts_of(b);
        puts.put_barrier()?;
        let source = if ex.direct_send.is_some() {
            src
        } else {
            b.copy_runs(src, send, &ex.pack, elem)?;
            &*send
        };
        for q in (1..ranks).map(|k| (me + k) % ranks) {
            let bytes = self.to.counts[q] * elem;
            let put = ((source, self.to.displs[q] * elem), (&*out, at[q] * elem));
            puts.put(put.0, put.1, Rows::flat(bytes), q)?;
        }
        // The own part: as the exchange would have carried it, or by its local runs.
        if self.own_in_exchange {
            let own = Run::contiguous(self.to.displs[me], self.from.displs[me], self.to.counts[me]);
            b.copy_runs(source, out, &own.into(), elem)?;
        } else {
            b.copy_runs(src, out, &ex.local, elem)?;
        }
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

    /// Bytes of this movement's lists of runs (packing, unpacking, the own part): a plan keeps
    /// them for every run, and a GPU a copy of each.
    pub fn runs_bytes(&self) -> usize {
        let ex = &self.ex;
        (ex.pack.len() + ex.unpack.len() + ex.local.len()) * std::mem::size_of::<Run>()
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
