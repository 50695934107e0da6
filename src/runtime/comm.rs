//! The communicator the CPU backend talks through: byte-level data movement and typed
//! reductions. One rank without a launcher (`Single`), or MPI (`super::mpi::MpiComm`).

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

/// What ranks exchange. Counts are in elements of `elem_size` bytes; buffers are byte slices.
pub trait Comm {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Waits for every rank.
    fn barrier(&self) -> Result<()>;
    /// Sends `send_counts[q]` elements to rank q (consecutive in `send`, by rank) and receives
    /// `recv_counts[r]` from rank r (consecutive in `recv`, by rank).
    fn all_to_all_v(
        &self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        recv_counts: &[usize],
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
    /// Copies `root`'s buffer into every rank's.
    fn broadcast(&self, buf: &mut [u8], root: usize) -> Result<()>;
    /// Every rank's bytes, on every rank, by rank.
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// The largest `x` over the ranks.
    fn max_f64(&self, x: f64) -> Result<f64>;
    /// Ends every rank of the job now with `code` (MPI_Abort); returns only for one rank.
    fn abort(&self, code: i32);
}

/// One rank, no launcher: every collective is a local copy.
#[derive(Debug, Default)]
pub struct Single;

impl Comm for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn barrier(&self) -> Result<()> {
        Ok(())
    }
    fn all_to_all_v(
        &self,
        send: &[u8],
        send_counts: &[usize],
        recv: &mut [u8],
        _: &[usize],
        elem_size: usize,
    ) -> Result<()> {
        let n = send_counts[0] * elem_size;
        recv[..n].copy_from_slice(&send[..n]);
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
