//! The GPU backend: device buffers on one stream per rank, strided copies by an NVRTC kernel,
//! communication through NCCL (bootstrapped over the process group: rank 0's unique id travels
//! through MPI), local GEMMs through cuBLAS, local FFTs through cuFFT and the matmul epilog in an
//! NVRTC kernel, all loaded at run time through cudarc, so the binary builds and runs without
//! CUDA (cuBLAS and cuFFT are loaded only by a run that needs them).

mod across;
mod blas;
mod check;
pub mod devmap;
mod ends;
mod fft;
mod fill;
mod lt;
mod narrow;
mod nested;
pub mod nvshmem;
mod peer_copy;
pub mod probe;
mod route;
mod window;
pub mod window_puts;

use super::{Backend, Out, Puts, Rows};
use crate::backend::work::{self, Addends, Derived, Phase, Run, RunGrid, Runs, View};
use crate::ops::checks::{Along, C, Dot, Gap, Lanes, Matrix};
use crate::ops::sum::Sum;
use crate::runtime::comm::{Group, Parts};
use crate::spec::model::DeviceMap;
use crate::spec::step::{Epilog, ReduceOp};
use crate::spec::tensor::DType;
use across::{Fold, Sweep, divider};
use anyhow::{Context as _, Result, anyhow, bail};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};
use cudarc::nccl::{result as nccl, sys as nccl_sys};
use ends::Ends;
use narrow::Narrow;
use route::Route;
use std::borrow::Cow;
use std::cell::{Cell, OnceCell, RefCell};
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// The strided-copy kernels' common part: `copy_runs` takes a table of runs: groups of `lanes`
/// threads take runs, blocks along y 64 KiB chunks of each run. `copy_rows` takes a grid of runs
/// contiguous on both sides (see `RunGrid`), a group a run. Contiguous runs move in the
/// destination's aligned 16-byte words, each built from the two aligned source words it straddles
/// (`copy_bytes`), the ends byte by byte; strided runs one whole element at a time. Then the tile
/// kernels' templates, which [`KERNELS`] and [`NESTED_KERNELS`] instantiate.
const TILE_KERNELS: &str = r#"
template <typename T>
__device__ void copy_elems(const unsigned char* s, unsigned char* d, unsigned long long lo,
                           unsigned long long hi, unsigned long long ss, unsigned long long ds,
                           unsigned lane, unsigned lanes) {
    for (unsigned long long i = lo + lane; i < hi; i += lanes)
        ((T*)d)[i * ds] = ((const T*)s)[i * ss];
}

// The 16 bytes starting 4 K + sh / 8 bytes into the aligned words a, b (in that order).
template <int K>
__device__ __forceinline__ uint4 funnel(const uint4& a, const uint4& b, unsigned sh) {
    const unsigned u[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    return make_uint4(__funnelshift_r(u[K], u[K + 1], sh), __funnelshift_r(u[K + 1], u[K + 2], sh),
                      __funnelshift_r(u[K + 2], u[K + 3], sh), __funnelshift_r(u[K + 3], u[K + 4], sh));
}

// n aligned destination words d from the source words a shifted by 4 K + sh / 8 bytes (K < 0:
// not shifted), by `lanes` threads, each loading two rounds before storing them.
template <int K>
__device__ __forceinline__ void shifted_words(const uint4* a, uint4* d, unsigned long long n,
                                              unsigned sh, unsigned lane, unsigned lanes) {
    unsigned long long i = lane;
    if constexpr (K < 0) {
        for (; i + lanes < n; i += 2 * lanes) {
            const uint4 x = a[i], y = a[i + lanes];
            d[i] = x;
            d[i + lanes] = y;
        }
        if (i < n) d[i] = a[i];
    } else {
        for (; i + lanes < n; i += 2 * lanes) {
            const uint4 w0 = a[i], w1 = a[i + 1], w2 = a[i + lanes], w3 = a[i + lanes + 1];
            d[i] = funnel<K>(w0, w1, sh);
            d[i + lanes] = funnel<K>(w2, w3, sh);
        }
        if (i < n) d[i] = funnel<K>(a[i], a[i + 1], sh);
    }
}

// n bytes from s to d by `lanes` (at least 16) threads: the destination's aligned 16-byte words
// each from the aligned source words it straddles (every one holds a byte of the run, so none
// lies outside the buffer), the ends byte by byte. A thread loads all it moves in a round before
// it stores any: a store would hold back the later loads (the buffers may alias).
__device__ __forceinline__ void copy_bytes(const unsigned char* s, unsigned char* d,
                                           unsigned long long n, unsigned lane, unsigned lanes) {
    unsigned long long h = (16 - ((unsigned long long)d & 15)) & 15;
    if (h > n) h = n;
    const unsigned long long words = (n - h) / 16, t = h + words * 16;
    const bool head = lane < h, tail = t + lane < n;
    const unsigned char hb = head ? s[lane] : 0, tb = tail ? s[t + lane] : 0;
    const unsigned off = (unsigned long long)(s + h) & 15, sh = (off & 3) * 8;
    const uint4* a = (const uint4*)(s + h - off);
    uint4* w = (uint4*)(d + h);
    if (off == 0) shifted_words<-1>(a, w, words, sh, lane, lanes);
    else if (off < 4) shifted_words<0>(a, w, words, sh, lane, lanes);
    else if (off < 8) shifted_words<1>(a, w, words, sh, lane, lanes);
    else if (off < 12) shifted_words<2>(a, w, words, sh, lane, lanes);
    else shifted_words<3>(a, w, words, sh, lane, lanes);
    if (head) d[lane] = hb;
    if (tail) d[t + lane] = tb;
}

extern "C" __global__ void copy_runs(const unsigned char* src, unsigned char* dst,
                                     const unsigned long long* runs, unsigned long long n_runs,
                                     unsigned long long elem, int lanes_log) {
    const unsigned long long chunk = 65536;
    const unsigned lanes = 1u << lanes_log, lane = threadIdx.x & (lanes - 1),
                   groups = blockDim.x >> lanes_log;
    for (unsigned long long r = blockIdx.x * groups + (threadIdx.x >> lanes_log); r < n_runs;
         r += gridDim.x * groups) {
        const unsigned long long* q = runs + 5 * r;
        const unsigned char* s = src + q[0] * elem;
        unsigned char* d = dst + q[1] * elem;
        const unsigned long long bytes = q[2] * elem;
        const bool contiguous = q[2] <= 1 || (q[3] == 1 && q[4] == 1);
        for (unsigned long long c = blockIdx.y * chunk; c < bytes; c += gridDim.y * chunk) {
            const unsigned long long end = c + chunk < bytes ? c + chunk : bytes;
            if (contiguous) {
                copy_bytes(s + c, d + c, end - c, lane, lanes);
                continue;
            }
            const unsigned long long lo = c / elem, hi = end / elem;
            switch (elem) {
            case 1: copy_elems<unsigned char>(s, d, lo, hi, q[3], q[4], lane, lanes); break;
            case 2: copy_elems<unsigned short>(s, d, lo, hi, q[3], q[4], lane, lanes); break;
            case 4: copy_elems<unsigned int>(s, d, lo, hi, q[3], q[4], lane, lanes); break;
            case 8: copy_elems<unsigned long long>(s, d, lo, hi, q[3], q[4], lane, lanes); break;
            case 16: copy_elems<uint4>(s, d, lo, hi, q[3], q[4], lane, lanes); break;
            default:
                for (unsigned long long t = c + lane; t < end; t += lanes) {
                    const unsigned long long i = t / elem, b = t % elem;
                    d[i * q[4] * elem + b] = s[i * q[3] * elem + b];
                }
            }
        }
    }
}

// Runs that make a batch of 2-D grids (see `RunGrid`), copied in square tiles through shared
// memory: each tile is read along whichever axis is contiguous in the source (the runs, `load_q`,
// or a run's elements) and written along whichever is contiguous in the destination, so a
// transpose reads and writes whole lines. Elements (E) move V at a time as one word (W) on each
// side where the host found every word aligned (`wide`), or in the words that lie aligned along
// lines that start anywhere (`S`, shifted_tile), else one at a time (V = 1): tiles of T = 32 V
// elements square, blocks of 32 x 8 threads, each thread loading its T / 8 words into registers
// before any lands in the tile (so all are in flight at once), and a line's last partial word
// moving element by element. The grid comes by value, so a block's first load waits on nothing.
struct Grid {
    unsigned long long start_s, start_d, batches, outer_s, outer_d, rows, step_s, step_d, count,
        stride_s, stride_d;
};

// Grids nested in further levels (a layout change of four axes or more; copy_nested_*): every
// `every` grids the next lies jump_s[k] / jump_d[k] elements from where the steps below reach,
// so that grid p starts at_s(p) / at_d(p) past grid 0 (the host's `RunGrid::wraps`). p / every
// is umulhi(p, mul[k]) >> shift[k] (the host's `divider`; mul 0 where no such level), a grid
// index below 2^31: no 64-bit division in the kernels. A struct of its own: any change to
// `Grid` moved the other kernels' registers (copy_grid_8s from 64 to 108-173).
//
// Up to three levels may be taken into the rows (each continuing them on the side they run along:
// row t then lies t / per_r[k] jumps jr_*[k] further than its step reaches, per_r[k] the rows
// before level k) and three into a run's elements (column c, jc_*): tiles then fill where the axes
// at both ends are short (f64 [6, 50, 70, 90, 11] to F order: rows of 6 and 300 folded, elements
// of 11 and 990; f16 [8, 8, 512, 512]: rows of 8, 64 and 32768). mul 0 where no such level.
// The addresses take K of those levels a side (the kernels folded once, twice or three times;
// all three by default, as the CPU emulation places elements).
struct Nested : Grid {
    unsigned int mul[3], shift[3];
    long long jump_s[3], jump_d[3];
    unsigned int mul_r[3], shift_r[3], mul_c[3], shift_c[3];
    long long jr_s[3], jr_d[3], jc_s[3], jc_d[3];
    template <int K = 3> __device__ __forceinline__ unsigned long long row_s(unsigned long long t) const { return t * step_s + folds<K>(t, mul_r, shift_r, jr_s); }
    template <int K = 3> __device__ __forceinline__ unsigned long long row_d(unsigned long long t) const { return t * step_d + folds<K>(t, mul_r, shift_r, jr_d); }
    template <int K = 3> __device__ __forceinline__ unsigned long long col_s(unsigned long long c) const { return c * stride_s + folds<K>(c, mul_c, shift_c, jc_s); }
    template <int K = 3> __device__ __forceinline__ unsigned long long col_d(unsigned long long c) const { return c * stride_d + folds<K>(c, mul_c, shift_c, jc_d); }
    static __device__ __forceinline__ unsigned long long fold(unsigned long long t, unsigned int mul, unsigned int shift, long long jump) {
        return (unsigned long long)(__umulhi((unsigned int)t, mul) >> shift) * (unsigned long long)jump;
    }
    template <int K>
    static __device__ __forceinline__ unsigned long long folds(unsigned long long t, const unsigned int* mul,
                                                              const unsigned int* shift, const long long* jump) {
        unsigned long long o = fold(t, mul[0], shift[0], jump[0]);
        if constexpr (K > 1) o += fold(t, mul[1], shift[1], jump[1]);
        if constexpr (K > 2) o += fold(t, mul[2], shift[2], jump[2]);
        return o;
    }
    __device__ __forceinline__ unsigned long long wrapped(unsigned long long p, const long long* jump) const {
        unsigned long long o = 0;
#pragma unroll
        for (int k = 0; k < 3; k++)
            o += fold(p, mul[k], shift[k], jump[k]);
        return o;
    }
    __device__ __forceinline__ unsigned long long at_s(unsigned long long p) const {
        return p * outer_s + wrapped(p, jump_s);
    }
    __device__ __forceinline__ unsigned long long at_d(unsigned long long p) const {
        return p * outer_d + wrapped(p, jump_d);
    }
};

// A grid of runs contiguous on both sides (strides 1), a group of `lanes` threads a run (blocks
// along x the runs of a grid, along y the grids), as `copy_bytes` moves them.
extern "C" __global__ void copy_rows(const unsigned char* src, unsigned char* dst, Grid g,
                                     unsigned long long elem, int lanes_log) {
    const unsigned lanes = 1u << lanes_log, lane = threadIdx.x & (lanes - 1);
    const unsigned long long first = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) >> lanes_log,
                             every = (gridDim.x * (unsigned long long)blockDim.x) >> lanes_log,
                             n = g.count * elem;
    for (unsigned long long b = blockIdx.y; b < g.batches; b += gridDim.y)
        for (unsigned long long r = first; r < g.rows; r += every)
            copy_bytes(src + (g.start_s + b * g.outer_s + r * g.step_s) * elem,
                       dst + (g.start_d + b * g.outer_d + r * g.step_d) * elem, n, lane, lanes);
}

// Element v of a word of V elements, and the word with element v or'd in: shifts, and for two
// 8-byte elements in a 16-byte word (uint4) its halves.
template <typename E, typename W>
__device__ __forceinline__ E word_part(const W& w, int v) {
    return (E)(w >> (8 * sizeof(E) * v));
}
template <>
__device__ __forceinline__ unsigned long long word_part<unsigned long long, uint4>(const uint4& w,
                                                                                  int v) {
    return v ? (unsigned long long)w.w << 32 | w.z : (unsigned long long)w.y << 32 | w.x;
}
template <typename E, typename W>
__device__ __forceinline__ void word_set(W& w, E e, int v) {
    w |= (W)e << (8 * sizeof(E) * v);
}
template <>
__device__ __forceinline__ void word_set<unsigned long long, uint4>(uint4& w, unsigned long long e,
                                                                   int v) {
    if (v) { w.z = (unsigned int)e; w.w = (unsigned int)(e >> 32); }
    else { w.x = (unsigned int)e; w.y = (unsigned int)(e >> 32); }
}

// How many elements (of E) before `p` its word of V elements starts: 0 where `p` is aligned.
template <typename E, int V>
__device__ __forceinline__ unsigned int phase(const E* p) {
    return (unsigned int)((unsigned long long)p / sizeof(E) % V);
}

// A whole 128 x 128 tile of bytes moved across: the source contiguous along one axis (a), the
// destination along the other (b), in words of 4. Each thread loads 16 words along a and
// stores them whole in shared memory (a row per b, 32 words, swizzled so that no two threads of
// a warp meet in a bank on either side); then each reads the words of 4 consecutive rows at one
// column, transposes those 4 x 4 bytes in registers and writes 4 words along b. Two
// shared-memory accesses a word, where a byte at a time takes eight.
// Shifted (S), a line on either side may start anywhere in a word: each thread reads the aligned
// word at its place and its neighbour's (a shuffle; the warp's last thread reads one more) and
// shifts the tile's word out of the two; on the way out it shifts its word and its neighbour's
// into the aligned word at its place, and the block's threads write the bytes before a line's
// first aligned word and after its last together, from the tile.
// src_line(b) is where the source's line b starts, dst_line(a) the destination's line a.
template <typename E>
struct Stepped {
    E* start;
    unsigned long long step;
    __device__ __forceinline__ E* operator()(unsigned int k) const { return start + k * step; }
};
template <bool S, typename SL, typename DL>
__device__ __forceinline__ void byte_tile(SL src_line, DL dst_line, unsigned int* t) {
    const unsigned int x = threadIdx.x, y = threadIdx.y;
    unsigned int w[16], w2[S ? 16 : 1];
#pragma unroll
    for (unsigned int n = 0; n < 16; n++) {
        const unsigned char* line = src_line(y + 8 * n);
        if constexpr (S) {
            const unsigned int p = phase<unsigned char, 4>(line);
            const unsigned int* al = (const unsigned int*)(line - p);
            w[n] = al[x];
            w2[n] = x == 31 && p ? al[32] : 0;
        } else {
            w[n] = *(const unsigned int*)(line + 4 * x);
        }
    }
#pragma unroll
    for (unsigned int n = 0; n < 16; n++) {
        const unsigned int b = y + 8 * n;
        unsigned int word = w[n];
        if constexpr (S) {
            const unsigned int p = phase<unsigned char, 4>(src_line(b));
            const unsigned int next = __shfl_down_sync(0xffffffffu, w[n], 1);
            word = __funnelshift_r(w[n], x == 31 ? w2[n] : next, 8 * p);
        }
        t[b * 32 + (x ^ (b >> 2))] = word;
    }
    __syncthreads();
#pragma unroll
    for (unsigned int m = 0; m < 4; m++) {
        const unsigned int aw = y + 8 * m, at = 4 * x * 32 + (aw ^ x);
        const unsigned int r0 = t[at], r1 = t[at + 32], r2 = t[at + 64], r3 = t[at + 96];
        const unsigned int t0 = __byte_perm(r0, r1, 0x5140), t1 = __byte_perm(r0, r1, 0x7362);
        const unsigned int t2 = __byte_perm(r2, r3, 0x5140), t3 = __byte_perm(r2, r3, 0x7362);
        const unsigned int o[4] = {__byte_perm(t0, t2, 0x5410), __byte_perm(t0, t2, 0x7632),
                                   __byte_perm(t1, t3, 0x5410), __byte_perm(t1, t3, 0x7632)};
#pragma unroll
        for (unsigned int r = 0; r < 4; r++) {
            unsigned char* line = dst_line(4 * aw + r);
            if constexpr (S) {
                const unsigned int q = phase<unsigned char, 4>(line);
                const unsigned int prev = __shfl_up_sync(0xffffffffu, o[r], 1);
                unsigned int* al = (unsigned int*)(line - q);
                if (q == 0) {
                    al[x] = o[r];
                    continue;
                }
                if (x) al[x] = __funnelshift_l(prev, o[r], 8 * q);
            } else {
                *(unsigned int*)(line + 4 * x) = o[r];
            }
        }
    }
    if constexpr (S) {
        // A shifted line's bytes before its first aligned word and after its last (4 in all),
        // two a thread, from the tile: byte (a, b) is byte a % 4 of word b of row b's swizzle.
        const unsigned char* bytes = (const unsigned char*)t;
#pragma unroll
        for (unsigned int k = 0; k < 2; k++) {
            const unsigned int e = 32 * y + x + 256 * k, a = e >> 2, j = e & 3;
            unsigned char* line = dst_line(a);
            const unsigned int q = phase<unsigned char, 4>(line), b = j < 4 - q ? j : 124 + j;
            if (q) line[b] = bytes[4 * (b * 32 + ((a >> 2) ^ (b >> 2))) + (a & 3)];
        }
    }
    __syncthreads();
}

// A tile of T = 32 V elements square (see grid_tiles) whose lines, on either side, need not
// start on a word: each line moves in the words that lie aligned in it, the warp's threads
// taking them in turn (thread x the word at V x less the line's phase), a word that reaches past
// the tile's edge moving element by element on the way in; those words cover a line's stretch
// but for its last `phase` elements (V - 1 at most), which the block's threads take together,
// as on the way out the elements before a line's first whole word and after its last. Partial
// tiles alike (the lines and their lengths bounded by the grid).
template <typename E, typename W, int V>
__device__ __forceinline__ void shifted_tile(const E* sp, E* dp, const Grid& g, int load_q,
                                             int store_q, unsigned long long lim_q,
                                             unsigned long long lim_i, E* tile) {
    typedef unsigned long long u64;
    constexpr unsigned int T = 32 * V, P = T + 1, N = T / 8, TAILS = (T * (V - 1) + 255) / 256;
    const unsigned int x = threadIdx.x, y = threadIdx.y, me = 32 * y + x;
    const unsigned int cq = lim_q < T ? (unsigned int)lim_q : T, ci = lim_i < T ? (unsigned int)lim_i : T;
    // Each side's step between lines, the lines and their length in this tile.
    const u64 s_step = load_q ? g.stride_s : g.step_s, d_step = store_q ? g.stride_d : g.step_d;
    const unsigned int s_lines = load_q ? ci : cq, s_len = load_q ? cq : ci;
    const unsigned int d_lines = store_q ? ci : cq, d_len = store_q ? cq : ci;
    // Element c of line j in the tile (rows along q, as grid_tiles keeps it).
    auto s_at = [&](unsigned int j, unsigned int c) { return load_q ? c * P + j : j * P + c; };
    auto d_at = [&](unsigned int j, unsigned int c) { return store_q ? c * P + j : j * P + c; };
    W w[N];
    E tail[TAILS];
#pragma unroll
    for (unsigned int n = 0; n < N; n++) {
        const unsigned int j = y + 8 * n;
        const E* line = sp + j * s_step;
        const int at = (int)(V * x) - (int)phase<E, V>(line);
        if (j < s_lines && at < (int)s_len) w[n] = *(const W*)(line + at);
    }
#pragma unroll
    for (unsigned int k = 0; k < TAILS; k++) {
        const unsigned int e = me + 256 * k, j = e % T, v = e / T;
        const E* line = sp + j * s_step;
        const unsigned int p = phase<E, V>(line);
        if (v < p && j < s_lines && T - p + v < s_len) tail[k] = line[T - p + v];
    }
#pragma unroll
    for (unsigned int n = 0; n < N; n++) {
        const unsigned int j = y + 8 * n;
        const int at = (int)(V * x) - (int)phase<E, V>(sp + j * s_step);
        if (j >= s_lines) continue;
#pragma unroll
        for (int v = 0; v < V; v++)
            if (at + v >= 0 && at + v < (int)s_len) tile[s_at(j, at + v)] = word_part<E, W>(w[n], v);
    }
#pragma unroll
    for (unsigned int k = 0; k < TAILS; k++) {
        const unsigned int e = me + 256 * k, j = e % T, v = e / T;
        const unsigned int p = phase<E, V>(sp + j * s_step);
        if (v < p && j < s_lines && T - p + v < s_len) tile[s_at(j, T - p + v)] = tail[k];
    }
    __syncthreads();
#pragma unroll
    for (unsigned int n = 0; n < N; n++) {
        const unsigned int j = y + 8 * n;
        E* line = dp + j * d_step;
        const int at = (int)(V * x) - (int)phase<E, V>(line);
        if (j >= d_lines) continue;
        if (at >= 0 && at + V <= (int)d_len) {
            W word{};
#pragma unroll
            for (int v = 0; v < V; v++) word_set<E, W>(word, tile[d_at(j, at + v)], v);
            *(W*)(line + at) = word;
        } else if (at >= 0) {
            for (int v = 0; v < V; v++)
                if (at + v < (int)d_len) line[at + v] = tile[d_at(j, at + v)];
        }
    }
    // A shifted line's elements before its first aligned word and after its last (V in all),
    // the block's threads together.
#pragma unroll
    for (unsigned int k = 0; k < (T * V + 255) / 256; k++) {
        const unsigned int e = me + 256 * k, j = e / V, v = e % V;
        E* line = dp + j * d_step;
        const unsigned int q = phase<E, V>(line), c = v < V - q ? v : T - V + v;
        if (q && j < d_lines && c < d_len) line[c] = tile[d_at(j, c)];
    }
    __syncthreads();
}

// G is Grid, or Nested for grids nested in levels (NEST 1), their rows or elements folded (NEST
// 2 once a side, 3 twice, 4 three times): then each of a tile's rows and columns has its offset
// through the folds worked out once a tile, on each side (`lines`: the rows' source offsets, the
// columns', the rows' destination offsets, the columns'), rather than at every word's address
// (on an H200 f64 [6, 50, 70, 90, 11] to F order 0.113 -> 0.095 ms, f16 [2, 3, 5, 4096, 512]
// 0.126 -> 0.095, u8 [9, 40, 50, 30, 70] 0.045 -> 0.038); but not for 2-byte words folded once,
// whose 64 registers then spilled (f16 [32, 64, 128, 64] 0.026 -> 0.029 ms; capped at 80, 0.031;
// bench/RESULTS.md, 2026-11-29).
template <typename E, typename W, int V, int H, bool S = false, int NEST = 0, typename G = Grid>
__device__ __forceinline__ void grid_tiles(const E* __restrict__ s, E* __restrict__ d,
                                           const G& g, int load_q, int store_q, E* tile) {
    typedef unsigned long long u64;
    constexpr unsigned int T = 32 * V * H, P = T + 1, N = T / 8;
    const u64 tq = (g.rows + T - 1) / T, ti = (g.count + T - 1) / T;
    constexpr bool TABLES = NEST >= 2 && !(sizeof(E) == 2 && V > 1 && NEST == 2);
    __shared__ u64 lines[TABLES ? 4 : 1][TABLES ? T : 1];
    s += g.start_s;
    d += g.start_d;
    for (u64 p = blockIdx.z; p < g.batches; p += gridDim.z)
    for (u64 bq = blockIdx.x; bq < tq; bq += gridDim.x)
    for (u64 bi = blockIdx.y; bi < ti; bi += gridDim.y) {
        const u64 q0 = bq * T, i0 = bi * T;
        u64 ps = p * g.outer_s, pd = p * g.outer_d;
        if constexpr (NEST > 0) ps = g.at_s(p), pd = g.at_d(p);
        const E* sp = s + ps + q0 * g.step_s + i0 * g.stride_s;
        E* dp = d + pd + q0 * g.step_d + i0 * g.stride_d;
        const u64 lim_q = g.rows - q0, lim_i = g.count - i0;
        // An element's offset (row t, column c of the tile) on each side.
        auto at_s = [&](unsigned int t, unsigned int c) -> u64 {
            if constexpr (TABLES) return ps + lines[0][t] + lines[1][c];
            else if constexpr (NEST >= 2) return ps + g.template row_s<NEST - 1>(q0 + t) + g.template col_s<NEST - 1>(i0 + c);
            else return ps + (q0 + t) * g.step_s + (i0 + c) * g.stride_s;
        };
        auto at_d = [&](unsigned int t, unsigned int c) -> u64 {
            if constexpr (TABLES) return pd + lines[2][t] + lines[3][c];
            else if constexpr (NEST >= 2) return pd + g.template row_d<NEST - 1>(q0 + t) + g.template col_d<NEST - 1>(i0 + c);
            else return pd + (q0 + t) * g.step_d + (i0 + c) * g.stride_d;
        };
        if constexpr (TABLES) {
            constexpr int K = NEST - 1;
            for (unsigned int k = threadIdx.y * 32 + threadIdx.x; k < 4 * T; k += 256) {
                const unsigned int side = k / T, t = k % T;
                const u64 q = q0 + t, i = i0 + t;
                lines[side][t] = side == 0 ? g.template row_s<K>(q) : side == 1 ? g.template col_s<K>(i)
                               : side == 2 ? g.template row_d<K>(q) : g.template col_d<K>(i);
            }
            __syncthreads();
        }
        if constexpr (sizeof(E) == 1 && V == 4) {
            if (load_q != store_q && lim_q >= T && lim_i >= T) {
                // The source's lines b along the runs' elements or the runs, the destination's
                // a along the other (folded, through the folds, each contiguous along a line).
                if constexpr (NEST >= 2) {
                    byte_tile<S>([&](unsigned int b) { return s + (load_q ? at_s(0, b) : at_s(b, 0)); },
                                 [&](unsigned int a) { return d + (load_q ? at_d(a, 0) : at_d(0, a)); },
                                 (unsigned int*)tile);
                } else {
                    const u64 sb = load_q ? g.stride_s : g.step_s, da = load_q ? g.step_d : g.stride_d;
                    byte_tile<S>(Stepped<const E>{sp, sb}, Stepped<E>{dp, da}, (unsigned int*)tile);
                }
                continue;
            }
        }
        if constexpr (S) {
            shifted_tile<E, W, V>(sp, dp, g, load_q, store_q, lim_q, lim_i, tile);
            continue;
        }
        W w[H][N];
#pragma unroll
        for (unsigned int h = 0; h < H; h++)
#pragma unroll
        for (unsigned int n = 0; n < N; n++) {
            const unsigned int j = threadIdx.y + 8 * n, c = (threadIdx.x + 32 * h) * V;
            const unsigned int tq_ = load_q ? c : j, ti_ = load_q ? j : c;
            if (tq_ < lim_q && ti_ < lim_i && (load_q ? lim_q - tq_ : lim_i - ti_) >= V) {
                if constexpr (NEST >= 2) w[h][n] = *(const W*)(s + at_s(tq_, ti_));
                else w[h][n] = *(const W*)(sp + tq_ * g.step_s + ti_ * g.stride_s);
            }
        }
#pragma unroll
        for (unsigned int h = 0; h < H; h++)
#pragma unroll
        for (unsigned int n = 0; n < N; n++) {
            const unsigned int j = threadIdx.y + 8 * n, c = (threadIdx.x + 32 * h) * V;
            const unsigned int tq_ = load_q ? c : j, ti_ = load_q ? j : c;
            if (tq_ >= lim_q || ti_ >= lim_i) continue;
            const unsigned int at = tq_ * P + ti_;
            if constexpr (V == 1) {
                tile[at] = w[h][n];
            } else {
                const u64 left = load_q ? lim_q - tq_ : lim_i - ti_;
                const unsigned int next = load_q ? P : 1;
                if (left >= V) {
#pragma unroll
                    for (int v = 0; v < V; v++) tile[at + v * next] = word_part<E, W>(w[h][n], v);
                } else {
                    const E* from = sp + tq_ * g.step_s + ti_ * g.stride_s;
                    if constexpr (NEST >= 2) from = s + at_s(tq_, ti_);
                    for (unsigned int v = 0; v < left; v++) tile[at + v * next] = from[v];
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (unsigned int h = 0; h < H; h++)
#pragma unroll
        for (unsigned int n = 0; n < N; n++) {
            const unsigned int j = threadIdx.y + 8 * n, c = (threadIdx.x + 32 * h) * V;
            const unsigned int tq_ = store_q ? c : j, ti_ = store_q ? j : c;
            if (tq_ >= lim_q || ti_ >= lim_i) continue;
            E* to = dp + tq_ * g.step_d + ti_ * g.stride_d;
            if constexpr (NEST >= 2) to = d + at_d(tq_, ti_);
            const unsigned int at = tq_ * P + ti_;
            if constexpr (V == 1) {
                *to = tile[at];
            } else {
                const u64 left = store_q ? lim_q - tq_ : lim_i - ti_;
                const unsigned int next = store_q ? P : 1;
                if (left >= V) {
                    W word{};
#pragma unroll
                    for (int v = 0; v < V; v++) word_set<E, W>(word, tile[at + v * next], v);
                    *(W*)to = word;
                } else {
                    for (unsigned int v = 0; v < left; v++) to[v] = tile[at + v * next];
                }
            }
        }
        __syncthreads();
    }
}

// COMMA puts a launch bound's blocks an SM into one macro argument (MINB, below); TILE(K) is a
// tile of 32 K elements square, a column more.
#define COMMA ,
#define TILE(K) (32 * (K) * (32 * (K) + 1))
"#;

/// The backend's copy kernels past [`TILE_KERNELS`] (compiled with it): tiles of grids of one
/// level, across, narrow and gapped, and the FFT's complex product.
const KERNELS: &str = r#"
// One kernel per element size (each keeps its own registers): copy_grid_<bytes>, taking words
// of W (V elements) where `wide`, else one element at a time.
// MINB (empty, or COMMA and the blocks an SM must hold) caps the registers: the 1-, 2- and
// 4-byte kernels left to themselves take too many, and move 74-86% of the copy bandwidth; at
// four blocks an SM 86-97% on an H200 (at three, 88-92%), 92-97% on an H100 (bench/RESULTS.md,
// 2026-11-26 and 2026-11-27).
// 1- and 8-byte elements have a kernel for each way, copy_grid_1 / copy_grid_8 one element at a
// time and copy_grid_1w / copy_grid_8w in words (bytes in 4 x 4 blocks, `byte_tile`; 8-byte
// elements two to a 16-byte word in 33 KiB tiles): one kernel with both paths takes the larger
// tile and registers for either, and its narrow path ran slower, beside the 2-D FFT's exchange
// by 12%, for bytes by 16% (bench/RESULTS.md, 2026-11-27).
// Element by element (not `wide`), where the host finds tiles enough (`pairs`), each thread
// moves H elements along a tile's lines (tiles of 32 H square; H = 2 for elements of 1, 2 and 4
// bytes), so that a block of small tiles does not spend more on starting than on moving; a
// small grid keeps tiles of 32 and more blocks.
#define COPY_GRID(NAME, E, W, V, H, MINB)                                                        \
    extern "C" __global__ void __launch_bounds__(256 MINB) copy_grid_##NAME(                     \
        const E* src, E* dst, Grid g, int load_q, int store_q, int wide, int pairs) {            \
        __shared__ __align__(16) E tile[TILE(V > H ? V : H)];                                    \
        if (V > 1 && wide) grid_tiles<E, W, V, 1>(src, dst, g, load_q, store_q, tile);           \
        else if (H > 1 && pairs) grid_tiles<E, E, 1, H>(src, dst, g, load_q, store_q, tile);     \
        else grid_tiles<E, E, 1, 1>(src, dst, g, load_q, store_q, tile);                         \
    }
COPY_GRID(1, unsigned char, unsigned char, 1, 2, )
COPY_GRID(1w, unsigned char, unsigned int, 4, 1, COMMA 4)
COPY_GRID(2, unsigned short, unsigned long long, 4, 2, COMMA 4)
COPY_GRID(4, unsigned int, unsigned long long, 2, 2, COMMA 4)
COPY_GRID(8, unsigned long long, unsigned long long, 1, 1, )
COPY_GRID(8w, unsigned long long, uint4, 2, 1, )
COPY_GRID(16, uint4, uint4, 1, 1, )

// copy_grid_<bytes>s: in words of W (V elements) where each side's lines run along one axis but
// need not start on a word (shifted_tile; bytes in 4 x 4 blocks, byte_tile shifted). Bytes and
// 2-byte elements capped at three blocks an SM (80 registers), against four: u8 16385 x 16383
// C -> F 0.238 -> 0.218 ms, f16 8191 x 12289 0.170 -> 0.143 on an H200 (bench/RESULTS.md,
// 2026-11-27 eleventh session).
#define COPY_SHIFTED(NAME, E, W, V, MINB)                                                        \
    extern "C" __global__ void __launch_bounds__(256 MINB) copy_grid_##NAME##s(                  \
        const E* src, E* dst, Grid g, int load_q, int store_q, int, int) {                       \
        __shared__ __align__(16) E tile[TILE(V)];                                                \
        grid_tiles<E, W, V, 1, true>(src, dst, g, load_q, store_q, tile);                        \
    }
COPY_SHIFTED(1, unsigned char, unsigned int, 4, COMMA 3)
COPY_SHIFTED(2, unsigned short, unsigned long long, 4, COMMA 3)
COPY_SHIFTED(4, unsigned int, unsigned long long, 2, COMMA 4)
COPY_SHIFTED(8, unsigned long long, uint4, 2, )

// copy_grid_1t and copy_grid_2t: 1- and 2-byte elements across (the source's lines along one
// axis, the destination's along the other) where lines start anywhere in a word on both sides,
// in grids too large for the L2 to hold. Where a line's 128 bytes start mid-sector, writing them
// costs the L2 a partial sector at each end, shared with the next tile's write; reading them so
// costs nothing (on an H200, 1.3x the time writing words anywhere against whole sectors, the
// same reading either way; bench/RESULTS.md, 2026-11-28 seventeenth session). So each block
// writes whole sectors: of each destination line of its CB columns (a source line's 128 bytes),
// the K x 128 bytes from the sector holding its band's first row r0 (rows r0 - phi.., phi that
// row's place in its sector), and reads for that the HALO lines before its band too (32 bytes'
// worth). Each warp reads V source lines at a time (each lane a word, two aligned ones
// funnel-shifted to the columns), turns its V x V block over in registers and stores the V
// words down the tile's columns (P words apart, and a column more every 32, so that a warp's
// stores meet every bank once), in PASSES passes; then each destination word is two tile words
// funnel-shifted to where its sector puts its rows. Inner tiles check no bounds; at a grid's
// edges, elements outside the lines stay unread and unwritten.
// A batch of grids may be swept as one (the host's `Sweep`, FOLD): where each grid's
// destination lines continue the last's (a three-axis reversal read along its last axis and
// written along its first, say), its lines follow one another as one grid's (FOLD_ROWS); where
// its source lines continue the last's, their elements do (FOLD_COLS). Few lines (129) or short
// ones (257 elements) then fill whole bands and tiles. Line t of the rows swept then starts
// t / per grids on, each grid `jump` bytes further than its lines' steps reach (column c's
// destination line likewise): the quotient of an index below 2^31 by a multiply-high and a
// shift (the host's `divider`). 4-byte elements (V = 1, each line on its words) take these
// kernels only folded (copy_grid_4tr, 4tc): a batch of grids with few or short lines (f32
// [7, 2049, 4097] to F order), which tiles of 64 elements square would mostly leave empty.
enum { UNFOLDED = 0, FOLD_ROWS = 1, FOLD_COLS = 2 };

// What the host makes of a grid for these kernels: the source's lines and their length as swept,
// the grids launched apart (1 where folded), the fold's lines a grid (or their length), divider
// and jump, and the tiles along a line a strip of blocks takes before the next band (0: a whole
// band of tiles first).
struct Sweep {
    unsigned long long lines, len, batches, per, mul, shift;
    long long jump;
    unsigned long long strip;
};

struct Lines {
    unsigned long long src, dst;  // byte addresses of line 0's first element on each side
    long long lines, len, ps, pd;  // source lines, their length, and each side's line step
    unsigned int mul, shift;       // the fold's divider
    long long jump;                // and its jump in bytes
    // The fold's jumps before index i.
    __device__ __forceinline__ long long jumps(long long i) const {
        return (long long)(__umulhi((unsigned int)i, mul) >> shift) * jump;
    }
};

template <int E> struct Unit { typedef unsigned char T; };
template <> struct Unit<2> { typedef unsigned short T; };
template <> struct Unit<4> { typedef unsigned int T; };

template <int E, int K, int FOLD>
struct Across {
    typedef unsigned long long u64;
    typedef typename Unit<E>::T T;
    static constexpr int V = 4 / E, CB = 128 / E, RB = K * CB, HALO = 32 / E, ROWS = RB + HALO;
    static constexpr int GROUPS = ROWS / V, P = GROUPS + 1, WARPS = 8;
    static constexpr int PASSES = K == 1 ? 1 : 3, PER = GROUPS / WARPS / PASSES;
    static_assert(PER * PASSES * WARPS == GROUPS, "every group of lines in a pass");
    static constexpr int WORDS = CB * P + CB / 32;
    long long r0, c0;

    __device__ static unsigned int column(unsigned int x) { return x * P + (x >> 5); }
    __device__ bool inner(const Lines& a) const {
        return r0 >= HALO && r0 + RB <= a.lines && c0 + CB < a.len;
    }
    template <bool EDGE>
    __device__ void load(const Lines& a, unsigned int* sm, unsigned int w, unsigned int l) const {
        const long long step = a.ps * E, t_first = r0 - HALO + V * w;
        const u64 first = a.src + (u64)(t_first * step) + (u64)(c0 * E);
#pragma unroll 1
        for (int pass = 0; pass < PASSES; pass++) {
            unsigned int w0[PER][V], w1[PER][V], sh[PER][V];
#pragma unroll
            for (int g = 0; g < PER; g++)
#pragma unroll
                for (int v = 0; v < V; v++) {
                    const int k = V * WARPS * (g + PER * pass) + v;
                    u64 from = first + (u64)(k * step);
                    if constexpr (FOLD == FOLD_ROWS) from += a.jumps(t_first + k);
                    const u64 p0 = (from & ~3ull) + 4 * l, p1 = p0 + 4;
                    sh[g][v] = (unsigned int)(from & 3) * 8;
                    // 4-byte elements start on their words: no second word to shift from.
                    if constexpr (EDGE) {
                        const u64 end = from + (u64)((a.len - c0) * E);
                        const bool in = t_first + k >= 0 && t_first + k < a.lines;
                        w0[g][v] = in && p0 < end ? *(const unsigned int*)p0 : 0u;
                        w1[g][v] = E < 4 && in && p1 < end && sh[g][v] ? *(const unsigned int*)p1 : 0u;
                    } else {
                        w0[g][v] = *(const unsigned int*)p0;
                        w1[g][v] = E < 4 ? *(const unsigned int*)p1 : 0u;
                    }
                }
#pragma unroll
            for (int g = 0; g < PER; g++) {
                unsigned int r[V], o[V];
#pragma unroll
                for (int v = 0; v < V; v++)
                    r[v] = E < 4 ? __funnelshift_r(w0[g][v], w1[g][v], sh[g][v]) : w0[g][v];
                if constexpr (V == 4) {
                    const unsigned int t0 = __byte_perm(r[0], r[1], 0x5140);
                    const unsigned int t1 = __byte_perm(r[0], r[1], 0x7362);
                    const unsigned int t2 = __byte_perm(r[2], r[3], 0x5140);
                    const unsigned int t3 = __byte_perm(r[2], r[3], 0x7362);
                    o[0] = __byte_perm(t0, t2, 0x5410);
                    o[1] = __byte_perm(t0, t2, 0x7632);
                    o[2] = __byte_perm(t1, t3, 0x5410);
                    o[3] = __byte_perm(t1, t3, 0x7632);
                } else if constexpr (V == 2) {
                    o[0] = __byte_perm(r[0], r[1], 0x5410);
                    o[1] = __byte_perm(r[0], r[1], 0x7632);
                } else {
                    o[0] = r[0];
                }
                const unsigned int G = w + WARPS * (g + PER * pass);
#pragma unroll
                for (int i = 0; i < V; i++) sm[column(V * l + i) + G] = o[i];
            }
        }
    }
    template <bool EDGE>
    __device__ void write(const Lines& a, const unsigned int* sm, unsigned int w, unsigned int l) const {
        const long long step = a.pd * E;
        const u64 first = a.dst + (u64)((c0 + w) * step) + (u64)(r0 * E);
#pragma unroll
        for (int i = 0; i < CB / WARPS; i++) {
            const unsigned int x = w + WARPS * i;
            if (EDGE && c0 + x >= a.len) continue;
            u64 seg = first + (u64)(WARPS * i * step);
            if constexpr (FOLD == FOLD_COLS) seg += a.jumps(c0 + x);
            const int phi = (int)((seg & 31) / E);
#pragma unroll
            for (int h = 0; h < K; h++) {
                const unsigned int m = l + 32 * h;
                const u64 at = (seg & ~31ull) + 4 * m;
                const int j0 = HALO - phi + V * (int)m;  // the word's first row in the tile
                const unsigned int* col = sm + column(x) + j0 / V;
                const unsigned int word =
                    V == 1 ? col[0] : __funnelshift_r(col[0], col[1], (unsigned int)(j0 % V) * 8 * E);
                if constexpr (EDGE) {
                    const long long t0 = r0 - phi + V * (long long)m;  // below 0: before the line
                    if (t0 < 0 || t0 + V > a.lines) {
                        for (int v = 0; v < V; v++)
                            if (t0 + v >= 0 && t0 + v < a.lines) ((T*)at)[v] = (T)(word >> (8 * E * v));
                        continue;
                    }
                }
                *(unsigned int*)at = word;
            }
        }
    }
};

// One tile: (bx, by) of grid p.
template <int E, int K, int FOLD>
__device__ __forceinline__ void across_tile(const unsigned char* s, unsigned char* d, const Grid& g,
                                            const Sweep& sw, int load_q, unsigned int* sm,
                                            unsigned long long p, long long by, long long bx) {
    typedef Across<E, K, FOLD> A;
    // The source's lines run along the runs (load_q) or along a run's elements.
    const long long ps = load_q ? g.stride_s : g.step_s, pd = load_q ? g.step_d : g.stride_d;
    const A t{by * A::RB, bx * A::CB};
    const Lines a{(unsigned long long)(s + (g.start_s + p * g.outer_s) * E),
                  (unsigned long long)(d + (g.start_d + p * g.outer_d) * E),
                  (long long)sw.lines, (long long)sw.len, ps, pd, (unsigned int)sw.mul,
                  (unsigned int)sw.shift, sw.jump};
    const unsigned int w = threadIdx.y, l = threadIdx.x;
    if (t.inner(a)) {
        t.template load<false>(a, sm, w, l);
        __syncthreads();
        t.template write<false>(a, sm, w, l);
    } else {
        t.template load<true>(a, sm, w, l);
        __syncthreads();
        t.template write<true>(a, sm, w, l);
    }
}

// Tile (bx, by) of a grid's `tiles` x `bands` in strips of `strip` tiles along the lines, each
// strip's bands in turn (the blocks' order as launched: bx first, then by): where a grid has
// few bands, the blocks on the GPU at once then write more of each destination line than one
// band's 128 bytes (f16 1023 x 131327 to F order, 17 bands, on an H200: 0.239 -> 0.195 ms).
__device__ __forceinline__ void strip_order(long long& by, long long& bx, long long bands,
                                            long long tiles, long long strip) {
    if (strip == 0 || strip >= tiles) return;
    const long long k = bx + tiles * by, per = strip * bands;
    const long long first = k / per * strip, in = k % per;
    const long long wide = strip < tiles - first ? strip : tiles - first;
    by = in / wide;
    bx = first + in % wide;
}

// The host launches a block a tile (x along the source's lines, y over their bands, z the
// grids). 2-byte elements take the block's own tile: looping over tiles in a block ran 1.13x
// slower on an H200. Bytes loop (over the one tile a launch gives each block), as measured:
// taking the tile alone, their kernel spills 80 bytes of registers at four blocks an SM (not yet
// run on a GPU).
template <int E, int K, int FOLD, bool LOOP>
__device__ __forceinline__ void across_tiles(const unsigned char* s, unsigned char* d, const Grid& g,
                                             const Sweep& sw, int load_q, unsigned int* sm) {
    typedef Across<E, K, FOLD> A;
    const long long lines = sw.lines, len = sw.len, strip = sw.strip;
    const long long bands = (lines + A::HALO + A::RB - 1) / A::RB, tiles = (len + A::CB - 1) / A::CB;
    if constexpr (LOOP) {
        for (unsigned long long p = blockIdx.z; p < sw.batches; p += gridDim.z)
        for (long long y = blockIdx.y; y < bands; y += gridDim.y)
        for (long long x = blockIdx.x; x < tiles; x += gridDim.x) {
            long long by = y, bx = x;
            strip_order(by, bx, bands, tiles, strip);
            across_tile<E, K, FOLD>(s, d, g, sw, load_q, sm, p, by, bx);
            __syncthreads();
        }
    } else if (blockIdx.z < sw.batches && blockIdx.y < bands && blockIdx.x < tiles) {
        long long by = blockIdx.y, bx = blockIdx.x;
        strip_order(by, bx, bands, tiles, strip);
        across_tile<E, K, FOLD>(s, d, g, sw, load_q, sm, blockIdx.z, by, bx);
    }
}

// Bytes in bands of 256 lines, 2- and 4-byte elements of 64 (on an H200 bytes in bands of 128
// ran 1.03x slower, 2-byte elements in bands of 128 1.02-1.07x); registers capped for four and
// five blocks an SM. Each unfolded (copy_grid_<bytes>t), its rows folded (tr) or its columns
// (tc).
#define COPY_ACROSS(NAME, E, K, FOLD, LOOP, MINB)                                                \
    extern "C" __global__ void __launch_bounds__(256 MINB) copy_grid_##NAME(                     \
        const Unit<E>::T* src, Unit<E>::T* dst, Grid g, Sweep sw, int load_q) {                  \
        __shared__ unsigned int sm[Across<E, K, FOLD>::WORDS];                                   \
        across_tiles<E, K, FOLD, LOOP>((const unsigned char*)src, (unsigned char*)dst, g, sw,    \
                                       load_q, sm);                                              \
    }
COPY_ACROSS(1t, 1, 2, UNFOLDED, true, COMMA 4)
COPY_ACROSS(1tr, 1, 2, FOLD_ROWS, true, COMMA 4)
COPY_ACROSS(1tc, 1, 2, FOLD_COLS, true, COMMA 4)
COPY_ACROSS(2t, 2, 1, UNFOLDED, false, COMMA 5)
COPY_ACROSS(2tr, 2, 1, FOLD_ROWS, false, COMMA 5)
COPY_ACROSS(2tc, 2, 1, FOLD_COLS, false, COMMA 5)
COPY_ACROSS(4tr, 4, 2, FOLD_ROWS, false, COMMA 5)
COPY_ACROSS(4tc, 4, 2, FOLD_COLS, false, COMMA 5)

// copy_narrow_<bytes>: grids with a short axis (r: 2 elements up to 63 bytes) that one side
// packs, its lines one after another, q apart (q = r, or up to 2r or 64 bytes: lines with gaps
// between them), as in a C-order
// [3, 5000000] to F order (lines of 3 elements, 12 bytes), the other side holding that axis's
// few long lines `pitch` apart. Tiles of a square kernel would stand mostly empty, and whole
// sectors hold several packed lines; so each block takes the next C elements (2^log_c, the
// host's pick to fill the shared tile) of every long line and the packed stretch they make
// together, reading one side and writing the other in order through shared memory: element e of
// the stretch is element e / q of line e % q (the host's divider for q), a gap from line r on.
// Both sides move in 16-byte words where the data lies on them (a word a gap cuts, element by
// element when written), element by element at their ends: row j of the tile holds line j's
// element c at row(j) + h_j + c (row(j) about j * P: see Words), h_j the line's elements past a
// 16-byte boundary, so that the line's words are the tile's. Where both sides pack the short
// axis (mode 2: an exchange's pack of short rows, up to 256 bytes, from a wider array), the
// destination's lines `pitch` apart are its packed lines with gaps between (the divider mul_o,
// shift_o for pitch), and every h_j is 0. The short axis may be two folded into one (an [N, a,
// b] from F to C order packs a * b elements, its lines of N two axes apart): line j then lies
// (j % fold) * pitch + (j / fold) * pitch2 from line 0 (mul_f, shift_f the divider for fold; fold
// r where nothing is folded).
// (Its small fields are 32 bits: NVRTC addressed a larger struct, of 152 bytes, in parameter
// space where it keeps this one's fields in registers, and unrolled less.)
struct Narrow {
    unsigned long long packed, lines;  // grid 0's first element on each side
    unsigned long long outer_p, outer_l, batches;  // from grid to grid (elements), the grids
    unsigned long long n, pitch, pitch2;  // the long axis, the long lines' step, the groups'
    unsigned int r, q, fold;  // the short axis, the packed lines' step, the long lines a group
    unsigned int mul, shift, log_c;
    unsigned int mode;  // 0 unpacking (the source packs), 1 packing, 2 both packed
    unsigned int mul_o, shift_o;
    unsigned int mul_f, shift_f;
};

// Where a narrow grid's long lines lie: line j at (j % fold) * pitch + (j / fold) * pitch2 from
// line 0 (the divider mul, shift for fold) where the kernel folds (F), else j * pitch.
template <bool F>
struct Folds {
    unsigned int fold, mul, shift;
    unsigned long long pitch, pitch2;
    __device__ __forceinline__ unsigned int group(unsigned int j) const {
        return F ? __umulhi(j, mul) >> shift : 0;
    }
    __device__ __forceinline__ unsigned long long at(unsigned int j) const {
        const unsigned int g = group(j);
        return (j - g * fold) * pitch + g * pitch2;
    }
};

// The elements of T in a 16-byte word, those of `x` past the last 16-byte boundary, and where
// a narrow tile's row j starts: rows P apart, and where they shift (S, 1- and 2-byte elements)
// j >> (log2 V - 1) words further (up to 7 for 63 lines of bytes, 15 of f16), so that the packed
// side's threads, whose lines are V apart, fall in different banks (u8 lines of 60 met 8 to a
// bank, 2 shifted).
template <typename T>
struct Words {
    static constexpr unsigned int V = 16 / sizeof(T);
    static __device__ __forceinline__ unsigned int skew(const T* x) {
        return (unsigned int)((unsigned long long)x / sizeof(T)) & (V - 1);
    }
    template <bool S>
    static __device__ __forceinline__ unsigned int row(unsigned int j, unsigned int P) {
        return j * P + (S && V >= 8 ? (j >> (V == 16 ? 3 : 2)) * V : 0);
    }
};

// The long lines' side: `cols` elements of r lines from g, `pitch` apart, to the tile's rows
// (LOAD) or back. Each thread takes a row's word (the row's words in turn, then the next
// row's); a word a line's ends cut moves element by element.
template <typename T, bool LOAD, bool S, bool F>
__device__ __forceinline__ void narrow_lines(T* g, const Folds<F>& f, T* tile, unsigned int P,
                                             unsigned int r, unsigned int cols) {
    constexpr unsigned int V = Words<T>::V;
    const unsigned int per = P / V;
    unsigned int j = threadIdx.x / per, q = threadIdx.x - j * per;
    while (j < r) {
        T* line = g + f.at(j);
        const int c0 = (int)(q * V) - (int)Words<T>::skew(line);
        T* t = tile + Words<T>::template row<S>(j, P) + q * V;
        if (c0 >= 0 && c0 + (int)V <= (int)cols) {
            if (LOAD) *(uint4*)t = *(const uint4*)(line + c0);
            else *(uint4*)(line + c0) = *(const uint4*)t;
        } else {
#pragma unroll
            for (int i = 0; i < (int)V; i++) {
                const int c = c0 + i;
                if (c >= 0 && c < (int)cols) {
                    if (LOAD) t[i] = line[c];
                    else line[c] = t[i];
                }
            }
        }
        for (q += blockDim.x; q >= per; q -= per) j++;
    }
}

// The packed side: the stretch's `all` elements from x to the tile (LOAD) or back, a 16-byte
// word a thread, gaps skipped: lines q apart (mul and shift the divider for q). h0 is line 0's
// skew; line j's is h0 + (j % fold) * pitch + (j / fold) * pitch2, mod V (`f`; both pitches 0
// where the lines' skews do not matter).
template <typename T, bool LOAD, bool S, bool F>
__device__ __forceinline__ void narrow_packed(T* x, unsigned int all, T* tile, unsigned int P,
                                              unsigned int r, unsigned int q, unsigned int mul,
                                              unsigned int shift, unsigned int h0,
                                              const Folds<F>& f) {
    constexpr unsigned int V = Words<T>::V;
    union Word { uint4 v; T e[V]; };
    const unsigned int H = Words<T>::skew(x), words = (all + H + V - 1) / V;
    const unsigned int hp = (unsigned int)f.pitch & (V - 1), hg = (unsigned int)f.pitch2 & (V - 1);
    // From a group's last line to the next group's first.
    const unsigned int hq = (hg - (f.fold - 1) * hp) & (V - 1);
    for (unsigned int w = threadIdx.x; w < words; w += blockDim.x) {
        const int e0 = (int)(w * V) - (int)H;
        const unsigned int first = e0 < 0 ? 0u : (unsigned int)e0;
        // The element's line j (a gap from r on), its place in its group k, and column c, and
        // the line's skew h: the next element's follow.
        unsigned int c = __umulhi(first, mul) >> shift, j = first - c * q, k = 0, h;
        if (F) {
            const unsigned int g = f.group(j);
            k = j - g * f.fold;
            h = (h0 + k * hp + g * hg) & (V - 1);
        } else {
            h = (h0 + j * hp) & (V - 1);
        }
        auto next = [&] {
            if (++j == q) {
                j = 0;
                c++;
                h = h0;
                if (F) k = 0;
            } else if (F && ++k == f.fold) {
                k = 0;
                h = (h + hq) & (V - 1);
            } else {
                h = (h + hp) & (V - 1);
            }
        };
        // A whole word is read, gaps and all; written only where no gap cuts it.
        if (e0 >= 0 && e0 + (int)V <= (int)all && (LOAD || q == r || j + V <= r)) {
            Word word;
            if (LOAD) word.v = *(const uint4*)(x + e0);
#pragma unroll
            for (unsigned int i = 0; i < V; i++) {
                if (j < r) {
                    T& t = tile[Words<T>::template row<S>(j, P) + h + c];
                    if (LOAD) t = word.e[i];
                    else word.e[i] = t;
                }
                next();
            }
            if (!LOAD) *(uint4*)(x + e0) = word.v;
        } else {
            for (int e = (int)first; e < e0 + (int)V && e < (int)all; e++) {
                if (j < r) {
                    T& t = tile[Words<T>::template row<S>(j, P) + h + c];
                    if (LOAD) t = x[e];
                    else x[e] = t;
                }
                next();
            }
        }
    }
}

template <typename T, bool S, bool F>
__device__ __forceinline__ void narrow_in(const T* s, T* d, const Narrow& a, T* tile) {
    constexpr unsigned int V = Words<T>::V;
    const unsigned int C = 1u << a.log_c, P = C + V;
    const unsigned long long p = blockIdx.y, b0 = (unsigned long long)blockIdx.x * C;
    if (p >= a.batches || b0 >= a.n) return;
    const unsigned int r = (unsigned int)a.r, cols = a.n - b0 < C ? (unsigned int)(a.n - b0) : C;
    T* from = const_cast<T*>(s);
    const bool pack = a.mode == 1;
    T* packed = (pack ? d : from) + a.packed + p * a.outer_p + b0 * a.q;
    const unsigned int q = (unsigned int)a.q, mul = (unsigned int)a.mul, shift = (unsigned int)a.shift;
    // The stretch: from line 0's first element to line r - 1's last.
    const unsigned int all = (cols - 1) * q + r;
    const Folds<F> f{(unsigned int)a.fold, (unsigned int)a.mul_f, (unsigned int)a.shift_f,
                     a.pitch, a.pitch2};
    if (!F && a.mode == 2) {
        const unsigned int qd = (unsigned int)a.pitch;
        const Folds<F> none{f.fold, f.mul, f.shift, 0, 0};
        narrow_packed<T, true, S, F>(packed, all, tile, P, r, q, mul, shift, 0, none);
        __syncthreads();
        narrow_packed<T, false, S, F>(d + a.lines + p * a.outer_l + b0 * qd, (cols - 1) * qd + r,
                                      tile, P, r, qd, (unsigned int)a.mul_o,
                                      (unsigned int)a.shift_o, 0, none);
        return;
    }
    T* lines = (pack ? from : d) + a.lines + p * a.outer_l + b0;
    const unsigned int h0 = Words<T>::skew(lines);
    if (pack) {
        narrow_lines<T, true, S, F>(lines, f, tile, P, r, cols);
        __syncthreads();
        narrow_packed<T, false, S, F>(packed, all, tile, P, r, q, mul, shift, h0, f);
    } else {
        narrow_packed<T, true, S, F>(packed, all, tile, P, r, q, mul, shift, h0, f);
        __syncthreads();
        narrow_lines<T, false, S, F>(lines, f, tile, P, r, cols);
    }
}

// The tile's rows unshifted (copy_narrow_<bytes>) or shifted between banks
// (copy_narrow_shifted_<bytes>, 1- and 2-byte elements: 16 words more for the shifts); the
// short axis two folded into one (copy_narrow_folded_<bytes>, copy_narrow_folded_shifted_<bytes>).
template <typename T, bool S, bool F>
__device__ __forceinline__ void narrow_tiled(const T* s, T* d, const Narrow& a) {
    __shared__ __align__(16) T tile[16 * (2048 / sizeof(T) + Words<T>::V) + (S ? 16 * Words<T>::V : 0)];
    narrow_in<T, S, F>(s, d, a, tile);
}
#define NARROW(FN, S, F)                                                                       \
    template <typename T>                                                                      \
    __device__ __forceinline__ void FN(const T* s, T* d, const Narrow& a) {                    \
        narrow_tiled<T, S, F>(s, d, a);                                                        \
    }
NARROW(narrow, false, false)
NARROW(narrow_shifted, true, false)
NARROW(narrow_folded, false, true)
NARROW(narrow_folded_shifted, true, true)

// NAME_<bytes> for elements of 1, 2, 4, 8 and 16 bytes: FN<T>(s, d, a), `a` an A by value.
#define BY_SIZE_ONE(NAME, FN, A, BYTES, T)                                                       \
    extern "C" __global__ void __launch_bounds__(256) NAME##_##BYTES(const T* s, T* d, A a) {  \
        FN<T>(s, d, a);                                                                          \
    }
#define BY_SIZE(NAME, FN, A)                                                                     \
    BY_SIZE_ONE(NAME, FN, A, 1, unsigned char)                                                   \
    BY_SIZE_ONE(NAME, FN, A, 2, unsigned short)                                                  \
    BY_SIZE_ONE(NAME, FN, A, 4, unsigned int)                                                    \
    BY_SIZE_ONE(NAME, FN, A, 8, unsigned long long)                                              \
    BY_SIZE_ONE(NAME, FN, A, 16, uint4)
BY_SIZE(copy_narrow, narrow, Narrow)
BY_SIZE_ONE(copy_narrow_shifted, narrow_shifted, Narrow, 1, unsigned char)
BY_SIZE_ONE(copy_narrow_shifted, narrow_shifted, Narrow, 2, unsigned short)
BY_SIZE(copy_narrow_folded, narrow_folded, Narrow)
BY_SIZE_ONE(copy_narrow_folded_shifted, narrow_folded_shifted, Narrow, 1, unsigned char)
BY_SIZE_ONE(copy_narrow_folded_shifted, narrow_folded_shifted, Narrow, 2, unsigned short)

// A batch of grids whose few rows are short destination lines (step 1) with gaps between grids
// (the destination's outer step more than the rows), read along the runs' elements (source
// stride 1): an exchange's unpack of 4 of each 7 elements along a C-order [7, J, K]'s first axis
// into F order. The rows of every grid fold into one axis of lines (t = grid * rows + row), so a
// block's tile holds 64 of them by 32 of a run's elements: each warp reads whole source lines of
// 32 elements, then writes, for each element, 32 folded lines at once (groups of `rows`
// contiguous, the gaps skipped).
template <typename T>
__device__ __forceinline__ void gapped(const T* s, T* d, const Grid& g) {
    typedef unsigned long long u64;
    __shared__ T tile[64][33];
    const u64 lines = g.rows * g.batches;
    const unsigned int x = threadIdx.x, y = threadIdx.y;
    for (u64 t0 = blockIdx.y * 64ull; t0 < lines; t0 += gridDim.y * 64ull)
    for (u64 k0 = blockIdx.x * 32ull; k0 < g.count; k0 += gridDim.x * 32ull) {
        T w[8];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const u64 t = t0 + y + 8 * n, k = k0 + x;
            if (t < lines && k < g.count) {
                const u64 b = t / g.rows, r = t % g.rows;
                w[n] = s[g.start_s + b * g.outer_s + r * g.step_s + k * g.stride_s];
            }
        }
#pragma unroll
        for (int n = 0; n < 8; n++) tile[y + 8 * n][x] = w[n];
        __syncthreads();
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const u64 t = t0 + x + 32 * h;
            if (t >= lines) continue;
            const u64 b = t / g.rows, r = t % g.rows;
            T* line = d + g.start_d + b * g.outer_d + r * g.step_d;
#pragma unroll
            for (int m = 0; m < 4; m++) {
                const u64 k = k0 + y + 8 * m;
                if (k < g.count) line[k * g.stride_d] = tile[x + 32 * h][y + 8 * m];
            }
        }
        __syncthreads();
    }
}

BY_SIZE(copy_gapped, gapped, Grid)

// A grid whose two axes are both short, each continued by a third, m, on one side (the host's
// `Ends`): x runs along the source (step 1), y along the destination, and m steps nx on the
// source and ny on the destination, as a three-axis reversal [3, 230013, 16] with both end axes
// short runs between C and F order. A block's tile holds `per` steps of m whole: it reads them
// y by y, each a stretch of per * nx source elements (a row of the tile, padded to an odd
// length), and writes them x by x, each a stretch of per * ny destination elements, 8 elements a
// thread in flight each way. Indices below 2^31 divided as the host's `divider` says (mul,
// shift: by per * nx, per * ny and ny).
struct Ends {
    unsigned long long start_s, start_d, m, step_ys, step_xd;
    unsigned int nx, ny, per, row, mul[3], shift[3];
};

template <typename T>
__device__ __forceinline__ void ends(const T* s, T* d, const Ends& a) {
    typedef unsigned long long u64;
    __shared__ __align__(16) T tile[32768 / sizeof(T)];
    const unsigned int jx = a.per * a.nx, jy = a.per * a.ny, n = jx * a.ny;
    for (u64 m0 = (u64)blockIdx.x * a.per; m0 < a.m; m0 += (u64)gridDim.x * a.per) {
        // The stretches' elements that lie inside the grid (the last tile's may not).
        const u64 left = a.m - m0;
        const unsigned int lx = left < a.per ? (unsigned int)left * a.nx : jx;
        const unsigned int ly = left < a.per ? (unsigned int)left * a.ny : jy;
        const T* from = s + a.start_s + m0 * a.nx;
        T* to = d + a.start_d + m0 * a.ny;
        for (unsigned int e0 = threadIdx.x; e0 < n; e0 += 256 * 8) {
            T w[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const unsigned int e = e0 + 256 * k;
                const unsigned int y = __umulhi(e, a.mul[0]) >> a.shift[0], r = e - y * jx;
                if (e < n && r < lx) w[k] = from[r + y * a.step_ys];
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const unsigned int e = e0 + 256 * k;
                const unsigned int y = __umulhi(e, a.mul[0]) >> a.shift[0], r = e - y * jx;
                if (e < n && r < lx) tile[y * a.row + r] = w[k];
            }
        }
        __syncthreads();
        for (unsigned int e0 = threadIdx.x; e0 < n; e0 += 256 * 8) {
            T w[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const unsigned int e = e0 + 256 * k;
                const unsigned int x = __umulhi(e, a.mul[1]) >> a.shift[1], r = e - x * jy;
                const unsigned int j = __umulhi(r, a.mul[2]) >> a.shift[2], y = r - j * a.ny;
                if (e < n && r < ly) w[k] = tile[y * a.row + j * a.nx + x];
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const unsigned int e = e0 + 256 * k;
                const unsigned int x = __umulhi(e, a.mul[1]) >> a.shift[1], r = e - x * jy;
                if (e < n && r < ly) to[x * a.step_xd + r] = w[k];
            }
        }
        __syncthreads();
    }
}

BY_SIZE(copy_ends, ends, Ends)

// The product over `ranks` gathered arrays of n complex values (float2 or double2), elements
// first..first + count, in rank order, in double precision.
extern "C" __global__ void complex_product(const void* all, void* out, int f64,
                                           unsigned long long n, unsigned long long first,
                                           unsigned long long count, unsigned long long ranks) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < count; i += (unsigned long long)gridDim.x * blockDim.x) {
        double re = 1.0, im = 0.0;
        for (unsigned long long r = 0; r < ranks; r++) {
            unsigned long long k = r * n + first + i;
            double x, y;
            if (f64) { double2 v = ((const double2*)all)[k]; x = v.x; y = v.y; }
            else { float2 v = ((const float2*)all)[k]; x = v.x; y = v.y; }
            double t = re * x - im * y;
            im = re * y + im * x;
            re = t;
        }
        if (f64) ((double2*)out)[i] = make_double2(re, im);
        else ((float2*)out)[i] = make_float2((float)re, (float)im);
    }
}
"#;

/// The nested grids' copy kernels (layout changes of four axes and more), compiled with
/// [`TILE_KERNELS`] into a module of their own on the first such copy (`Cuda::nested_kernels`): twenty
/// kernels that a run without such a change would compile for nothing (0.05-0.1 s more of
/// start-up, bench/RESULTS.md 2026-11-29).
const NESTED_KERNELS: &str = r#"
// copy_nested_<bytes>: grids nested in levels (a layout change of four axes or more), in square
// tiles as copy_grid_<bytes> moves them, in words where `wide`, else one element at a time;
// copy_nested_folded_<bytes> the same with their rows or elements folded (NEST 2: once a side),
// copy_nested_folded2_<bytes> twice on a side or both (NEST 3), copy_nested_folded3_<bytes> three
// times (NEST 4: f64 [2, 2, 2, 64, 64, 64] from F to C order; 4- and 8-byte elements capped a
// block an SM less, where they spilled at 64 and 80 registers; the second fold's arithmetic at
// every address took f16 [32, 64, 128, 64] to F order from 0.026 to 0.032 ms where one fold
// a side is enough, f32 [8, 8, 512, 512] 0.043 -> 0.050; bench/RESULTS.md, 2026-11-29). Kernels of
// their own: the wraps' arithmetic in copy_grid_<bytes> moved the registers of the grids of one
// level (f64 4097 x 5001 to F order 0.092 -> 0.099 ms on an H200), the folds' at every element's
// address slowed grids that need none (f32 64^4 to F order 0.038 -> 0.043 ms), and 8-byte
// elements want their registers capped (three blocks an SM) folded, not otherwise (f64 [6, 50,
// 70, 90, 11] to F order 0.201 -> 0.137 ms capped, c64 [8, 64, 64, 64] to C order 0.010 -> 0.024;
// bench/RESULTS.md, 2026-11-28 twenty-third session).
#define COPY_NESTED(NAME, NEST, E, W, V, MINB)                                                   \
    extern "C" __global__ void __launch_bounds__(256 MINB) copy_##NAME(                          \
        const E* src, E* dst, Nested g, int load_q, int store_q, int wide, int) {                \
        __shared__ __align__(16) E tile[TILE(V)];                                                \
        if (V > 1 && wide) grid_tiles<E, W, V, 1, false, NEST>(src, dst, g, load_q, store_q, tile); \
        else grid_tiles<E, E, 1, 1, false, NEST>(src, dst, g, load_q, store_q, tile);            \
    }
COPY_NESTED(nested_1, 1, unsigned char, unsigned int, 4, COMMA 4)
COPY_NESTED(nested_2, 1, unsigned short, unsigned long long, 4, COMMA 4)
COPY_NESTED(nested_4, 1, unsigned int, unsigned long long, 2, COMMA 4)
COPY_NESTED(nested_8, 1, unsigned long long, uint4, 2, )
COPY_NESTED(nested_16, 1, uint4, uint4, 1, )
COPY_NESTED(nested_folded_1, 2, unsigned char, unsigned int, 4, COMMA 3)
COPY_NESTED(nested_folded_2, 2, unsigned short, unsigned long long, 4, COMMA 4)
COPY_NESTED(nested_folded_4, 2, unsigned int, unsigned long long, 2, COMMA 4)
COPY_NESTED(nested_folded_8, 2, unsigned long long, uint4, 2, COMMA 3)
COPY_NESTED(nested_folded_16, 2, uint4, uint4, 1, )
COPY_NESTED(nested_folded2_1, 3, unsigned char, unsigned int, 4, COMMA 3)
COPY_NESTED(nested_folded2_2, 3, unsigned short, unsigned long long, 4, COMMA 4)
COPY_NESTED(nested_folded2_4, 3, unsigned int, unsigned long long, 2, COMMA 4)
COPY_NESTED(nested_folded2_8, 3, unsigned long long, uint4, 2, COMMA 3)
COPY_NESTED(nested_folded2_16, 3, uint4, uint4, 1, )
COPY_NESTED(nested_folded3_1, 4, unsigned char, unsigned int, 4, COMMA 3)
COPY_NESTED(nested_folded3_2, 4, unsigned short, unsigned long long, 4, COMMA 4)
COPY_NESTED(nested_folded3_4, 4, unsigned int, unsigned long long, 2, COMMA 3)
COPY_NESTED(nested_folded3_8, 4, unsigned long long, uint4, 2, COMMA 2)
COPY_NESTED(nested_folded3_16, 4, uint4, uint4, 1, )
"#;

/// The elements a tile kernel moves as one word on each side where `wide_words` allows: four of
/// 1 byte in 32 bits, four of 2 or two of 4 in 64, two of 8 in 128; none of 16 bytes.
fn word_elements(elem: usize) -> Option<usize> {
    match elem {
        1 | 2 => Some(4),
        4 | 8 => Some(2),
        _ => None,
    }
}

/// The side, in elements, of the square kernels' tiles of 32 words of `elem`-byte elements (32
/// elements where a word is one).
fn words_side(elem: usize) -> usize {
    32 * word_elements(elem).unwrap_or(1)
}

/// Whether a tile kernel moving `g`'s elements one at a time (not in words) has each thread
/// move two along a tile's lines (tiles of 64; the kernels' H): for elements of 1, 2 or 4 bytes
/// where that still makes 512 tiles or more. One H100, two against one: u8 3001 x 4097 C -> F
/// 0.040 -> 0.030 ms, f16 1000 x 77 x 131 0.044 -> 0.037, f32 255 x 257 x 33 0.014 -> 0.011;
/// f16 130 x 3002 (141 tiles of 64) 0.004 -> 0.005 (bench/RESULTS.md, 2026-11-27 ninth).
fn pairs(g: &RunGrid, elem: usize) -> bool {
    matches!(elem, 1 | 2 | 4) && tiles_enough(g, 64)
}

/// Whether `g` makes 512 tiles or more of `side` elements square (else a kernel with larger
/// tiles leaves the GPU's SMs idle: smaller ones run faster).
fn tiles_enough(g: &RunGrid, side: usize) -> bool {
    g.rows.div_ceil(side) * g.count.div_ceil(side) * g.batches >= 512
}

/// The most rows of a grid that `copy_gapped` folds across grids.
const GAPPED_ROWS: usize = 16;

/// Whether `copy_gapped` takes a batch of grids: few rows (at most [`GAPPED_ROWS`]), each a
/// destination line (step 1) with gaps before the next grid's (the outer step past the rows,
/// so no fold across grids takes them), read along the runs' elements (source stride 1), the
/// runs' elements the destination's slowest axis (past every grid's rows). The square tiles
/// would stand mostly empty (f32 [7, 2049, 4097] slab 0 C -> slab 1 F on 2 ranks:
/// rows of 4 and 3, grids 7 apart).
fn gapped_rows(g: &RunGrid) -> bool {
    g.batches > 1
        && g.rows <= GAPPED_ROWS
        && g.step.1 == 1
        && g.strides.0 == 1
        && g.outer.1 > g.rows
        && g.strides.1 >= g.outer.1 * g.batches
}

/// Whether grids of 1-, 2- or 4-byte elements can move a word of several at a time on both
/// sides (see [`word_elements`]): each side contiguous along its runs or along their elements,
/// and every word it moves aligned to its size (`ptrs`: the buffers' addresses).
fn wide_words(g: &RunGrid, elem: usize, ptrs: (u64, u64)) -> bool {
    let Some(v) = word_elements(elem) else {
        return false;
    };
    let word = (v * elem) as u64;
    // Where the words start: the grid's start, each grid's (of every level), and each line
    // across the contiguous axis must be whole words apart.
    let levels = |outer: usize, side: fn((usize, usize)) -> usize| {
        (g.batches <= 1 || outer.is_multiple_of(v))
            && (g.more.iter()).all(|l| l.extent <= 1 || side(l.step).is_multiple_of(v))
    };
    let side = |start: usize, levels: bool, step: usize, stride: usize, ptr: u64| {
        let Some(line) = lines(step, stride) else {
            return false;
        };
        ptr.is_multiple_of(word) && start.is_multiple_of(v) && levels && line.is_multiple_of(v)
    };
    side(
        g.start.0,
        levels(g.outer.0, |s| s.0),
        g.step.0,
        g.strides.0,
        ptrs.0,
    ) && side(
        g.start.1,
        levels(g.outer.1, |s| s.1),
        g.step.1,
        g.strides.1,
        ptrs.1,
    )
}

/// Nested grid `g` of `elem`-byte elements (at device addresses `ptrs`) as `copy_nested` tiles
/// it: folded for tiles of 32 words square where the folded grid's lines are whole words on word
/// starts on both sides (a level taken into them need not be: u8 [9, 40, 50, 30, 70] from F to
/// C order reads runs of 9 bytes, lines of 360 once the 40 is taken in), else for tiles of 32
/// elements, one at a time.
fn nested_tiles(g: &RunGrid, elem: usize, ptrs: (u64, u64)) -> (nested::Folded, bool) {
    if let Some(v) = word_elements(elem) {
        let folded = nested::Folded::of(g, 32 * v);
        if wide_words(&folded.grid, elem, ptrs) && folded.jumps_in_words(v) {
            return (folded, true);
        }
    }
    (nested::Folded::of(g, 32), false)
}

/// Grid `g` of one level (a layout change of three axes), as `copy_nested` would tile it
/// folded ([`nested_tiles`]): a short axis at one end taken with the middle one that continues
/// it, where that at least doubles the share of its square tiles the grid fills, and the
/// other kernels' tiles (in words) would stand mostly empty: less than [`FOLD_FILL_WORDS`]
/// full where the folded grid moves in words (16-byte elements always do: c128 [65536, 5, 8]
/// to C order, tiles 25% full, 0.033 -> 0.025 ms folded), [`FOLD_FILL_ELEMENTS`] where it moves
/// one element at a time. Where the across kernels sweep the rows into long lines (`rows_swept`)
/// they stay, but for folded words of 1, 4 or 8 bytes. On an H200 (bench/RESULTS.md,
/// 2026-11-29 twenty-fifth session): c64 [2, 933, 2721] from F to C order 0.228 -> 0.035 ms,
/// u8 [5, 32, 32768] to F 0.128 -> 0.011, u8 [8, 1024, 1168] to C (swept) 0.091 -> 0.011, f64
/// [3000, 4000, 5] to C 1.241 -> 0.245; but one element at a time u8 [6, 64, 104066] to F
/// (swept) 0.057 -> 0.185 ms, f32 [2471, 512, 16] to F (tiles 25% full) 0.059 -> 0.082, and
/// in 2-byte words f16 [4, 4096, 4100] to F (swept) 0.088 -> 0.094.
fn folded_tiles(
    g: &RunGrid,
    elem: usize,
    ptrs: (u64, u64),
    rows_swept: bool,
) -> Option<(nested::Folded, bool)> {
    if g.batches < 2 || g.batches >= route::NESTED_GRIDS_MOST {
        return None;
    }
    // (Each side's tiles as wide as its kernel's: the others' in words or shifted words.)
    let words = words_side(elem);
    let flat = nested::fill(g, words);
    // (Tiles full enough for either limit keep their kernels without folding, on every launch.)
    if flat >= FOLD_FILL_WORDS.max(FOLD_FILL_ELEMENTS) {
        return None;
    }
    let (folded, wide) = nested_tiles(g, elem, ptrs);
    let fill = folded.fill(if wide { words } else { 32 });
    // (16-byte elements are words themselves: a tile of them moves in words either way.)
    let (most, swept_stays) = if wide || elem == 16 {
        (FOLD_FILL_WORDS, elem == 2)
    } else {
        (FOLD_FILL_ELEMENTS, true)
    };
    let take = folded.folds() > 0 && flat < most && fill >= 2.0 * flat;
    (take && !(rows_swept && swept_stays)).then_some((folded, wide))
}

/// See [`folded_tiles`]: tiles fuller than this keep their kernels where the folded grid moves
/// in words (f16 [128, 512, 72] to C order, tiles 56% full, 0.010 ms square, 0.012 folded; c64
/// [1000, 1000, 24] to F, 37%, 0.160 -> 0.104).
const FOLD_FILL_WORDS: f64 = 0.5;

/// See [`folded_tiles`]: the same where it moves one element at a time (f64 [9, 3000, 3001] to
/// F order, tiles 14% full, 0.950 -> 0.479 ms; f32 [2471, 512, 16], 25%, 0.059 -> 0.082).
const FOLD_FILL_ELEMENTS: f64 = 0.2;

/// The step between the lines of one side of a grid (its runs' `step`, their elements'
/// `stride`) where the side is contiguous along one axis: along the runs (step 1), or along a
/// run's elements (stride 1); None where neither.
fn lines(step: usize, stride: usize) -> Option<usize> {
    match (step, stride) {
        (1, s) if s != 1 => Some(s),
        (s, 1) => Some(s),
        _ => None,
    }
}

/// Whether a side of a grid (its runs' `step`, their elements' `stride`) is contiguous along
/// the runs, not along a run's elements.
fn along_runs(step: usize, stride: usize) -> bool {
    step == 1 && stride != 1
}

/// Whether grids of 1-, 2-, 4- or 8-byte elements whose words are not all aligned
/// ([`wide_words`] false) move in words shifted along each line (the `s` kernels): where each
/// side is contiguous along one axis and the tiles of 32 words square number 512 or more (a
/// smaller grid runs faster in more, smaller tiles: f16 998 x 1002, 64 such tiles, 7 -> 9 us).
fn shifted_words(g: &RunGrid, elem: usize) -> bool {
    let Some(v) = word_elements(elem) else {
        return false;
    };
    lines(g.step.0, g.strides.0).is_some()
        && lines(g.step.1, g.strides.1).is_some()
        && tiles_enough(g, 32 * v)
}

/// The tile kernel that moves a grid (`Cuda::copy_grid_at`), picked on the host from the grid,
/// its elements' size and the buffers' addresses (`ptrs`).
#[derive(Debug)]
enum TileKernel {
    /// Two short axes, whole grids a tile: `copy_ends`.
    Ends(Ends),
    /// A short axis packed on one side or both: `copy_narrow`.
    Narrow(Narrow),
    /// Few rows with gaps between grids: `copy_gapped`. Before the sweeps, whose bands of 64
    /// or more lines such grids leave mostly empty (f16 rows of 3 of 5 took 1.06 ms on 2
    /// H200s, f16 [5, 3000, 4001] slab 0 C -> slab 2 F).
    Gapped,
    /// Across in whole destination sectors (`copy_grid_across`, `copy_grid_4_folded`).
    Across(Sweep),
    /// Grids nested in levels: `copy_nested`, their levels folded as they are tiled (see
    /// [`nested_tiles`]), square tiles in words on both sides (`wide`) or one element at a time.
    Nested {
        folded: Box<nested::Folded>,
        wide: bool,
    },
    /// Square tiles (`copy_grid`), in words on both sides (`wide`), in words shifted along each
    /// line (`shifted`) or two elements a thread (`pairs`).
    Square {
        wide: bool,
        shifted: bool,
        pairs: bool,
    },
}

impl TileKernel {
    /// The kernel for `g`: nested grids their own, else two short axes, a short axis packed,
    /// few rows with gaps, a short end axis folded ([`folded_tiles`]), across, else square
    /// tiles.
    fn of(g: &RunGrid, elem: usize, ptrs: (u64, u64)) -> TileKernel {
        if g.nested() {
            let (folded, wide) = nested_tiles(g, elem, ptrs);
            return TileKernel::Nested {
                folded: Box::new(folded),
                wide,
            };
        }
        if let Some(ends) = Ends::of(g, elem) {
            return TileKernel::Ends(ends);
        }
        if let Some(narrow) = Narrow::of(g, elem) {
            return TileKernel::Narrow(narrow);
        }
        if gapped_rows(g) && matches!(elem, 1 | 2 | 4 | 8 | 16) {
            return TileKernel::Gapped;
        }
        let wide = wide_words(g, elem, ptrs);
        let sweep = Sweep::of(g, elem, wide);
        let rows_swept = sweep.is_some_and(|s| s.fold() == Fold::Rows);
        if let Some((folded, wide)) = folded_tiles(g, elem, ptrs, rows_swept) {
            return TileKernel::Nested {
                folded: Box::new(folded),
                wide,
            };
        }
        if let Some(sweep) = sweep {
            return TileKernel::Across(sweep);
        }
        let shifted = !wide && shifted_words(g, elem);
        TileKernel::Square {
            wide,
            shifted,
            pairs: !wide && !shifted && pairs(g, elem),
        }
    }
}

/// A [`RunGrid`] as the tile kernels take it, by value: starts, batches, outer steps, rows, steps,
/// count and strides (source then destination), in elements.
#[repr(C)]
struct GridArg([u64; 11]);

// SAFETY: eleven u64s, laid out as the kernels' `Grid`.
unsafe impl cudarc::driver::DeviceRepr for GridArg {}

impl GridArg {
    fn of(g: &RunGrid) -> Self {
        let fields = [
            g.start.0,
            g.start.1,
            g.batches,
            g.outer.0,
            g.outer.1,
            g.rows,
            g.step.0,
            g.step.1,
            g.count,
            g.strides.0,
            g.strides.1,
        ];
        GridArg(fields.map(|x| x as u64))
    }
}

/// The launch of square tiles of `side` elements over `g`: a block a tile, blocks along z for
/// the grids (the kernels loop over what a dimension's 65535 blocks leave).
fn square_tiles(g: &RunGrid, side: usize) -> LaunchConfig {
    let tiles = |n: usize| n.div_ceil(side).clamp(1, 65535) as u32;
    LaunchConfig {
        grid_dim: (
            tiles(g.rows),
            tiles(g.count),
            g.batches.clamp(1, 65535) as u32,
        ),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    }
}

/// The parts of a start-up and their times.
struct Clock {
    laps: Vec<(&'static str, f64)>,
    since: std::time::Instant,
}

impl Clock {
    fn start() -> Self {
        Clock {
            laps: Vec::new(),
            since: std::time::Instant::now(),
        }
    }

    /// Ends the part called `what`, begun at the previous lap (or the start).
    fn lap(&mut self, what: &'static str) {
        let now = std::time::Instant::now();
        self.laps.push((what, (now - self.since).as_secs_f64()));
        self.since = now;
    }
}

/// A launch of one thread per element over `n` elements (grid-stride loops cover the rest).
fn launch_config(n: u64) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 65535 * 8) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Compiles `source` with NVRTC for `ctx`'s GPU (`opts` with its architecture set) and loads
/// it; `what` names it in an error.
fn load_module(
    ctx: &Arc<CudaContext>,
    source: String,
    opts: cudarc::nvrtc::CompileOptions,
    what: &str,
) -> Result<Arc<cudarc::driver::CudaModule>> {
    let ptx = compile_ptx(source, opts, arch_of(ctx.ordinal())?, what)?;
    Ok(ctx.load_module(ptx)?)
}

/// `module`'s kernel for each element size: `name`_1, _2, _4, _8 and _16.
fn by_size(module: &Arc<cudarc::driver::CudaModule>, name: &str) -> Result<[CudaFunction; 5]> {
    let load = |bytes: usize| module.load_function(&format!("{name}_{bytes}"));
    Ok([load(1)?, load(2)?, load(4)?, load(8)?, load(16)?])
}

/// `source` compiled by NVRTC for the virtual architecture `arch`.
fn compile_ptx(
    source: String,
    opts: cudarc::nvrtc::CompileOptions,
    arch: &'static str,
    what: &str,
) -> Result<cudarc::nvrtc::Ptx> {
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        ..opts
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| anyhow!("NVRTC ({what}): {e:?}"))
}

/// NVRTC's virtual architecture for GPU `ordinal` (`compute_90` on an H200: the kernels use
/// conversions, bf16, that older default targets lack), asked of the driver without a context
/// (which another thread may be creating meanwhile).
fn arch_of(ordinal: usize) -> Result<&'static str> {
    use cudarc::driver::result::device;
    use cudarc::driver::sys::CUdevice_attribute as A;
    cudarc::driver::result::init()?;
    let dev = device::get(ordinal as i32)?;
    // SAFETY: attribute queries of a device the driver has just returned.
    let (major, minor) = unsafe {
        (
            device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        )
    };
    Ok(arch_name(major, minor))
}

/// `compute_<major><minor>`, leaked once per process and kernel module: NVRTC's options want a
/// static string.
fn arch_name(major: i32, minor: i32) -> &'static str {
    Box::leak(format!("compute_{major}{minor}").into_boxed_str())
}

/// The versions a run used, for the manifest: the CUDA the driver supports, NCCL, and NVSHMEM
/// when started (e.g. "driver CUDA 13.0, NCCL 2.28.3, NVSHMEM 3.4.5").
fn versions(nvshmem: Option<String>) -> String {
    let (mut driver, nccl) = (0, nccl_version());
    // SAFETY: an out-pointer to a plain integer; the driver is loaded (probed at start).
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver) };
    // NCCL 2.9+ encodes major*10000 + minor*100 + patch; the driver major*1000 + minor*10.
    let mut text = format!(
        "driver CUDA {}.{}, NCCL {}.{}.{}",
        driver / 1000,
        driver % 1000 / 10,
        nccl / 10000,
        nccl % 10000 / 100,
        nccl % 100
    );
    if let Some(v) = nvshmem {
        text += &format!(", NVSHMEM {v}");
    }
    text
}

/// The NVRTC kernels of the backend, compiled once per rank.
struct Kernels {
    copy: CudaFunction,
    copy_rows: CudaFunction,
    /// copy_grid_<bytes> for elements of 1, 2, 4, 8 and 16 bytes, in that order.
    copy_grid: [CudaFunction; 5],
    /// copy_grid_1w and copy_grid_8w: 1- and 8-byte elements in words.
    copy_grid_1w: CudaFunction,
    copy_grid_8w: CudaFunction,
    /// copy_grid_<bytes>s for elements of 1, 2, 4 and 8 bytes: words shifted along each line.
    copy_grid_shifted: [CudaFunction; 4],
    /// copy_grid_1t and copy_grid_2t: 1- and 2-byte elements across in whole destination
    /// sectors, each unfolded, its rows folded and its columns (`tr`, `tc`; see [`Sweep`]).
    copy_grid_across: [[CudaFunction; 3]; 2],
    /// copy_grid_4tr and copy_grid_4tc: 4-byte elements across, only folded.
    copy_grid_4_folded: [CudaFunction; 2],
    /// copy_narrow_<bytes> for elements of 1, 2, 4, 8 and 16 bytes: a short axis packed on
    /// one side (see [`Narrow`]).
    copy_narrow: [CudaFunction; 5],
    /// copy_narrow_shifted_<bytes> for elements of 1 and 2 bytes: the same, the tile's rows
    /// shifted between banks.
    copy_narrow_shifted: [CudaFunction; 2],
    /// copy_narrow_folded_<bytes> and copy_narrow_folded_shifted_<bytes>: the same, the short
    /// axis two folded into one.
    copy_narrow_folded: [CudaFunction; 5],
    copy_narrow_folded_shifted: [CudaFunction; 2],
    /// copy_gapped_<bytes> for elements of 1, 2, 4, 8 and 16 bytes: few rows with gaps between
    /// grids (see `gapped_rows`).
    copy_gapped: [CudaFunction; 5],
    /// copy_ends_<bytes> for elements of 1, 2, 4, 8 and 16 bytes: grids of two short axes,
    /// whole grids a tile (see [`Ends`]).
    copy_ends: [CudaFunction; 5],
    finish: CudaFunction,
    conj_copy: CudaFunction,
    scale_f32: CudaFunction,
    scale_f64: CudaFunction,
    real_to_complex: CudaFunction,
    complex_to_real: CudaFunction,
    hermitian_planes: CudaFunction,
    complex_product: CudaFunction,
}

impl Kernels {
    /// The source of the backend's kernels (this module's, blas.rs's and fft.rs's) and its
    /// NVRTC options (the architecture left to `load_module`).
    fn module() -> (String, cudarc::nvrtc::CompileOptions) {
        let source = [
            TILE_KERNELS,
            KERNELS,
            blas::ELEMENTS,
            blas::KERNELS,
            fft::KERNELS,
        ]
        .concat();
        (source, cudarc::nvrtc::CompileOptions::default())
    }

    /// The backend's kernels compiled for GPU `ordinal`, on a thread of their own: NVRTC needs
    /// only the GPU's architecture, so it runs while the caller creates the context.
    fn compiling(ordinal: usize) -> std::thread::JoinHandle<Result<cudarc::nvrtc::Ptx>> {
        std::thread::spawn(move || {
            let (source, opts) = Self::module();
            compile_ptx(source, opts, arch_of(ordinal)?, "the backend's kernels")
        })
    }

    /// Loads the backend's kernels, compiled ([`Kernels::compiling`]), into `ctx`.
    fn load(ctx: &Arc<CudaContext>, ptx: cudarc::nvrtc::Ptx) -> Result<Self> {
        let module = ctx.load_module(ptx)?;
        // A kernel for each element size: `name`_1 to `name`_16.
        let sizes = |name: &str| by_size(&module, name);
        Ok(Kernels {
            copy: module.load_function("copy_runs")?,
            copy_rows: module.load_function("copy_rows")?,
            copy_grid: sizes("copy_grid")?,
            copy_grid_1w: module.load_function("copy_grid_1w")?,
            copy_grid_8w: module.load_function("copy_grid_8w")?,
            copy_grid_shifted: {
                let grid = |bytes: usize| module.load_function(&format!("copy_grid_{bytes}s"));
                [grid(1)?, grid(2)?, grid(4)?, grid(8)?]
            },
            copy_grid_across: {
                let across = |bytes: usize| -> Result<[CudaFunction; 3]> {
                    let load =
                        |fold: &str| module.load_function(&format!("copy_grid_{bytes}t{fold}"));
                    Ok([load("")?, load("r")?, load("c")?])
                };
                [across(1)?, across(2)?]
            },
            copy_grid_4_folded: [
                module.load_function("copy_grid_4tr")?,
                module.load_function("copy_grid_4tc")?,
            ],
            copy_narrow: sizes("copy_narrow")?,
            copy_narrow_shifted: [
                module.load_function("copy_narrow_shifted_1")?,
                module.load_function("copy_narrow_shifted_2")?,
            ],
            copy_narrow_folded: sizes("copy_narrow_folded")?,
            copy_narrow_folded_shifted: [
                module.load_function("copy_narrow_folded_shifted_1")?,
                module.load_function("copy_narrow_folded_shifted_2")?,
            ],
            copy_gapped: sizes("copy_gapped")?,
            copy_ends: sizes("copy_ends")?,
            finish: module.load_function("finish")?,
            conj_copy: module.load_function("conj_copy")?,
            scale_f32: module.load_function("scale_f32")?,
            scale_f64: module.load_function("scale_f64")?,
            real_to_complex: module.load_function("real_to_complex")?,
            complex_to_real: module.load_function("complex_to_real")?,
            hermitian_planes: module.load_function("hermitian_planes")?,
            complex_product: module.load_function("complex_product")?,
        })
    }
}

/// A device buffer of `len` bytes (at least one byte is allocated: CUDA refuses empty ones),
/// owned by cudarc or, when `sym` is set, a view of a buffer on NVSHMEM's symmetric heap (never
/// freed alone: the heap is sized for every step's buffers), or, when `window` is, a view of an
/// NCCL window (freed with its last view).
pub struct DevBuf {
    data: ManuallyDrop<CudaSlice<u8>>,
    len: usize,
    sym: Option<nvshmem::SymBuf>,
    window: Option<Arc<window::Window>>,
}

impl DevBuf {
    fn owned(data: CudaSlice<u8>, len: usize) -> Self {
        DevBuf {
            data: ManuallyDrop::new(data),
            len,
            sym: None,
            window: None,
        }
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: `data` is taken or dropped once, here.
        unsafe {
            if let Some(sym) = self.sym.take() {
                // NVSHMEM's memory: cudarc must not free it, and nvshmem_free is collective (a
                // rank failing alone would wait in it forever): the heap goes whole at the end.
                ManuallyDrop::take(&mut self.data).leak();
                std::mem::forget(sym);
            } else if self.window.is_some() {
                // NCCL's memory, freed by the window.
                ManuallyDrop::take(&mut self.data).leak();
            } else {
                ManuallyDrop::drop(&mut self.data);
            }
        }
    }
}

/// One rank's GPU, stream, kernels, NCCL communicator, and the cuBLAS handle and cuFFT plans
/// once used.
pub struct Cuda<'a> {
    /// How long each part of starting it took (see [`Cuda::startup`]).
    startup: Vec<(&'static str, f64)>,
    comm: &'a dyn Group,
    stream: Arc<CudaStream>,
    /// The stream of communication that overlaps computation ([`Backend::side`]).
    side_stream: Arc<CudaStream>,
    /// Inside a `side` stretch: copies and NCCL calls go to `side_stream`.
    on_side: Cell<bool>,
    kernels: Kernels,
    /// The NCCL communicator; none for one rank, whose collectives are local copies.
    nccl: Option<nccl_sys::ncclComm_t>,
    blas: OnceCell<cudarc::cublas::CudaBlas>,
    /// cuBLASLt, for GEMMs with a fused epilog (made on first use).
    lt: OnceCell<lt::Lt>,
    /// NVSHMEM, when the spec's backends name it (its symmetric buffers take puts).
    nvshmem: Option<nvshmem::Nvshmem<'a>>,
    /// Puts within NCCL windows, where NVSHMEM is not named and NCCL maps every rank's windows
    /// into every GPU's address space.
    window_puts: Option<window_puts::WindowPuts>,
    /// Kernel tables on the GPU, by hash of their contents and length ([`Cuda::device_table`]).
    tables: RefCell<std::collections::HashMap<(u64, usize), CudaSlice<u64>>>,
    /// cuFFT plans by phase and precision, made on first use.
    ffts: RefCell<Vec<fft::CachedPlans>>,
    /// Scratch of the FFT plans run on transposed columns (see `fft::Group::by_rows`), as large
    /// as the largest so far, kept like cuFFT's own work areas.
    fft_scratch: RefCell<Option<CudaSlice<u8>>>,
    /// The check kernels, compiled on the first check.
    checks: OnceCell<check::CheckKernels>,
    /// The nested grids' copy kernels, compiled on the first such copy.
    nested: OnceCell<nested::NestedKernels>,
    name: String,
}

fn nccl_err(e: nccl::NcclError) -> anyhow::Error {
    anyhow!("NCCL: {e:?}")
}

/// A zeroed host vector of `bytes` that the kernel may back with transparent huge pages: a
/// download's destination is fresh memory, and faulting it in 4 KiB at a time cost more than
/// the copy itself (`bench/gpu/download.py`). Its pages stay untouched until the copy writes
/// them (a large zeroed allocation is a fresh mapping).
fn host_buffer(bytes: usize) -> Vec<u8> {
    let v = vec![0u8; bytes];
    super::advise_huge_pages(&v);
    v
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

/// NCCL's reduction op (a complex product is not one: see [`Cuda::complex_product`]).
fn nccl_op(op: ReduceOp) -> nccl_sys::ncclRedOp_t {
    use nccl_sys::ncclRedOp_t::*;
    match op {
        ReduceOp::Sum => ncclSum,
        ReduceOp::Prod => ncclProd,
        ReduceOp::Min => ncclMin,
        ReduceOp::Max => ncclMax,
        ReduceOp::Avg => ncclAvg,
    }
}

/// Whether a reduction is a product of complex values, which NCCL (reducing pairs of reals)
/// cannot make.
fn complex_product(dtype: DType, op: ReduceOp) -> bool {
    dtype.is_complex() && op == ReduceOp::Prod
}

/// This rank's GPU (collective): its ordinal among the visible GPUs, from its local rank among
/// the ranks on its host (or the launcher's) and `map`, checked to be shared with no other rank
/// of the host; and the ordinal to open it by. A rank alone, where the visible GPUs are known
/// before CUDA starts, starts CUDA on its GPU alone (`CUDA_VISIBLE_DEVICES` narrowed to it,
/// opened as 0): CUDA then initialises one GPU, not all of the host's (a one-rank run on four
/// H100s: 1.0-1.3 s -> 0.45-0.50 s). Ranks with peers see every GPU: NVSHMEM's puts to GPUs
/// this process cannot see ran slower (a 4-GPU FFT by puts 7.5 -> 9.5 ms).
fn place(comm: &dyn Group, host: &str, map: &DeviceMap) -> Result<(usize, usize)> {
    let rank = comm.rank();
    let hosts: Vec<String> = comm
        .all_gather_bytes(host.as_bytes())?
        .into_iter()
        .map(|h| String::from_utf8_lossy(&h).into_owned())
        .collect();
    let local = devmap::local_rank_from_env()
        .unwrap_or_else(|| devmap::local_rank_from_hosts(&hosts, rank));
    let known = match comm.size() == 1 && !cuda_started() {
        true => devmap::visible_here(),
        false => None,
    };
    let visible = match &known {
        Some(list) => list.len(),
        None => CudaContext::device_count().context("cannot count the GPUs")? as usize,
    };
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
    match known {
        Some(list) if list.len() > 1 => {
            // SAFETY: set before CUDA starts (it reads the variable once, at its start); no
            // thread of this program reads the environment meanwhile.
            unsafe { std::env::set_var("CUDA_VISIBLE_DEVICES", &list[ordinal]) };
            Ok((ordinal, 0))
        }
        _ => Ok((ordinal, ordinal)),
    }
}

/// Whether CUDA has started in this process (after which `CUDA_VISIBLE_DEVICES` no longer
/// counts).
fn cuda_started() -> bool {
    use cudarc::driver::{DriverError, result, sys::CUresult};
    !matches!(
        result::device::get_count(),
        Err(DriverError(CUresult::CUDA_ERROR_NOT_INITIALIZED))
    )
}

/// The NCCL communicator over `comm` (collective): rank 0's unique id reaches every rank
/// through the process group.
fn nccl_comm(comm: &dyn Group) -> Result<nccl_sys::ncclComm_t> {
    let (rank, size) = (comm.rank(), comm.size());
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
    // Where NCCL has windows, a CTA policy of zero lets it move them by the copy engines (it
    // changes nothing else: see `window.rs`).
    let mut config = window::config();
    // SAFETY: valid out- and config pointers; every rank calls this with the same id.
    let nccl_comm = unsafe {
        match window::supported() {
            true => nccl::comm_init_rank_config(
                raw.as_mut_ptr(),
                size as i32,
                id,
                rank as i32,
                &mut config,
            ),
            false => nccl::comm_init_rank(raw.as_mut_ptr(), size as i32, id, rank as i32),
        }
        .map_err(nccl_err)?;
        raw.assume_init()
    };
    Ok(nccl_comm)
}

/// Testing hook: `DISTRUN_PEERS_UNMAPPED=1` makes a rank treat its peers as unmapped, as GPUs
/// of different nodes are (no puts, by NVSHMEM or within NCCL windows): how `scripts/gpu-check`
/// takes the multi-node path on one node.
fn peers_marked_apart() -> bool {
    std::env::var_os("DISTRUN_PEERS_UNMAPPED").is_some_and(|v| v == "1")
}

/// NCCL's version, major * 10000 + minor * 100 + patch.
fn nccl_version() -> i32 {
    let mut v = 0;
    // SAFETY: an out-pointer to a plain integer; NCCL is loaded (probed at start).
    unsafe { nccl_sys::ncclGetVersion(&mut v) };
    v
}

impl<'a> Cuda<'a> {
    /// Starts the GPU backend on every rank: picks this rank's GPU, compiles the kernels, builds
    /// the NCCL communicator over `comm`, and with `heap` starts NVSHMEM with a symmetric heap of
    /// that many bytes.
    pub fn new(
        comm: &'a dyn Group,
        host: &str,
        map: &DeviceMap,
        heap: Option<usize>,
    ) -> Result<Self> {
        let mut clock = Clock::start();
        probe::require(&[probe::Lib::Driver, probe::Lib::Nvrtc, probe::Lib::Nccl])?;
        clock.lap("libraries loaded");
        let (ordinal, opened) = place(comm, host, map)?;
        clock.lap("GPU chosen");
        let compiling = Kernels::compiling(opened);
        let ctx = CudaContext::new(opened).with_context(|| format!("cannot open GPU {ordinal}"))?;
        // One stream per rank: ordering is the stream's, so cudarc's per-buffer events are off.
        // SAFETY: no buffer exists yet.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.default_stream();
        // (A higher priority for it was measured slower: bench/RESULTS.md.)
        let side_stream = ctx.new_stream()?;
        clock.lap("CUDA context");
        let ptx = (compiling.join())
            .map_err(|_| anyhow!("compiling the backend's kernels panicked"))??;
        let kernels = Kernels::load(&ctx, ptx)?;
        clock.lap("kernels compiled");
        let puts_in_windows = window_puts::wanted(comm.size(), heap.is_some());
        if puts_in_windows {
            window_puts::prepare_environment();
        }
        // One rank communicates with nobody: no communicator (half a second of start-up).
        let nccl_comm = match comm.size() {
            1 => None,
            _ => Some(nccl_comm(comm)?),
        };
        if nccl_comm.is_some() {
            clock.lap("NCCL communicator");
        }
        let nvshmem = match heap {
            Some(bytes) => Some(nvshmem::Nvshmem::init(comm, bytes)?),
            None => None,
        };
        if nvshmem.is_some() {
            clock.lap("NVSHMEM");
        }
        let window_puts = match nccl_comm {
            Some(nccl) if puts_in_windows => {
                let puts = window_puts::WindowPuts::start(comm, nccl, &stream)?;
                clock.lap("NCCL windows for puts");
                puts
            }
            _ => None,
        };
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let nvshmem_version = nvshmem.as_ref().map(|nv| nv.version());
        Ok(Cuda {
            comm,
            stream,
            side_stream,
            on_side: Cell::new(false),
            kernels,
            nccl: nccl_comm,
            blas: OnceCell::new(),
            lt: OnceCell::new(),
            nvshmem,
            window_puts,
            tables: RefCell::default(),
            ffts: RefCell::new(Vec::new()),
            fft_scratch: RefCell::new(None),
            checks: OnceCell::new(),
            nested: OnceCell::new(),
            name: format!("cuda:{ordinal} ({name}; {})", versions(nvshmem_version)),
            startup: clock.laps,
        })
    }

    /// The `bytes` of window `w` from byte `offset`, as a buffer.
    fn window_buf(&self, w: &Arc<window::Window>, offset: usize, bytes: usize) -> DevBuf {
        // SAFETY: inside the window (its callers check), this GPU's memory kept alive by the
        // window's last view; DevBuf's drop leaks the slice instead of freeing it.
        let data = unsafe {
            self.stream
                .upgrade_device_ptr::<u8>(w.ptr() + offset as u64, bytes.max(1))
        };
        DevBuf {
            data: ManuallyDrop::new(data),
            len: bytes,
            sym: None,
            window: Some(w.clone()),
        }
    }

    /// The address of `buf` on the GPU.
    fn ptr(&self, buf: &DevBuf) -> u64 {
        buf.data.device_ptr(&self.stream).0
    }

    /// The byte of window `w` that `buf` (a view of it) starts at.
    fn window_offset(&self, buf: &DevBuf, w: &window::Window) -> usize {
        (self.ptr(buf) - w.ptr()) as usize
    }

    /// How long each part of starting the backend took, in seconds (for `-v`).
    pub fn startup(&self) -> &[(&'static str, f64)] {
        &self.startup
    }

    /// Copies `runs` (`derived` from them) the way `route` says: by the copy engines, the tile
    /// kernels, the rows' kernel or the runs' kernel over their table.
    fn copy_routed(
        &self,
        src: &DevBuf,
        dst: &mut DevBuf,
        runs: &[Run],
        derived: &Derived,
        route: Route,
        elem: usize,
    ) -> Result<()> {
        let (lanes_log, chunks) = match route {
            Route::Nothing => return Ok(()),
            Route::Engines {
                src: s,
                dst: d,
                count,
            } => {
                let (s, d, n) = (s * elem, d * elem, count * elem);
                self.st()
                    .memcpy_dtod(&src.data.slice(s..s + n), &mut dst.data.slice_mut(d..d + n))?;
                return Ok(());
            }
            Route::Tiles(grid) => return self.copy_grid(src, dst, &grid, elem),
            Route::Rows { grid, lanes_log } => {
                return self.copy_rows(src, dst, &grid, elem, lanes_log);
            }
            Route::Table { lanes_log, chunks } => (lanes_log, chunks),
        };
        let table = self.keyed_table((derived.key, runs.len() * 5), || work::table(runs))?;
        let (n, elem) = (runs.len() as u64, elem as u64);
        let cfg = LaunchConfig {
            grid_dim: (
                (runs.len() << lanes_log).div_ceil(256).min(65535) as u32,
                chunks,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.st().launch_builder(&self.kernels.copy);
        launch
            .arg(&*src.data)
            .arg(&mut *dst.data)
            .arg(&table)
            .arg(&n)
            .arg(&elem)
            .arg(&lanes_log);
        // SAFETY: the runs stay inside both buffers (the exchange plans size them).
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// Copies runs that make grids (see [`RunGrid`]) in tiles, each read and written along the
    /// axis that is contiguous on its side (elements of 1, 2, 4, 8 or 16 bytes).
    fn copy_grid(&self, src: &DevBuf, dst: &mut DevBuf, g: &RunGrid, elem: usize) -> Result<()> {
        let ptrs = (self.ptr(src), self.ptr(dst));
        self.copy_grid_at(self.st(), ptrs, g, elem)
    }

    /// A grid of runs contiguous on both sides, with copy_rows: 2^lanes_log threads a run.
    fn copy_rows(
        &self,
        src: &DevBuf,
        dst: &mut DevBuf,
        g: &RunGrid,
        elem: usize,
        lanes_log: i32,
    ) -> Result<()> {
        let (s, d) = (self.ptr(src), self.ptr(dst));
        let cfg = LaunchConfig {
            grid_dim: (
                (g.rows << lanes_log).div_ceil(256).clamp(1, 1 << 30) as u32,
                g.batches.clamp(1, 65535) as u32,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let grid = GridArg::of(g);
        let elem = elem as u64;
        let mut launch = self.st().launch_builder(&self.kernels.copy_rows);
        launch.arg(&s).arg(&d).arg(&grid).arg(&elem).arg(&lanes_log);
        // SAFETY: the grid's runs stay inside both buffers (their callers size them).
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// A grid of 1-, 2- or 4-byte elements across in whole destination sectors, as `sweep`
    /// takes it (see [`Sweep`]), a block a tile.
    fn copy_across(
        &self,
        stream: &Arc<CudaStream>,
        (src, dst): (u64, u64),
        grid: GridArg,
        sweep: &Sweep,
        (elem, load_q): (usize, i32),
    ) -> Result<()> {
        let [x, y, z] = sweep.blocks().map(|n| n.max(1) as u32);
        let cfg = LaunchConfig {
            grid_dim: (x, y, z),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        let arg = sweep.arg();
        let kernel = match (elem, sweep.fold()) {
            (4, Fold::Rows) => &self.kernels.copy_grid_4_folded[0],
            (4, _) => &self.kernels.copy_grid_4_folded[1],
            (_, fold) => &self.kernels.copy_grid_across[elem / 2][fold as usize],
        };
        let mut launch = stream.launch_builder(kernel);
        launch.arg(&src).arg(&dst).arg(&grid).arg(&arg).arg(&load_q);
        // SAFETY: the grid's runs stay inside both buffers (their callers size them).
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// A batch of grids of few rows with gaps between grids in the destination, as
    /// `gapped_rows` takes them: tiles of 64 folded rows by 32 of a run's elements.
    fn copy_gapped(
        &self,
        stream: &Arc<CudaStream>,
        (src, dst): (u64, u64),
        g: &RunGrid,
        elem: usize,
    ) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (
                g.count.div_ceil(32).clamp(1, 65535) as u32,
                (g.rows * g.batches).div_ceil(64).clamp(1, 65535) as u32,
                1,
            ),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        let kernel = &self.kernels.copy_gapped[elem.trailing_zeros() as usize];
        let grid = GridArg::of(g);
        let mut launch = stream.launch_builder(kernel);
        launch.arg(&src).arg(&dst).arg(&grid);
        // SAFETY: the grid's runs stay inside both buffers (their callers size them).
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// Grids of two short axes with copy_ends: whole grids a tile (see [`Ends`]).
    fn copy_ends(
        &self,
        stream: &Arc<CudaStream>,
        (src, dst): (u64, u64),
        ends: &Ends,
        elem: usize,
    ) -> Result<()> {
        let kernel = &self.kernels.copy_ends[elem.trailing_zeros() as usize];
        let arg = ends.arg();
        let mut launch = stream.launch_builder(kernel);
        launch.arg(&src).arg(&dst).arg(&arg);
        // SAFETY: the grid's runs stay inside both buffers (their callers size them).
        unsafe { launch.launch(ends.launch()) }?;
        Ok(())
    }

    /// The nested grids' copy kernels, compiled on the first call.
    fn nested_kernels(&self) -> Result<&nested::NestedKernels> {
        if let Some(k) = self.nested.get() {
            return Ok(k);
        }
        let k = nested::NestedKernels::compile(self.stream.context())?;
        Ok(self.nested.get_or_init(|| k))
    }

    /// Grids nested in levels, with copy_nested: square tiles of 32 words (`wide`) or elements,
    /// across the grid's rows and a run's elements with the levels that continue them taken
    /// into them (`folded`, see [`nested_tiles`]).
    fn copy_nested(
        &self,
        stream: &Arc<CudaStream>,
        (src, dst): (u64, u64),
        folded: &nested::Folded,
        (elem, wide): (usize, bool),
    ) -> Result<()> {
        let side = 32
            * if wide {
                word_elements(elem).unwrap_or(1)
            } else {
                1
            };
        let g = &folded.grid;
        let cfg = square_tiles(g, side);
        let load_q = i32::from(along_runs(g.step.0, g.strides.0));
        let store_q = i32::from(along_runs(g.step.1, g.strides.1));
        let (arg, wide) = (folded.arg(), i32::from(wide));
        let kernel = self.nested_kernels()?.get(folded.folds(), elem);
        let mut launch = stream.launch_builder(kernel);
        launch
            .arg(&src)
            .arg(&dst)
            .arg(&arg)
            .arg(&load_q)
            .arg(&store_q)
            .arg(&wide)
            .arg(&0i32);
        // SAFETY: the grid's runs stay inside both buffers (their callers size them).
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// A grid with a short axis packed on one side or both, as `narrow` takes it (see
    /// [`Narrow`]).
    fn copy_narrow(
        &self,
        stream: &Arc<CudaStream>,
        (src, dst): (u64, u64),
        narrow: &Narrow,
        elem: usize,
    ) -> Result<()> {
        let (x, y) = narrow.blocks();
        let cfg = LaunchConfig {
            grid_dim: (x, y, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let arg = narrow.arg();
        let at = elem.trailing_zeros() as usize;
        let k = &self.kernels;
        let kernel = match (narrow.folded(), narrow.shifted()) {
            (false, false) => &k.copy_narrow[at],
            (false, true) => &k.copy_narrow_shifted[at],
            (true, false) => &k.copy_narrow_folded[at],
            (true, true) => &k.copy_narrow_folded_shifted[at],
        };
        let mut launch = stream.launch_builder(kernel);
        launch.arg(&src).arg(&dst).arg(&arg);
        // SAFETY: the grid's runs stay inside both buffers (their callers size them).
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// [`Cuda::copy_grid`] between device addresses (the grid's starts count from them), on
    /// `stream`.
    fn copy_grid_at(
        &self,
        stream: &Arc<CudaStream>,
        (src, dst): (u64, u64),
        g: &RunGrid,
        elem: usize,
    ) -> Result<()> {
        let grid = GridArg::of(g);
        // Along the runs where they follow each other and a run's elements do not.
        let load_q = i32::from(along_runs(g.step.0, g.strides.0));
        let store_q = i32::from(along_runs(g.step.1, g.strides.1));
        let (wide, shifted, pairs) = match TileKernel::of(g, elem, (src, dst)) {
            TileKernel::Narrow(narrow) => {
                return self.copy_narrow(stream, (src, dst), &narrow, elem);
            }
            TileKernel::Gapped => return self.copy_gapped(stream, (src, dst), g, elem),
            TileKernel::Ends(ends) => return self.copy_ends(stream, (src, dst), &ends, elem),
            TileKernel::Nested { folded, wide } => {
                return self.copy_nested(stream, (src, dst), &folded, (elem, wide));
            }
            TileKernel::Across(sweep) => {
                return self.copy_across(stream, (src, dst), grid, &sweep, (elem, load_q));
            }
            TileKernel::Square {
                wide,
                shifted,
                pairs,
            } => (wide, shifted, pairs),
        };
        let side = 32
            * match (wide || shifted, pairs) {
                (true, _) => word_elements(elem).unwrap_or(1),
                (false, true) => 2,
                (false, false) => 1,
            };
        let cfg = square_tiles(g, side);
        let kernel = match (elem, wide) {
            (1, true) => &self.kernels.copy_grid_1w,
            (8, true) => &self.kernels.copy_grid_8w,
            _ if shifted => &self.kernels.copy_grid_shifted[elem.trailing_zeros() as usize],
            _ => &self.kernels.copy_grid[elem.trailing_zeros() as usize],
        };
        let (wide, pairs) = (i32::from(wide), i32::from(pairs));
        let mut launch = stream.launch_builder(kernel);
        launch
            .arg(&src)
            .arg(&dst)
            .arg(&grid)
            .arg(&load_q)
            .arg(&store_q)
            .arg(&wide)
            .arg(&pairs);
        // SAFETY: the grid's runs stay inside both buffers (their callers size them).
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// The device address of a copy of `values` (kernel tables: copy runs, bias rows). Steps
    /// pass the same tables every iteration, so each is copied to the GPU once and kept, keyed
    /// by a hash of its contents.
    fn device_table(&self, values: &[u64]) -> Result<u64> {
        // SAFETY: u64s read as their bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values))
        };
        let key = (xxhash_rust::xxh3::xxh3_64(bytes), values.len());
        self.keyed_table(key, || values.to_vec())
    }

    /// [`Cuda::device_table`] for a table whose key (the hash of its bytes and its length) the
    /// caller knows: `values` is called only the first time.
    fn keyed_table(&self, key: (u64, usize), values: impl FnOnce() -> Vec<u64>) -> Result<u64> {
        let mut tables = self.tables.borrow_mut();
        let table = match tables.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let on_gpu = self.st().clone_htod(&values())?;
                // Complete before any stream uses it (it may be uploaded on the side stream).
                self.st().synchronize()?;
                e.insert(on_gpu)
            }
        };
        Ok(table.device_ptr(&self.stream).0)
    }

    /// Where puts reach `buf`, which `what` (a put, a signal) needs: NVSHMEM's heap, or an
    /// NCCL window (with the byte of the window `buf` starts at).
    fn target<'b>(&'b self, buf: &'b DevBuf, what: &str) -> Result<Target<'b, 'a>> {
        match (&self.nvshmem, &buf.sym, &self.window_puts, &buf.window) {
            (Some(nv), Some(sym), _, _) => Ok(Target::Heap(nv, sym)),
            (_, _, Some(wp), Some(w)) => Ok(Target::Window(wp, w, self.window_offset(buf, w))),
            _ => bail!("{what} needs a symmetric buffer"),
        }
    }

    /// The stream data movement goes to now: the side stream inside a `side` stretch.
    fn st(&self) -> &Arc<CudaStream> {
        if self.on_side.get() {
            &self.side_stream
        } else {
            &self.stream
        }
    }

    /// Bytes free on this rank's GPU now.
    pub fn free_memory(&self) -> Result<u64> {
        let (free, _total) = self.stream.context().mem_get_info()?;
        Ok(free as u64)
    }

    /// Bytes this rank's GPU already holds for puts within NCCL windows (their barriers' words'
    /// window, in whole granules as the plan counts it); none without.
    pub fn windows_held(&self) -> u64 {
        (self.window_puts.as_ref()).map_or(0, |wp| wp.held())
    }

    /// Gives NVSHMEM up without its collective teardown (on an error path, where other ranks
    /// may never reach it).
    pub fn abandon_nvshmem(&mut self) {
        if let Some(nv) = self.nvshmem.take() {
            nv.abandon();
        }
    }

    fn raw_stream(&self) -> nccl_sys::cudaStream_t {
        self.st().cu_stream() as _
    }
}

impl Drop for Cuda<'_> {
    fn drop(&mut self) {
        self.ffts.borrow_mut().clear();
        self.fft_scratch.take();
        self.blas.take();
        // Its window goes before the communicator it is registered on.
        self.window_puts.take();
        if let Some(comm) = self.nccl {
            // SAFETY: the communicator this backend created, destroyed once.
            unsafe {
                let _ = nccl::comm_destroy(comm);
            }
        }
    }
}

impl Cuda<'_> {
    /// The NCCL communicator (a collective of several ranks has one).
    fn nccl(&self) -> Result<nccl_sys::ncclComm_t> {
        self.nccl
            .ok_or_else(|| anyhow!("no NCCL communicator: one rank's collectives are copies"))
    }

    /// One rank's collective, which moves its own data only: the first `bytes` of `src` from
    /// byte `from` into `dst` from byte `to`; true where this rank is alone (then it is done).
    fn alone(
        &self,
        src: &DevBuf,
        dst: &mut DevBuf,
        (from, to, bytes): (usize, usize, usize),
    ) -> Result<bool> {
        if self.nccl.is_some() {
            return Ok(false);
        }
        self.copy_runs(src, dst, &Run::contiguous(from, to, bytes).into(), 1)?;
        Ok(true)
    }

    /// The product over the ranks of complex values, which NCCL cannot reduce: every rank's
    /// `send` gathered on every rank, then elements `first..first + count` multiplied in rank
    /// order (in double precision, rounded once) into `recv` where this rank receives.
    fn complex_product(
        &self,
        send: &DevBuf,
        recv: Option<&mut DevBuf>,
        dtype: DType,
        (first, count): (usize, usize),
    ) -> Result<()> {
        let ranks = self.ranks();
        let mut all = self.zeros(send.len * ranks)?;
        {
            let (s, _g1) = send.data.device_ptr(&self.stream);
            let (a, _g2) = all.data.device_ptr_mut(&self.stream);
            // SAFETY: `all` holds every rank's `send.len` bytes.
            unsafe {
                nccl::all_gather(
                    s as _,
                    a as _,
                    send.len,
                    nccl_sys::ncclDataType_t::ncclUint8,
                    self.nccl()?,
                    self.raw_stream(),
                )
            }
            .map_err(nccl_err)?;
        }
        let Some(recv) = recv.filter(|_| count > 0) else {
            return Ok(());
        };
        let n = (send.len / dtype.size() as usize) as u64;
        let (first, count, ranks) = (first as u64, count as u64, ranks as u64);
        let double = i32::from(dtype == DType::C128);
        let (a, r) = (
            all.data.device_ptr(&self.stream).0,
            recv.data.device_ptr_mut(&self.stream).0,
        );
        let mut launch = self.stream.launch_builder(&self.kernels.complex_product);
        launch
            .arg(&a)
            .arg(&r)
            .arg(&double)
            .arg(&n)
            .arg(&first)
            .arg(&count)
            .arg(&ranks);
        // SAFETY: `all` holds `ranks` arrays of n values, recv `count` of them.
        unsafe { launch.launch(launch_config(count)) }?;
        Ok(())
    }
}

/// Where puts reach a buffer: NVSHMEM's heap, or an NCCL window from a byte of it.
enum Target<'b, 'a> {
    Heap(&'b nvshmem::Nvshmem<'a>, &'b nvshmem::SymBuf),
    Window(&'b window_puts::WindowPuts, &'b window::Window, usize),
}

/// Puts and signals into peers' symmetric buffers (see [`Backend::puts`]): on NVSHMEM's heap
/// where the spec names `nvshmem`, else in NCCL windows; only where the GPUs map each other's
/// memory.
impl Puts for Cuda<'_> {
    type Buf = DevBuf;

    fn name(&self) -> &'static str {
        match self.nvshmem {
            Some(_) => "nvshmem",
            None => "nccl_windows",
        }
    }

    fn symmetric(&self, reserved: usize, bytes: usize) -> Result<Self::Buf> {
        anyhow::ensure!(
            bytes <= reserved,
            "{bytes} bytes in a reservation of {reserved}"
        );
        let (ptr, sym, window) = match (&self.nvshmem, &self.window_puts) {
            (Some(nv), _) if nv.peers_mapped() => {
                let sym = nv.alloc(reserved)?;
                (sym.ptr(), Some(sym), None)
            }
            (None, Some(wp)) => {
                let w = wp.alloc(self.nccl()?, reserved, &self.stream)?;
                (w.ptr(), None, Some(w))
            }
            _ => bail!("symmetric buffers need GPUs that map each other's memory"),
        };
        // SAFETY: `reserved` (at least one) bytes of device memory on this GPU, kept alive by
        // `sym` or `window`; DevBuf's drop leaks the slice instead of freeing it.
        let data = unsafe { self.stream.upgrade_device_ptr::<u8>(ptr, reserved.max(1)) };
        let mut buf = DevBuf {
            data: ManuallyDrop::new(data),
            len: bytes,
            sym,
            window,
        };
        self.stream.memset_zeros(&mut buf.data.slice_mut(..))?;
        Ok(buf)
    }

    fn symmetric_part(
        &self,
        buf: &Self::Buf,
        offset: usize,
        reserved: usize,
        bytes: usize,
    ) -> Result<Self::Buf> {
        anyhow::ensure!(
            bytes <= reserved,
            "{bytes} bytes in a reservation of {reserved}"
        );
        if let Some(w) = &buf.window {
            let start = self.window_offset(buf, w) + offset;
            anyhow::ensure!(
                start + reserved <= w.len(),
                "{reserved} bytes at {start} of a window of {}",
                w.len()
            );
            return Ok(self.window_buf(w, start, bytes));
        }
        let Some(sym) = &buf.sym else {
            bail!("a part of a buffer that is not symmetric");
        };
        let part = sym.part(offset, reserved)?;
        // SAFETY: inside the symmetric buffer (checked by `part`; one byte past an empty part
        // is still inside the heap's margin), kept alive by the heap to the end; DevBuf's drop
        // leaks the slice instead of freeing it.
        let data = unsafe {
            self.stream
                .upgrade_device_ptr::<u8>(part.ptr(), bytes.max(1))
        };
        Ok(DevBuf {
            data: ManuallyDrop::new(data),
            len: bytes,
            sym: Some(part),
            window: None,
        })
    }

    fn put(
        &self,
        (src, at): (&Self::Buf, usize),
        (dst, to): (&Self::Buf, usize),
        rows: Rows,
        peer: usize,
    ) -> Result<()> {
        if rows.width == 0 || rows.height == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            at + rows.span(rows.src_pitch) <= src.len,
            "a put reads past its source"
        );
        let from = src.data.device_ptr(&self.stream).0 + at as u64;
        // SAFETY (both): `src` is this GPU's memory, alive while the queued put runs (the step
        // keeps it); the destination's bounds are checked.
        match self.target(dst, "a put")? {
            Target::Heap(nv, sym) => unsafe {
                nv.put_on_stream(sym, to, from, rows, peer, self.st())
            },
            Target::Window(wp, w, start) => unsafe {
                wp.put(self.st(), from, (w, start + to), rows, peer)
            },
        }
    }

    fn put_barrier(&self) -> Result<()> {
        match (&self.nvshmem, &self.window_puts) {
            (Some(nv), _) => nv.barrier_all_on_stream(self.st()),
            (None, Some(wp)) => wp.barrier(self.st(), self.on_side.get())?,
            (None, None) => bail!("a put barrier needs puts"),
        }
        Ok(())
    }

    fn signal(&self, flags: &Self::Buf, at: usize, value: u32, peer: usize) -> Result<()> {
        match self.target(flags, "a signal")? {
            Target::Heap(nv, sym) => nv.signal_on_stream(sym, at, value, peer, self.st()),
            Target::Window(wp, w, start) => wp.signal(self.st(), (w, start + at), value, peer),
        }
    }

    fn wait_signal(&self, flags: &Self::Buf, at: usize, value: u32) -> Result<()> {
        match self.target(flags, "a signal")? {
            Target::Heap(nv, sym) => nv.wait_on_stream(sym, at, value, &self.stream),
            Target::Window(wp, w, start) => wp.wait(&self.stream, (w, start + at), value),
        }
    }
}

impl Backend for Cuda<'_> {
    type Buf = DevBuf;
    type Mark = cudarc::driver::CudaEvent;
    type Puts = Self;

    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn ranks(&self) -> usize {
        self.comm.size()
    }

    fn device(&self) -> String {
        self.name.clone()
    }

    fn device_kind(&self) -> crate::spec::model::Device {
        crate::spec::model::Device::Cuda
    }

    fn upload(&self, data: Vec<u8>) -> Result<Self::Buf> {
        if data.is_empty() {
            return self.zeros(0);
        }
        Ok(DevBuf::owned(self.stream.clone_htod(&data)?, data.len()))
    }

    fn download<'a>(&self, buf: &'a Self::Buf) -> Result<Cow<'a, [u8]>> {
        if buf.len == 0 {
            return Ok(Cow::Owned(Vec::new()));
        }
        let mut out = host_buffer(buf.len);
        self.stream
            .memcpy_dtoh(&buf.data.slice(..buf.len), &mut out)?;
        // A copy into pageable memory returns once done; the wait is for clarity, not order.
        self.stream.synchronize()?;
        Ok(Cow::Owned(out))
    }

    fn zeros(&self, bytes: usize) -> Result<Self::Buf> {
        Ok(DevBuf::owned(
            self.stream.alloc_zeros::<u8>(bytes.max(1))?,
            bytes,
        ))
    }

    fn len(&self, buf: &Self::Buf) -> usize {
        buf.len
    }

    fn copy_runs(
        &self,
        src: &Self::Buf,
        dst: &mut Self::Buf,
        runs: &Runs,
        elem: usize,
    ) -> Result<()> {
        for (range, derived, route) in route::routes(runs, elem) {
            self.copy_routed(src, dst, &runs[range], &derived, route, elem)?;
        }
        Ok(())
    }

    fn fuses(&self, dtype: DType, _epilog: Epilog) -> bool {
        self.lt_fuses(dtype)
    }

    fn gemm(
        &self,
        dtype: DType,
        a: (&Self::Buf, View),
        b: (&Self::Buf, View),
        alpha: (f64, f64),
        out: Out<'_, Self::Buf>,
    ) -> Result<()> {
        self.gemm_on(dtype, a, b, alpha, out)
    }

    fn finish(
        &self,
        dtype: DType,
        acc: &Self::Buf,
        cols: usize,
        add: &Addends<'_, Self::Buf>,
        epilog: Option<Epilog>,
        out: &mut Self::Buf,
        pre: Option<&mut Self::Buf>,
    ) -> Result<()> {
        let compute = crate::ops::matmul::local::compute_dtype(dtype);
        self.finish_on(dtype, compute, acc, cols, add, epilog, out, pre)
    }

    fn fft(
        &self,
        precision: DType,
        phase: &Phase,
        input: (&Self::Buf, usize),
        output: (&mut Self::Buf, usize),
    ) -> Result<()> {
        probe::require(&[probe::Lib::Cufft])?;
        self.fft_phase(precision, phase, input, output)
    }

    fn all_to_all_v(
        &self,
        send: &Self::Buf,
        to: &Parts,
        recv: &mut Self::Buf,
        from: &Parts,
        elem: usize,
    ) -> Result<()> {
        let own = (
            to.displs[0] * elem,
            from.displs[0] * elem,
            to.counts[0] * elem,
        );
        if self.alone(send, recv, own)? {
            return Ok(());
        }
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
                        self.nccl()?,
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
                        self.nccl()?,
                        stream,
                    )
                    .map_err(nccl_err)?;
                }
            }
        }
        nccl::group_end().map_err(nccl_err)?;
        Ok(())
    }

    fn window(&self, bytes: usize) -> Result<Option<Self::Buf>> {
        let Some(comm) = self.nccl.filter(|_| window::supported()) else {
            return Ok(None);
        };
        let w = Arc::new(window::Window::new(comm, bytes, self.stream.context())?);
        let mut buf = self.window_buf(&w, 0, bytes);
        self.stream.memset_zeros(&mut buf.data.slice_mut(..))?;
        Ok(Some(buf))
    }

    fn window_part(&self, win: &Self::Buf, offset: usize, bytes: usize) -> Result<Self::Buf> {
        let Some(w) = &win.window else {
            bail!("a part of a buffer that is no window");
        };
        anyhow::ensure!(
            offset + bytes <= win.len,
            "{bytes} bytes at {offset} of a window of {}",
            win.len
        );
        Ok(self.window_buf(w, self.window_offset(win, w) + offset, bytes))
    }

    fn all_gather_window(&self, win: &mut Self::Buf, at: usize, count: usize) -> Result<()> {
        anyhow::ensure!(
            win.window.is_some(),
            "an all-gather within a buffer that is no window"
        );
        let end = at + count * self.ranks();
        anyhow::ensure!(
            end <= win.len,
            "an all-gather to byte {end} of a window of {}",
            win.len
        );
        let (w, _g) = win.data.device_ptr_mut(&self.stream);
        let (send, recv) = (w as usize + at + self.rank() * count, w as usize + at);
        // SAFETY: the window holds every rank's block (checked); NCCL queues on our stream.
        unsafe {
            nccl_sys::ncclAllGather(
                send as *const _,
                recv as *mut _,
                count,
                nccl_sys::ncclDataType_t::ncclUint8,
                self.nccl()?,
                self.raw_stream(),
            )
            .result()
            .map_err(nccl_err)?;
        }
        Ok(())
    }

    fn all_reduce(
        &self,
        send: &Self::Buf,
        recv: &mut Self::Buf,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        if self.alone(send, recv, (0, 0, send.len))? {
            return Ok(());
        }
        if complex_product(dtype, op) {
            let n = send.len / dtype.size() as usize;
            return self.complex_product(send, Some(recv), dtype, (0, n));
        }
        let (t, lanes) = nccl_type(dtype);
        let op = nccl_op(op);
        let count = send.len / dtype.size() as usize * lanes;
        let (s, _g1) = send.data.device_ptr(&self.stream);
        let (r, _g2) = recv.data.device_ptr_mut(&self.stream);
        // SAFETY: both buffers hold `count` elements.
        unsafe {
            nccl::all_reduce(
                s as _,
                r as _,
                count,
                t,
                op,
                self.nccl()?,
                self.raw_stream(),
            )
        }
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
        if self.alone(send, recv, (0, 0, send.len))? {
            return Ok(());
        }
        if complex_product(dtype, op) {
            let n = send.len / dtype.size() as usize;
            let here = (self.rank() == root).then_some(recv);
            return self.complex_product(send, here, dtype, (0, n));
        }
        let (t, lanes) = nccl_type(dtype);
        let op = nccl_op(op);
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
                self.nccl()?,
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
        let own = counts[0] * dtype.size() as usize;
        if self.alone(send, recv, (0, 0, own))? {
            return Ok(());
        }
        if complex_product(dtype, op) {
            let first = counts[..self.rank()].iter().sum();
            return self.complex_product(send, Some(recv), dtype, (first, counts[self.rank()]));
        }
        let (t, lanes) = nccl_type(dtype);
        let op = nccl_op(op);
        let (s, _g1) = send.data.device_ptr(&self.stream);
        let (r, _g2) = recv.data.device_ptr_mut(&self.stream);
        if counts.windows(2).any(|w| w[0] != w[1]) {
            // Unequal blocks: one reduction per block to its rank, grouped.
            let size = dtype.size();
            nccl::group_start().map_err(nccl_err)?;
            let mut at = 0;
            for (root, &n) in counts.iter().enumerate() {
                // SAFETY: block `root` lies inside send; recv holds this rank's block and is
                // written on the root only.
                unsafe {
                    nccl::reduce(
                        (s + at * size) as _,
                        r as _,
                        n * lanes,
                        t,
                        op,
                        root as i32,
                        self.nccl()?,
                        self.raw_stream(),
                    )
                }
                .map_err(nccl_err)?;
                at += n as u64;
            }
            nccl::group_end().map_err(nccl_err)?;
            return Ok(());
        }
        // SAFETY: send holds P blocks of counts[0] elements, recv one.
        unsafe {
            nccl::reduce_scatter(
                s as _,
                r as _,
                counts[0] * lanes,
                t,
                op,
                self.nccl()?,
                self.raw_stream(),
            )
        }
        .map_err(nccl_err)?;
        Ok(())
    }

    fn broadcast(&self, send: Option<&Self::Buf>, recv: &mut Self::Buf, root: usize) -> Result<()> {
        let len = recv.len;
        if self.nccl.is_none() {
            // Alone: the root's data is already here, or is copied from `send`.
            if let Some(send) = send {
                self.alone(send, recv, (0, 0, len))?;
            }
            return Ok(());
        }
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
                self.nccl()?,
                self.raw_stream(),
            )
        }
        .map_err(nccl_err)?;
        Ok(())
    }

    fn side(&self, comm: &mut dyn FnMut() -> Result<()>) -> Result<Self::Mark> {
        let queued = self.stream.record_event(None)?;
        self.side_stream.wait(&queued)?;
        self.on_side.set(true);
        let done = comm();
        self.on_side.set(false);
        done?;
        Ok(self.side_stream.record_event(None)?)
    }

    fn wait(&self, mark: &Self::Mark) -> Result<()> {
        Ok(self.stream.wait(mark)?)
    }

    fn puts(&self) -> Option<&Self> {
        let heap = self.nvshmem.as_ref().is_some_and(|nv| nv.peers_mapped());
        (heap || self.window_puts.is_some()).then_some(self)
    }

    fn barrier(&self) -> Result<()> {
        self.stream.synchronize()?;
        self.comm.barrier()
    }

    fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }

    fn align(&self) -> Result<()> {
        if self.nccl.is_none() {
            return Ok(());
        }
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
                self.nccl()?,
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

    fn generate(
        &self,
        generator: &crate::init::Generator,
        dtype: DType,
        map: &crate::init::IndexMap,
    ) -> Result<Self::Buf> {
        let (data, len) = fill::generate(&self.stream, generator, dtype, map)?;
        Ok(DevBuf::owned(data, len))
    }

    fn fingerprint(
        &self,
        dtype: DType,
        buf: Option<&DevBuf>,
        map: &crate::init::IndexMap,
        shift: u64,
    ) -> Result<u64> {
        self.check_fingerprint(dtype, buf, map, shift)
    }

    fn reduction_error(
        &self,
        op: ReduceOp,
        dtype: DType,
        ranks: u64,
        terms: &DevBuf,
        got: &DevBuf,
    ) -> Result<(bool, f64)> {
        self.check_reduction(op, dtype, ranks, terms, got)
    }

    fn gap(&self, dtype: DType, x: &DevBuf, y: &DevBuf, s: f64, lanes: &Lanes) -> Result<Gap> {
        self.check_gap(dtype, x, y, s, lanes)
    }

    fn energy(&self, dtype: DType, x: &DevBuf, lanes: &Lanes) -> Result<Sum> {
        self.check_energy(dtype, x, lanes)
    }

    fn dots(
        &self,
        dtype: DType,
        v: &DevBuf,
        m: &Matrix,
        along: Along,
        x: &[C],
        w: &[f64],
    ) -> Result<Vec<Dot>> {
        self.check_dots(dtype, v, m, along, x, w)
    }

    fn activation_matches(
        &self,
        epilog: Option<Epilog>,
        out: (DType, &DevBuf),
        pre: (DType, &DevBuf),
    ) -> Result<bool> {
        self.check_activation(epilog, out, pre)
    }
}

#[cfg(test)]
mod tests {
    use super::{Kernels, check, fill, gapped_rows, shifted_words, wide_words};
    use crate::backend::work::{Run, RunGrid};

    /// The grid of an R x C matrix from C to F order (one run per column).
    pub(super) fn transpose(rows: usize, cols: usize, start: usize) -> RunGrid {
        let runs: Vec<Run> = (0..cols)
            .map(|j| Run {
                src: start + j,
                dst: j * rows,
                count: rows,
                src_stride: cols,
                dst_stride: 1,
            })
            .collect();
        RunGrid::of(&runs).expect("a grid")
    }

    /// The grids of a C-order `shape`'s change to F order, as a redistribution lists its runs
    /// (nested in levels from four axes on).
    pub(super) fn reversal(shape: &[usize]) -> RunGrid {
        RunGrid::of(&crate::backend::work::reversal(shape)).expect("grids")
    }

    #[test]
    fn wide_words_need_aligned_lines_on_both_sides() {
        let aligned = (256, 512);
        // 16 x 16 elements: every line starts on a word, on both sides.
        for elem in [1, 2, 4] {
            assert!(wide_words(&transpose(16, 16, 0), elem, aligned), "{elem}");
        }
        // Columns of 6 elements: pairs of u32 are whole words, 6 u8 or u16 are not (words of 4).
        assert!(wide_words(&transpose(6, 16, 0), 4, aligned));
        assert!(!wide_words(&transpose(6, 16, 0), 2, aligned));
        assert!(!wide_words(&transpose(6, 16, 0), 1, aligned));
        assert!(wide_words(&transpose(8, 16, 0), 2, aligned));
        // A start or a buffer off a word, and wider elements, go the other way.
        assert!(!wide_words(&transpose(16, 16, 1), 1, aligned));
        assert!(!wide_words(&transpose(16, 16, 1), 4, aligned));
        assert!(!wide_words(&transpose(16, 16, 0), 1, (256, 514)));
        // u16 and u32 words are 8 bytes: a buffer 4 bytes off one takes one element a word.
        assert!(wide_words(&transpose(16, 16, 0), 1, (256, 516)));
        assert!(!wide_words(&transpose(16, 16, 0), 2, (256, 516)));
        assert!(!wide_words(&transpose(16, 16, 0), 4, (256, 516)));
        // Two 8-byte elements make a 16-byte word; 16-byte elements are words themselves.
        assert!(wide_words(&transpose(16, 16, 0), 8, aligned));
        assert!(!wide_words(&transpose(16, 16, 0), 8, (256, 520)));
        assert!(!wide_words(&transpose(16, 16, 0), 16, aligned));
    }

    #[test]
    fn nested_grids_move_in_words_where_their_folded_lines_are_words() {
        use super::nested_tiles;
        let aligned = (256, 512);
        let tiles = |shape: &[usize], elem| {
            let g = reversal(shape);
            let (folded, wide) = nested_tiles(&g, elem, aligned);
            (wide, folded.grid.rows, folded.grid.count)
        };
        // u8 [9, 40, 50, 30, 70] from F to C order: runs of 9 bytes, lines of 360 and 2100
        // folded, in tiles of 128.
        assert_eq!(tiles(&[70, 30, 50, 40, 9], 1), (true, 2100, 360));
        // f32 [7, 64, 64, 64, 5] to F order: 448 rows and lines of 320, in tiles of 64.
        assert_eq!(tiles(&[7, 64, 64, 64, 5], 4), (true, 448, 320));
        // Lines of 33 x 65 f16 are not words: tiles of 32 elements.
        assert_eq!(tiles(&[33, 65, 129, 17], 2), (false, 33, 2193));
        // A buffer off a word takes no words either.
        let g = reversal(&[70, 30, 50, 40, 9]);
        assert!(!nested_tiles(&g, 1, (257, 512)).1);
    }

    #[test]
    fn few_rows_with_gaps_between_grids_go_gapped() {
        // The unpack of f32 [7, 2049, 4097] slab 0 C -> slab 1 F on rank 1 of 2, as planned:
        // rows i (4, destination step 1), grids j (1024, 7 apart), runs along k.
        let unpack = RunGrid {
            start: (0, 0),
            batches: 1024,
            outer: (4097, 7),
            rows: 4,
            step: (4195328, 1),
            count: 4097,
            strides: (1, 7168),
            more: RunGrid::FLAT,
        };
        assert!(gapped_rows(&unpack));
        // No gaps (the folds take those), many rows, one grid, or runs not read along: not.
        assert!(!gapped_rows(&RunGrid {
            outer: (4097, 4),
            ..unpack
        }));
        assert!(!gapped_rows(&RunGrid {
            rows: 17,
            outer: (4097, 20),
            strides: (1, 20480),
            ..unpack
        }));
        assert!(!gapped_rows(&RunGrid {
            batches: 1,
            ..unpack
        }));
        assert!(!gapped_rows(&RunGrid {
            strides: (2, 7168),
            ..unpack
        }));
    }

    #[test]
    fn words_shift_along_lines_wherever_each_side_has_them() {
        // Odd lines and starts: lines on both sides, so every size but 16 bytes shifts.
        for elem in [1, 2, 4, 8] {
            assert!(shifted_words(&transpose(3001, 4097, 3), elem), "{elem}");
        }
        assert!(!shifted_words(&transpose(3001, 4097, 3), 16));
        // 8 x 8 tiles of 128 f16: too few to fill the GPU.
        assert!(!shifted_words(&transpose(998, 1002, 3), 2));
        // A side contiguous along neither axis (every other element of every other run) has
        // no lines to shift along.
        let runs: Vec<Run> = (0..8)
            .map(|j| Run {
                src: 2 * j * 9,
                dst: j,
                count: 9,
                src_stride: 2,
                dst_stride: 8,
            })
            .collect();
        let strided = RunGrid::of(&runs).expect("a grid");
        assert!(!shifted_words(&strided, 2));
    }

    /// Builds `harness` (a C++ file that `#include`s `kernels`, written beside it as `source`)
    /// with the host's C++ compiler (build-essential's, C++20) and runs it: its standard output,
    /// after asserting that it exited 0.
    pub(super) fn emulated(name: &str, harness: &str, (source, kernels): (&str, &str)) -> String {
        let dir = std::env::temp_dir().join(format!("distrun-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        std::fs::write(dir.join(source), kernels).expect("writing the kernels");
        let main = dir.join(format!("{name}.cpp"));
        std::fs::write(&main, harness).expect("writing the harness");
        let exe = dir.join(name);
        let built = std::process::Command::new("c++")
            .args([
                "-std=c++20",
                "-O1",
                "-pthread",
                "-Wno-unknown-pragmas",
                "-o",
            ])
            .arg(&exe)
            .arg(&main)
            .output()
            .expect("a C++ compiler (c++, from build-essential)");
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let ran = std::process::Command::new(&exe)
            .output()
            .expect("the harness runs");
        let _ = std::fs::remove_dir_all(&dir);
        let out = String::from_utf8_lossy(&ran.stdout).into_owned();
        assert!(ran.status.success(), "{out}");
        out
    }

    /// The copy kernels (tiles, rows, runs) move every element of every kind of grid or table
    /// to its place and nothing elsewhere, run on the CPU: the host's C++ compiler builds their
    /// source with the few CUDA names they use stood in for (emulate_tiles.cpp), every block's
    /// 256 threads meeting at each `__syncthreads`.
    #[test]
    fn copy_kernels_move_every_element_emulated_on_the_cpu() {
        let kernels = [super::TILE_KERNELS, super::KERNELS, super::NESTED_KERNELS].concat();
        let out = emulated(
            "emulate_tiles",
            include_str!("emulate_tiles.cpp"),
            ("kernels.cu", &kernels),
        );
        assert!(
            out.contains("1936 grid copies, 0 elements misplaced"),
            "{out}"
        );
    }

    /// Every NVRTC module of the backend compiles (for an H100's architecture). NVRTC needs no
    /// GPU, only its library: `scripts/test` brings it into .tools/nvrtc and runs this test
    /// with it; with DISTRUN_PTX_DIR set it writes each module's PTX there (for
    /// `ptxas -v`: registers, spills).
    #[test]
    #[ignore = "needs libnvrtc on the library path (.tools/nvrtc, as scripts/test runs it)"]
    fn kernels_compile() {
        let modules = [
            ("backend", Kernels::module()),
            ("check", check::CheckKernels::module()),
            ("nested", super::nested::NestedKernels::module()),
            ("fill", fill::module()),
        ];
        for (what, (source, opts)) in modules {
            let opts = cudarc::nvrtc::CompileOptions {
                arch: Some("compute_90"),
                ..opts
            };
            let ptx = match cudarc::nvrtc::compile_ptx_with_opts(source, opts) {
                Ok(ptx) => ptx,
                Err(e) => panic!("{what}: {e:?}"),
            };
            if let Some(dir) = std::env::var_os("DISTRUN_PTX_DIR") {
                let path = std::path::Path::new(&dir).join(format!("{what}.ptx"));
                std::fs::write(path, ptx.to_src()).expect("writing the PTX");
            }
        }
    }
}
