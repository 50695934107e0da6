//! Generated inits computed on the GPU: an NVRTC kernel that gives every element of a rank's
//! piece the bytes [`init::generate`](crate::init::generate) gives it on the host (the
//! generator is specified in the [init docs](crate::init)).
//!
//! The host packs the piece's [`IndexMap`] into one table of u64 (see [`table`]): per local axis,
//! fastest varying first (so the layout is in the order of the axes), its extent and where its
//! terms start, then per axis the term `coords[a][j] * strides[a]` of each local coordinate `j`
//! (or, for consecutive coordinates, the first term and the stride).
//! One thread per element (grid-stride loop) unravels its local offset over the axes, sums the
//! terms into the C-order global index `i`, computes the value in f64 exactly as
//! `init::Generator::value` does (separately rounded `__dadd_rn`/`__dmul_rn`/`__ddiv_rn`/
//! `__dsqrt_rn`, and the program is compiled with `--fmad=false`; normal's `log` and `cos` are
//! [`init::fdlibm`](crate::init::fdlibm)'s, ported operation for operation, not CUDA's), and
//! stores it as `init::encode` does: f16/bf16 rounded once from f64 to nearest even (a port of
//! `scalar::round_f64`), f32 by `__double2float_rn` (a NaN keeps its sign and top payload bits,
//! as on the host), integers truncated and saturated (NaN to 0), complex as `[re, im]`.
//! Constants skip the index.
//!
//! Bit for bit with the host for every generated init. (Specs admit only finite parameters; a
//! NaN that arithmetic makes from infinite ones could differ in its sign or payload bits.)

use crate::init::{Coords, GenKind, Generator, IndexMap};
use crate::spec::tensor::DType;
use anyhow::{Result, anyhow};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::CompileOptions;
use std::sync::{Arc, Mutex};

/// What the fill kernel shares with the check kernels: the dtype numbers, splitmix, the global
/// index of a local offset from [`table`]'s table, and the one-step roundings of `init::encode`.
pub(super) const COMMON: &str = r#"
typedef unsigned long long u64;
typedef long long i64;

#define GOLDEN 0x9E3779B97F4A7C15ULL
/* Marks an axis whose terms are first + j * stride (two words) rather than listed. */
#define RANGE 0x8000000000000000ULL

enum { CONSTANT = 0, ARANGE = 1, UNIFORM = 2, NORMAL = 3 };
enum { F16 = 0, BF16 = 1, F32 = 2, F64 = 3, C64 = 4, C128 = 5,
       I8 = 6, U8 = 7, I32 = 8, U32 = 9, I64 = 10, U64 = 11 };

__device__ u64 splitmix(u64 x) {
    u64 z = x + GOLDEN;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The C-order global index of local offset k of a piece whose table `table` packs (see
   `table`): nd extents, nd term offsets, then the terms. */
__device__ u64 global_index(const u64* table, unsigned int nd, u64 k) {
    u64 i = 0;
    for (unsigned int ax = 0; ax < nd; ax++) {
        u64 ext = table[ax];
        u64 j = k % ext;
        k /= ext;
        u64 at = table[nd + ax];
        if (at & RANGE) {
            at &= ~RANGE;
            i += table[at] + j * table[at + 1];
        } else {
            i += table[at + j];
        }
    }
    return i;
}

/* Round to nearest even into eb exponent and mb mantissa bits (f16: 5, 10; bf16: 8, 7), in one
   step from f64: init::scalar::round_f64. */
__device__ unsigned short round_half(double x, int eb, int mb) {
    u64 bits = (u64)__double_as_longlong(x);
    unsigned short sign = (unsigned short)((bits >> 63) << 15);
    u64 inf = ((1ULL << eb) - 1) << mb;
    if (x != x) return sign | (unsigned short)(inf | (1ULL << (mb - 1)));
    i64 e64 = (i64)((bits >> 52) & 0x7ff);
    if (e64 == 0x7ff) return sign | (unsigned short)inf;
    if (e64 == 0) return sign;
    i64 bias = (1LL << (eb - 1)) - 1;
    i64 emin = 1 - bias;
    i64 e = e64 - 1023;
    if (e > bias) return sign | (unsigned short)inf;
    u64 m = (bits & ((1ULL << 52) - 1)) | (1ULL << 52);
    i64 eq = e > emin ? e : emin;
    i64 shift = 52 - mb + (eq - e);
    if (shift > 54) return sign;
    u64 q = m >> shift;
    u64 rem = m & ((1ULL << shift) - 1);
    u64 half = 1ULL << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q += 1;
    u64 out = ((u64)(eq - emin) << mb) + q;
    if (out > inf) out = inf;
    return sign | (unsigned short)out;
}

/* f64 -> f32 bits, to nearest even; a NaN keeps its sign and top payload bits, quieted (as the
   host's conversion does) rather than becoming the GPU's canonical NaN. */
__device__ unsigned int f32_bits(double x) {
    if (x != x) {
        u64 b = (u64)__double_as_longlong(x);
        return (unsigned int)((b >> 63) << 31) | 0x7FC00000u
             | (unsigned int)((b >> 29) & 0x3FFFFFu);
    }
    return __float_as_uint(__double2float_rn(x));
}

"#;

/// The fill kernel (after [`COMMON`]). `table` is [`table`]'s; `kind` and `dtype` are
/// [`kind_params`]' and [`dtype_code`]'s numbers.
const KERNEL: &str = r#"

/* (bits >> 11) * 2^-53: exact. */
__device__ double unit(u64 key, u64 c) {
    u64 bits = splitmix(key ^ (c * GOLDEN));
    return __dmul_rn(__ull2double_rn(bits >> 11), __longlong_as_double(0x3CA0000000000000LL));
}

__device__ double uniform(u64 key, u64 c, double low, double high) {
    return __dadd_rn(low, __dmul_rn(__dsub_rn(high, low), unit(key, c)));
}

/* init::fdlibm, operation for operation: fdlibm's log and cos (not CUDA's), every operation
   rounded separately. */
#define ADD __dadd_rn
#define SUB __dsub_rn
#define MUL __dmul_rn
__device__ __forceinline__ double D(u64 b) { return __longlong_as_double((i64)b); }
__device__ __forceinline__ u64 B(double x) { return (u64)__double_as_longlong(x); }

__device__ double fd_ln(double x) {
    u64 ui = B(x);
    unsigned int hx = (unsigned int)(ui >> 32);
    int k = 0;
    if (hx < 0x00100000u || (hx >> 31) != 0) {
        if ((ui << 1) == 0) return D(0xFFF0000000000000ULL);
        if ((hx >> 31) != 0) return D(0x7FF8000000000000ULL);
        k -= 54;
        x = MUL(x, D(0x4350000000000000ULL));
        ui = B(x);
        hx = (unsigned int)(ui >> 32);
    } else if (hx >= 0x7ff00000u) {
        return x;
    } else if (hx == 0x3ff00000u && (ui << 32) == 0) {
        return 0.0;
    }
    hx += 0x3ff00000u - 0x3fe6a09eu;
    k += (int)(hx >> 20) - 0x3ff;
    hx = (hx & 0x000fffffu) + 0x3fe6a09eu;
    x = D(((u64)hx << 32) | (ui & 0xffffffffULL));
    const double LG1 = D(0x3FE5555555555593ULL), LG2 = D(0x3FD999999997FA04ULL),
                 LG3 = D(0x3FD2492494229359ULL), LG4 = D(0x3FCC71C51D8E78AFULL),
                 LG5 = D(0x3FC7466496CB03DEULL), LG6 = D(0x3FC39A09D078C69FULL),
                 LG7 = D(0x3FC2F112DF3E5244ULL);
    double f = SUB(x, 1.0);
    double hfsq = MUL(MUL(0.5, f), f);
    double s = __ddiv_rn(f, ADD(2.0, f));
    double z = MUL(s, s);
    double w = MUL(z, z);
    double t1 = MUL(w, ADD(LG2, MUL(w, ADD(LG4, MUL(w, LG6)))));
    double t2 = MUL(z, ADD(LG1, MUL(w, ADD(LG3, MUL(w, ADD(LG5, MUL(w, LG7)))))));
    double r = ADD(t2, t1);
    double dk = __int2double_rn(k);
    return ADD(ADD(SUB(ADD(MUL(s, ADD(hfsq, r)), MUL(dk, D(0x3DEA39EF35793C76ULL))), hfsq), f),
               MUL(dk, D(0x3FE62E42FEE00000ULL)));
}

__device__ double k_cos(double x, double y) {
    const double C1 = D(0x3FA555555555554CULL), C2 = D(0xBF56C16C16C15177ULL),
                 C3 = D(0x3EFA01A019CB1590ULL), C4 = D(0xBE927E4F809C52ADULL),
                 C5 = D(0x3E21EE9EBDB4B1C4ULL), C6 = D(0xBDA8FAE9BE8838D4ULL);
    double z = MUL(x, x);
    double w = MUL(z, z);
    double r = ADD(MUL(z, ADD(C1, MUL(z, ADD(C2, MUL(z, C3))))),
                   MUL(MUL(w, w), ADD(C4, MUL(z, ADD(C5, MUL(z, C6))))));
    double hz = MUL(0.5, z);
    w = SUB(1.0, hz);
    return ADD(w, ADD(SUB(SUB(1.0, w), hz), SUB(MUL(z, r), MUL(x, y))));
}

__device__ double k_sin(double x, double y) {
    const double S1 = D(0xBFC5555555555549ULL), S2 = D(0x3F8111111110F8A6ULL),
                 S3 = D(0xBF2A01A019C161D5ULL), S4 = D(0x3EC71DE357B1FE7DULL),
                 S5 = D(0xBE5AE5E68A2B9CEBULL), S6 = D(0x3DE5D93A5ACFD57CULL);
    double z = MUL(x, x);
    double w = MUL(z, z);
    double r = ADD(ADD(S2, MUL(z, ADD(S3, MUL(z, S4)))), MUL(MUL(z, w), ADD(S5, MUL(z, S6))));
    double v = MUL(z, x);
    return SUB(x, SUB(SUB(MUL(z, SUB(MUL(0.5, y), MUL(v, r))), y), MUL(v, S1)));
}

__device__ int exponent(double x) { return (int)((B(x) >> 52) & 0x7ff); }

__device__ double fd_cos(double x) {
    const double TO_INT = D(0x4338000000000000ULL), INV_PIO2 = D(0x3FE45F306DC9C883ULL),
                 PIO2_1 = D(0x3FF921FB54400000ULL), PIO2_1T = D(0x3DD0B4611A626331ULL),
                 PIO2_2 = D(0x3DD0B4611A600000ULL), PIO2_2T = D(0x3BA3198A2E037073ULL),
                 PIO2_3 = D(0x3BA3198A2E000000ULL), PIO2_3T = D(0x397B839A252049C1ULL);
    double f_n = SUB(ADD(MUL(x, INV_PIO2), TO_INT), TO_INT);
    int n = __double2int_rz(f_n);
    int ex = exponent(x);
    double r = SUB(x, MUL(f_n, PIO2_1));
    double w = MUL(f_n, PIO2_1T);
    double y0 = SUB(r, w);
    if (ex - exponent(y0) > 16) {
        double t = r;
        w = MUL(f_n, PIO2_2);
        r = SUB(t, w);
        w = SUB(MUL(f_n, PIO2_2T), SUB(SUB(t, r), w));
        y0 = SUB(r, w);
        if (ex - exponent(y0) > 49) {
            t = r;
            w = MUL(f_n, PIO2_3);
            r = SUB(t, w);
            w = SUB(MUL(f_n, PIO2_3T), SUB(SUB(t, r), w));
            y0 = SUB(r, w);
        }
    }
    double y1 = SUB(SUB(r, y0), w);
    switch (n & 3) {
    case 0: return k_cos(y0, y1);
    case 1: return -k_sin(y0, y1);
    case 2: return -k_cos(y0, y1);
    default: return k_sin(y0, y1);
    }
}

/* mean + std * sqrt(-2 log(1 - u(c))) * cos(2 pi u(c + 1)) */
__device__ double normal(u64 key, u64 c, double mean, double sd) {
    double u1 = unit(key, c);
    double u2 = unit(key, c + 1);
    double r = __dsqrt_rn(MUL(-2.0, fd_ln(SUB(1.0, u1))));
    double t = fd_cos(MUL(D(0x401921FB54442D18ULL), u2));
    return ADD(mean, MUL(sd, MUL(r, t)));
}

/* Truncate toward zero, saturating at [-lim, lim - 1], NaN to 0 (Rust's `as`). */
__device__ i64 to_signed(double x, double lim, i64 lo, i64 hi) {
    if (x != x) return 0;
    if (x >= lim) return hi;
    if (x <= -lim) return lo;
    return (i64)x;
}

/* Truncate toward zero, saturating at [0, lim - 1], NaN to 0 (Rust's `as`). */
__device__ u64 to_unsigned(double x, double lim, u64 hi) {
    if (!(x > 0.0)) return 0;
    if (x >= lim) return hi;
    return (u64)x;
}

extern "C" __global__ void fill(unsigned char* out, u64 n, const u64* table, unsigned int nd,
                                unsigned int kind, double a, double b, u64 key,
                                unsigned int dtype) {
    const int complex = dtype == C64 || dtype == C128;
    for (u64 k = blockIdx.x * (u64)blockDim.x + threadIdx.x; k < n;
         k += (u64)gridDim.x * blockDim.x) {
        double re = a, im = 0.0;
        if (kind != CONSTANT) {
            u64 i = global_index(table, nd, k);
            if (kind == ARANGE) {
                re = __dadd_rn(a, __dmul_rn(b, __ull2double_rn(i)));
            } else if (kind == UNIFORM) {
                if (complex) {
                    re = uniform(key, 2 * i, a, b);
                    im = uniform(key, 2 * i + 1, a, b);
                } else {
                    re = uniform(key, i, a, b);
                }
            } else {
                if (complex) {
                    re = normal(key, 4 * i, a, b);
                    im = normal(key, 4 * i + 2, a, b);
                } else {
                    re = normal(key, 2 * i, a, b);
                }
            }
        }
        switch (dtype) {
        case F16: ((unsigned short*)out)[k] = round_half(re, 5, 10); break;
        case BF16: ((unsigned short*)out)[k] = round_half(re, 8, 7); break;
        case F32: ((unsigned int*)out)[k] = f32_bits(re); break;
        case F64: ((u64*)out)[k] = (u64)__double_as_longlong(re); break;
        case C64:
            ((unsigned int*)out)[2 * k] = f32_bits(re);
            ((unsigned int*)out)[2 * k + 1] = f32_bits(im);
            break;
        case C128:
            ((u64*)out)[2 * k] = (u64)__double_as_longlong(re);
            ((u64*)out)[2 * k + 1] = (u64)__double_as_longlong(im);
            break;
        case I8: ((signed char*)out)[k] = (signed char)to_signed(re, 128.0, -128, 127); break;
        case U8: out[k] = (unsigned char)to_unsigned(re, 256.0, 255); break;
        case I32:
            ((int*)out)[k] = (int)to_signed(re, 2147483648.0, -2147483648LL, 2147483647LL);
            break;
        case U32:
            ((unsigned int*)out)[k] = (unsigned int)to_unsigned(re, 4294967296.0, 4294967295ULL);
            break;
        case I64:
            ((i64*)out)[k] = to_signed(re, 9223372036854775808.0, (i64)0x8000000000000000ULL,
                                       0x7FFFFFFFFFFFFFFFLL);
            break;
        case U64:
            ((u64*)out)[k] = to_unsigned(re, 18446744073709551616.0, 0xFFFFFFFFFFFFFFFFULL);
            break;
        }
    }
}
"#;

/// Threads per block.
const THREADS: u32 = 256;
/// At most this many blocks: the loop strides over larger pieces.
const MAX_BLOCKS: u64 = 1 << 16;

/// The kernel's number for `dtype` (the epilog kernel's too).
pub(super) fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::F16 => 0,
        DType::Bf16 => 1,
        DType::F32 => 2,
        DType::F64 => 3,
        DType::C64 => 4,
        DType::C128 => 5,
        DType::I8 => 6,
        DType::U8 => 7,
        DType::I32 => 8,
        DType::U32 => 9,
        DType::I64 => 10,
        DType::U64 => 11,
    }
}

/// The kernel's number for a formula and its two parameters `(a, b)`: constant (value, 0),
/// arange (start, step), uniform (low, high), normal (mean, std).
fn kind_params(kind: GenKind) -> (u32, f64, f64) {
    match kind {
        GenKind::Constant(v) => (0, v, 0.0),
        GenKind::Arange { start, step } => (1, start, step),
        GenKind::Uniform { low, high } => (2, low, high),
        GenKind::Normal { mean, std } => (3, mean, std),
    }
}

/// The kernel's table of `map`: `nd` extents and `nd` term offsets (indices into the table),
/// the local axes fastest varying first, then the terms: for each axis `a` in that order,
/// `coords[a][j] * strides[a]` for every local `j`, so that the global index of local offset
/// `k` is the sum over axes of the term at digit `j` of `k` in the mixed radix of the extents.
/// An axis of consecutive coordinates stores two words instead, the first term and the stride,
/// its offset marked with the top bit ([`RANGE`]): a slab of any length costs no table.
/// Never empty (a 0-d piece gets one unused word: CUDA allocates no empty buffers).
pub(super) fn table(map: &IndexMap) -> Vec<u64> {
    let order = map.order();
    let nd = order.len();
    let words = |c: &Coords| match c {
        Coords::Range { .. } => 2,
        Coords::List(list) => list.len() as u64,
    };
    let mut t = Vec::with_capacity(2 * nd + 1);
    t.extend(order.iter().map(|&a| map.local[a]));
    let mut at = 2 * nd as u64;
    for &a in order {
        let c = &map.coords[a];
        t.push(if matches!(c, Coords::Range { .. }) {
            at | RANGE
        } else {
            at
        });
        at += words(c);
    }
    for &a in order {
        let stride = map.strides()[a];
        match &map.coords[a] {
            Coords::Range { start, .. } => t.extend([start * stride, stride]),
            Coords::List(list) => t.extend(list.iter().map(|&c| c * stride)),
        }
    }
    if t.is_empty() {
        t.push(0);
    }
    t
}

/// The top bit of a table offset: the axis's terms are a range (see [`table`]).
const RANGE: u64 = 1 << 63;

/// The fill kernel's source and NVRTC options (the architecture left to `load_module`): exact
/// IEEE arithmetic, so the values match the CPU's.
pub(super) fn module() -> (String, CompileOptions) {
    let opts = CompileOptions {
        fmad: Some(false),
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        name: Some("distrun_fill.cu".into()),
        ..Default::default()
    };
    ([COMMON, KERNEL].concat(), opts)
}

/// The fill kernel of the process's GPU context: compiled and loaded once, reloaded only if the
/// stream belongs to another context.
fn kernel(stream: &Arc<CudaStream>) -> Result<CudaFunction> {
    static LOADED: Mutex<Option<(Arc<CudaContext>, CudaFunction)>> = Mutex::new(None);
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = stream.context();
    if let Some((c, f)) = loaded.as_ref()
        && Arc::ptr_eq(c, ctx)
    {
        return Ok(f.clone());
    }
    let (source, opts) = module();
    let module = super::load_module(ctx, source, opts, "init fill kernel")?;
    let function = module.load_function("fill")?;
    *loaded = Some((ctx.clone(), function.clone()));
    Ok(function)
}

/// A device buffer of `map.len()` elements of `dtype`, each `generator`'s value at its global
/// index, queued on `stream`; with its length in bytes (at least one byte is allocated).
pub fn generate(
    stream: &Arc<CudaStream>,
    generator: &Generator,
    dtype: DType,
    map: &IndexMap,
) -> Result<(CudaSlice<u8>, usize)> {
    let n = map.len();
    let bytes = (n * dtype.size()) as usize;
    if map.is_empty() {
        return Ok((stream.alloc_zeros::<u8>(1)?, 0));
    }
    let function = kernel(stream)?;
    let parts = generator.parts();
    let (kind, a, b) = kind_params(parts.kind);
    let table = stream.clone_htod(&table(map))?;
    let nd = map.order().len() as u32;
    let code = dtype_code(dtype);
    // SAFETY: the kernel writes every one of the n elements before anything reads the buffer.
    let mut out = unsafe { stream.alloc::<u8>(bytes) }?;
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(u64::from(THREADS)).min(MAX_BLOCKS) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut launch = stream.launch_builder(&function);
    launch
        .arg(&mut out)
        .arg(&n)
        .arg(&table)
        .arg(&nd)
        .arg(&kind)
        .arg(&a)
        .arg(&b)
        .arg(&parts.key)
        .arg(&code);
    // SAFETY: the argument types match the kernel's; it writes n elements of `dtype` (bytes in
    // all) and reads the table only at the offsets `table` packed.
    unsafe { launch.launch(cfg) }.map_err(|e| anyhow!("launching the init fill kernel: {e:?}"))?;
    Ok((out, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init;
    use crate::init::tests::state;
    use crate::spec::tensor::{
        Arange, Axis, BlockCyclicSpec, Distribution, GridLayout, Init, Layout, Normal, Uniform,
    };

    /// Distributions with uneven, permuted and empty pieces, for 3-d shapes on 4 ranks.
    fn distributions() -> Vec<Distribution> {
        vec![
            Distribution::Replicated,
            Distribution::Partial,
            Distribution::Root(3),
            Distribution::Slab(Axis::Index(1)),
            Distribution::BlockCyclic(BlockCyclicSpec {
                grid: Some(vec![2, 2, 1]),
                blocks: vec![3, 2, 5],
                grid_layout: GridLayout::ColMajor,
                first: Some(vec![1, 0, 0]),
            }),
        ]
    }

    /// Every (map, rank) the tests cover.
    fn maps(shape: &[u64], dtype: DType) -> Vec<IndexMap> {
        let mut out = Vec::new();
        for dist in distributions() {
            for layout in [Layout::C, Layout::F] {
                let st = state(shape, dtype, layout, dist.clone());
                out.extend((0..4).filter_map(|r| IndexMap::new(&st, 4, r)));
            }
        }
        out
    }

    /// The kernel's index computation, on the host.
    fn kernel_index(t: &[u64], nd: usize, k: u64) -> u64 {
        let (mut i, mut r) = (0, k);
        for ax in 0..nd {
            let (ext, at) = (t[ax], t[nd + ax]);
            let j = r % ext;
            i += if at & RANGE != 0 {
                let at = (at & !RANGE) as usize;
                t[at] + j * t[at + 1]
            } else {
                t[(at + j) as usize]
            };
            r /= ext;
        }
        i
    }

    #[test]
    fn the_table_gives_every_local_offset_its_global_index() {
        for shape in [vec![9u64, 7, 4], vec![5, 1, 3]] {
            for map in maps(&shape, DType::F32) {
                let t = table(&map);
                let nd = map.order().len();
                // Only block-cyclic axes list their terms; the others take two words.
                let terms: u64 = map
                    .coords
                    .iter()
                    .map(|c| match c {
                        Coords::Range { .. } => 2,
                        Coords::List(list) => list.len() as u64,
                    })
                    .sum();
                assert_eq!(t.len() as u64, 2 * nd as u64 + terms);
                let mut idx = vec![0; nd];
                for k in 0..map.len() {
                    assert_eq!(
                        kernel_index(&t, nd, k),
                        map.global_linear(&idx),
                        "offset {k}"
                    );
                    map.advance(&mut idx);
                }
            }
        }
    }

    #[test]
    fn long_slabs_and_partial_pieces_cost_a_few_words() {
        // 2^31 elements per rank: listing them (as block-cyclic axes are) would take 16 GiB.
        for dist in [Distribution::Slab(Axis::Index(0)), Distribution::Partial] {
            let st = state(&[1 << 33], DType::F32, Layout::C, dist);
            let map = IndexMap::new(&st, 4, 3).expect("rank 3 holds a piece");
            let t = table(&map);
            assert!(t.len() <= 8, "{} words", t.len());
            let last = map.len() - 1;
            assert_eq!(
                kernel_index(&t, map.order().len(), last),
                map.global_linear(&map.unravel(last))
            );
        }
    }

    #[test]
    fn a_zero_dimensional_piece_has_a_nonempty_table() {
        let st = state(&[], DType::F64, Layout::C, Distribution::Replicated);
        let map = IndexMap::new(&st, 1, 0).expect("rank 0 holds the scalar");
        assert_eq!(map.len(), 1);
        assert_eq!(table(&map), [0]);
        assert_eq!(kernel_index(&table(&map), 0, 0), 0);
    }

    #[test]
    fn codes_follow_the_kernels_numbering() {
        let codes: Vec<u32> = DType::ALL.iter().map(|&d| dtype_code(d)).collect();
        assert_eq!(codes, (0..12).collect::<Vec<_>>());
        // The kernel's enum, in the same order as DType::ALL's names.
        assert!(COMMON.contains(
            "F16 = 0, BF16 = 1, F32 = 2, F64 = 3, C64 = 4, C128 = 5,\n       \
             I8 = 6, U8 = 7, I32 = 8, U32 = 9, I64 = 10, U64 = 11"
        ));
        assert!(COMMON.contains("CONSTANT = 0, ARANGE = 1, UNIFORM = 2, NORMAL = 3"));
        let g = |init: &Init| {
            let parts = init::Generator::new(init, 7, "t", DType::F64)
                .unwrap()
                .parts();
            assert_eq!(parts.key, init::key(7, "t"));
            kind_params(parts.kind)
        };
        assert_eq!(g(&Init::Zeros), (0, 0.0, 0.0));
        assert_eq!(g(&Init::Ones), (0, 1.0, 0.0));
        assert_eq!(g(&Init::Fill(-2.5)), (0, -2.5, 0.0));
        let arange = Init::Arange(Arange {
            start: 3.0,
            step: 0.5,
        });
        assert_eq!(g(&arange), (1, 3.0, 0.5));
        let uniform = Init::Uniform(Uniform {
            low: -1.0,
            high: 4.0,
        });
        assert_eq!(g(&uniform), (2, -1.0, 4.0));
        let normal = Init::Normal(Normal {
            mean: 2.0,
            std: 0.25,
        });
        assert_eq!(g(&normal), (3, 2.0, 0.25));
        assert!(
            init::Generator::new(&normal, 7, "t", DType::C64)
                .unwrap()
                .parts()
                .complex
        );
    }

    /// Inits whose values reach every conversion's edge cases: ties to even in f16/bf16 and
    /// f32, overflow, subnormals, integer saturation, NaN and infinities.
    fn inits() -> Vec<Init> {
        let arange = |start: f64, step: f64| Init::Arange(Arange { start, step });
        vec![
            Init::Zeros,
            Init::Ones,
            Init::Fill(-2.75),
            Init::Fill(f64::NAN),
            Init::Fill(-f64::NAN),
            Init::Fill(f64::INFINITY),
            Init::Fill(f64::NEG_INFINITY),
            Init::Fill(1e300),
            Init::Fill(-0.0),
            arange(0.0, 1.0),
            arange(-300.7, 1.3),
            arange(2048.0, 0.5),
            arange(256.0, 0.25),
            arange(65000.0, 4.0),
            arange(1.0, 2f64.powi(-29)),
            arange(-1e19, 1.7e17),
            arange(-3e9, 2.3e7),
            arange(1e-8, 1e-9),
            Init::Uniform(Uniform {
                low: 0.0,
                high: 1.0,
            }),
            Init::Uniform(Uniform {
                low: -1e-5,
                high: 1e-5,
            }),
            Init::Uniform(Uniform {
                low: -1e5,
                high: 7e19,
            }),
            Init::Normal(Normal {
                mean: 0.0,
                std: 1.0,
            }),
            Init::Normal(Normal {
                mean: 100.0,
                std: 30.0,
            }),
        ]
    }

    /// The GPU's bytes for `g` over `map`, and the host's.
    fn both(stream: &Arc<CudaStream>, g: &Generator, dtype: DType, map: &IndexMap) -> [Vec<u8>; 2] {
        let host = init::generate(g, dtype, map);
        let (buf, len) = generate(stream, g, dtype, map).unwrap();
        assert_eq!(len, host.len());
        let gpu = if len == 0 {
            Vec::new()
        } else {
            stream.clone_dtoh(&buf.slice(..len)).unwrap()
        };
        [gpu, host]
    }

    /// The first element where two pieces differ, decoded.
    fn first_difference(dtype: DType, gpu: &[u8], host: &[u8]) -> String {
        let size = dtype.size() as usize;
        let (k, (d, h)) = gpu
            .chunks_exact(size)
            .zip(host.chunks_exact(size))
            .enumerate()
            .find(|(_, (d, h))| d != h)
            .expect("a difference");
        let (d, h) = (init::decode(dtype, d), init::decode(dtype, h));
        format!("element {k}: GPU {d:?}, host {h:?}")
    }

    /// On a GPU: `cargo test --release --lib gpu_ -- --ignored`. Every dtype, init,
    /// distribution and layout, and a long normal piece: the kernel's bytes equal the host's.
    #[test]
    #[ignore = "needs a GPU with the CUDA driver and NVRTC"]
    fn gpu_generation_matches_the_host() {
        let ctx = CudaContext::new(0).expect("a GPU");
        let stream = ctx.default_stream();
        let (mut pieces, mut elements) = (0u64, 0u64);
        for dtype in DType::ALL {
            for init in inits() {
                for map in maps(&[9, 7, 40], dtype) {
                    let g = init::Generator::new(&init, 42, "t", dtype).unwrap();
                    let [gpu, host] = both(&stream, &g, dtype, &map);
                    assert!(
                        gpu == host,
                        "{dtype} {init:?} {map:?}: {}",
                        first_difference(dtype, &gpu, &host)
                    );
                    pieces += 1;
                    elements += map.len();
                }
            }
        }
        // Many normals: every branch of log's and cos's reductions.
        let normal = Init::Normal(Normal {
            mean: 0.0,
            std: 1.0,
        });
        for dtype in [DType::F64, DType::C128] {
            let st = state(&[1 << 22], dtype, Layout::C, Distribution::Replicated);
            let map = IndexMap::new(&st, 1, 0).unwrap();
            let g = init::Generator::new(&normal, 9, "long", dtype).unwrap();
            let [gpu, host] = both(&stream, &g, dtype, &map);
            assert!(
                gpu == host,
                "{dtype}: {}",
                first_difference(dtype, &gpu, &host)
            );
            pieces += 1;
            elements += map.len();
        }
        eprintln!("{pieces} pieces, {elements} elements: the GPU's bytes are the host's");
    }
}
