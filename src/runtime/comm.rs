//! What ranks say to each other. [`Group`]: who is who, and the small host-side messages that
//! coordinate them (ids, flags, timings), which every process group gives: one rank without a
//! launcher ([`Single`]), MPI (`super::mpi::MpiComm`), or ranks joined over TCP
//! (`super::tcp::TcpGroup`). [`Comm`]: byte-level data movement and typed reductions, which the
//! CPU backend needs and only one rank and MPI give (on GPUs, NCCL moves the data).

use anyhow::Result;

/// Element types MPI reduces natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// f32.
    F32,
    /// f64.
    F64,
    /// Complex f32.
    C64,
    /// Complex f64.
    C128,
    /// i8.
    I8,
    /// u8.
    U8,
    /// i32.
    I32,
    /// u32.
    U32,
    /// i64.
    I64,
    /// u64.
    U64,
}

impl Elem {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::I8 | Elem::U8 => 1,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::C64 | Elem::I64 | Elem::U64 => 8,
            Elem::C128 => 16,
        }
    }
}

/// Reductions MPI applies natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

/// Where each peer's part of an all-to-all-v lies in a buffer: element counts and displacements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parts {
    /// Elements per peer.
    pub counts: Vec<usize>,
    /// First element of each peer's part.
    pub displs: Vec<usize>,
}

impl Parts {
    /// Parts laid end to end in rank order.
    pub fn packed(counts: &[usize]) -> Self {
        let mut displs = Vec::with_capacity(counts.len());
        let mut at = 0;
        for &c in counts {
            displs.push(at);
            at += c;
        }
        Parts {
            counts: counts.to_vec(),
            displs,
        }
    }
}

/// The ranks of a process group and the messages that coordinate them.
pub trait Group {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Waits for every rank.
    fn barrier(&self) -> Result<()>;
    /// Copies `root`'s buffer into every rank's.
    fn broadcast(&self, buf: &mut [u8], root: usize) -> Result<()>;
    /// Every rank's bytes, on every rank, by rank.
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// The largest `x` over the ranks.
    fn max_f64(&self, x: f64) -> Result<f64>;
    /// Ends every rank of the job now with `code`; returns only for one rank.
    fn abort(&self, code: i32);
}

/// What ranks exchange of the tensors' data. Counts are in elements of `elem_size` bytes;
/// buffers are byte slices.
pub trait Comm: Group {
    /// Sends each rank its part of `send` and receives each rank's part into `recv` (elements of
    /// `elem_size` bytes).
    fn all_to_all_v(
        &self,
        send: &[u8],
        to: &Parts,
        recv: &mut [u8],
        from: &Parts,
        elem_size: usize,
    ) -> Result<()>;
    /// Element-wise reduction of every rank's `send` into every rank's `recv`.
    fn all_reduce(&self, send: &[u8], recv: &mut [u8], elem: Elem, op: Op) -> Result<()>;
    /// Element-wise reduction into `recv` on `root` (ignored elsewhere).
    fn reduce(&self, send: &[u8], recv: &mut [u8], elem: Elem, op: Op, root: usize) -> Result<()>;
    /// Reduces `send` (P consecutive blocks of `counts[r]` elements) and leaves block r of the
    /// result in rank r's `recv`.
    fn reduce_scatter(
        &self,
        send: &[u8],
        recv: &mut [u8],
        counts: &[usize],
        elem: Elem,
        op: Op,
    ) -> Result<()>;
}

/// One rank, no launcher: every collective is a local copy.
#[derive(Debug, Default)]
pub struct Single;

impl Group for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn barrier(&self) -> Result<()> {
        Ok(())
    }
    fn broadcast(&self, _: &mut [u8], _: usize) -> Result<()> {
        Ok(())
    }
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![mine.to_vec()])
    }
    fn max_f64(&self, x: f64) -> Result<f64> {
        Ok(x)
    }
    fn abort(&self, _: i32) {}
}

impl Comm for Single {
    fn all_to_all_v(
        &self,
        send: &[u8],
        to: &Parts,
        recv: &mut [u8],
        from: &Parts,
        elem_size: usize,
    ) -> Result<()> {
        let n = to.counts[0] * elem_size;
        let (s, r) = (to.displs[0] * elem_size, from.displs[0] * elem_size);
        recv[r..r + n].copy_from_slice(&send[s..s + n]);
        Ok(())
    }
    fn all_reduce(&self, send: &[u8], recv: &mut [u8], _: Elem, _: Op) -> Result<()> {
        recv.copy_from_slice(send);
        Ok(())
    }
    fn reduce(&self, send: &[u8], recv: &mut [u8], _: Elem, _: Op, _: usize) -> Result<()> {
        recv.copy_from_slice(send);
        Ok(())
    }
    fn reduce_scatter(
        &self,
        send: &[u8],
        recv: &mut [u8],
        _: &[usize],
        _: Elem,
        _: Op,
    ) -> Result<()> {
        recv.copy_from_slice(send);
        Ok(())
    }
}
