//! The local GEMM through cuBLAS (`cublasGemmEx`: tensor cores for f16 and bf16 with f32
//! accumulation; f32, f64, c64 and c128 in their own precision) and the product's epilog in an
//! NVRTC kernel.
//!
//! The pipeline wants `out` (m x n) row-major; cuBLAS is column-major, so it computes
//! `out^T = op(b)^T op(a)^T`, which is `out` in row-major order.

use super::{Cuda, DevBuf, launch_config, lt, probe};
use crate::backend::work::Addends;
use crate::backend::work::View;
use crate::backend::{Backend, Out};
use crate::spec::step::{BiasPer, Epilog};
use crate::spec::tensor::{DType, Layout};
use anyhow::{Result, anyhow};
use cudarc::cublas::sys::{
    self, cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasOperation_t, cudaDataType,
};
use cudarc::cublas::{CudaBlas, result as cublas};
use cudarc::driver::{DevicePtr, DevicePtrMut, PushKernelArg};

/// Loads and stores of one float element of any float dtype as a double2 (the init kernel's
/// dtype numbers), for the epilog kernels and the check kernels.
pub const ELEMENTS: &str = r#"
__device__ double2 load_el(const void* p, unsigned long long i, int t) {
    switch (t) {
    case 0: { unsigned short h = ((const unsigned short*)p)[i]; float f;
              asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return make_double2(f, 0.0); }
    case 1: { unsigned int h = ((const unsigned short*)p)[i];
              return make_double2(__uint_as_float(h << 16), 0.0); }
    case 2: return make_double2(((const float*)p)[i], 0.0);
    case 3: return make_double2(((const double*)p)[i], 0.0);
    case 4: { float2 v = ((const float2*)p)[i]; return make_double2(v.x, v.y); }
    default: return ((const double2*)p)[i];
    }
}

__device__ void store_el(void* p, unsigned long long i, int t, double2 v) {
    switch (t) {
    case 0: { unsigned short h; float f = (float)v.x;
              asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); ((unsigned short*)p)[i] = h; break; }
    case 1: { unsigned short h; float f = (float)v.x;
              asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); ((unsigned short*)p)[i] = h; break; }
    case 2: ((float*)p)[i] = (float)v.x; break;
    case 3: ((double*)p)[i] = v.x; break;
    case 4: ((float2*)p)[i] = make_float2((float)v.x, (float)v.y); break;
    default: ((double2*)p)[i] = v; break;
    }
}

/* An epilog's activation by `activation_code`: 1 relu, 2 GELU's tanh form, else none. */
__device__ double activate(int act, double x) {
    if (act == 1) return x > 0.0 ? x : 0.0;
    if (act == 2) return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    return x;
}
"#;

/// The epilog kernel and a conjugating copy. Element types by code: 0 f16, 1 bf16, 2 f32,
/// 3 f64, 4 c64, 5 c128. Arithmetic is in f64 like the CPU backend's; f16 and bf16 are rounded
/// from f32 (the accumulator's type).
pub const KERNELS: &str = r#"
extern "C" __global__ void finish(const void* acc, int ct, void* out, int ot, void* pre,
                                  const void* c, double beta, const void* bias,
                                  const unsigned long long* index, int per_column,
                                  unsigned long long cols, int act, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        double2 v = load_el(acc, i, ct);
        if (c) { double2 x = load_el(c, i, ot); v.x += beta * x.x; v.y += beta * x.y; }
        if (bias) {
            double2 x = load_el(bias, index[per_column ? i % cols : i / cols], ot);
            v.x += x.x; v.y += x.y;
        }
        if (pre) store_el(pre, i, ct, v);
        v.x = activate(act, v.x);
        store_el(out, i, ot, v);
    }
}

extern "C" __global__ void conj_copy(const void* src, void* dst, int t, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        double2 v = load_el(src, i, t);
        v.y = -v.y;
        store_el(dst, i, t, v);
    }
}
"#;

/// The element-type code the kernels use (the init kernel's numbering; floats only).
pub fn code(dtype: DType) -> Result<i32> {
    match dtype {
        DType::F16 | DType::Bf16 | DType::F32 | DType::F64 | DType::C64 | DType::C128 => {
            Ok(super::fill::dtype_code(dtype) as i32)
        }
        other => Err(anyhow!("no GPU matmul kernel handles {other}")),
    }
}

/// The kernels' number for an epilog's activation (`activate` in [`ELEMENTS`]).
pub fn activation_code(epilog: Option<Epilog>) -> i32 {
    match epilog {
        Some(Epilog::Relu | Epilog::ReluBias) => 1,
        Some(Epilog::Gelu | Epilog::GeluBias) => 2,
        _ => 0,
    }
}

/// cuBLAS's view of one operand of `out^T = op(b)^T op(a)^T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operand {
    /// cuBLAS's operation on the stored (column-major) matrix.
    pub op: cublasOperation_t,
    /// Leading dimension of the stored matrix seen column-major.
    pub ld: usize,
    /// The operand must be conjugated into a copy first (cuBLAS has no conjugate without a
    /// transpose).
    pub conj_copy: bool,
}

/// How cuBLAS reads the matrix `op(x)^T` from `x`'s piece.
pub fn operand(v: View) -> Operand {
    // Column-major, an F piece is the stored matrix S and a C piece is S^T; op(x)^T is S^T when
    // op(x) = S, and S when op(x) = S^T.
    let transposed = (v.layout == Layout::F) != v.transpose;
    let ld = match v.layout {
        Layout::F => v.rows,
        Layout::C => v.cols,
    }
    .max(1);
    let op = match (transposed, v.conjugate) {
        (false, _) => cublasOperation_t::CUBLAS_OP_N,
        (true, false) => cublasOperation_t::CUBLAS_OP_T,
        (true, true) => cublasOperation_t::CUBLAS_OP_C,
    };
    Operand {
        op,
        ld,
        conj_copy: !transposed && v.conjugate,
    }
}

/// What a scalar (alpha, beta) is passed as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarKind {
    F32,
    F64,
    C32,
    C64,
}

/// The types of a GEMM in cuBLAS's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmTypes {
    /// a's and b's.
    pub data: cudaDataType,
    /// The result's.
    pub out: cudaDataType,
    /// The arithmetic's.
    pub compute: cublasComputeType_t,
    /// What alpha and beta are passed as.
    pub scalar: ScalarKind,
}

/// The GEMM's types for operands of `dtype` and a result of `out`.
pub fn types(dtype: DType, out: DType) -> Result<GemmTypes> {
    use cublasComputeType_t::*;
    use cudaDataType::*;
    let data = |t: DType| -> Result<cudaDataType> {
        Ok(match t {
            DType::F16 => CUDA_R_16F,
            DType::Bf16 => CUDA_R_16BF,
            DType::F32 => CUDA_R_32F,
            DType::F64 => CUDA_R_64F,
            DType::C64 => CUDA_C_32F,
            DType::C128 => CUDA_C_64F,
            other => return Err(anyhow!("no GPU matmul of {other}")),
        })
    };
    let (compute, scalar) = match dtype {
        DType::F16 | DType::Bf16 | DType::F32 => (CUBLAS_COMPUTE_32F, ScalarKind::F32),
        DType::F64 => (CUBLAS_COMPUTE_64F, ScalarKind::F64),
        DType::C64 => (CUBLAS_COMPUTE_32F, ScalarKind::C32),
        _ => (CUBLAS_COMPUTE_64F, ScalarKind::C64),
    };
    Ok(GemmTypes {
        data: data(dtype)?,
        out: data(out)?,
        compute,
        scalar,
    })
}

/// A scalar's bytes as cuBLAS reads it (host pointer mode).
pub fn scalar_bytes(kind: ScalarKind, v: (f64, f64)) -> Vec<u8> {
    match kind {
        ScalarKind::F32 => (v.0 as f32).to_le_bytes().to_vec(),
        ScalarKind::F64 => v.0.to_le_bytes().to_vec(),
        ScalarKind::C32 => [v.0 as f32, v.1 as f32]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        ScalarKind::C64 => [v.0, v.1].iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

fn blas_err(e: cublas::CublasError) -> anyhow::Error {
    anyhow!("cuBLAS: {e:?}")
}

impl Cuda<'_> {
    /// The cuBLAS handle, made on first use (a run without matmul never loads cuBLAS).
    fn blas(&self) -> Result<cublasHandle_t> {
        if let Some(h) = self.blas.get() {
            return Ok(*h.handle());
        }
        probe::require(&[probe::Lib::Cublas])?;
        // cudarc's handle, on this rank's stream, destroyed when the backend drops.
        let h = CudaBlas::new(self.stream.clone()).map_err(blas_err)?;
        Ok(*self.blas.get_or_init(|| h).handle())
    }

    /// The device address of an operand for cuBLAS: the piece, or a conjugated copy of it
    /// (kept alive in `keep`).
    fn operand_ptr(
        &self,
        piece: &DevBuf,
        o: &Operand,
        dtype: DType,
        keep: &mut Vec<DevBuf>,
    ) -> Result<u64> {
        if !o.conj_copy {
            return Ok(piece.data.device_ptr(&self.stream).0);
        }
        let mut copy = self.zeros(piece.len)?;
        let n = (piece.len / dtype.size() as usize) as u64;
        let (t, src) = (code(dtype)?, piece.data.device_ptr(&self.stream).0);
        let dst = copy.data.device_ptr_mut(&self.stream).0;
        let mut launch = self.stream.launch_builder(&self.kernels.conj_copy);
        launch.arg(&src).arg(&dst).arg(&t).arg(&n);
        // SAFETY: n elements in both buffers.
        unsafe { launch.launch(launch_config(n)) }?;
        keep.push(copy);
        Ok(dst)
    }

    /// The m x n block `out` (row-major, in the compute type or `dtype` itself) =
    /// `alpha * op(a) @ op(b)`.
    pub(super) fn gemm_on(
        &self,
        dtype: DType,
        a: (&DevBuf, View),
        b: (&DevBuf, View),
        alpha: (f64, f64),
        mut out: Out<'_, DevBuf>,
    ) -> Result<()> {
        let ((m, k), (kb, n)) = (a.1.dims(), b.1.dims());
        anyhow::ensure!(
            k == kb,
            "inner dimensions of the local pieces: {k} and {kb}"
        );
        if m == 0 || n == 0 {
            return Ok(());
        }
        let handle = self.blas()?;
        let types = types(dtype, out.dtype)?;
        let (oa, ob) = (operand(a.1), operand(b.1));
        let mut keep = Vec::new();
        let pa = self.operand_ptr(a.0, &oa, dtype, &mut keep)?;
        let pb = self.operand_ptr(b.0, &ob, dtype, &mut keep)?;
        let gemm = lt::Gemm {
            dims: lt::Dims { m, n, k },
            a: lt::Matrix { ptr: pa, view: oa },
            b: lt::Matrix { ptr: pb, view: ob },
            d: self.block(&mut out, m, n)?,
        };
        if let Some(fused) = &out.fused {
            anyhow::ensure!(
                !out.accumulate,
                "a GEMM with a fused epilog replaces its block"
            );
            let size = out.dtype.size() as usize;
            let bias = fused
                .bias
                .as_ref()
                .map(|(v, first)| v.data.device_ptr(&self.stream).0 + (first * size) as u64);
            return self.gemm_lt(&lt::Call {
                dtype,
                out: out.dtype,
                gemm,
                alpha: alpha.0 as f32,
                epilog: fused.epilog,
                bias,
            });
        }
        // Adding to the block: beta = 1.
        let beta = (f64::from(u8::from(out.accumulate)), 0.0);
        let scalars = [alpha, beta].map(|v| scalar_bytes(types.scalar, v));
        // SAFETY: the views describe the pieces; the block lies inside `out` (checked).
        unsafe { gemm_ex(handle, &types, &gemm, &scalars) }
    }

    /// The block of `out` an m x n product goes to, checked to lie inside its buffer.
    fn block(&self, out: &mut Out<'_, DevBuf>, m: usize, n: usize) -> Result<lt::Block> {
        let (ld, size) = (out.ld, out.dtype.size() as usize);
        anyhow::ensure!(
            ((out.at.0 + m - 1) * ld + out.at.1 + n) * size <= out.buf.len,
            "the GEMM's block lies outside its output"
        );
        let ptr = out.buf.data.device_ptr_mut(&self.stream).0
            + ((out.at.0 * ld + out.at.1) * size) as u64;
        Ok(lt::Block { ptr, ld })
    }

    /// The epilog on the GPU: `out` (in `dtype`) from `acc` (compute type) plus the addends,
    /// through the activation; the pre-activation values go to `pre` when given.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish_on(
        &self,
        dtype: DType,
        compute: DType,
        acc: &DevBuf,
        cols: usize,
        add: &Addends<'_, DevBuf>,
        epilog: Option<Epilog>,
        out: &mut DevBuf,
        pre: Option<&mut DevBuf>,
    ) -> Result<()> {
        let n = (acc.len / compute.size() as usize) as u64;
        if n == 0 {
            return Ok(());
        }
        let (ct, ot) = (code(compute)?, code(dtype)?);
        let ptr = |b: &DevBuf| b.data.device_ptr(&self.stream).0;
        let (c, beta) = add.c.map_or((0, 0.0), |(beta, c)| (ptr(c), beta));
        let (bias, index_ptr, per_column) = match &add.bias {
            Some(b) => (
                ptr(b.vector),
                self.device_table(b.index)?,
                i32::from(b.per == BiasPer::Column),
            ),
            None => (0, 0, 0),
        };
        let pre_ptr = match pre {
            Some(p) => {
                if p.len != acc.len {
                    *p = self.zeros(acc.len)?;
                }
                p.data.device_ptr_mut(&self.stream).0
            }
            None => 0,
        };
        let act = activation_code(epilog);
        let (src, dst, cols) = (
            ptr(acc),
            out.data.device_ptr_mut(&self.stream).0,
            cols.max(1) as u64,
        );
        let mut launch = self.stream.launch_builder(&self.kernels.finish);
        launch
            .arg(&src)
            .arg(&ct)
            .arg(&dst)
            .arg(&ot)
            .arg(&pre_ptr)
            .arg(&c)
            .arg(&beta)
            .arg(&bias)
            .arg(&index_ptr)
            .arg(&per_column)
            .arg(&cols)
            .arg(&act)
            .arg(&n);
        // SAFETY: n elements in acc, out, c and pre; the bias index has one entry per local row
        // (per column: per local column).
        unsafe { launch.launch(launch_config(n)) }?;
        Ok(())
    }
}

/// `d = alpha op(b)^T op(a)^T + beta d` through `cublasGemmEx` (`scalars`: alpha's and beta's
/// bytes, as [`scalar_bytes`] makes them).
///
/// # Safety
///
/// The matrices of `gemm` must hold what their views describe, on the handle's stream.
unsafe fn gemm_ex(
    handle: cublasHandle_t,
    types: &GemmTypes,
    gemm: &lt::Gemm,
    [alpha, beta]: &[Vec<u8>; 2],
) -> Result<()> {
    let lt::Gemm { dims, a, b, d } = gemm;
    // SAFETY: the caller vouches for the matrices; the scalars live through the call (host
    // pointer mode).
    unsafe {
        sys::cublasGemmEx_64(
            handle,
            b.view.op,
            a.view.op,
            dims.n as i64,
            dims.m as i64,
            dims.k as i64,
            alpha.as_ptr() as _,
            b.ptr as _,
            types.data,
            b.view.ld as i64,
            a.ptr as _,
            types.data,
            a.view.ld as i64,
            beta.as_ptr() as _,
            d.ptr as _,
            types.out,
            d.ld as i64,
            types.compute,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
        .result()
    }
    .map_err(blas_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cublasOperation_t::*;

    fn view(layout: Layout, transpose: bool, conjugate: bool) -> View {
        View {
            rows: 3,
            cols: 5,
            layout,
            transpose,
            conjugate,
        }
    }

    #[test]
    fn operands_read_the_stored_piece_with_the_right_leading_dimension() {
        // F piece 3x5 column-major: ld 3; op(x)^T is its transpose unless x is used transposed.
        assert_eq!(operand(view(Layout::F, false, false)).op, CUBLAS_OP_T);
        assert_eq!(operand(view(Layout::F, false, false)).ld, 3);
        assert_eq!(operand(view(Layout::F, true, false)).op, CUBLAS_OP_N);
        // C piece 3x5 row-major is 5x3 column-major: ld 5.
        assert_eq!(operand(view(Layout::C, false, false)).op, CUBLAS_OP_N);
        assert_eq!(operand(view(Layout::C, false, false)).ld, 5);
        assert_eq!(operand(view(Layout::C, true, true)).op, CUBLAS_OP_C);
    }

    #[test]
    fn conjugation_without_transpose_needs_a_copy() {
        let o = operand(view(Layout::C, false, true));
        assert_eq!((o.op, o.conj_copy), (CUBLAS_OP_N, true));
        assert!(!operand(view(Layout::F, false, true)).conj_copy);
    }

    #[test]
    fn half_types_accumulate_in_f32_and_may_write_themselves() {
        let t = types(DType::F16, DType::F32).unwrap();
        assert_eq!(t.data, cudaDataType::CUDA_R_16F);
        assert_eq!(t.out, cudaDataType::CUDA_R_32F);
        assert_eq!(t.compute, cublasComputeType_t::CUBLAS_COMPUTE_32F);
        assert_eq!(t.scalar, ScalarKind::F32);
        assert_eq!(
            types(DType::Bf16, DType::Bf16).unwrap().out,
            cudaDataType::CUDA_R_16BF
        );
        assert_eq!(
            types(DType::C128, DType::C128).unwrap().scalar,
            ScalarKind::C64
        );
        assert!(types(DType::I32, DType::I32).is_err());
        assert_eq!(scalar_bytes(ScalarKind::C32, (1.0, -2.0)).len(), 8);
    }
}
