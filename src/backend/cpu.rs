//! The CPU backend: host buffers, copies in parallel with rayon, communication through MPI (or
//! nothing, for one rank).

use super::work::{Addends, Bias, Phase, Runs, View};
use super::{Backend, Out, Puts, Rows, advise_huge_pages};
use crate::init::IndexMap;
use crate::ops::checks::{self, Along, C, Dot, Gap, Lanes, Matrix};
use crate::ops::fft::local as fft;
use crate::ops::matmul::{epilog, local};
use crate::ops::sum::Sum;
use crate::runtime::comm::{Comm, Elem, Op, Parts};
use crate::spec::step::{Epilog, ReduceOp};
use crate::spec::tensor::DType;
use anyhow::Result;
use half::{bf16, f16};
use rayon::prelude::*;
use std::borrow::Cow;

/// Host memory and a communicator.
pub struct Cpu<'a> {
    comm: &'a dyn Comm,
}

impl<'a> Cpu<'a> {
    /// A CPU backend over a communicator.
    pub fn new(comm: &'a dyn Comm) -> Self {
        Cpu { comm }
    }
}

/// The MPI element and operation for a dtype and reduction, as the values travel (see
/// [`widen`]); avg is a sum divided afterwards.
fn mpi_op(dtype: DType, op: ReduceOp) -> (Elem, Op) {
    let op = match op {
        ReduceOp::Sum | ReduceOp::Avg => Op::Sum,
        ReduceOp::Prod => Op::Prod,
        ReduceOp::Min => Op::Min,
        ReduceOp::Max => Op::Max,
    };
    let elem = match dtype {
        DType::F16 | DType::Bf16 | DType::F32 => Elem::F32,
        DType::F64 => Elem::F64,
        DType::C64 => Elem::C64,
        DType::C128 => Elem::C128,
        // Signed order needs signed 32-bit values; sums and products wrap alike in unsigned ones.
        DType::I8 if matches!(op, Op::Min | Op::Max) => Elem::I32,
        DType::I8 | DType::U8 | DType::U32 => Elem::U32,
        DType::I32 => Elem::I32,
        DType::I64 => Elem::I64,
        DType::U64 => Elem::U64,
    };
    (elem, op)
}

/// The bytes a reduction sends for `dtype`, where they differ from the dtype's own: half types
/// travel as f32 and come back rounded once; 8-bit integers as 32-bit ones (sign-extended for
/// i8), whose sums and products wrapped back to 8 bits are the 8-bit ones' wrapped results.
/// Open MPI 4.1's AVX reductions saturate 8-bit sums instead of wrapping; 32-bit values keep
/// every MPI to the standard's wrapping arithmetic.
fn widen(dtype: DType, bytes: &[u8]) -> Cow<'_, [u8]> {
    match dtype {
        DType::I8 => Cow::Owned(
            bytes
                .par_iter()
                .flat_map_iter(|&b| i32::from(b as i8).to_le_bytes())
                .collect(),
        ),
        DType::U8 => Cow::Owned(
            bytes
                .par_iter()
                .flat_map_iter(|&b| u32::from(b).to_le_bytes())
                .collect(),
        ),
        _ => local::widen(dtype, bytes),
    }
}

/// Wide values (see [`widen`]) narrowed back into `dtype`'s `out`: halves rounded, 8-bit
/// integers wrapped (their low byte).
fn narrow(dtype: DType, wide: &[u8], out: &mut [u8]) {
    if matches!(dtype, DType::I8 | DType::U8) {
        out.par_iter_mut()
            .zip(wide.par_chunks_exact(4))
            .for_each(|(o, w)| *o = w[0]);
        return;
    }
    out.par_chunks_exact_mut(2)
        .zip(wide.par_chunks_exact(4))
        .for_each(|(o, w)| {
            let x = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let b = match dtype {
                DType::F16 => f16::from_f32(x).to_le_bytes(),
                _ => bf16::from_f32(x).to_le_bytes(),
            };
            o.copy_from_slice(&b);
        });
}

/// Divides every element by `n` (the avg reduction), in the dtype's own arithmetic.
fn divide(dtype: DType, data: &mut [u8], n: usize) {
    macro_rules! each {
        ($t:ty, $size:expr, $div:expr) => {
            data.par_chunks_exact_mut($size).for_each(|c| {
                let x = <$t>::from_le_bytes(c.try_into().expect("element size"));
                let f: fn($t, usize) -> $t = $div;
                c.copy_from_slice(&f(x, n).to_le_bytes());
            })
        };
    }
    match dtype {
        DType::F16 => each!(f16, 2, |x, n| f16::from_f32(x.to_f32() / n as f32)),
        DType::Bf16 => each!(bf16, 2, |x, n| bf16::from_f32(x.to_f32() / n as f32)),
        DType::F32 | DType::C64 => each!(f32, 4, |x, n| x / n as f32),
        DType::F64 | DType::C128 => each!(f64, 8, |x, n| x / n as f64),
        DType::I8 => each!(i8, 1, |x, n| (x as i64 / n as i64) as i8),
        DType::U8 => each!(u8, 1, |x, n| (x as u64 / n as u64) as u8),
        DType::I32 => each!(i32, 4, |x, n| (x as i64 / n as i64) as i32),
        DType::U32 => each!(u32, 4, |x, n| (x as u64 / n as u64) as u32),
        DType::I64 => each!(i64, 8, |x, n| x / n as i64),
        DType::U64 => each!(u64, 8, |x, n| x / n as u64),
    }
}

/// A raw destination pointer shared by rayon tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct Dst(*mut u8);
// SAFETY: tasks write disjoint ranges (the runs of one exchange never overlap in `dst`).
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

impl Cpu<'_> {
    /// Runs an MPI reduction `f` for a dtype and op: half types and 8-bit integers travel wide
    /// (see [`widen`]), and `avg` divides the sum where `f` left a result (`divide_here`).
    fn reduced(
        &self,
        dtype: DType,
        op: ReduceOp,
        send: &[u8],
        recv: &mut [u8],
        divide_here: bool,
        f: impl FnOnce(&[u8], &mut [u8], Elem, Op) -> Result<()>,
    ) -> Result<()> {
        let (elem, mpi) = mpi_op(dtype, op);
        match widen(dtype, send) {
            Cow::Owned(wide) => {
                let mut out = vec![0u8; recv.len() / dtype.size() as usize * 4];
                f(&wide, &mut out, elem, mpi)?;
                narrow(dtype, &out, recv);
            }
            Cow::Borrowed(_) => f(send, recv, elem, mpi)?,
        }
        if divide_here && op == ReduceOp::Avg {
            divide(dtype, recv, self.ranks());
        }
        Ok(())
    }
}

/// The CPU has no puts: no value of this type exists, so none of its methods can be called.
pub enum NoPuts {}

impl Puts for NoPuts {
    type Buf = Vec<u8>;

    fn name(&self) -> &'static str {
        match *self {}
    }

    fn symmetric(&self, _: usize, _: usize) -> Result<Vec<u8>> {
        match *self {}
    }

    fn symmetric_part(&self, _: &Vec<u8>, _: usize, _: usize, _: usize) -> Result<Vec<u8>> {
        match *self {}
    }

    fn put(&self, _: (&Vec<u8>, usize), _: (&Vec<u8>, usize), _: Rows, _: usize) -> Result<()> {
        match *self {}
    }

    fn put_barrier(&self) -> Result<()> {
        match *self {}
    }

    fn signal(&self, _: &Vec<u8>, _: usize, _: u32, _: usize) -> Result<()> {
        match *self {}
    }

    fn wait_signal(&self, _: &Vec<u8>, _: usize, _: u32) -> Result<()> {
        match *self {}
    }
}

impl Backend for Cpu<'_> {
    type Buf = Vec<u8>;
    type Mark = ();
    type Puts = NoPuts;

    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn ranks(&self) -> usize {
        self.comm.size()
    }

    fn device(&self) -> String {
        match rayon::current_num_threads() {
            1 => "cpu (1 thread)".to_string(),
            n => format!("cpu ({n} threads)"),
        }
    }

    fn device_kind(&self) -> crate::spec::model::Device {
        crate::spec::model::Device::Cpu
    }

    fn upload(&self, data: Vec<u8>) -> Result<Vec<u8>> {
        advise_huge_pages(&data);
        Ok(data)
    }

    fn download<'a>(&self, buf: &'a Vec<u8>) -> Result<Cow<'a, [u8]>> {
        Ok(Cow::Borrowed(buf))
    }

    fn zeros(&self, bytes: usize) -> Result<Vec<u8>> {
        let buf = vec![0u8; bytes];
        advise_huge_pages(&buf);
        Ok(buf)
    }

    fn len(&self, buf: &Vec<u8>) -> usize {
        buf.len()
    }

    fn copy_runs(&self, src: &Vec<u8>, dst: &mut Vec<u8>, runs: &Runs, elem: usize) -> Result<()> {
        let out = Dst(dst.as_mut_ptr());
        let (src_len, dst_len) = (src.len(), dst.len());
        runs.par_iter().with_min_len(64).for_each(move |r| {
            let out = out;
            if r.count == 0 {
                return;
            }
            assert!((r.src + (r.count - 1) * r.src_stride + 1) * elem <= src_len);
            assert!((r.dst + (r.count - 1) * r.dst_stride + 1) * elem <= dst_len);
            // SAFETY: bounds asserted above; runs write disjoint destination elements.
            unsafe {
                if r.src_stride == 1 && r.dst_stride == 1 {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr().add(r.src * elem),
                        out.0.add(r.dst * elem),
                        r.count * elem,
                    );
                } else {
                    for i in 0..r.count {
                        std::ptr::copy_nonoverlapping(
                            src.as_ptr().add((r.src + i * r.src_stride) * elem),
                            out.0.add((r.dst + i * r.dst_stride) * elem),
                            elem,
                        );
                    }
                }
            }
        });
        Ok(())
    }

    fn gemm(
        &self,
        dtype: DType,
        a: (&Vec<u8>, View),
        b: (&Vec<u8>, View),
        alpha: (f64, f64),
        out: Out<'_, Vec<u8>>,
    ) -> Result<()> {
        anyhow::ensure!(out.fused.is_none(), "the CPU backend fuses no epilog");
        let (wa, wb) = (local::widen(dtype, a.0), local::widen(dtype, b.0));
        let compute = local::compute_dtype(dtype);
        let block = local::Block {
            at: out.at,
            ld: out.ld,
            accumulate: out.accumulate,
        };
        if out.dtype == compute {
            local::gemm(compute, (&wa, a.1), (&wb, b.1), alpha, out.buf, block);
            return Ok(());
        }
        // Rounded to the dtype: the product in the compute type first (plus the block where it
        // adds to it, rounded once as cuBLAS does with beta = 1), then its rows placed.
        let (m, n) = (a.1.dims().0, b.1.dims().1);
        if m == 0 || n == 0 {
            return Ok(());
        }
        let size = out.dtype.size() as usize;
        let row_at = |i: usize| ((out.at.0 + i) * out.ld + out.at.1) * size;
        let held: Vec<u8> = if out.accumulate {
            (0..m)
                .flat_map(|i| &out.buf[row_at(i)..row_at(i) + n * size])
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        let mut acc = vec![0u8; m * n * compute.size() as usize];
        let whole = local::Block {
            at: (0, 0),
            ld: n,
            accumulate: false,
        };
        local::gemm(compute, (&wa, a.1), (&wb, b.1), alpha, &mut acc, whole);
        let mut rounded = vec![0u8; m * n * size];
        let add = Addends {
            c: out.accumulate.then_some((1.0, held.as_slice())),
            bias: None,
        };
        epilog::finish(compute, &acc, n, out.dtype, &add, None, &mut rounded, false);
        for (i, row) in rounded.chunks_exact(n * size).enumerate() {
            out.buf[row_at(i)..row_at(i) + row.len()].copy_from_slice(row);
        }
        Ok(())
    }

    fn finish(
        &self,
        dtype: DType,
        acc: &Vec<u8>,
        cols: usize,
        add: &Addends<'_, Vec<u8>>,
        act: Option<Epilog>,
        out: &mut Vec<u8>,
        pre: Option<&mut Vec<u8>>,
    ) -> Result<()> {
        let compute = local::compute_dtype(dtype);
        let add = Addends {
            c: add.c.map(|(beta, c)| (beta, c.as_slice())),
            bias: add.bias.as_ref().map(|b| Bias {
                vector: b.vector.as_slice(),
                index: b.index,
                per: b.per,
            }),
        };
        let kept = epilog::finish(compute, acc, cols, dtype, &add, act, out, pre.is_some());
        if let (Some(pre), Some(kept)) = (pre, kept) {
            *pre = kept;
        }
        Ok(())
    }

    fn fft(
        &self,
        precision: DType,
        phase: &Phase,
        (input, at_in): (&Vec<u8>, usize),
        (output, at_out): (&mut Vec<u8>, usize),
    ) -> Result<()> {
        let (n_in, n_out) = phase.bytes(precision.size() as usize);
        let (input, output) = (
            &input[at_in..at_in + n_in],
            &mut output[at_out..at_out + n_out],
        );
        match precision {
            DType::C64 => fft::run_phase::<f32>(phase, input, output),
            _ => fft::run_phase::<f64>(phase, input, output),
        }
        Ok(())
    }

    fn all_to_all_v(
        &self,
        send: &Vec<u8>,
        to: &Parts,
        recv: &mut Vec<u8>,
        from: &Parts,
        elem: usize,
    ) -> Result<()> {
        self.comm.all_to_all_v(send, to, recv, from, elem)
    }

    fn all_reduce(
        &self,
        send: &Vec<u8>,
        recv: &mut Vec<u8>,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        self.reduced(dtype, op, send, recv, true, |s, r, e, o| {
            self.comm.all_reduce(s, r, e, o)
        })
    }

    fn reduce(
        &self,
        send: &Vec<u8>,
        recv: &mut Vec<u8>,
        dtype: DType,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let mine = self.rank() == root;
        // Ranks other than the root receive nothing, but MPI wants a buffer there too.
        let mut scratch = if mine {
            Vec::new()
        } else {
            vec![0u8; send.len()]
        };
        let out = if mine { recv } else { &mut scratch };
        self.reduced(dtype, op, send, out, mine, |s, r, e, o| {
            self.comm.reduce(s, r, e, o, root)
        })
    }

    fn reduce_scatter(
        &self,
        send: &Vec<u8>,
        recv: &mut Vec<u8>,
        counts: &[usize],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        self.reduced(dtype, op, send, recv, true, |s, r, e, o| {
            self.comm.reduce_scatter(s, r, counts, e, o)
        })
    }

    fn broadcast(&self, send: Option<&Vec<u8>>, recv: &mut Vec<u8>, root: usize) -> Result<()> {
        if let Some(send) = send.filter(|_| self.rank() == root) {
            recv.copy_from_slice(send);
        }
        self.comm.broadcast(recv, root)
    }

    fn side(&self, comm: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        comm()
    }

    fn wait(&self, _: &()) -> Result<()> {
        Ok(())
    }

    fn puts(&self) -> Option<&NoPuts> {
        None
    }

    fn barrier(&self) -> Result<()> {
        self.comm.barrier()
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn align(&self) -> Result<()> {
        Ok(())
    }

    fn time(&self, run: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        let t0 = std::time::Instant::now();
        run()?;
        Ok(t0.elapsed().as_secs_f64())
    }

    fn max_over_ranks(&self, x: f64) -> Result<f64> {
        self.comm.max_f64(x)
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.comm.all_gather_bytes(mine)
    }

    fn generate(
        &self,
        generator: &crate::init::Generator,
        dtype: DType,
        map: &crate::init::IndexMap,
    ) -> Result<Vec<u8>> {
        self.upload(crate::init::generate(generator, dtype, map))
    }

    fn fingerprint(
        &self,
        dtype: DType,
        buf: Option<&Vec<u8>>,
        map: &IndexMap,
        shift: u64,
    ) -> Result<u64> {
        Ok(checks::fingerprint(map, dtype, buf.map(|b| &b[..]), shift))
    }

    fn reduction_error(
        &self,
        op: ReduceOp,
        dtype: DType,
        ranks: u64,
        terms: &Vec<u8>,
        got: &Vec<u8>,
    ) -> Result<(bool, f64)> {
        Ok(checks::reduction(op, dtype, ranks, terms, got))
    }

    fn gap(&self, dtype: DType, x: &Vec<u8>, y: &Vec<u8>, s: f64, lanes: &Lanes) -> Result<Gap> {
        Ok(checks::gap(dtype, x, y, s, lanes))
    }

    fn energy(&self, dtype: DType, x: &Vec<u8>, lanes: &Lanes) -> Result<Sum> {
        Ok(checks::energy(dtype, x, lanes))
    }

    fn dots(
        &self,
        dtype: DType,
        v: &Vec<u8>,
        m: &Matrix,
        along: Along,
        x: &[C],
        w: &[f64],
    ) -> Result<Vec<Dot>> {
        Ok(checks::dots(dtype, v, m, along, x, w))
    }

    fn activation_matches(
        &self,
        epilog: Option<Epilog>,
        out: (DType, &Vec<u8>),
        pre: (DType, &Vec<u8>),
    ) -> Result<bool> {
        Ok(checks::activation(epilog, (out.0, out.1), (pre.0, pre.1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::work::Run;
    use crate::runtime::comm::Single;

    #[test]
    fn half_types_reduce_through_f32_and_avg_divides() {
        let comm = Single;
        let cpu = Cpu::new(&comm);
        let x: Vec<u8> = [1.5f32, -2.0, 3.25]
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect();
        let mut out = vec![0u8; x.len()];
        cpu.all_reduce(&x, &mut out, DType::F16, ReduceOp::Avg)
            .unwrap();
        assert_eq!(out, x, "one rank: the average is the value");
        let mut ints: Vec<u8> = [7i32, -9].iter().flat_map(|v| v.to_le_bytes()).collect();
        divide(DType::I32, &mut ints, 2);
        assert_eq!(
            ints,
            [3i32, -4]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
        );
    }

    #[test]
    fn strided_runs_copy_in_parallel() {
        let comm = Single;
        let cpu = Cpu::new(&comm);
        let src: Vec<u8> = (0..12u8).collect();
        let mut dst = vec![0u8; 12];
        // Transpose a 3x4 C array (2-byte elements: 3x2) into F order.
        let runs: Vec<Run> = (0..3)
            .map(|i| Run {
                src: i * 2,
                dst: i,
                count: 2,
                src_stride: 1,
                dst_stride: 3,
            })
            .collect();
        cpu.copy_runs(&src, &mut dst, &runs.into(), 2).unwrap();
        assert_eq!(dst, [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]);
    }
}
