//! Puts with NCCL alone: symmetric buffers are NCCL windows, a put is a copy-engine copy into a
//! peer's window where NCCL maps it into this GPU's address space, signals and barriers are
//! stream memory operations on words of peers' windows. The same puts as on NVSHMEM's heap
//! (see `nvshmem`), where the spec names only `nccl`; they need NCCL 2.28 or later and GPUs
//! that map each other's windows (one node).

use super::peer_copy;
use super::window::Window;
use crate::backend::Rows;
use crate::runtime::comm::Group;
use anyhow::{Result, ensure};
use cudarc::driver::CudaStream;
use cudarc::driver::sys::{cuMemcpyDtoH_v2, cuMemcpyHtoD_v2};
use cudarc::nccl::sys as nccl_sys;
use std::cell::Cell;
use std::sync::{Arc, OnceLock};

/// Puts into peers' NCCL windows (see the module's doc), with the barrier's own window: one
/// u32 per rank and stream, which that rank writes into every peer's.
pub struct WindowPuts {
    flags: Arc<Window>,
    /// Barriers queued so far, on the main and the side stream (each stream's own count, so
    /// that a stream's writes only ever raise its words).
    barriers: [Cell<u32>; 2],
    max_pitch: OnceLock<usize>,
    rank: usize,
    ranks: usize,
}

/// NCCL's switch for registering user buffers so that sends and receives copy into them
/// directly.
const ENV_LOCAL_REGISTER: &str = "NCCL_LOCAL_REGISTER";

/// Whether a run of `ranks` ranks tries puts within NCCL windows: several ranks, no NVSHMEM
/// (whose heap takes the puts then), an NCCL with windows, peers not marked apart.
pub fn wanted(ranks: usize, nvshmem: bool) -> bool {
    ranks > 1 && !nvshmem && !super::peers_marked_apart() && super::window::supported()
}

/// Before NCCL starts, where puts within windows are [`wanted`]: NCCL's registration of user
/// buffers goes off, unless the user set `NCCL_LOCAL_REGISTER`. A window is registered so too,
/// and NCCL's receive into a window that a put had filled since the last receive hung on 2
/// H100s (NCCL 2.28; the receive before the puts ran). distrun registers no other buffer, and
/// NCCL's copy-engine collectives within windows do not need it.
pub fn prepare_environment() {
    if std::env::var_os(ENV_LOCAL_REGISTER).is_none() {
        // SAFETY: on the thread that starts the GPU backend, before NCCL starts its threads;
        // the rest of distrun reads no environment concurrently.
        unsafe { std::env::set_var(ENV_LOCAL_REGISTER, "0") }
    }
}

/// Bytes of the barrier window of `ranks` ranks: two 4-byte counts a rank.
pub fn barrier_bytes(ranks: usize) -> usize {
    8 * ranks
}

/// The byte of the barrier window where `rank`'s count of barriers on the main or the side
/// stream lies.
fn barrier_word(rank: usize, side: bool) -> usize {
    4 * (2 * rank + usize::from(side))
}

/// A tag no fresh memory holds by chance: the time's nanoseconds, this rank, a marker.
fn tag(rank: usize) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (nanos << 16) ^ (rank as u64) ^ 0xd157_0000_0000_0000
}

impl WindowPuts {
    /// Sets puts up on every rank (collective; where [`wanted`], after
    /// [`prepare_environment`]): a window for the barriers' words, mapped on every rank, and a
    /// probe through the mapping (each rank reads a tag every peer wrote into its copy). None,
    /// on every rank, where some rank cannot reach some peer's window so.
    pub fn start(
        comm: &dyn Group,
        nccl: nccl_sys::ncclComm_t,
        stream: &Arc<CudaStream>,
    ) -> Result<Option<Self>> {
        let (rank, ranks) = (comm.rank(), comm.size());
        let ctx = stream.context();
        ctx.bind_to_thread()?;
        let flags = Arc::new(Window::new(nccl, barrier_bytes(ranks), ctx)?);
        let mapped = flags.map_peers(rank, ranks).is_ok();
        let mine = tag(rank);
        // SAFETY: eight bytes of this rank's window from a host value.
        unsafe { cuMemcpyHtoD_v2(flags.ptr(), (&mine as *const u64).cast(), 8) }.result()?;
        let tags = comm.all_gather_bytes(&mine.to_le_bytes())?;
        let seen = mapped
            && (0..ranks).all(|p| {
                let mut got = 0u64;
                let at = flags.peer(p, 0).expect("mapped");
                // SAFETY: eight bytes of rank p's window, mapped here (checked), into a host
                // value; the all-gather above follows every rank's write of its tag.
                let read = unsafe { cuMemcpyDtoH_v2((&mut got as *mut u64).cast(), at, 8) };
                read.result().is_ok() && got.to_le_bytes().as_slice() == tags[p].as_slice()
            });
        let all = comm.all_gather_bytes(&[u8::from(seen)])?;
        if all.iter().any(|flag| flag != &[1]) {
            return Ok(None);
        }
        // Every peer has read this rank's tag (the all-gather above): the words start at zero.
        let zeros = vec![0u8; barrier_bytes(ranks)];
        // SAFETY: the window's bytes from a host buffer as long.
        unsafe { cuMemcpyHtoD_v2(flags.ptr(), zeros.as_ptr().cast(), zeros.len()) }.result()?;
        comm.barrier()?;
        Ok(Some(WindowPuts {
            flags,
            barriers: [Cell::new(0), Cell::new(0)],
            max_pitch: OnceLock::new(),
            rank,
            ranks,
        }))
    }

    /// The device memory the barriers' words take (a window's whole granules).
    pub fn held(&self) -> u64 {
        crate::plan::memory::window_bytes(self.flags.len() as u64)
    }

    /// A window of `bytes` (collective), mapped on every rank.
    pub fn alloc(
        &self,
        nccl: nccl_sys::ncclComm_t,
        bytes: usize,
        stream: &CudaStream,
    ) -> Result<Arc<Window>> {
        let w = Window::new(nccl, bytes, stream.context())?;
        w.map_peers(self.rank, self.ranks)?;
        Ok(Arc::new(w))
    }

    /// Queues on `stream` the copy of `rows` from this GPU's `src` into byte `at` of rank
    /// `peer`'s copy of `dst`.
    ///
    /// # Safety
    ///
    /// `src` must address the rows' span of this GPU's memory, valid until the stream passes
    /// the copy, and `stream` be a live stream of this GPU; nothing may touch the destination
    /// bytes on `peer` meanwhile.
    pub unsafe fn put(
        &self,
        stream: &CudaStream,
        src: u64,
        (dst, at): (&Window, usize),
        rows: Rows,
        peer: usize,
    ) -> Result<()> {
        let span = rows.span(rows.dst_pitch);
        ensure!(
            at.checked_add(span).is_some_and(|end| end <= dst.len()),
            "a put of {span} bytes at byte {at} overruns a window of {}",
            dst.len()
        );
        let to = self.address(dst, peer, at)?;
        let max = peer_copy::max_pitch(stream, &self.max_pitch)?;
        // SAFETY: the destination inside the peer's window, mapped here (checked when it was
        // made); the caller vouches for the source and the stream.
        unsafe { peer_copy::copy_rows(stream, src, to, rows, max) }
    }

    /// Where byte `at` of rank `peer`'s copy of `w` lies here.
    fn address(&self, w: &Window, peer: usize, at: usize) -> Result<u64> {
        ensure!(peer < self.ranks, "rank {peer} of {}", self.ranks);
        w.peer(peer, at)
            .ok_or_else(|| anyhow::anyhow!("a window whose peers are not mapped here"))
    }

    /// Queues on `stream` a signal to rank `peer`: the u32 at byte `at` of its copy of `flags`
    /// becomes `value` once the work queued before it is done.
    pub fn signal(
        &self,
        stream: &CudaStream,
        (flags, at): (&Window, usize),
        value: u32,
        peer: usize,
    ) -> Result<()> {
        ensure!(at + 4 <= flags.len(), "a signal past its window");
        let to = self.address(flags, peer, at)?;
        // SAFETY: four bytes of the peer's window, mapped here.
        unsafe { peer_copy::write_u32(stream, to, value) }
    }

    /// Makes `stream` wait until the u32 at byte `at` of this rank's `flags` is at least `value`.
    pub fn wait(
        &self,
        stream: &CudaStream,
        (flags, at): (&Window, usize),
        value: u32,
    ) -> Result<()> {
        ensure!(at + 4 <= flags.len(), "a signal past its window");
        // SAFETY: four bytes of this GPU's window.
        unsafe { peer_copy::wait_u32(stream, flags.ptr() + at as u64, value) }
    }

    /// Queues on `stream` (the side stream where `side`) a barrier over every rank
    /// (collective, in the same order on every rank): work queued after it waits for every
    /// rank to get here, with the copies queued before it on each rank's same stream done.
    pub fn barrier(&self, stream: &CudaStream, side: bool) -> Result<()> {
        let count = &self.barriers[usize::from(side)];
        let n = count.get().wrapping_add(1);
        count.set(n);
        let word = |rank: usize| barrier_word(rank, side);
        let peers = (0..self.ranks).filter(|&p| p != self.rank);
        for p in peers.clone() {
            self.signal(stream, (&self.flags, word(self.rank)), n, p)?;
        }
        for p in peers {
            self.wait(stream, (&self.flags, word(p)), n)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_and_stream_has_its_own_word_inside_the_window() {
        let ranks = 5;
        let mut words: Vec<usize> = (0..ranks)
            .flat_map(|r| [barrier_word(r, false), barrier_word(r, true)])
            .collect();
        assert!(
            words
                .iter()
                .all(|&w| w % 4 == 0 && w + 4 <= barrier_bytes(ranks))
        );
        words.sort();
        words.dedup();
        assert_eq!(words.len(), 2 * ranks);
    }

    #[test]
    fn one_rank_or_nvshmem_wants_no_windows() {
        // Decided before NCCL is asked anything (no NCCL on the build machine).
        assert!(!wanted(1, false));
        assert!(!wanted(4, true));
    }
}
