//! MPI_COMM_WORLD as a [`Group`] and [`Comm`], through the MPI C API that the `mpi` crate
//! exposes.

use super::comm::{Comm, Elem, Group, Op, Parts};
use anyhow::{Result, bail};
use mpi::ffi;
use std::os::raw::{c_int, c_void};

/// The world communicator of an initialized MPI (keep the `Universe` alive beside it).
pub struct MpiComm {
    rank: usize,
    size: usize,
}

/// The most elements one MPI call takes for one peer or in one buffer (counts are C ints).
const MAX_COUNT: usize = i32::MAX as usize;

fn check(code: c_int, what: &str) -> Result<()> {
    if code != 0 {
        bail!("{what} failed with MPI error {code}");
    }
    Ok(())
}

fn world() -> ffi::MPI_Comm {
    // SAFETY: a constant handle set by the MPI library at load time.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

fn datatype(elem: Elem) -> ffi::MPI_Datatype {
    // SAFETY: constant handles.
    unsafe {
        match elem {
            Elem::F32 => ffi::RSMPI_FLOAT,
            Elem::F64 => ffi::RSMPI_DOUBLE,
            Elem::C64 => ffi::RSMPI_FLOAT_COMPLEX,
            Elem::C128 => ffi::RSMPI_DOUBLE_COMPLEX,
            Elem::I8 => ffi::RSMPI_INT8_T,
            Elem::U8 => ffi::RSMPI_UINT8_T,
            Elem::I32 => ffi::RSMPI_INT32_T,
            Elem::U32 => ffi::RSMPI_UINT32_T,
            Elem::I64 => ffi::RSMPI_INT64_T,
            Elem::U64 => ffi::RSMPI_UINT64_T,
        }
    }
}

fn operation(op: Op) -> ffi::MPI_Op {
    // SAFETY: constant handles.
    unsafe {
        match op {
            Op::Sum => ffi::RSMPI_SUM,
            Op::Prod => ffi::RSMPI_PROD,
            Op::Min => ffi::RSMPI_MIN,
            Op::Max => ffi::RSMPI_MAX,
        }
    }
}

/// A committed contiguous datatype of `bytes` bytes, freed on drop.
struct Contiguous(ffi::MPI_Datatype);

impl Contiguous {
    fn new(bytes: usize) -> Result<Self> {
        let mut t: ffi::MPI_Datatype = unsafe { ffi::RSMPI_DATATYPE_NULL };
        // SAFETY: valid out-pointer; byte type is a constant handle.
        unsafe {
            check(
                ffi::MPI_Type_contiguous(bytes as c_int, ffi::RSMPI_UINT8_T, &mut t),
                "MPI_Type_contiguous",
            )?;
            check(ffi::MPI_Type_commit(&mut t), "MPI_Type_commit")?;
        }
        Ok(Contiguous(t))
    }
}

impl Drop for Contiguous {
    fn drop(&mut self) {
        // SAFETY: a type this value committed.
        unsafe {
            ffi::MPI_Type_free(&mut self.0);
        }
    }
}

/// Counts and displacements as MPI's C ints.
fn c_parts(parts: &Parts) -> Result<(Vec<c_int>, Vec<c_int>)> {
    let end = parts
        .counts
        .iter()
        .zip(&parts.displs)
        .map(|(c, d)| c + d)
        .max()
        .unwrap_or(0);
    if end > MAX_COUNT {
        bail!(
            "an exchange reaching element {end} of a buffer is more than MPI's counts can address ({MAX_COUNT})"
        );
    }
    Ok((
        parts.counts.iter().map(|&c| c as c_int).collect(),
        parts.displs.iter().map(|&d| d as c_int).collect(),
    ))
}

fn counts_and_displs(counts: &[usize]) -> Result<(Vec<c_int>, Vec<c_int>)> {
    let total: usize = counts.iter().sum();
    if total > MAX_COUNT {
        bail!(
            "an exchange of {total} elements on one rank is more than MPI's counts can address ({MAX_COUNT})"
        );
    }
    let mut displs = Vec::with_capacity(counts.len());
    let mut at = 0;
    for &c in counts {
        displs.push(at as c_int);
        at += c;
    }
    Ok((counts.iter().map(|&c| c as c_int).collect(), displs))
}

/// Ends every rank with `MPI_Abort` where MPI runs (initialized, not finalized) with more than
/// one rank; otherwise does nothing.
pub fn abort_if_running(code: i32) {
    let (mut initialized, mut finalized, mut size): (c_int, c_int, c_int) = (0, 0, 0);
    // SAFETY: the queries may be called at any time; the size and abort only while MPI runs.
    unsafe {
        ffi::MPI_Initialized(&mut initialized);
        ffi::MPI_Finalized(&mut finalized);
        if initialized == 0 || finalized != 0 {
            return;
        }
        ffi::MPI_Comm_size(world(), &mut size);
        if size > 1 {
            ffi::MPI_Abort(world(), code);
        }
    }
}

impl MpiComm {
    /// The world communicator of an initialized MPI.
    pub fn world() -> Self {
        let (mut rank, mut size) = (0, 0);
        // SAFETY: MPI is initialized by the caller; valid out-pointers.
        unsafe {
            ffi::MPI_Comm_rank(world(), &mut rank);
            ffi::MPI_Comm_size(world(), &mut size);
        }
        MpiComm {
            rank: rank as usize,
            size: size as usize,
        }
    }

    /// Runs `call(offset, count)` over `n` elements in chunks MPI can count.
    fn chunked(n: usize, mut call: impl FnMut(usize, usize) -> Result<()>) -> Result<()> {
        let mut at = 0;
        while at < n {
            let count = (n - at).min(MAX_COUNT);
            call(at, count)?;
            at += count;
        }
        Ok(())
    }
}

impl Group for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn barrier(&self) -> Result<()> {
        // SAFETY: collective on an initialized world.
        check(unsafe { ffi::MPI_Barrier(world()) }, "MPI_Barrier")
    }

    fn broadcast(&self, buf: &mut [u8], root: usize) -> Result<()> {
        let len = buf.len();
        Self::chunked(len, |at, n| {
            // SAFETY: the buffer holds n bytes from `at` on every rank.
            check(
                unsafe {
                    ffi::MPI_Bcast(
                        buf[at..].as_mut_ptr() as *mut c_void,
                        n as c_int,
                        ffi::RSMPI_UINT8_T,
                        root as c_int,
                        world(),
                    )
                },
                "MPI_Bcast",
            )
        })
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut lens = vec![0u64; self.size];
        self.all_gather_lengths(mine.len() as u64, &mut lens)?;
        let counts: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
        // Nothing to move; and two empty buffers share one dangling address, which Open MPI
        // takes for a send buffer aliasing the receive buffer (MPI_ERR_ARG).
        if counts.iter().all(|&c| c == 0) {
            return Ok(vec![Vec::new(); self.size]);
        }
        let (rc, rd) = counts_and_displs(&counts)?;
        let mut all = vec![0u8; counts.iter().sum()];
        // SAFETY: `all` holds every rank's bytes at its displacement.
        check(
            unsafe {
                ffi::MPI_Allgatherv(
                    mine.as_ptr() as *const c_void,
                    mine.len() as c_int,
                    ffi::RSMPI_UINT8_T,
                    all.as_mut_ptr() as *mut c_void,
                    rc.as_ptr(),
                    rd.as_ptr(),
                    ffi::RSMPI_UINT8_T,
                    world(),
                )
            },
            "MPI_Allgatherv",
        )?;
        Ok(rd
            .iter()
            .zip(&counts)
            .map(|(&d, &c)| all[d as usize..d as usize + c].to_vec())
            .collect())
    }

    fn max_f64(&self, x: f64) -> Result<f64> {
        let mut out = 0f64;
        // SAFETY: one f64 each way.
        check(
            unsafe {
                ffi::MPI_Allreduce(
                    &x as *const f64 as *const c_void,
                    &mut out as *mut f64 as *mut c_void,
                    1,
                    ffi::RSMPI_DOUBLE,
                    ffi::RSMPI_MAX,
                    world(),
                )
            },
            "MPI_Allreduce",
        )?;
        Ok(out)
    }

    fn abort(&self, code: i32) {
        // SAFETY: ends the job (MPI_Abort: the launcher stops every rank).
        unsafe {
            ffi::MPI_Abort(world(), code);
        }
    }
}

impl Comm for MpiComm {
    fn all_to_all_v(
        &self,
        send: &[u8],
        to: &Parts,
        recv: &mut [u8],
        from: &Parts,
        elem_size: usize,
    ) -> Result<()> {
        let t = Contiguous::new(elem_size)?;
        let (sc, sd) = c_parts(to)?;
        let (rc, rd) = c_parts(from)?;
        // Empty Vecs share one dangling address, which Open MPI takes for aliased buffers: give
        // empty buffers distinct addresses.
        let (mut no_send, mut no_recv) = (0u8, 0u8);
        let send_ptr = if send.is_empty() {
            &mut no_send as *mut u8 as *const c_void
        } else {
            send.as_ptr() as *const c_void
        };
        let recv_ptr = if recv.is_empty() {
            &mut no_recv as *mut u8 as *mut c_void
        } else {
            recv.as_mut_ptr() as *mut c_void
        };
        // SAFETY: buffers hold the counted elements (checked above in debug builds, and by the
        // exchange plans that size them).
        check(
            unsafe {
                ffi::MPI_Alltoallv(
                    send_ptr,
                    sc.as_ptr(),
                    sd.as_ptr(),
                    t.0,
                    recv_ptr,
                    rc.as_ptr(),
                    rd.as_ptr(),
                    t.0,
                    world(),
                )
            },
            "MPI_Alltoallv",
        )
    }

    fn all_reduce(&self, send: &[u8], recv: &mut [u8], elem: Elem, op: Op) -> Result<()> {
        let s = elem.size();
        Self::chunked(send.len() / s, |at, n| {
            // SAFETY: both buffers hold n elements from `at`.
            check(
                unsafe {
                    ffi::MPI_Allreduce(
                        send[at * s..].as_ptr() as *const c_void,
                        recv[at * s..].as_mut_ptr() as *mut c_void,
                        n as c_int,
                        datatype(elem),
                        operation(op),
                        world(),
                    )
                },
                "MPI_Allreduce",
            )
        })
    }

    fn reduce(&self, send: &[u8], recv: &mut [u8], elem: Elem, op: Op, root: usize) -> Result<()> {
        let s = elem.size();
        Self::chunked(send.len() / s, |at, n| {
            let out = if self.rank == root {
                recv[at * s..].as_mut_ptr() as *mut c_void
            } else {
                std::ptr::null_mut()
            };
            // SAFETY: the send buffer holds n elements; the root's receive buffer too.
            check(
                unsafe {
                    ffi::MPI_Reduce(
                        send[at * s..].as_ptr() as *const c_void,
                        out,
                        n as c_int,
                        datatype(elem),
                        operation(op),
                        root as c_int,
                        world(),
                    )
                },
                "MPI_Reduce",
            )
        })
    }

    fn reduce_scatter(
        &self,
        send: &[u8],
        recv: &mut [u8],
        counts: &[usize],
        elem: Elem,
        op: Op,
    ) -> Result<()> {
        let (counts, _) = counts_and_displs(counts)?;
        debug_assert_eq!(recv.len(), counts[self.rank] as usize * elem.size());
        // Empty receive buffers still need their own address (see all_to_all_v).
        let mut none = 0u8;
        let out = if recv.is_empty() {
            &mut none as *mut u8 as *mut c_void
        } else {
            recv.as_mut_ptr() as *mut c_void
        };
        // SAFETY: send holds the sum of the counts, recv this rank's count.
        check(
            unsafe {
                ffi::MPI_Reduce_scatter(
                    send.as_ptr() as *const c_void,
                    out,
                    counts.as_ptr(),
                    datatype(elem),
                    operation(op),
                    world(),
                )
            },
            "MPI_Reduce_scatter",
        )
    }
}

impl MpiComm {
    /// Every rank's length, by rank.
    fn all_gather_lengths(&self, mine: u64, out: &mut [u64]) -> Result<()> {
        // SAFETY: one u64 sent, P received.
        check(
            unsafe {
                ffi::MPI_Allgather(
                    &mine as *const u64 as *const c_void,
                    1,
                    ffi::RSMPI_UINT64_T,
                    out.as_mut_ptr() as *mut c_void,
                    1,
                    ffi::RSMPI_UINT64_T,
                    world(),
                )
            },
            "MPI_Allgather",
        )
    }
}
