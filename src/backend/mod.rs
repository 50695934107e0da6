//! The backend a run computes and communicates through. Operations (`crate::ops`) are written
//! once against [`Backend`]; `cpu` implements it with host memory, rayon and MPI.

pub mod cpu;
pub mod cuda;
pub mod work;

use crate::init::{Generator, IndexMap};
use crate::ops::checks::{Along, C, Dot, Gap, Lanes, Matrix};
use crate::ops::sum::Sum;
use crate::runtime::comm::Parts;
use crate::spec::model::Device;
use crate::spec::step::{Epilog, ReduceOp};
use crate::spec::tensor::DType;
use anyhow::Result;
use std::borrow::Cow;
use work::{Addends, Phase, Runs, View};

/// The bytes a [`Backend::put`] moves: `height` rows of `width` bytes, `src_pitch` bytes apart
/// in the source and `dst_pitch` apart in the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    /// Bytes per row.
    pub width: usize,
    /// Number of rows.
    pub height: usize,
    /// Bytes from one row's start to the next in the source.
    pub src_pitch: usize,
    /// Bytes from one row's start to the next in the destination.
    pub dst_pitch: usize,
}

impl Rows {
    /// One contiguous run of `bytes`.
    pub fn flat(bytes: usize) -> Self {
        Rows {
            width: bytes,
            height: 1,
            src_pitch: bytes,
            dst_pitch: bytes,
        }
    }

    /// The bytes the rows span from the first, in a buffer where they lie `pitch` apart.
    pub fn span(&self, pitch: usize) -> usize {
        match self.height {
            0 => 0,
            h => (h - 1) * pitch + self.width,
        }
    }

    /// True when source and destination are each one contiguous run.
    pub fn is_flat(&self) -> bool {
        self.height <= 1 || (self.width == self.src_pitch && self.width == self.dst_pitch)
    }
}

/// Memory, local kernels and communication of one rank.
pub trait Backend {
    /// A buffer of bytes on the device.
    type Buf;
    /// The end of a stretch of communication queued by [`Backend::side`].
    type Mark;
    /// Its puts, where it has them (see [`Backend::puts`]).
    type Puts: Puts<Buf = Self::Buf>;

    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn ranks(&self) -> usize;
    /// The device, in words (for the manifest).
    fn device(&self) -> String;
    /// The kind of device the steps run on (cpu or cuda).
    fn device_kind(&self) -> Device;

    /// A device buffer holding `data`.
    fn upload(&self, data: Vec<u8>) -> Result<Self::Buf>;
    /// A device buffer holding the piece `map` of a generated init, each element `generator`'s
    /// value at its global index stored in `dtype`: the same bytes as
    /// [`init::generate`](crate::init::generate), computed where the buffer lives (see the
    /// [init docs](crate::init)).
    fn generate(&self, generator: &Generator, dtype: DType, map: &IndexMap) -> Result<Self::Buf>;
    /// The bytes of a device buffer, on the host: copied from a GPU, the buffer itself on the CPU
    /// (no copy: reading a tensor to check or write it takes no second tensor of memory).
    fn download<'a>(&self, buf: &'a Self::Buf) -> Result<Cow<'a, [u8]>>;
    /// A zeroed buffer of `bytes`.
    fn zeros(&self, bytes: usize) -> Result<Self::Buf>;
    /// The size of a buffer in bytes.
    fn len(&self, buf: &Self::Buf) -> usize;

    /// Strided element copies from `src` into `dst` (elements of `elem` bytes).
    fn copy_runs(
        &self,
        src: &Self::Buf,
        dst: &mut Self::Buf,
        runs: &Runs,
        elem: usize,
    ) -> Result<()>;

    /// Whether [`Backend::gemm`] can apply `epilog` itself ([`Out::fused`]) to a product of
    /// pieces stored in `dtype`. The CPU fuses nothing; the GPU fuses through cuBLASLt.
    fn fuses(&self, _dtype: DType, _epilog: Epilog) -> bool {
        false
    }
    /// The m x n block of `out` at `out.at` = `alpha * op(a) @ op(b)`, for pieces stored in
    /// `dtype` (then the fused epilog, where `out.fused` gives one).
    fn gemm(
        &self,
        dtype: DType,
        a: (&Self::Buf, View),
        b: (&Self::Buf, View),
        alpha: (f64, f64),
        out: Out<'_, Self::Buf>,
    ) -> Result<()>;
    /// The product's epilog: `out` (in `dtype`) from `acc` (compute type, `cols` columns) with
    /// the addends and activation; the pre-activation values go to `pre` when given.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        dtype: DType,
        acc: &Self::Buf,
        cols: usize,
        add: &Addends<'_, Self::Buf>,
        epilog: Option<Epilog>,
        out: &mut Self::Buf,
        pre: Option<&mut Self::Buf>,
    ) -> Result<()>;

    /// A local FFT phase on a piece in C order, in complex `precision` (c64 or c128), reading
    /// `input` and writing `output` from the given byte offsets.
    fn fft(
        &self,
        precision: DType,
        phase: &Phase,
        input: (&Self::Buf, usize),
        output: (&mut Self::Buf, usize),
    ) -> Result<()>;

    /// Sends each rank its part of `send` and receives each rank's part into `recv`.
    fn all_to_all_v(
        &self,
        send: &Self::Buf,
        to: &Parts,
        recv: &mut Self::Buf,
        from: &Parts,
        elem: usize,
    ) -> Result<()>;
    /// A zeroed buffer of `bytes` (collective: the same size on every rank) within which
    /// [`Backend::all_gather_window`] moves by the copy engines, the SMs left to the
    /// computation it overlaps, where the backend can: NCCL 2.28 or later on GPUs that all
    /// reach each other. None elsewhere.
    fn window(&self, _bytes: usize) -> Result<Option<Self::Buf>> {
        Ok(None)
    }
    /// The `bytes` of the [`Backend::window`] `win` from byte `offset`, as a buffer of their
    /// own (the same memory, not a copy).
    fn window_part(&self, _win: &Self::Buf, _offset: usize, _bytes: usize) -> Result<Self::Buf> {
        anyhow::bail!("this backend has no windows")
    }
    /// An all-gather in place within the [`Backend::window`] `win`: the `count` bytes of rank r
    /// at byte `at + r * count` to the same place on every rank (`at` the same everywhere).
    fn all_gather_window(&self, _win: &mut Self::Buf, _at: usize, _count: usize) -> Result<()> {
        anyhow::bail!("this backend has no windows")
    }
    /// Element-wise reduction of every rank's `send` into every rank's `recv`.
    fn all_reduce(
        &self,
        send: &Self::Buf,
        recv: &mut Self::Buf,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// Element-wise reduction into `recv` on `root`.
    fn reduce(
        &self,
        send: &Self::Buf,
        recv: &mut Self::Buf,
        dtype: DType,
        op: ReduceOp,
        root: usize,
    ) -> Result<()>;
    /// Reduction of P consecutive blocks of `counts[r]` elements, block r left on rank r.
    fn reduce_scatter(
        &self,
        send: &Self::Buf,
        recv: &mut Self::Buf,
        counts: &[usize],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()>;
    /// `root`'s `send` (its `recv` when None) into every rank's `recv`.
    fn broadcast(&self, send: Option<&Self::Buf>, recv: &mut Self::Buf, root: usize) -> Result<()>;
    /// Queues `comm` (data movement) so that it may overlap the computation queued after it: on
    /// the GPU on a second stream that first waits for the work queued so far. Returns the mark
    /// [`Backend::wait`] waits for; on the CPU `comm` simply runs.
    fn side(&self, comm: &mut dyn FnMut() -> Result<()>) -> Result<Self::Mark>;
    /// Makes the work queued next wait for a [`Backend::side`] stretch to finish.
    fn wait(&self, mark: &Self::Mark) -> Result<()>;
    /// The backend's puts into other ranks' memory, where this run has them: on GPUs that map
    /// each other's memory, NVSHMEM's symmetric heap with `nvshmem` in the spec's backends,
    /// else NCCL's windows (NCCL 2.28 or later). None elsewhere (the CPU, one rank, GPUs across
    /// nodes): NCCL or MPI moves everything there.
    fn puts(&self) -> Option<&Self::Puts>;
    /// Waits for every rank.
    fn barrier(&self) -> Result<()>;
    /// Waits for the device to finish queued work.
    fn synchronize(&self) -> Result<()>;
    /// Brings the ranks into step just before a timed run (after a barrier): on the GPU a tiny
    /// NCCL all-reduce on the stream, so that no rank's timing starts while a peer's GPU lags.
    fn align(&self) -> Result<()>;
    /// Seconds `run` takes on the device: wall time on the CPU, CUDA events around the queued
    /// work on the GPU (launch gaps excluded, as nccl-tests and cupy time it).
    fn time(&self, run: &mut dyn FnMut() -> Result<()>) -> Result<f64>;
    /// The largest `x` over the ranks (host values: timings, errors).
    fn max_over_ranks(&self, x: f64) -> Result<f64>;
    /// Every rank's host bytes, by rank (metadata: names, messages).
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;

    // The checks' reductions, computed where the data is: only scalars come back (the host's
    // forms, which these match, are in `crate::ops::checks`).

    /// [`crate::ops::checks::fingerprint`] of this rank's piece (`map`), or of zeros laid out so (None).
    fn fingerprint(
        &self,
        dtype: DType,
        buf: Option<&Self::Buf>,
        map: &IndexMap,
        shift: u64,
    ) -> Result<u64>;
    /// [`crate::ops::checks::reduction`]: `got` against `op` over the rows of `terms`.
    fn reduction_error(
        &self,
        op: ReduceOp,
        dtype: DType,
        ranks: u64,
        terms: &Self::Buf,
        got: &Self::Buf,
    ) -> Result<(bool, f64)>;
    /// [`crate::ops::checks::gap`] between `y` and `s x`.
    fn gap(&self, dtype: DType, x: &Self::Buf, y: &Self::Buf, s: f64, lanes: &Lanes)
    -> Result<Gap>;
    /// [`crate::ops::checks::energy`] of `x`.
    fn energy(&self, dtype: DType, x: &Self::Buf, lanes: &Lanes) -> Result<Sum>;
    /// [`crate::ops::checks::dots`] of the piece `v` with `x` and `w`.
    fn dots(
        &self,
        dtype: DType,
        v: &Self::Buf,
        m: &Matrix,
        along: Along,
        x: &[C],
        w: &[f64],
    ) -> Result<Vec<Dot>>;
    /// [`crate::ops::checks::activation`]: whether `out` is the activation of `pre` (same layout).
    fn activation_matches(
        &self,
        epilog: Option<Epilog>,
        out: (DType, &Self::Buf),
        pre: (DType, &Self::Buf),
    ) -> Result<bool>;
}

/// Writes into other ranks' memory, where a backend can: symmetric buffers, puts into a peer's,
/// barriers that wait for them, and signals (on the GPU NVSHMEM's heap, or NCCL's windows).
pub trait Puts {
    /// The backend's buffer.
    type Buf;

    /// What carries the puts, as a step's `via` names it: `nvshmem` (NVSHMEM's symmetric heap)
    /// or `nccl_windows` (NCCL's windows, where the spec names no `nvshmem`).
    fn name(&self) -> &'static str;
    /// A zeroed buffer of `reserved` bytes that other ranks write into with [`Puts::put`] (on
    /// NVSHMEM's symmetric heap; collective, the same size on every rank), of which this rank's
    /// piece is the first `bytes` (a buffer `bytes` long: a piece of an uneven split).
    fn symmetric(&self, reserved: usize, bytes: usize) -> Result<Self::Buf>;
    /// The `reserved` bytes of the symmetric buffer `buf` from byte `offset` (the same on every
    /// rank: puts may fill them all) as a symmetric buffer of its own, of which this rank's
    /// piece is the first `bytes` (the same memory, not a copy: a planned tensor on the heap).
    fn symmetric_part(
        &self,
        buf: &Self::Buf,
        offset: usize,
        reserved: usize,
        bytes: usize,
    ) -> Result<Self::Buf>;
    /// Copies `rows` of `src` from byte `src.1` into the symmetric buffer `dst` of rank `peer`
    /// from byte `dst.1` (on the GPU by the copy engines, leaving the SMs to the computation it
    /// overlaps; rows strided on either side in one copy where the peer is reached over NVLink).
    fn put(
        &self,
        src: (&Self::Buf, usize),
        dst: (&Self::Buf, usize),
        rows: Rows,
        peer: usize,
    ) -> Result<()>;
    /// Queued where it is called (the main queue, or inside a [`Backend::side`] stretch): work after it
    /// waits for every rank to get here, with every put queued before it delivered.
    fn put_barrier(&self) -> Result<()>;
    /// Queues a signal to rank `peer`: the u32 at byte `at` of the symmetric `flags` there
    /// becomes `value` once everything queued before it on the current queue is done, puts
    /// included. Unlike [`Puts::put_barrier`] it needs no SM, so a GEMM holding them all on
    /// either side does not delay it.
    fn signal(&self, flags: &Self::Buf, at: usize, value: u32, peer: usize) -> Result<()>;
    /// Makes the main queue wait until the u32 at byte `at` of this rank's symmetric `flags` is
    /// at least `value` (see [`Puts::signal`]).
    fn wait_signal(&self, flags: &Self::Buf, at: usize, value: u32) -> Result<()>;
}

/// The backend's puts, for work prepared with them: a symmetric buffer, which such work holds,
/// exists only where the backend has puts.
pub fn puts_of<B: Backend>(b: &B) -> &B::Puts {
    b.puts()
        .expect("work prepared with symmetric buffers runs where the backend has puts")
}

/// Where a GEMM writes: a block of a row-major matrix.
pub struct Out<'a, T> {
    /// The matrix's buffer.
    pub buf: &'a mut T,
    /// Its element type: the compute type of the operands' dtype, or that dtype (rounded once).
    pub dtype: DType,
    /// The block's first row and column.
    pub at: (usize, usize),
    /// Elements per row of the matrix.
    pub ld: usize,
    /// The product adds to the block instead of replacing it (computed in the compute type,
    /// rounded once; never with a fused epilog).
    pub accumulate: bool,
    /// An epilog the GEMM applies itself (only where [`Backend::fuses`] said it can).
    pub fused: Option<Fused<'a, T>>,
}

/// An epilog applied by the GEMM as it writes its block: the bias added, then the activation.
pub struct Fused<'a, T> {
    /// The epilog.
    pub epilog: Epilog,
    /// For epilogs that read a bias: the vector (the block's dtype) and the index of the entry
    /// of the block's first column; column `j` adds entry `first + j` (a bias per column of the
    /// row-major block is one per row of cuBLAS's column-major result).
    pub bias: Option<(&'a T, usize)>,
}

// Copied whatever T is (it only holds a reference).
impl<T> Clone for Fused<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Fused<'_, T> {}

/// Element-wise sums of a few host values over the ranks (check statistics).
pub fn sum_over_ranks<B: Backend>(b: &B, v: &[f64]) -> Result<Vec<f64>> {
    let send = b.upload(v.iter().flat_map(|x| x.to_le_bytes()).collect())?;
    let mut recv = b.zeros(v.len() * 8)?;
    b.all_reduce(&send, &mut recv, DType::F64, ReduceOp::Sum)?;
    Ok(b.download(&recv)?
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// Asks the kernel to back a large buffer with transparent huge pages (as numpy does): fewer TLB
/// misses when MPI and the copies stream through it.
pub(crate) fn advise_huge_pages(buf: &[u8]) {
    const HUGE: usize = 2 << 20;
    if buf.len() < 2 * HUGE {
        return;
    }
    let start = (buf.as_ptr() as usize).next_multiple_of(HUGE);
    let end = (buf.as_ptr() as usize + buf.len()) / HUGE * HUGE;
    if end > start {
        // SAFETY: advice only, on whole pages inside the buffer; it changes no contents (a kernel
        // without transparent huge pages ignores it).
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}
