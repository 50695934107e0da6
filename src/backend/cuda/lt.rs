//! GEMMs with a fused epilog through cuBLASLt: the bias and the activation (ReLU, or GELU in its
//! tanh form, as the CPU backend computes it) applied as the product is written, in the
//! accumulator's f32, instead of a pass of the epilog kernel over an f32 accumulator.
//!
//! Offered for f16, bf16 and f32 pieces. cuBLASLt adds a bias per row of its column-major
//! result, which is a column of the row-major block the pipeline asks for (see blas.rs): a
//! result stored in Fortran order, whose block is the transposed result.

use super::blas::Operand;
use super::{Cuda, probe};
use crate::spec::step::Epilog;
use crate::spec::tensor::DType;
use anyhow::{Result, anyhow};
use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::CudaSlice;
use std::ffi::c_void;

/// Workspace bytes (NVIDIA's recommendation for Hopper).
const WORKSPACE: usize = 32 << 20;

/// The dtypes whose GEMMs take a fused epilog.
pub fn fusable(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::Bf16 | DType::F32)
}

/// cuBLASLt's name for a fusable dtype.
fn data_type(dtype: DType) -> Result<sys::cudaDataType> {
    use sys::cudaDataType::*;
    Ok(match dtype {
        DType::F16 => CUDA_R_16F,
        DType::Bf16 => CUDA_R_16BF,
        DType::F32 => CUDA_R_32F,
        other => return Err(anyhow!("cuBLASLt fuses no epilog into GEMMs of {other}")),
    })
}

/// cuBLASLt's epilogue for a spec's epilog.
pub fn epilogue(epilog: Epilog) -> sys::cublasLtEpilogue_t {
    use sys::cublasLtEpilogue_t::*;
    match epilog {
        Epilog::Relu => CUBLASLT_EPILOGUE_RELU,
        Epilog::Gelu => CUBLASLT_EPILOGUE_GELU,
        Epilog::Bias => CUBLASLT_EPILOGUE_BIAS,
        Epilog::ReluBias => CUBLASLT_EPILOGUE_RELU_BIAS,
        Epilog::GeluBias => CUBLASLT_EPILOGUE_GELU_BIAS,
    }
}

/// A cuBLASLt handle and its workspace.
pub struct Lt {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
}

impl Drop for Lt {
    fn drop(&mut self) {
        // SAFETY: the handle this module created, destroyed once.
        unsafe {
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

fn lt_err(e: lt::CublasError) -> anyhow::Error {
    anyhow!("cuBLASLt: {e:?}")
}

/// Destroys a cuBLASLt descriptor when dropped.
struct Guard<T: Copy>(T, unsafe fn(T) -> Result<(), lt::CublasError>);

impl<T: Copy> Drop for Guard<T> {
    fn drop(&mut self) {
        // SAFETY: the descriptor was created by this module and is destroyed once.
        unsafe {
            let _ = (self.1)(self.0);
        }
    }
}

/// A matrix layout: `rows x cols` column-major with leading dimension `ld`.
fn layout(
    t: sys::cudaDataType,
    rows: usize,
    cols: usize,
    ld: usize,
) -> Result<Guard<sys::cublasLtMatrixLayout_t>> {
    let l = lt::create_matrix_layout(t, rows as u64, cols as u64, ld as i64).map_err(lt_err)?;
    Ok(Guard(l, lt::destroy_matrix_layout))
}

/// A cuBLASLt attribute setter: a matmul descriptor's or a preference's.
type Setter<H, A> = unsafe fn(H, A, *const c_void, usize) -> Result<(), lt::CublasError>;

/// Sets attribute `attr` of `handle` to `value` through `setter`.
fn set<H, A, V>(setter: Setter<H, A>, handle: H, attr: A, value: &V) -> Result<()> {
    // SAFETY: `value` is the attribute's type and lives through the call.
    unsafe {
        setter(
            handle,
            attr,
            value as *const V as *const c_void,
            std::mem::size_of::<V>(),
        )
    }
    .map_err(lt_err)
}

/// One fused GEMM, in cuBLAS's column-major terms: `d` (n x m) =
/// `epilogue(alpha * op(b) op(a) + bias)`, the operands as `blas::operand` describes them.
pub struct Call {
    /// The operands' dtype.
    pub dtype: DType,
    /// The result's dtype.
    pub out: DType,
    /// The product's dimensions and matrices.
    pub gemm: Gemm,
    pub alpha: f32,
    pub epilog: Epilog,
    /// The bias's device address (its first entry for this block).
    pub bias: Option<u64>,
}

/// The matrices of one GEMM, the row-major block `out = op(a) op(b)`.
#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    /// The dimensions.
    pub dims: Dims,
    /// a's piece.
    pub a: Matrix,
    /// b's piece.
    pub b: Matrix,
    /// The result's block.
    pub d: Block,
}

/// The dimensions of a product: m x k times k x n.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

/// An operand's piece: its device address and how cuBLAS reads it.
#[derive(Debug, Clone, Copy)]
pub struct Matrix {
    pub ptr: u64,
    pub view: Operand,
}

/// A block of the result: its device address and leading dimension.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    pub ptr: u64,
    pub ld: usize,
}

/// The descriptor of the fused GEMM: f32 compute, the operands' ops (matrix A is b's piece,
/// B a's) and the epilogue.
fn matmul_desc(call: &Call) -> Result<Guard<sys::cublasLtMatmulDesc_t>> {
    let desc = lt::create_matmul_desc(
        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        sys::cudaDataType::CUDA_R_32F,
    )
    .map_err(lt_err)?;
    let desc = Guard(desc, lt::destroy_matmul_desc);
    use sys::cublasLtMatmulDescAttributes_t::*;
    let attrs = [
        (CUBLASLT_MATMUL_DESC_TRANSA, call.gemm.b.view.op as i32),
        (CUBLASLT_MATMUL_DESC_TRANSB, call.gemm.a.view.op as i32),
    ];
    for (attr, op) in attrs {
        set(lt::set_matmul_desc_attribute, desc.0, attr, &op)?;
    }
    set(
        lt::set_matmul_desc_attribute,
        desc.0,
        CUBLASLT_MATMUL_DESC_EPILOGUE,
        &epilogue(call.epilog),
    )?;
    Ok(desc)
}

/// The layouts of the fused GEMM: matrix A (b's piece, n x k after its op), B (a's, k x m) and
/// the result (n x m), which is also C.
struct Layouts {
    a: Guard<sys::cublasLtMatrixLayout_t>,
    b: Guard<sys::cublasLtMatrixLayout_t>,
    d: Guard<sys::cublasLtMatrixLayout_t>,
}

impl Layouts {
    /// The layouts of `call`: operands of type `ab`, the result of type `ct`.
    fn of(call: &Call, ab: sys::cudaDataType, ct: sys::cudaDataType) -> Result<Self> {
        let Dims { m, n, k } = call.gemm.dims;
        Ok(Layouts {
            a: stored_layout(ab, &call.gemm.b.view, n, k)?,
            b: stored_layout(ab, &call.gemm.a.view, k, m)?,
            d: layout(ct, n, m, call.gemm.d.ld)?,
        })
    }
}

/// The layout of an operand whose op makes it `rows x cols`, as it is stored (transposed where
/// the op transposes).
fn stored_layout(
    t: sys::cudaDataType,
    o: &Operand,
    rows: usize,
    cols: usize,
) -> Result<Guard<sys::cublasLtMatrixLayout_t>> {
    if o.op == cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N {
        layout(t, rows, cols, o.ld)
    } else {
        layout(t, cols, rows, o.ld)
    }
}

/// The heuristic's preferences: the workspace, and each matrix's alignment as its address
/// allows (it assumes 256 bytes unless told otherwise; a block of the result, or an operand's
/// piece in a buffer, may start anywhere on an element).
fn preference(call: &Call) -> Result<Guard<sys::cublasLtMatmulPreference_t>> {
    let pref = Guard(
        lt::create_matmul_pref().map_err(lt_err)?,
        lt::destroy_matmul_pref,
    );
    use sys::cublasLtMatmulPreferenceAttributes_t::*;
    set(
        lt::set_matmul_pref_attribute,
        pref.0,
        CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        &(WORKSPACE as u64),
    )?;
    let align = |p: u64| (1u32 << p.trailing_zeros().min(8)).max(1);
    let alignments = [
        (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, call.gemm.b.ptr),
        (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, call.gemm.a.ptr),
        (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, call.gemm.d.ptr),
        (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, call.gemm.d.ptr),
    ];
    for (attr, ptr) in alignments {
        set(lt::set_matmul_pref_attribute, pref.0, attr, &align(ptr))?;
    }
    Ok(pref)
}

impl Cuda<'_> {
    /// The cuBLASLt handle, made on first use.
    fn lt(&self) -> Result<&Lt> {
        if let Some(h) = self.lt.get() {
            return Ok(h);
        }
        probe::require(&[probe::Lib::Cublaslt])?;
        let handle = lt::create_handle().map_err(lt_err)?;
        // SAFETY: the workspace is only cuBLASLt's scratch.
        let workspace = unsafe { self.stream.alloc::<u8>(WORKSPACE) }?;
        Ok(self.lt.get_or_init(|| Lt { handle, workspace }))
    }

    /// Whether this GPU fuses `epilog` into GEMMs of `dtype`: cuBLASLt loads and the dtype is
    /// one it fuses.
    pub(super) fn lt_fuses(&self, dtype: DType) -> bool {
        fusable(dtype) && probe::require(&[probe::Lib::Cublaslt]).is_ok()
    }

    /// Runs `call` on the rank's stream.
    pub(super) fn gemm_lt(&self, call: &Call) -> Result<()> {
        use cudarc::driver::DevicePtr;
        let lt_handle = self.lt()?;
        let (ab, ct) = (data_type(call.dtype)?, data_type(call.out)?);
        let desc = matmul_desc(call)?;
        let aligned = self.set_bias(call, &desc)?;
        let layouts = Layouts::of(call, ab, ct)?;
        let pref = preference(call)?;
        let (la, lb, ld) = (layouts.a.0, layouts.b.0, layouts.d.0);
        // SAFETY: descriptors made above.
        let heuristic = unsafe {
            lt::get_matmul_algo_heuristic(lt_handle.handle, desc.0, la, lb, ld, ld, pref.0)
        }
        .map_err(lt_err)?;
        let (alpha, beta) = (call.alpha, 0.0f32);
        let w = lt_handle.workspace.device_ptr(&self.stream).0;
        // SAFETY: the operands and the result hold the matrices their layouts describe (the
        // caller checked the block lies in its buffer); the scalars live through the call.
        unsafe {
            lt::matmul(
                lt_handle.handle,
                desc.0,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                call.gemm.b.ptr as *const c_void,
                la,
                call.gemm.a.ptr as *const c_void,
                lb,
                call.gemm.d.ptr as *const c_void,
                ld,
                call.gemm.d.ptr as *mut c_void,
                ld,
                &heuristic.algo,
                w as *mut c_void,
                WORKSPACE,
                self.stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(lt_err)?;
        // The aligned bias (if any) is freed in stream order, after the GEMM.
        drop(aligned);
        Ok(())
    }

    /// Points `desc` at the bias's stretch for this block, copied where it starts on 16 bytes
    /// when it does not (a block's first row can start anywhere in the vector): the copy, which
    /// must live until the GEMM is queued.
    fn set_bias(
        &self,
        call: &Call,
        desc: &Guard<sys::cublasLtMatmulDesc_t>,
    ) -> Result<Option<CudaSlice<u8>>> {
        use cudarc::driver::DevicePtrMut;
        let Some(bias) = call.bias else {
            return Ok(None);
        };
        let mut aligned = None;
        let at = if bias % 16 == 0 {
            bias
        } else {
            let bytes = call.gemm.dims.n * call.out.size() as usize;
            // SAFETY: written by the copy below before the GEMM reads it.
            let mut copy = unsafe { self.stream.alloc::<u8>(bytes) }?;
            let dst = copy.device_ptr_mut(&self.stream).0;
            // SAFETY: the block's n entries lie in the bias vector (the caller's); the copy
            // holds n entries; both on this stream.
            unsafe {
                cudarc::driver::result::memcpy_dtod_async(dst, bias, bytes, self.stream.cu_stream())
            }?;
            aligned = Some(copy);
            dst
        };
        set(
            lt::set_matmul_desc_attribute,
            desc.0,
            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
            &(at as *const c_void),
        )?;
        Ok(aligned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_epilog_has_its_cublaslt_epilogue() {
        use sys::cublasLtEpilogue_t::*;
        let pairs = [
            (Epilog::Relu, CUBLASLT_EPILOGUE_RELU),
            (Epilog::Gelu, CUBLASLT_EPILOGUE_GELU),
            (Epilog::Bias, CUBLASLT_EPILOGUE_BIAS),
            (Epilog::ReluBias, CUBLASLT_EPILOGUE_RELU_BIAS),
            (Epilog::GeluBias, CUBLASLT_EPILOGUE_GELU_BIAS),
        ];
        for (e, want) in pairs {
            assert_eq!(epilogue(e), want, "{e:?}");
            assert_eq!(e.needs_bias(), want as u32 & 4 != 0, "{e:?}: the bias bit");
        }
    }

    #[test]
    fn only_real_single_and_half_precision_fuse() {
        let fused: Vec<DType> = DType::ALL.into_iter().filter(|&d| fusable(d)).collect();
        assert_eq!(fused, [DType::F16, DType::Bf16, DType::F32]);
    }
}
