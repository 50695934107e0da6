//! The GPU backend: device buffers on one stream per rank, strided copies by an NVRTC kernel,
//! communication through NCCL (bootstrapped over the process group: rank 0's unique id travels
//! through MPI), all loaded at run time through cudarc, so the binary builds and runs without
//! CUDA. Matmul and FFT on the GPU are not built yet: they are refused before a run starts.

pub mod devmap;
pub mod probe;

use super::Backend;
use crate::ops::exchange::Run;
use crate::ops::fft::local::Phase;
use crate::ops::matmul::epilog::Addends;
use crate::ops::matmul::local::View;
use crate::runtime::comm::{Comm, Parts};
use crate::spec::model::DeviceMap;
use crate::spec::step::{Epilog, ReduceOp};
use crate::spec::tensor::DType;
use anyhow::{Context as _, Result, anyhow, bail};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};
use cudarc::nccl::{result as nccl, sys as nccl_sys};
use std::sync::Arc;

/// The strided-copy kernel: blocks along x take runs, blocks along y 64 KiB chunks of each run,
/// threads the bytes of a chunk.
const KERNELS: &str = r#"
extern "C" __global__ void copy_runs(const unsigned char* src, unsigned char* dst,
                                     const unsigned long long* runs, unsigned long long n_runs,
                                     unsigned long long elem) {
    const unsigned long long chunk = 65536;
    for (unsigned long long r = blockIdx.x; r < n_runs; r += gridDim.x) {
        const unsigned long long* q = runs + 5 * r;
        unsigned long long bytes = q[2] * elem;
        for (unsigned long long c = blockIdx.y * chunk; c < bytes; c += gridDim.y * chunk) {
            unsigned long long end = c + chunk < bytes ? c + chunk : bytes;
            for (unsigned long long t = c + threadIdx.x; t < end; t += blockDim.x) {
                unsigned long long i = t / elem, b = t % elem;
                dst[(q[1] + i * q[4]) * elem + b] = src[(q[0] + i * q[3]) * elem + b];
            }
        }
    }
}
"#;

/// A device buffer of `len` bytes (at least one byte is allocated: CUDA refuses empty ones).
pub struct DevBuf {
    data: CudaSlice<u8>,
    len: usize,
}

/// One rank's GPU, stream, copy kernel and NCCL communicator.
pub struct Cuda<'a> {
    comm: &'a dyn Comm,
    stream: Arc<CudaStream>,
    copy: CudaFunction,
    nccl: nccl_sys::ncclComm_t,
    name: String,
}

fn nccl_err(e: nccl::NcclError) -> anyhow::Error {
    anyhow!("NCCL: {e:?}")
}

/// NCCL's type and element count for a buffer of `dtype` (complex values as pairs of reals).
fn nccl_type(dtype: DType) -> (nccl_sys::ncclDataType_t, usize) {
    use nccl_sys::ncclDataType_t::*;
    match dtype {
        DType::F16 => (ncclFloat16, 1),
        DType::Bf16 => (ncclBfloat16, 1),
        DType::F32 => (ncclFloat32, 1),
        DType::F64 => (ncclFloat64, 1),
        DType::C64 => (ncclFloat32, 2),
        DType::C128 => (ncclFloat64, 2),
        DType::I8 => (ncclInt8, 1),
        DType::U8 => (ncclUint8, 1),
        DType::I32 => (ncclInt32, 1),
        DType::U32 => (ncclUint32, 1),
        DType::I64 => (ncclInt64, 1),
        DType::U64 => (ncclUint64, 1),
    }
}

fn nccl_op(dtype: DType, op: ReduceOp) -> Result<nccl_sys::ncclRedOp_t> {
    use nccl_sys::ncclRedOp_t::*;
    if dtype.is_complex() && op == ReduceOp::Prod {
        bail!(
            "reduce = \"prod\" of complex values is not built on the GPU backend (NCCL reduces pairs of reals)"
        );
    }
    Ok(match op {
        ReduceOp::Sum => ncclSum,
        ReduceOp::Prod => ncclProd,
        ReduceOp::Min => ncclMin,
        ReduceOp::Max => ncclMax,
        ReduceOp::Avg => ncclAvg,
    })
}

impl<'a> Cuda<'a> {
    /// Starts the GPU backend on every rank: picks this rank's GPU, compiles the copy kernel and
    /// builds the NCCL communicator over `comm`.
    pub fn new(comm: &'a dyn Comm, host: &str, map: &DeviceMap) -> Result<Self> {
        probe::require(&[probe::Lib::Driver, probe::Lib::Nvrtc, probe::Lib::Nccl])?;
        let (rank, size) = (comm.rank(), comm.size());
        let hosts: Vec<String> = comm
            .all_gather_bytes(host.as_bytes())?
            .into_iter()
            .map(|h| String::from_utf8_lossy(&h).into_owned())
            .collect();
        let local = devmap::local_rank_from_env()
            .unwrap_or_else(|| devmap::local_rank_from_hosts(&hosts, rank));
        let visible = CudaContext::device_count().context("cannot count the GPUs")? as usize;
        let ordinal = devmap::ordinal(map, rank, local, visible)?;
        let placed: Vec<(String, usize)> = comm
            .all_gather_bytes(&(ordinal as u64).to_le_bytes())?
            .iter()
            .zip(&hosts)
            .map(|(b, h)| {
                (
                    h.clone(),
                    u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as usize,
                )
            })
            .collect();
        devmap::check_unshared(&placed)?;
        let ctx =
            CudaContext::new(ordinal).with_context(|| format!("cannot open GPU {ordinal}"))?;
        let stream = ctx.default_stream();
        let ptx = cudarc::nvrtc::compile_ptx(KERNELS).map_err(|e| anyhow!("NVRTC: {e:?}"))?;
        let module = ctx.load_module(ptx)?;
        let copy = module.load_function("copy_runs")?;
        // NCCL: rank 0's unique id reaches every rank through the process group.
        let id = if rank == 0 {
            nccl::get_uniqueid().map_err(nccl_err)?
        } else {
            nccl_sys::ncclUniqueId { internal: [0; 128] }
        };
        // SAFETY: the id is 128 plain bytes.
        let bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
        let shared = comm.all_gather_bytes(&bytes)?.swap_remove(0);
        let mut id = id;
        for (d, s) in id.internal.iter_mut().zip(shared) {
            *d = s as _;
        }
        let mut raw = std::mem::MaybeUninit::uninit();
        // SAFETY: a valid out-pointer; every rank calls this with the same id.
        let nccl_comm = unsafe {
            nccl::comm_init_rank(raw.as_mut_ptr(), size as i32, id, rank as i32)
                .map_err(nccl_err)?;
            raw.assume_init()
        };
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        Ok(Cuda {
            comm,
            stream,
            copy,
            nccl: nccl_comm,
            name: format!("cuda:{ordinal} ({name})"),
        })
    }

    fn raw_stream(&self) -> nccl_sys::cudaStream_t {
        self.stream.cu_stream() as _
    }
}

impl Drop for Cuda<'_> {
    fn drop(&mut self) {
        // SAFETY: the communicator this backend created, destroyed once.
        unsafe {
            let _ = nccl::comm_destroy(self.nccl);
        }
    }
}

impl Backend for Cuda<'_> {
    type Buf = DevBuf;

    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn ranks(&self) -> usize {
        self.comm.size()
    }

    fn device(&self) -> String {
        self.name.clone()
    }

    fn upload(&self, data: Vec<u8>) -> Result<Self::Buf> {
        if data.is_empty() {
            return self.zeros(0);
        }
        Ok(DevBuf {
            len: data.len(),
            data: self.stream.clone_htod(&data)?,
        })
    }

    fn download(&self, buf: &Self::Buf) -> Result<Vec<u8>> {
        if buf.len == 0 {
            return Ok(Vec::new());
        }
        Ok(self.stream.clone_dtoh(&buf.data.slice(..buf.len))?)
    }

    fn zeros(&self, bytes: usize) -> Result<Self::Buf> {
        Ok(DevBuf {
            data: self.stream.alloc_zeros::<u8>(bytes.max(1))?,
            len: bytes,
        })
    }

    fn len(&self, buf: &Self::Buf) -> usize {
        buf.len
    }

    fn copy_runs(&self, src: &Self::Buf, dst: &mut Self::Buf, runs: &[Run], elem: usize) {
        if runs.is_empty() {
            return;
        }
        // A few contiguous runs go to the copy engines; many small or strided ones to the kernel.
        let contiguous = runs
            .iter()
            .all(|r| r.count <= 1 || (r.src_stride == 1 && r.dst_stride == 1));
        if contiguous && runs.len() <= 64 {
            for r in runs.iter().filter(|r| r.count > 0) {
                let (s, d, n) = (r.src * elem, r.dst * elem, r.count * elem);
                self.stream
                    .memcpy_dtod(&src.data.slice(s..s + n), &mut dst.data.slice_mut(d..d + n))
                    .expect("a device-to-device copy");
            }
            return;
        }
        let table: Vec<u64> = runs
            .iter()
            .flat_map(|r| [r.src, r.dst, r.count, r.src_stride, r.dst_stride].map(|x| x as u64))
            .collect();
        let table = self
            .stream
            .clone_htod(&table)
            .expect("copying a run table to the GPU");
        let longest = runs.iter().map(|r| r.count * elem).max().unwrap_or(0);
        let chunks = longest.div_ceil(65536).clamp(1, 1024) as u32;
        let (n, elem) = (runs.len() as u64, elem as u64);
        let cfg = LaunchConfig {
            grid_dim: (runs.len().min(65535) as u32, chunks, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(&self.copy);
        launch
            .arg(&src.data)
            .arg(&mut dst.data)
            .arg(&table)
            .arg(&n)
            .arg(&elem);
        // SAFETY: the runs stay inside both buffers (the exchange plans size them).
        unsafe { launch.launch(cfg) }.expect("launching the copy kernel");
    }

    fn gemm(
        &self,
        _: DType,
        _: (&Self::Buf, View),
        _: (&Self::Buf, View),
        _: (f64, f64),
        _: &mut Self::Buf,
    ) -> Result<()> {
        bail!("matmul on the GPU backend is not built yet")
    }

    fn finish(
        &self,
        _: DType,
        _: &Self::Buf,
        _: usize,
        _: &Addends<'_, Self::Buf>,
        _: Option<Epilog>,
        _: &mut Self::Buf,
        _: Option<&mut Self::Buf>,
    ) -> Result<()> {
        bail!("matmul on the GPU backend is not built yet")
    }

    fn fft(&self, _: DType, _: &Phase, _: &Self::Buf, _: &mut Self::Buf) -> Result<()> {
        bail!("fft on the GPU backend is not built yet")
    }

    fn all_to_all_v(
        &self,
        send: &Self::Buf,
        to: &Parts,
        recv: &mut Self::Buf,
        from: &Parts,
        elem: usize,
    ) -> Result<()> {
        let stream = self.raw_stream();
        let (s, _g1) = send.data.device_ptr(&self.stream);
        let (r, _g2) = recv.data.device_ptr_mut(&self.stream);
        nccl::group_start().map_err(nccl_err)?;
        for peer in 0..self.ranks() {
            let (sc, rc) = (to.counts[peer] * elem, from.counts[peer] * elem);
            let (so, ro) = (to.displs[peer] * elem, from.displs[peer] * elem);
            // SAFETY: the parts stay inside the buffers; NCCL queues on our stream.
            unsafe {
                if sc > 0 {
                    nccl::send(
                        (s as usize + so) as *const _,
                        sc,
                        nccl_sys::ncclDataType_t::ncclUint8,
                        peer as i32,
                        self.nccl,
                        stream,
                    )
                    .map_err(nccl_err)?;
                }
                if rc > 0 {
                    nccl::recv(
                        (r as usize + ro) as *mut _,
                        rc,
                        nccl_sys::ncclDataType_t::ncclUint8,
                        peer as i32,
                        self.nccl,
                        stream,
                    )
                    .map_err(nccl_err)?;
                }
            }
        }
        nccl::group_end().map_err(nccl_err)?;
        Ok(())
    }

    fn all_reduce(
        &self,
        send: &Self::Buf,
        recv: &mut Self::Buf,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let (t, lanes) = nccl_type(dtype);
        let op = nccl_op(dtype, op)?;
        let count = send.len / dtype.size() as usize * lanes;
        let (s, _g1) = send.data.device_ptr(&self.stream);
        let (r, _g2) = recv.data.device_ptr_mut(&self.stream);
        // SAFETY: both buffers hold `count` elements.
        unsafe { nccl::all_reduce(s as _, r as _, count, t, op, self.nccl, self.raw_stream()) }
            .map_err(nccl_err)?;
        Ok(())
    }

    fn reduce(
        &self,
        send: &Self::Buf,
        recv: &mut Self::Buf,
        dtype: DType,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let (t, lanes) = nccl_type(dtype);
        let op = nccl_op(dtype, op)?;
        let count = send.len / dtype.size() as usize * lanes;
        let (s, _g1) = send.data.device_ptr(&self.stream);
        // Ranks other than the root receive nothing but NCCL wants a buffer of the size.
        let mut scratch = if self.rank() == root {
            None
        } else {
            Some(self.zeros(send.len)?)
        };
        let out = scratch.as_mut().unwrap_or(recv);
        let (r, _g2) = out.data.device_ptr_mut(&self.stream);
        // SAFETY: both buffers hold `count` elements.
        unsafe {
            nccl::reduce(
                s as _,
                r as _,
                count,
                t,
                op,
                root as i32,
                self.nccl,
                self.raw_stream(),
            )
        }
        .map_err(nccl_err)?;
        Ok(())
    }

    fn reduce_scatter(
        &self,
        send: &Self::Buf,
        recv: &mut Self::Buf,
        counts: &[usize],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        if counts.windows(2).any(|w| w[0] != w[1]) {
            bail!("a reduce-scatter of unequal blocks is not built on the GPU backend yet");
        }
        let (t, lanes) = nccl_type(dtype);
        let op = nccl_op(dtype, op)?;
        let (s, _g1) = send.data.device_ptr(&self.stream);
        let (r, _g2) = recv.data.device_ptr_mut(&self.stream);
        // SAFETY: send holds P blocks of counts[0] elements, recv one.
        unsafe {
            nccl::reduce_scatter(
                s as _,
                r as _,
                counts[0] * lanes,
                t,
                op,
                self.nccl,
                self.raw_stream(),
            )
        }
        .map_err(nccl_err)?;
        Ok(())
    }

    fn broadcast(&self, send: Option<&Self::Buf>, recv: &mut Self::Buf, root: usize) -> Result<()> {
        let len = recv.len;
        let (r, _g) = recv.data.device_ptr_mut(&self.stream);
        let source = match send.filter(|_| self.rank() == root) {
            Some(send) => send.data.device_ptr(&self.stream),
            None => (r, cudarc::driver::SyncOnDrop::Sync(None)),
        };
        // SAFETY: both buffers hold `len` bytes; NCCL reads the source on the root only.
        unsafe {
            nccl::broadcast(
                source.0 as _,
                r as _,
                len,
                nccl_sys::ncclDataType_t::ncclUint8,
                root as i32,
                self.nccl,
                self.raw_stream(),
            )
        }
        .map_err(nccl_err)?;
        Ok(())
    }

    fn barrier(&self) -> Result<()> {
        self.stream.synchronize()?;
        self.comm.barrier()
    }

    fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    fn align(&self) -> Result<()> {
        let mut one = self.zeros(4)?;
        let (p, _g) = one.data.device_ptr_mut(&self.stream);
        // SAFETY: one f32 in place on every rank.
        unsafe {
            nccl::all_reduce(
                p as _,
                p as _,
                1,
                nccl_sys::ncclDataType_t::ncclFloat32,
                nccl_sys::ncclRedOp_t::ncclSum,
                self.nccl,
                self.raw_stream(),
            )
        }
        .map_err(nccl_err)?;
        Ok(())
    }

    fn time(&self, run: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let ctx = self.stream.context();
        let (start, end) = (ctx.new_event(timing)?, ctx.new_event(timing)?);
        start.record(&self.stream)?;
        run()?;
        end.record(&self.stream)?;
        Ok(f64::from(start.elapsed_ms(&end)?) / 1e3)
    }

    fn max_over_ranks(&self, x: f64) -> Result<f64> {
        self.comm.max_f64(x)
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.comm.all_gather_bytes(mine)
    }
}
