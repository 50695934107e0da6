//! The checks' reductions on the GPU ([`crate::ops::checks`] has their host forms, which these
//! match): kernels that read a rank's buffers where they lie and leave a few scalars (or one
//! per row of a Freivalds product) to copy back, so that a check never downloads a tensor.
//! Compiled on the first check (a run without checks pays nothing for them), with `--fmad=false`
//! like the fill kernel: each product rounds as the host's does. Sums are compensated
//! (Neumaier's, as `ops::sum::Sum`) per thread and merged pairwise across a block; the blocks'
//! sums come back and merge on the host in block order, so a result depends on nothing but the
//! data and the launch shape.

use super::{Cuda, DevBuf, blas, fill};
use crate::init::IndexMap;
use crate::ops::checks::{Along, C, Dot, Gap, Lanes, Matrix, strided_dot_parts};
use crate::ops::sum::Sum;
use crate::spec::step::{Epilog, ReduceOp};
use crate::spec::tensor::{DType, Layout};
use anyhow::Result;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::CompileOptions;
use std::sync::Arc;

/// The check kernels (after the fill kernel's [`fill::COMMON`] and [`blas::ELEMENTS`]).
const KERNELS: &str = r#"
#define THREADS 256

/* Neumaier's step: (hi, lo) += x. */
__device__ void kadd(double& hi, double& lo, double x) {
    double t = hi + x;
    lo += fabs(hi) >= fabs(x) ? (hi - t) + x : (x - t) + hi;
    hi = t;
}

/* Merges every thread's (hi, lo) into thread 0's (all threads of the block call it). */
__device__ void block_sum(double& hi, double& lo, double* sh) {
    unsigned int t = threadIdx.x;
    sh[2 * t] = hi;
    sh[2 * t + 1] = lo;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            double h = sh[2 * t], l = sh[2 * t + 1];
            kadd(h, l, sh[2 * (t + s)]);
            kadd(h, l, sh[2 * (t + s) + 1]);
            sh[2 * t] = h;
            sh[2 * t + 1] = l;
        }
        __syncthreads();
    }
    hi = sh[0];
    lo = sh[1];
    __syncthreads();
}

/* The block's largest x and wrapping sum of y in thread 0 (all threads call it). */
__device__ void block_max_add(u64& x, u64& y, u64* sh) {
    unsigned int t = threadIdx.x;
    sh[2 * t] = x;
    sh[2 * t + 1] = y;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            u64 a = sh[2 * (t + s)];
            if (a > sh[2 * t]) sh[2 * t] = a;
            sh[2 * t + 1] += sh[2 * (t + s) + 1];
        }
        __syncthreads();
    }
    x = sh[0];
    y = sh[1];
    __syncthreads();
}

/* A non-negative double's bits order as the doubles do (NaN: taken as infinite). */
__device__ u64 order_bits(double x) {
    if (x != x) x = __longlong_as_double(0x7FF0000000000000LL);
    return (u64)__double_as_longlong(x);
}

__device__ double weight(const double* w, u64 nw, u64 stride, u64 k) {
    return nw == 1 ? w[0] : w[(k / stride) % nw];
}

/* Sums of the element hashes of a piece (or of zeros: data null) at their global indices plus
   shift: result[1] += the block's sum (ops::checks::element_hash). */
extern "C" __global__ void fingerprint(const unsigned char* data, u64 n, unsigned int size,
                                       const u64* table, unsigned int nd, u64 shift,
                                       u64* result) {
    __shared__ u64 sh[2 * THREADS];
    u64 sum = 0, none = 0;
    for (u64 k = blockIdx.x * (u64)blockDim.x + threadIdx.x; k < n;
         k += (u64)gridDim.x * blockDim.x) {
        u64 lo = 0, hi = 0;
        if (data) {
            switch (size) {
            case 1: lo = data[k]; break;
            case 2: lo = ((const unsigned short*)data)[k]; break;
            case 4: lo = ((const unsigned int*)data)[k]; break;
            case 8: lo = ((const u64*)data)[k]; break;
            default: lo = ((const u64*)data)[2 * k]; hi = ((const u64*)data)[2 * k + 1]; break;
            }
        }
        u64 g = global_index(table, nd, k) + shift;
        sum += splitmix((g * GOLDEN) ^ splitmix(lo + 0x2545F4914F6CDD1DULL)
                        ^ splitmix(hi + 0x6A09E667F3BCC909ULL));
    }
    block_max_add(none, sum, sh);
    if (threadIdx.x == 0) atomicAdd(&result[1], sum);
}

enum { SUM = 0, AVG = 1, PROD = 2, MIN = 3, MAX = 4 };

__device__ int is_signed(unsigned int t) { return t == I8 || t == I32 || t == I64; }

/* An integer element, sign-extended for the signed dtypes. */
__device__ u64 load_int(const unsigned char* p, u64 i, unsigned int t) {
    switch (t) {
    case I8: return (u64)(i64)((const signed char*)p)[i];
    case U8: return p[i];
    case I32: return (u64)(i64)((const int*)p)[i];
    case U32: return ((const unsigned int*)p)[i];
    default: return ((const u64*)p)[i];
    }
}

/* v wrapped into the dtype's range (sign-extended for the signed ones). */
__device__ u64 wrap_int(u64 v, unsigned int t) {
    switch (t) {
    case I8: return (u64)(i64)(signed char)v;
    case U8: return v & 0xFF;
    case I32: return (u64)(i64)(int)v;
    case U32: return v & 0xFFFFFFFFULL;
    default: return v;
    }
}

/* Whether the float element i of got has the bits of (re, im) rounded to its dtype. */
__device__ int same_bits(const unsigned char* got, u64 i, unsigned int t, double re, double im) {
    switch (t) {
    case F16: return ((const unsigned short*)got)[i] == round_half(re, 5, 10);
    case BF16: return ((const unsigned short*)got)[i] == round_half(re, 8, 7);
    case F32: return ((const unsigned int*)got)[i] == f32_bits(re);
    case F64: return ((const u64*)got)[i] == (u64)__double_as_longlong(re);
    case C64:
        return ((const unsigned int*)got)[2 * i] == f32_bits(re)
            && ((const unsigned int*)got)[2 * i + 1] == f32_bits(im);
    default:
        return ((const u64*)got)[2 * i] == (u64)__double_as_longlong(re)
            && ((const u64*)got)[2 * i + 1] == (u64)__double_as_longlong(im);
    }
}

/* ops::checks::reduction: got (n elements) against op over the ranks' rows of terms;
   result[0] = the largest error's bits (max), result[1] += elements out of tolerance. */
extern "C" __global__ void reduction(const unsigned char* terms, const unsigned char* got, u64 n,
                                     u64 ranks, unsigned int t, unsigned int op, int inexact,
                                     double eps, double tiny, u64* result) {
    __shared__ u64 sh[2 * THREADS];
    u64 worst = 0, fails = 0;
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < n;
         e += (u64)gridDim.x * blockDim.x) {
        double err = 0.0;
        int ok;
        if (t >= I8) {
            int sg = is_signed(t);
            u64 acc = op == PROD ? 1 : 0;
            for (u64 r = 0; r < ranks; r++) {
                u64 v = load_int(terms, r * n + e, t);
                if (r == 0 && (op == MIN || op == MAX)) { acc = v; continue; }
                switch (op) {
                case SUM: case AVG: acc += v; break;
                case PROD: acc *= v; break;
                case MIN: if (sg ? (i64)v < (i64)acc : v < acc) acc = v; break;
                default: if (sg ? (i64)v > (i64)acc : v > acc) acc = v; break;
                }
            }
            acc = wrap_int(acc, t);
            if (op == AVG) acc = sg ? (u64)((i64)acc / (i64)ranks) : acc / ranks;
            acc = wrap_int(acc, t);
            u64 g = load_int(got, e, t);
            ok = g == acc;
            if (!ok) err = sg ? fabs((double)(i64)g - (double)(i64)acc) : fabs((double)g - (double)acc);
        } else {
            double re, im, mag;
            if (op == PROD) { re = 1.0; im = 0.0; mag = 1.0; }
            else if (op == MIN) { re = __longlong_as_double(0x7FF0000000000000LL); im = 0.0; mag = 0.0; }
            else if (op == MAX) { re = __longlong_as_double((i64)0xFFF0000000000000ULL); im = 0.0; mag = 0.0; }
            else { re = 0.0; im = 0.0; mag = 0.0; }
            for (u64 r = 0; r < ranks; r++) {
                double2 v = load_el(terms, r * n + e, t);
                double a = hypot(v.x, v.y);
                switch (op) {
                case SUM: case AVG: re += v.x; im += v.y; mag += a; break;
                case PROD: { double x = re * v.x - im * v.y; im = re * v.y + im * v.x; re = x;
                             mag *= a; break; }
                case MIN: re = fmin(re, v.x); break;
                default: re = fmax(re, v.x); break;
                }
            }
            if (op == AVG) { re /= (double)ranks; im /= (double)ranks; mag /= (double)ranks; }
            if (same_bits(got, e, t, re, im)) {
                ok = 1;
            } else {
                double2 a = load_el(got, e, t);
                double diff = hypot(a.x - re, a.y - im);
                if (diff != diff) {
                    int both = a.x != a.x || a.y != a.y;
                    int expected = re != re || im != im;
                    ok = both && expected;
                    err = ok ? 0.0 : __longlong_as_double(0x7FF0000000000000LL);
                } else if (!inexact) {
                    ok = diff == 0.0;
                    err = diff;
                } else {
                    double tol = 2.0 * ((double)ranks + 1.0) * eps * mag + tiny;
                    ok = diff <= tol;
                    err = diff / fmax(mag, tiny);
                    if (err != err) err = 0.0;
                }
            }
        }
        if (!ok) fails++;
        u64 b = order_bits(err);
        if (b > worst) worst = b;
    }
    block_max_add(worst, fails, sh);
    if (threadIdx.x == 0) {
        atomicMax(&result[0], worst);
        atomicAdd(&result[1], fails);
    }
}

/* ops::checks::gap: result[0] = max |y - s x|, result[1] = max |s x| (bits), over the elements
   of weight above 0. */
extern "C" __global__ void gap(const unsigned char* x, const unsigned char* y, u64 n, int t,
                               double s, u64 stride, const double* w, u64 nw, u64* result) {
    __shared__ u64 sh[2 * THREADS];
    u64 diff = 0, size = 0;
    for (u64 k = blockIdx.x * (u64)blockDim.x + threadIdx.x; k < n;
         k += (u64)gridDim.x * blockDim.x) {
        if (weight(w, nw, stride, k) <= 0.0) continue;
        double2 a = load_el(x, k, t), b = load_el(y, k, t);
        double a0 = s * a.x, a1 = s * a.y;
        u64 d = order_bits(hypot(b.x - a0, b.y - a1)), z = order_bits(hypot(a0, a1));
        if (d > diff) diff = d;
        if (z > size) size = z;
    }
    /* Two maxima: the second through the sum slot would add, so one pass each. */
    u64 unused = 0;
    block_max_add(diff, unused, sh);
    block_max_add(size, unused, sh);
    if (threadIdx.x == 0) {
        atomicMax(&result[0], diff);
        atomicMax(&result[1], size);
    }
}

/* ops::checks::energy: the block's compensated sum of w |x|^2 in partial[2 block, +1]. */
extern "C" __global__ void energy(const unsigned char* x, u64 n, int t, u64 stride,
                                  const double* w, u64 nw, double* partial) {
    __shared__ double sh[2 * THREADS];
    double hi = 0.0, lo = 0.0;
    for (u64 k = blockIdx.x * (u64)blockDim.x + threadIdx.x; k < n;
         k += (u64)gridDim.x * blockDim.x) {
        double2 v = load_el(x, k, t);
        kadd(hi, lo, weight(w, nw, stride, k) * (v.x * v.x + v.y * v.y));
    }
    block_sum(hi, lo, sh);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = hi;
        partial[2 * blockIdx.x + 1] = lo;
    }
}

/* One dot's terms (ops::checks::Dot::add) into s[0..6] = re (hi, lo), im (hi, lo), abs (hi, lo). */
__device__ void dot_add(double* s, double2 v, double2 x, double w) {
    kadd(s[0], s[1], v.x * x.x - v.y * x.y);
    kadd(s[2], s[3], v.x * x.y + v.y * x.x);
    kadd(s[4], s[5], hypot(v.x, v.y) * w);
}

/* ops::checks::dots where the summed axis is contiguous: output o's elements are
   o * len .. o * len + len; one block per output, out[6 o ..] its dot. */
extern "C" __global__ void dots_contiguous(const unsigned char* v, int t, u64 outs, u64 len,
                                           const double2* x, const double* w, double* out) {
    __shared__ double sh[2 * THREADS];
    for (u64 o = blockIdx.x; o < outs; o += gridDim.x) {
        double s[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        for (u64 j = threadIdx.x; j < len; j += blockDim.x)
            dot_add(s, load_el(v, o * len + j, t), x[j], w[j]);
        for (int q = 0; q < 3; q++) block_sum(s[2 * q], s[2 * q + 1], sh);
        if (threadIdx.x == 0)
            for (int q = 0; q < 6; q++) out[6 * o + q] = s[q];
    }
}

/* ops::checks::dots where the outputs are contiguous: element (o, j) at j * outs + o; thread
   per output, blocks along y take stretches of `step` along j, partial[6 (y outs + o) ..]. */
extern "C" __global__ void dots_strided(const unsigned char* v, int t, u64 outs, u64 len,
                                        const double2* x, const double* w, u64 step,
                                        double* partial) {
    u64 o = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    if (o >= outs) return;
    double s[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    u64 lo = blockIdx.y * step, hi = lo + step < len ? lo + step : len;
    for (u64 j = lo; j < hi; j++) dot_add(s, load_el(v, j * outs + o, t), x[j], w[j]);
    double* p = partial + 6 * (blockIdx.y * outs + o);
    for (int q = 0; q < 6; q++) p[q] = s[q];
}

/* Merges dots_strided's `parts` stretches per output, in order, into out[6 o ..]. */
extern "C" __global__ void dots_merge(const double* partial, u64 outs, u64 parts, double* out) {
    u64 o = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    if (o >= outs) return;
    double s[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (u64 c = 0; c < parts; c++) {
        const double* p = partial + 6 * (c * outs + o);
        for (int q = 0; q < 3; q++) {
            kadd(s[2 * q], s[2 * q + 1], p[2 * q]);
            kadd(s[2 * q], s[2 * q + 1], p[2 * q + 1]);
        }
    }
    for (int q = 0; q < 6; q++) out[6 * o + q] = s[q];
}

/* ops::checks::activation: result[1] += elements of out that are not the activation of pre
   within the rounding of both. */
extern "C" __global__ void activation(const unsigned char* out, int ot, const unsigned char* pre,
                                      int pt, u64 n, int act, double eps_o, double eps_p,
                                      double floor, u64* result) {
    __shared__ u64 sh[2 * THREADS];
    u64 none = 0, fails = 0;
    for (u64 k = blockIdx.x * (u64)blockDim.x + threadIdx.x; k < n;
         k += (u64)gridDim.x * blockDim.x) {
        double g = load_el(out, k, ot).x, p = load_el(pre, k, pt).x;
        double a = activate(act, p);
        double moved = fmax(fabs(activate(act, p * (1.0 + eps_p)) - a),
                            fabs(activate(act, p * (1.0 - eps_p)) - a));
        if (!(fabs(g - a) <= 2.0 * eps_o * fmax(fabs(a), 1e-30) + 2.0 * moved + floor)) fails++;
    }
    block_max_add(none, fails, sh);
    if (threadIdx.x == 0) atomicAdd(&result[1], fails);
}
"#;

/// Threads per block (the kernels' `THREADS`).
const THREADS: u32 = 256;
/// At most this many blocks for the element-wise reductions (their loops stride over the rest;
/// the plan counts their partial sums: `checks::lanes_scratch`).
const BLOCKS: u64 = crate::ops::checks::REDUCTION_BLOCKS;

/// The check kernels, compiled and loaded for one context.
pub struct CheckKernels {
    fingerprint: CudaFunction,
    reduction: CudaFunction,
    gap: CudaFunction,
    energy: CudaFunction,
    dots_contiguous: CudaFunction,
    dots_strided: CudaFunction,
    dots_merge: CudaFunction,
    activation: CudaFunction,
}

impl CheckKernels {
    /// The check kernels' source and NVRTC options (the architecture left to `load_module`).
    pub(super) fn module() -> (String, CompileOptions) {
        let opts = CompileOptions {
            fmad: Some(false),
            name: Some("distrun_check.cu".into()),
            ..Default::default()
        };
        ([fill::COMMON, blas::ELEMENTS, KERNELS].concat(), opts)
    }

    fn compile(ctx: &Arc<CudaContext>) -> Result<Self> {
        let (source, opts) = Self::module();
        let m = super::load_module(ctx, source, opts, "check kernels")?;
        Ok(CheckKernels {
            fingerprint: m.load_function("fingerprint")?,
            reduction: m.load_function("reduction")?,
            gap: m.load_function("gap")?,
            energy: m.load_function("energy")?,
            dots_contiguous: m.load_function("dots_contiguous")?,
            dots_strided: m.load_function("dots_strided")?,
            dots_merge: m.load_function("dots_merge")?,
            activation: m.load_function("activation")?,
        })
    }
}

/// A launch of [`THREADS`]-thread blocks over `n` elements, at most [`BLOCKS`] of them.
fn over(n: u64) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(u64::from(THREADS)).clamp(1, BLOCKS) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The kernels' number for a reduce op.
fn op_code(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Avg => 1,
        ReduceOp::Prod => 2,
        ReduceOp::Min => 3,
        ReduceOp::Max => 4,
    }
}

impl Cuda<'_> {
    /// The check kernels, compiled on first use.
    fn checks(&self) -> Result<&CheckKernels> {
        if let Some(k) = self.checks.get() {
            return Ok(k);
        }
        let k = CheckKernels::compile(self.stream.context())?;
        Ok(self.checks.get_or_init(|| k))
    }

    /// A small result, copied back once the kernels before it are done.
    fn fetch<T: cudarc::driver::DeviceRepr>(&self, s: &CudaSlice<T>) -> Result<Vec<T>> {
        let v = self.stream.clone_dtoh(s)?;
        self.stream.synchronize()?;
        Ok(v)
    }

    /// A two-word result, zeroed, for the kernels' atomics.
    fn words(&self) -> Result<CudaSlice<u64>> {
        Ok(self.stream.alloc_zeros::<u64>(2)?)
    }

    /// The lanes' weights on the GPU, with their count and stride.
    fn lanes(&self, lanes: &Lanes) -> Result<(CudaSlice<f64>, u64, u64)> {
        let w = self.stream.clone_htod(&lanes.weights)?;
        Ok((w, lanes.weights.len() as u64, lanes.stride.max(1)))
    }

    pub(super) fn check_fingerprint(
        &self,
        dtype: DType,
        buf: Option<&DevBuf>,
        map: &IndexMap,
        shift: u64,
    ) -> Result<u64> {
        let n = map.len();
        if n == 0 {
            return Ok(0);
        }
        let k = self.checks()?;
        let table = self.stream.clone_htod(&fill::table(map))?;
        let (data, size, nd) = (
            buf.map_or(0, |b| self.ptr(b)),
            dtype.size() as u32,
            map.order().len() as u32,
        );
        let mut out = self.words()?;
        let mut launch = self.stream.launch_builder(&k.fingerprint);
        launch
            .arg(&data)
            .arg(&n)
            .arg(&size)
            .arg(&table)
            .arg(&nd)
            .arg(&shift)
            .arg(&mut out);
        // SAFETY: the argument types match the kernel's; it reads n elements of `size` bytes of
        // the piece `map` describes and the table `fill::table` packed.
        unsafe { launch.launch(over(n)) }?;
        Ok(self.fetch(&out)?[1])
    }

    pub(super) fn check_reduction(
        &self,
        op: ReduceOp,
        dtype: DType,
        ranks: u64,
        terms: &DevBuf,
        got: &DevBuf,
    ) -> Result<(bool, f64)> {
        let n = (got.len / dtype.size() as usize) as u64;
        if n == 0 {
            return Ok((true, 0.0));
        }
        let k = self.checks()?;
        let (t, op_n) = (fill::dtype_code(dtype), op_code(op));
        let inexact = i32::from(
            dtype.is_float() && matches!(op, ReduceOp::Sum | ReduceOp::Avg | ReduceOp::Prod),
        );
        let (eps, tiny) = (dtype.epsilon(), 4.0 * crate::ops::checks::subnormal(dtype));
        let (pt, pg) = (self.ptr(terms), self.ptr(got));
        let mut out = self.words()?;
        let mut launch = self.stream.launch_builder(&k.reduction);
        launch
            .arg(&pt)
            .arg(&pg)
            .arg(&n)
            .arg(&ranks)
            .arg(&t)
            .arg(&op_n)
            .arg(&inexact)
            .arg(&eps)
            .arg(&tiny)
            .arg(&mut out);
        // SAFETY: terms holds `ranks` rows of n elements and got n, of `dtype`.
        unsafe { launch.launch(over(n)) }?;
        let r = self.fetch(&out)?;
        Ok((r[1] == 0, f64::from_bits(r[0])))
    }

    pub(super) fn check_gap(
        &self,
        dtype: DType,
        x: &DevBuf,
        y: &DevBuf,
        s: f64,
        lanes: &Lanes,
    ) -> Result<Gap> {
        let n = (x.len / dtype.size() as usize) as u64;
        if n == 0 {
            return Ok(Gap::default());
        }
        let k = self.checks()?;
        let t = blas::code(dtype)?;
        let (w, nw, stride) = self.lanes(lanes)?;
        let (px, py) = (self.ptr(x), self.ptr(y));
        let mut out = self.words()?;
        let mut launch = self.stream.launch_builder(&k.gap);
        launch
            .arg(&px)
            .arg(&py)
            .arg(&n)
            .arg(&t)
            .arg(&s)
            .arg(&stride)
            .arg(&w)
            .arg(&nw)
            .arg(&mut out);
        // SAFETY: x and y hold n elements of `dtype`; w holds nw weights.
        unsafe { launch.launch(over(n)) }?;
        let r = self.fetch(&out)?;
        Ok(Gap {
            diff: f64::from_bits(r[0]),
            size: f64::from_bits(r[1]),
        })
    }

    pub(super) fn check_energy(&self, dtype: DType, x: &DevBuf, lanes: &Lanes) -> Result<Sum> {
        let n = (x.len / dtype.size() as usize) as u64;
        if n == 0 {
            return Ok(Sum::default());
        }
        let k = self.checks()?;
        let t = blas::code(dtype)?;
        let (w, nw, stride) = self.lanes(lanes)?;
        let cfg = over(n);
        let mut partial = self
            .stream
            .alloc_zeros::<f64>(2 * cfg.grid_dim.0 as usize)?;
        let px = self.ptr(x);
        let mut launch = self.stream.launch_builder(&k.energy);
        launch
            .arg(&px)
            .arg(&n)
            .arg(&t)
            .arg(&stride)
            .arg(&w)
            .arg(&nw)
            .arg(&mut partial);
        // SAFETY: x holds n elements of `dtype`; partial two doubles per block.
        unsafe { launch.launch(cfg) }?;
        Ok(self
            .stream
            .clone_dtoh(&partial)?
            .chunks_exact(2)
            .fold(Sum::default(), |s, p| s.merge(Sum::from_parts(p[0], p[1]))))
    }

    pub(super) fn check_dots(
        &self,
        dtype: DType,
        v: &DevBuf,
        m: &Matrix,
        along: Along,
        x: &[C],
        w: &[f64],
    ) -> Result<Vec<Dot>> {
        let (outs, len) = match along {
            Along::Rows => (m.cols, m.rows),
            Along::Cols => (m.rows, m.cols),
        };
        if outs == 0 {
            return Ok(Vec::new());
        }
        if len == 0 {
            return Ok(vec![Dot::default(); outs]);
        }
        let k = self.checks()?;
        let t = blas::code(dtype)?;
        let flat: Vec<f64> = x.iter().flat_map(|&(re, im)| [re, im]).collect();
        let (dx, dw) = (self.stream.clone_htod(&flat)?, self.stream.clone_htod(w)?);
        let mut out = self.stream.alloc_zeros::<f64>(6 * outs)?;
        let pv = self.ptr(v);
        let (o64, l64) = (outs as u64, len as u64);
        let contiguous = matches!(
            (along, m.layout),
            (Along::Cols, Layout::C) | (Along::Rows, Layout::F)
        );
        if contiguous {
            let mut launch = self.stream.launch_builder(&k.dots_contiguous);
            launch
                .arg(&pv)
                .arg(&t)
                .arg(&o64)
                .arg(&l64)
                .arg(&dx)
                .arg(&dw)
                .arg(&mut out);
            let cfg = LaunchConfig {
                grid_dim: (outs.clamp(1, 65535) as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: v holds outs x len elements of `dtype`, x and w len entries, out 6 outs.
            unsafe { launch.launch(cfg) }?;
        } else {
            let (step, parts) = strided_dot_parts(outs, len);
            let mut partial = self.stream.alloc_zeros::<f64>(6 * outs * parts)?;
            let s64 = step as u64;
            let mut launch = self.stream.launch_builder(&k.dots_strided);
            launch
                .arg(&pv)
                .arg(&t)
                .arg(&o64)
                .arg(&l64)
                .arg(&dx)
                .arg(&dw)
                .arg(&s64)
                .arg(&mut partial);
            let blocks = outs.div_ceil(THREADS as usize) as u32;
            let cfg = LaunchConfig {
                grid_dim: (blocks, parts as u32, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: as above; partial holds 6 doubles per output and stretch.
            unsafe { launch.launch(cfg) }?;
            let p64 = parts as u64;
            let mut merge = self.stream.launch_builder(&k.dots_merge);
            merge.arg(&partial).arg(&o64).arg(&p64).arg(&mut out);
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: partial as written above; out 6 doubles per output.
            unsafe { merge.launch(cfg) }?;
        }
        Ok(self
            .stream
            .clone_dtoh(&out)?
            .chunks_exact(6)
            .map(|s| Dot {
                re: Sum::from_parts(s[0], s[1]),
                im: Sum::from_parts(s[2], s[3]),
                abs: Sum::from_parts(s[4], s[5]),
            })
            .collect())
    }

    pub(super) fn check_activation(
        &self,
        epilog: Option<Epilog>,
        (od, out): (DType, &DevBuf),
        (pd, pre): (DType, &DevBuf),
    ) -> Result<bool> {
        let n = (out.len / od.size() as usize) as u64;
        if n == 0 {
            return Ok(true);
        }
        let k = self.checks()?;
        let (ot, pt) = (blas::code(od)?, blas::code(pd)?);
        let act = blas::activation_code(epilog);
        let (eps_o, eps_p) = (od.epsilon().max(pd.epsilon()), pd.epsilon());
        let floor = crate::ops::checks::subnormal(od).max(1e-30);
        let (po, pp) = (self.ptr(out), self.ptr(pre));
        let mut res = self.words()?;
        let mut launch = self.stream.launch_builder(&k.activation);
        launch
            .arg(&po)
            .arg(&ot)
            .arg(&pp)
            .arg(&pt)
            .arg(&n)
            .arg(&act)
            .arg(&eps_o)
            .arg(&eps_p)
            .arg(&floor)
            .arg(&mut res);
        // SAFETY: out and pre hold n elements of their dtypes.
        unsafe { launch.launch(over(n)) }?;
        Ok(self.fetch(&res)?[1] == 0)
    }
}
