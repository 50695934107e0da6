// The backend's copy kernels (copy_grid_*, copy_narrow_*, copy_gapped_*, copy_ends_*,
// copy_nested_*, copy_rows, copy_runs) run on the CPU: a host C++ compiler builds the CUDA
// source (kernels.cu, written beside this file by the test that compiles it) with the few CUDA
// names they use stood in for, and every block runs as 32 x 8 threads (256 x 1 for copy_narrow,
// copy_ends, copy_rows and copy_runs) that meet at each __syncthreads (a std::barrier). Each
// kernel copies grids of every shape class (whole tiles, edges, lines shorter than a word,
// batches, offset starts) both ways across (the shifted kernels, lines starting anywhere in a
// word, alongside too), and every element must land where the grid says, with nothing written
// elsewhere (the kernels across in whole destination sectors, copy_grid_<bytes>t, on larger
// grids too, for their inner tiles, in strips, and three-axis reversals with their grids folded
// as the host folds them; copy_narrow packing and unpacking short axes (one, or two folded into
// one), its tile's rows shifted between banks or not; copy_gapped few rows with gaps between grids; copy_ends two short axes,
// whole grids a tile; copy_nested the grids of four- and five-axis layout changes, nested in
// levels; copy_rows and copy_runs runs contiguous on both sides from and to every place in a
// 16-byte word, and strided ones). Exit status 0 when all do.
#include <algorithm>
#include <array>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#define __device__
#define __forceinline__ inline
#define __global__
#define __restrict__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct uint4 { unsigned int x, y, z, w; };
struct float2 { float x, y; };
struct double2 { double x, y; };
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return {x, y, z, w}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
inline double2 make_double2(double a, double b) { return {a, b}; }
struct D3 { unsigned int x, y, z; };
thread_local D3 threadIdx, blockIdx;
D3 blockDim, gridDim;
std::barrier<>* block_barrier;
inline void __syncthreads() { block_barrier->arrive_and_wait(); }
// Byte n of the result is byte (s >> 4n) & 7 of y:x.
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    unsigned long long v = (unsigned long long)y << 32 | x;
    unsigned int r = 0;
    for (int n = 0; n < 4; n++) r |= (unsigned int)(v >> (8 * ((s >> (4 * n)) & 7)) & 0xff) << (8 * n);
    return r;
}

// A warp's shuffles: every thread of the block calls them together (the kernels do, outside any
// branch), each leaving its value in a slot the others read between two barriers.
static unsigned int shuffle_slots[256];
inline unsigned int shuffle(unsigned int v, int delta) {
    const unsigned int me = threadIdx.y * 32 + threadIdx.x, lane = threadIdx.x + delta;
    shuffle_slots[me] = v;
    __syncthreads();
    const unsigned int r = lane < 32 ? shuffle_slots[me + delta] : v;
    __syncthreads();
    return r;
}
inline unsigned int __shfl_down_sync(unsigned int, unsigned int v, unsigned int d) { return shuffle(v, (int)d); }
inline unsigned int __shfl_up_sync(unsigned int, unsigned int v, unsigned int d) { return shuffle(v, -(int)d); }
inline unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned int)((unsigned long long)a * b >> 32); }
// The low (right) or high (left) 32 bits of hi:lo shifted by `shift` mod 32.
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
    return (unsigned int)(((unsigned long long)hi << 32 | lo) >> (shift & 31));
}
inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
    return (unsigned int)((((unsigned long long)hi << 32 | lo) << (shift & 31)) >> 32);
}

#include "kernels.cu"

// Runs `kernel` over a grid of blocks of 32 x 8 threads (or 256 x 1), one block after another:
// 256 threads, started once and kept from launch to launch (starting them anew for every launch
// took half the harness's time), each taking its place in every block in turn.
static void launch(D3 grid, const std::function<void()>& kernel, bool flat = false) {
    static std::barrier<> start(257), done(257), block(256);
    static const std::function<void()>* running;
    static bool flat_now;
    static const bool started = [] {
        for (unsigned ty = 0; ty < 8; ty++)
            for (unsigned tx = 0; tx < 32; tx++)
                std::thread([tx, ty] {
                    for (;;) {
                        start.arrive_and_wait();
                        threadIdx = flat_now ? D3{tx + 32 * ty, 0, 0} : D3{tx, ty, 0};
                        const D3 g = gridDim;
                        for (unsigned z = 0; z < g.z; z++)
                            for (unsigned y = 0; y < g.y; y++)
                                for (unsigned x = 0; x < g.x; x++) {
                                    blockIdx = {x, y, z};
                                    (*running)();
                                    block.arrive_and_wait();
                                }
                        done.arrive_and_wait();
                    }
                }).detach();
        return true;
    }();
    (void)started;
    gridDim = grid;
    blockDim = flat ? D3{256, 1, 1} : D3{32, 8, 1};
    flat_now = flat;
    running = &kernel;
    block_barrier = &block;
    start.arrive_and_wait();
    done.arrive_and_wait();
}

template <typename E>
using Kernel = void (*)(const E*, E*, Grid, int, int, int, int);
template <typename E>
using AcrossKernel = void (*)(const E*, E*, Grid, Sweep, int);

// The host's divider for `per` (src/backend/cuda/across.rs): {multiplier, shift}.
static std::pair<unsigned long long, unsigned long long> divider(unsigned long long per) {
    const unsigned long long shift = 64 - __builtin_clzll(per - 1) - 1;
    return {((1ull << (32 + shift)) + per - 1) / per, shift};
}

// The host's sweep of a grid across (src/backend/cuda/across.rs): the source's `lines` of `len`
// elements in each of `batches` grids, folded as `fold` says (0 not, 1 the lines, 2 their
// elements) and in strips of `strip` tiles; the blocks it launches in `blocks`.
template <typename E>
static Sweep sweep(const Grid& g, int load_q, int fold, unsigned long long strip, D3& blocks) {
    const unsigned long long lines = load_q ? g.count : g.rows, len = load_q ? g.rows : g.count;
    const unsigned long long ps = load_q ? g.stride_s : g.step_s, pd = load_q ? g.step_d : g.stride_d;
    Sweep s{fold == 1 ? lines * g.batches : lines, fold == 2 ? len * g.batches : len, fold ? 1 : g.batches};
    const unsigned long long per = fold == 1 ? lines : len, outer = fold == 1 ? g.outer_s : g.outer_d;
    if (fold) {
        s.per = per;
        std::tie(s.mul, s.shift) = divider(per);
        s.jump = ((long long)outer - (long long)(per * (fold == 1 ? ps : pd))) * (long long)sizeof(E);
    }
    s.strip = strip;
    const unsigned long long side = 128 / sizeof(E), band = sizeof(E) == 1 ? 256 : 64;
    blocks = {(unsigned)((s.len + side - 1) / side), (unsigned)((s.lines + 32 / sizeof(E) + band - 1) / band),
              (unsigned)s.batches};
    return s;
}

// Where element i of run q of grid p lies past the grid's start (source, destination): a step
// along each axis, or a nested grid's levels and folds.
static std::pair<size_t, size_t> place(const Grid& g, unsigned long long p, unsigned long long q,
                                       unsigned long long i) {
    return {p * g.outer_s + q * g.step_s + i * g.stride_s, p * g.outer_d + q * g.step_d + i * g.stride_d};
}
static std::pair<size_t, size_t> place(const Nested& g, unsigned long long p, unsigned long long q,
                                       unsigned long long i) {
    return {g.at_s(p) + g.row_s(q) + g.col_s(i), g.at_d(p) + g.row_d(q) + g.col_d(i)};
}

// The elements of `batches` grids `g` misplaced in `dst` (copied from `src`), and those written
// outside them (`dst` was all 0xa5 bytes).
template <typename E, typename G>
static int misplaced(const G& g, const E* src, const E* dst, size_t n_d) {
    std::vector<char> in_grid(n_d, 0);
    int bad = 0;
    for (unsigned long long p = 0; p < g.batches; p++)
        for (unsigned long long q = 0; q < g.rows; q++)
            for (unsigned long long i = 0; i < g.count; i++) {
                size_t s = g.start_s + place(g, p, q, i).first;
                size_t d = g.start_d + place(g, p, q, i).second;
                in_grid[d] = 1;
                bad += std::memcmp(&dst[d], &src[s], sizeof(E)) != 0;
            }
    E untouched;
    std::memset(&untouched, 0xa5, sizeof(E));
    for (size_t d = 0; d < n_d; d++) bad += !in_grid[d] && std::memcmp(&dst[d], &untouched, sizeof(E)) != 0;
    return bad;
}

// Element k's value, distinct in every byte of every element that matters.
template <typename E>
static E value(size_t k) {
    E e;
    unsigned char* b = (unsigned char*)&e;
    for (size_t j = 0; j < sizeof(E); j++) b[j] = (unsigned char)((k * sizeof(E) + j) * 2654435761u >> 13);
    return e;
}

// Copies `batches` grids of rows x count elements, read along the runs where `load_q` (else
// along their elements) and written along the runs where `store_q`, with `kernel` in tiles of
// `side`; returns the misplaced elements. Aligned, lines are a word (4 elements) longer than
// their whole words and start on words, as the host takes wide ones; `shifted`, every line has
// an odd length (each side's its own) and the grids start at odd elements, so that lines start
// at every place in a word.
template <typename E, typename... A>
static int check(const char* name, void (*kernel)(const E*, E*, Grid, A...), unsigned side, int wide, int pairs, unsigned long long rows,
                 unsigned long long count, int load_q, int store_q, unsigned long long batches, bool shifted,
                 unsigned long long strip = 0) {
    Grid g{};
    g.batches = batches;
    g.rows = rows;
    g.count = count;
    g.start_s = shifted ? 3 : 4;
    g.start_d = shifted ? 5 : 8;
    auto pad = [shifted](unsigned long long n, unsigned long long extra) {
        return shifted ? (n | 1) + 2 * extra : (n + 3) / 4 * 4 + 4;
    };
    // One side's steps: along the runs (step 1, runs a padded line apart) or along a run's
    // elements (stride 1, elements a padded line apart), and from grid to grid.
    auto lay = [&](int q, unsigned long long extra, unsigned long long& step, unsigned long long& stride,
                   unsigned long long& outer) {
        if (q) step = 1, stride = pad(rows, extra), outer = stride * count;
        else step = pad(count, extra), stride = 1, outer = step * rows;
    };
    lay(load_q, 0, g.step_s, g.stride_s, g.outer_s);
    lay(store_q, 1, g.step_d, g.stride_d, g.outer_d);
    const size_t n_s = g.start_s + batches * g.outer_s, n_d = g.start_d + batches * g.outer_d + 4;
    E* src = (E*)std::aligned_alloc(64, (n_s * sizeof(E) + 63) / 64 * 64);
    E* dst = (E*)std::aligned_alloc(64, (n_d * sizeof(E) + 63) / 64 * 64);
    for (size_t k = 0; k < n_s; k++) src[k] = value<E>(k);
    std::memset(dst, 0xa5, n_d * sizeof(E));
    auto tiles = [side](unsigned long long m) { return (unsigned)((m + side - 1) / side); };
    // The kernels across in whole sectors take a block a tile, as the host sweeps the grids
    // (here launched apart).
    if constexpr (sizeof...(A) == 2) {
        D3 blocks;
        const Sweep sw = sweep<E>(g, load_q, 0, strip, blocks);
        launch(blocks, [&] { kernel(src, dst, g, sw, load_q); });
    } else {
        launch({tiles(rows), tiles(count), (unsigned)batches}, [&] { kernel(src, dst, g, load_q, store_q, wide, pairs); });
    }
    const int bad = misplaced(g, src, dst, n_d);
    if (bad)
        std::printf("%s (tiles of %u, wide %d, pairs %d): %llu x %llu, %llu grids, read along %s, written along %s: "
                    "%d misplaced\n",
                    name, side, wide, pairs, rows, count, batches, load_q ? "runs" : "elements",
                    store_q ? "runs" : "elements", bad);
    std::free(src);
    std::free(dst);
    return bad;
}

// Copies an [I, J, K] tensor from C to F order (from element `start` of one buffer to element
// start + 2 of another: lines anywhere in a word where it is odd) with an across kernel, its grids swept as `fold` says (the lines of the J grids
// following one another, or their elements) in strips of `strip` tiles; returns the misplaced
// elements. Read along the runs where `load_q`: runs along I (the destination's lines), else
// along K (the source's).
template <typename E>
static int check_reversal(const char* name, const AcrossKernel<E> (&kernels)[3], unsigned long long I,
                          unsigned long long J, unsigned long long K, int load_q, int fold, unsigned long long strip,
                          unsigned long long start = 3) {
    const AcrossKernel<E> kernel = kernels[fold];
    Grid g{};
    g.start_s = start;
    g.start_d = start + 2;
    g.batches = J, g.outer_s = K, g.outer_d = I;
    if (load_q) g.rows = K, g.step_s = 1, g.step_d = I * J, g.count = I, g.stride_s = J * K, g.stride_d = 1;
    else g.rows = I, g.step_s = J * K, g.step_d = 1, g.count = K, g.stride_s = 1, g.stride_d = I * J;
    const size_t n = I * J * K, n_s = g.start_s + n, n_d = g.start_d + n + 4;
    std::vector<E> src(n_s), dst(n_d);
    for (size_t k = 0; k < n_s; k++) src[k] = value<E>(k);
    std::memset(dst.data(), 0xa5, n_d * sizeof(E));
    D3 blocks;
    const Sweep sw = sweep<E>(g, load_q, fold, strip, blocks);
    launch(blocks, [&] { kernel(src.data(), dst.data(), g, sw, load_q); });
    const int bad = misplaced(g, src.data(), dst.data(), n_d);
    if (bad)
        std::printf("%s: [%llu, %llu, %llu] to F order, read along %s, fold %d, strips of %llu: %d misplaced\n", name, I,
                    J, K, load_q ? "runs" : "elements", fold, strip, bad);
    return bad;
}

// Copies a C-order `shape` of three axes or more to F order, or back (`to_c`), between elements
// `starts` of two buffers, as the host takes such a layout change: grids of the two contiguous
// axes (a run along the source's, the runs down the destination's), nested in levels of the axes
// between (the host's `RunGrid::wraps`: dividers and jumps), with copy_nested_<bytes> in tiles
// of `side` (`wide`: lines whole words on word starts); `fold`, a level taken into the rows and
// one into a run's elements as the host takes them. Blocks along z for half the grids, so that
// each takes several. Returns the misplaced elements, or -1 where the host would not take words.
template <typename E>
using NestedKernel = void (*)(const E*, E*, Nested, int, int, int, int);
template <typename E>
static int check_nested(const char* name, const std::array<NestedKernel<E>, 4>& kernels, unsigned side, int wide,
                        const std::vector<unsigned long long>& shape, bool to_c, bool fold,
                        std::pair<unsigned long long, unsigned long long> starts) {
    const size_t nd = shape.size();
    std::vector<unsigned long long> c(nd, 1), f(nd, 1);
    for (size_t a = 0; a < nd; a++)
        for (size_t b = 0; b < nd; b++) (b > a ? c : f)[a] *= b == a ? 1 : shape[b];
    const auto &ss = to_c ? f : c, &ds = to_c ? c : f;
    // The source's contiguous axis (a run's), the destination's (the runs'), the axes between
    // innermost first as the source's order takes them.
    const size_t ca = to_c ? 0 : nd - 1, ra = to_c ? nd - 1 : 0;
    std::vector<size_t> mid;
    for (size_t k = 1; k + 1 < nd; k++) mid.push_back(to_c ? k : nd - 1 - k);
    Nested g{};
    std::tie(g.start_s, g.start_d) = starts;
    g.count = shape[ca], g.stride_s = ss[ca], g.stride_d = ds[ca];
    g.rows = shape[ra], g.step_s = ss[ra], g.step_d = ds[ra];
    // Folded as the host folds (src/backend/cuda/nested.rs): the axis whose destination step is
    // the rows' count taken into the rows, then (where they are still fewer than `side`) the one
    // whose step is the rows' count so far; a run's elements likewise by the source's steps.
    // The kernel for the most levels taken on a side (0 to 3), as the host picks it.
    int most = 0;
    if (fold) {
        auto take = [&](unsigned long long& len, const std::vector<unsigned long long>& unit, unsigned int* mul,
                        unsigned int* shift, long long* js, long long* jd, unsigned long long by_s, unsigned long long by_d) {
            unsigned long long below = len;
            for (int t = 0; t < 3 && (t == 0 || 2 * len <= side); t++)
                for (size_t k = 0; k < mid.size(); k++)
                    if (unit[mid[k]] == len) {
                        const size_t m = mid[k];
                        const auto [dm, sh] = divider(len);
                        mul[t] = (unsigned)dm, shift[t] = (unsigned)sh;
                        js[t] = (long long)ss[m] - (long long)(below * by_s);
                        jd[t] = (long long)ds[m] - (long long)(below * by_d);
                        below = shape[m], by_s = ss[m], by_d = ds[m];
                        len *= shape[m];
                        mid.erase(mid.begin() + k);
                        most = std::max(most, t + 1);
                        break;
                    }
        };
        take(g.rows, ds, g.mul_r, g.shift_r, g.jr_s, g.jr_d, g.step_s, g.step_d);
        take(g.count, ss, g.mul_c, g.shift_c, g.jc_s, g.jc_d, g.stride_s, g.stride_d);
    }
    g.outer_s = mid.empty() ? 0 : ss[mid[0]], g.outer_d = mid.empty() ? 0 : ds[mid[0]];
    g.batches = mid.empty() ? 1 : shape[mid[0]];
    for (size_t k = 1; k < mid.size(); k++) {
        const size_t m = mid[k], below = mid[k - 1];
        const auto [mul, shift] = divider(g.batches);
        g.mul[k - 1] = (unsigned)mul, g.shift[k - 1] = (unsigned)shift;
        g.jump_s[k - 1] = (long long)ss[m] - (long long)(shape[below] * ss[below]);
        g.jump_d[k - 1] = (long long)ds[m] - (long long)(shape[below] * ds[below]);
        g.batches *= shape[m];
    }
    // In words only where the host takes them (src/backend/cuda/mod.rs, nested_tiles): every
    // start, step and jump whole words, but a side's unit step. Else nothing is copied (-1).
    if (wide) {
        const unsigned long long v = side / 32;
        bool words = true;
        auto in_words = [&](long long x, bool unit_ok) { words &= (unit_ok && x == 1) || x % (long long)v == 0; };
        for (auto x : {g.start_s, g.start_d, g.outer_s, g.outer_d}) in_words((long long)x, false);
        for (auto x : {g.step_s, g.step_d, g.stride_s, g.stride_d}) in_words((long long)x, true);
        for (int k = 0; k < 3; k++) in_words(g.jump_s[k], false), in_words(g.jump_d[k], false);
        for (int t = 0; t < 3; t++)
            for (auto x : {g.jr_s[t], g.jr_d[t], g.jc_s[t], g.jc_d[t]}) in_words(x, false);
        if (!words) return -1;
    }
    size_t n = 1;
    for (auto x : shape) n *= x;
    const size_t n_s = g.start_s + n, n_d = g.start_d + n + 4;
    E* src = (E*)std::aligned_alloc(64, (n_s * sizeof(E) + 63) / 64 * 64);
    E* dst = (E*)std::aligned_alloc(64, (n_d * sizeof(E) + 63) / 64 * 64);
    for (size_t k = 0; k < n_s; k++) src[k] = value<E>(k);
    std::memset(dst, 0xa5, n_d * sizeof(E));
    auto tiles = [side](unsigned long long m) { return (unsigned)((m + side - 1) / side); };
    launch({tiles(g.rows), tiles(g.count), (unsigned)(g.batches + 1) / 2},
           [&] { kernels[most](src, dst, g, 0, 1, wide, 0); });
    const int bad = misplaced(g, src, dst, n_d);
    if (bad) {
        std::printf("%s (tiles of %u, wide %d): [", name, side, wide);
        for (auto x : shape) std::printf(" %llu", x);
        std::printf(" ] to %s order%s: %d misplaced\n", to_c ? "C" : "F", fold ? ", folded" : "", bad);
    }
    std::free(src);
    std::free(dst);
    return bad;
}

// Moves `batches` grids of an r-element axis packed on one side (lines of r, `step` apart: one
// after another, or with gaps between) and n-element lines `pitch` apart on the other, packing
// (mode 1) or unpacking (0), with copy_narrow_<bytes>; or (mode 2) from lines of r `step` apart
// to lines of r `other` apart (both sides packed); `shifted`, the kernel is
// copy_narrow_shifted_<bytes>. With `groups` (modes 0 and 1, step r * groups, one batch), the
// grids are that many groups of r lines packed one after another, as the host folds an [N, a,
// b] from F to C order: the long lines of a group `pitch` apart, the groups `pitch2`. Returns
// the misplaced elements.
template <typename E>
static int check_narrow(void (*kernel)(const E*, E*, Narrow), unsigned long long r, unsigned long long n,
                        unsigned long long batches, int mode, unsigned long long step, unsigned long long other,
                        bool shifted = false, unsigned long long groups = 1) {
    const bool folded = groups > 1;
    const unsigned long long pitch2 = folded ? n + 3 : 0, pitch = mode == 2 ? other : folded ? groups * pitch2 : n + 3,
                             packed_size = step * n + 2, other_size = mode == 2 ? other * n + 5 : r * pitch;
    Grid g{};
    g.batches = folded ? groups : batches, g.rows = n, g.count = r;
    // Lines side: element (b, a) at b + a * pitch (repacking, at b * other + a); packed side:
    // at b * step + a. Folded, the groups' lines pitch2 apart, their packed lines r.
    auto lines = [&](unsigned long long& start, unsigned long long& outer, unsigned long long& along,
                     unsigned long long& stride) {
        start = 1, outer = folded ? pitch2 : other_size;
        along = mode == 2 ? other : 1, stride = mode == 2 ? 1 : pitch;
    };
    auto packed = [&](unsigned long long& start, unsigned long long& outer, unsigned long long& along,
                      unsigned long long& stride) {
        start = 3, outer = folded ? r : packed_size, along = step, stride = 1;
    };
    if (mode == 1) {
        lines(g.start_s, g.outer_s, g.step_s, g.stride_s);
        packed(g.start_d, g.outer_d, g.step_d, g.stride_d);
    } else {
        packed(g.start_s, g.outer_s, g.step_s, g.stride_s);
        lines(g.start_d, g.outer_d, g.step_d, g.stride_d);
    }
    const size_t n_s = g.start_s + batches * std::max(g.outer_s, packed_size) + other_size + 8,
                 n_d = g.start_d + batches * std::max(g.outer_d, packed_size) + other_size + 8;
    std::vector<E> src(n_s), dst(n_d);
    for (size_t k = 0; k < n_s; k++) src[k] = value<E>(k);
    std::memset(dst.data(), 0xa5, n_d * sizeof(E));
    // The host's dividers and stretch (src/backend/cuda/narrow.rs).
    const unsigned long long lines_all = r * groups, word = 16 / sizeof(E),
                             most = 16 * (2048 / sizeof(E) + word) / lines_all - word;
    const unsigned long long log_c = std::min(63 - __builtin_clzll(most), 63 - __builtin_clzll(2048 / sizeof(E)));
    const auto [mul, shift] = divider(step);
    const auto [mul_o, shift_o] = mode == 2 ? divider(other) : std::pair{0ull, 0ull};
    const auto [mul_f, shift_f] = divider(r);
    const auto u = [](unsigned long long v) { return (unsigned int)v; };
    Narrow a{3, 1, folded ? 0 : packed_size, folded ? 0 : other_size, batches, n, pitch, pitch2, u(lines_all), u(step),
             u(r), u(mul), u(shift), u(log_c), u(mode), u(mul_o), u(shift_o), u(mul_f), u(shift_f)};
    const unsigned long long stretch = 1ull << log_c;
    launch({(unsigned)((n + stretch - 1) / stretch), (unsigned)batches, 1}, [&] { kernel(src.data(), dst.data(), a); },
           true);
    const int bad = misplaced(g, src.data(), dst.data(), n_d);
    if (bad)
        std::printf("copy_narrow_%s%zu: r %llu x %llu (step %llu, other %llu), n %llu, %llu grids, mode %d: %d misplaced\n",
                    shifted ? "shifted_" : "", sizeof(E), r, groups, step, other, n, batches, mode, bad);
    return bad;
}

// check_narrow with copy_narrow_<bytes> for each element size and copy_narrow_shifted_<bytes>
// for 1 and 2 bytes: the misplaced elements.
static int check_narrow_all(unsigned long long r, unsigned long long n, unsigned long long batches, int mode,
                            unsigned long long step, unsigned long long other = 0) {
    return check_narrow(copy_narrow_1, r, n, batches, mode, step, other) +
           check_narrow(copy_narrow_2, r, n, batches, mode, step, other) +
           check_narrow(copy_narrow_4, r, n, batches, mode, step, other) +
           check_narrow(copy_narrow_8, r, n, batches, mode, step, other) +
           check_narrow(copy_narrow_16, r, n, batches, mode, step, other) +
           check_narrow(copy_narrow_shifted_1, r, n, batches, mode, step, other, true) +
           check_narrow(copy_narrow_shifted_2, r, n, batches, mode, step, other, true);
}

// The same for `groups` groups of r lines folded into one short axis, packing or unpacking,
// with copy_narrow_folded_<bytes> and copy_narrow_folded_shifted_<bytes>.
static int check_narrow_folded(unsigned long long r, unsigned long long groups, unsigned long long n, int mode) {
    const unsigned long long q = r * groups;
    return check_narrow(copy_narrow_folded_1, r, n, 1, mode, q, 0, false, groups) +
           check_narrow(copy_narrow_folded_2, r, n, 1, mode, q, 0, false, groups) +
           check_narrow(copy_narrow_folded_4, r, n, 1, mode, q, 0, false, groups) +
           check_narrow(copy_narrow_folded_8, r, n, 1, mode, q, 0, false, groups) +
           check_narrow(copy_narrow_folded_16, r, n, 1, mode, q, 0, false, groups) +
           check_narrow(copy_narrow_folded_shifted_1, r, n, 1, mode, q, 0, true, groups) +
           check_narrow(copy_narrow_folded_shifted_2, r, n, 1, mode, q, 0, true, groups);
}

// Copies `batches` grids of `rows` short destination lines (step 1), `gap` elements between one
// grid's and the next's, each row a run of `count` elements read along the source (stride 1),
// with copy_gapped_<bytes>, launched as the host does (a block per 32 of a run's elements and
// 64 folded rows; `fewer` launches fewer along each axis, so that blocks loop). Returns the
// misplaced elements.
template <typename E>
static int check_gapped(void (*kernel)(const E*, E*, Grid), unsigned long long rows, unsigned long long batches,
                        unsigned long long gap, unsigned long long count, bool fewer) {
    Grid g{};
    g.batches = batches, g.rows = rows, g.count = count;
    g.start_s = 3, g.start_d = 1;
    g.step_s = count + 5, g.outer_s = rows * g.step_s + 2, g.stride_s = 1;
    g.step_d = 1, g.outer_d = rows + gap, g.stride_d = batches * g.outer_d + 1;
    const size_t n_s = g.start_s + batches * g.outer_s, n_d = g.start_d + count * g.stride_d + 4;
    std::vector<E> src(n_s), dst(n_d);
    for (size_t k = 0; k < n_s; k++) src[k] = value<E>(k);
    std::memset(dst.data(), 0xa5, n_d * sizeof(E));
    const unsigned x = (unsigned)((count + 31) / 32), y = (unsigned)((rows * batches + 63) / 64);
    launch({fewer ? (x + 1) / 2 : x, fewer ? (y + 1) / 2 : y, 1}, [&] { kernel(src.data(), dst.data(), g); });
    const int bad = misplaced(g, src.data(), dst.data(), n_d);
    if (bad)
        std::printf("copy_gapped_%zu: %llu rows, %llu grids, gaps of %llu, runs of %llu%s: %d misplaced\n", sizeof(E),
                    rows, batches, gap, count, fewer ? ", blocks looping" : "", bad);
    return bad;
}

// Copies m grids of two short axes with copy_ends_<bytes> (the host's `Ends`): x (nx elements)
// along the source, y (ny) along the destination, m continuing x on the source and y on the
// destination, y's source lines and x's destination lines with gaps between them, starts off
// words; `per` steps of m a tile (its last one cut short where per does not divide m) in
// `blocks` blocks (fewer than the tiles: blocks loop). Returns the misplaced elements.
template <typename E>
static int check_ends(void (*kernel)(const E*, E*, Ends), unsigned nx, unsigned ny, unsigned long long m,
                      unsigned per, unsigned blocks) {
    Grid g{};
    g.batches = m, g.outer_s = nx, g.outer_d = ny;
    g.rows = ny, g.step_s = m * nx + 3, g.step_d = 1;
    g.count = nx, g.stride_s = 1, g.stride_d = m * ny + 2;
    g.start_s = 5, g.start_d = 3;
    Ends a{g.start_s, g.start_d, m, g.step_s, g.stride_d, nx, ny, per, (per * nx) | 1, {}, {}};
    const unsigned long long by[3] = {per * nx, per * ny, ny};
    for (int k = 0; k < 3; k++) {
        const auto [mul, shift] = divider(by[k]);
        a.mul[k] = (unsigned)mul, a.shift[k] = (unsigned)shift;
    }
    const size_t n_s = g.start_s + ny * g.step_s, n_d = g.start_d + nx * g.stride_d + 4;
    std::vector<E> src(n_s), dst(n_d);
    for (size_t k = 0; k < n_s; k++) src[k] = value<E>(k);
    std::memset(dst.data(), 0xa5, n_d * sizeof(E));
    launch({blocks, 1, 1}, [&] { kernel(src.data(), dst.data(), a); }, true);
    const int bad = misplaced(g, src.data(), dst.data(), n_d);
    if (bad)
        std::printf("copy_ends_%zu: x %u, y %u, m %llu, %u a tile, %u blocks: %d misplaced\n", sizeof(E), nx, ny, m,
                    per, blocks, bad);
    return bad;
}

// Copies `batches` grids of `rows` runs of `count` elements contiguous on both sides with
// copy_rows, groups of 2^lanes_log threads a run in `blocks` blocks along x (fewer than the runs
// need: groups take several); runs `count + 5` and `count + 3` elements apart start at every
// place in a 16-byte word on each side. Returns the misplaced elements.
template <typename E>
static int check_rows(unsigned long long count, unsigned long long rows, unsigned long long batches, int lanes_log,
                      unsigned blocks) {
    Grid g{};
    g.batches = batches, g.rows = rows, g.count = count, g.stride_s = 1, g.stride_d = 1;
    g.start_s = 3, g.start_d = 1, g.step_s = count + 5, g.step_d = count + 3;
    g.outer_s = g.step_s * rows + 7, g.outer_d = g.step_d * rows + 2;
    const size_t n_s = g.start_s + batches * g.outer_s, n_d = g.start_d + batches * g.outer_d + 4;
    E* src = (E*)std::aligned_alloc(64, (n_s * sizeof(E) + 63) / 64 * 64);
    E* dst = (E*)std::aligned_alloc(64, (n_d * sizeof(E) + 63) / 64 * 64);
    for (size_t k = 0; k < n_s; k++) src[k] = value<E>(k);
    std::memset(dst, 0xa5, n_d * sizeof(E));
    launch({blocks, (unsigned)batches, 1}, [&] {
        copy_rows((const unsigned char*)src, (unsigned char*)dst, g, sizeof(E), lanes_log);
    }, true);
    const int bad = misplaced(g, src, dst, n_d);
    if (bad)
        std::printf("copy_rows (%zu-byte elements, %d lanes, %u blocks): %llu runs of %llu, %llu grids: %d misplaced\n",
                    sizeof(E), 1 << lanes_log, blocks, rows, count, batches, bad);
    std::free(src);
    std::free(dst);
    return bad;
}

// Copies a table of runs with copy_runs (groups of 2^lanes_log threads a run, chunks of 64 KiB
// across `chunks` blocks along y): contiguous runs of 0 to 70000 bytes from and to every place
// in a 16-byte word, and strided ones; returns the bytes that differ from a copy made here.
static int check_runs(unsigned long long elem, int lanes_log, unsigned chunks) {
    std::vector<unsigned long long> table;
    unsigned long long s = 1, d = 6;
    const unsigned long long counts[] = {0, 1, 3, 17, 300, 70000 / elem, 5, 1000};
    for (int i = 0; i < 24; i++) {
        const unsigned long long count = counts[i % 8], ss = i % 3 == 2 ? 3 : 1, ds = i % 4 == 3 ? 2 : 1;
        table.insert(table.end(), {s, d, count, ss, ds});
        s += count * ss + i % 5, d += count * ds + 1 + i % 7;
    }
    const size_t n_s = s * elem + 64, n_d = d * elem + 64, n_runs = table.size() / 5;
    std::vector<unsigned char> src(n_s), dst(n_d, 0xa5), want(n_d, 0xa5);
    for (size_t k = 0; k < n_s; k++) src[k] = (unsigned char)(k * 2654435761u >> 13);
    for (size_t r = 0; r < n_runs; r++) {
        const unsigned long long* q = &table[5 * r];
        for (unsigned long long i = 0; i < q[2]; i++)
            std::memcpy(&want[(q[1] + i * q[4]) * elem], &src[(q[0] + i * q[3]) * elem], elem);
    }
    // 16-byte aligned buffers, as the device's are.
    unsigned char* a = (unsigned char*)std::aligned_alloc(64, (n_s + 63) / 64 * 64);
    unsigned char* b = (unsigned char*)std::aligned_alloc(64, (n_d + 63) / 64 * 64);
    std::memcpy(a, src.data(), n_s);
    std::memcpy(b, dst.data(), n_d);
    const unsigned blocks = (unsigned)std::max<size_t>(1, (n_runs << lanes_log) / 256 / 2);
    launch({blocks, chunks, 1}, [&] { copy_runs(a, b, table.data(), n_runs, elem, lanes_log); }, true);
    int bad = 0;
    for (size_t k = 0; k < n_d; k++) bad += b[k] != want[k];
    if (bad)
        std::printf("copy_runs (%llu-byte elements, %d lanes, %u chunks): %d bytes wrong\n", elem, 1 << lanes_log,
                    chunks, bad);
    std::free(a);
    std::free(b);
    return bad;
}

int main() {
    // Whole tiles of every kernel's side, edges, a thin grid, and lines shorter than a word.
    const unsigned long long shapes[][2] = {{128, 128}, {256, 384}, {300, 260}, {132, 8}, {4, 4}, {1, 9}};
    int bad = 0, runs = 0;
    for (auto& shape : shapes)
        for (int load_q = 0; load_q < 2; load_q++)
            for (unsigned long long batches : {1ull, 2ull}) {
                auto [rows, count] = std::pair{shape[0], shape[1]};
                const int store_q = !load_q;
                auto aligned = [&](const char* name, auto kernel, unsigned side, int wide, int pairs) {
                    bad += check(name, kernel, side, wide, pairs, rows, count, load_q, store_q, batches, false);
                    runs++;
                };
                aligned("copy_grid_1", copy_grid_1, 32, 0, 0);
                aligned("copy_grid_1", copy_grid_1, 64, 0, 1);
                aligned("copy_grid_1w", copy_grid_1w, 128, 1, 0);
                aligned("copy_grid_2", copy_grid_2, 32, 0, 0);
                aligned("copy_grid_2", copy_grid_2, 64, 0, 1);
                aligned("copy_grid_2", copy_grid_2, 128, 1, 0);
                aligned("copy_grid_4", copy_grid_4, 32, 0, 0);
                aligned("copy_grid_4", copy_grid_4, 64, 0, 1);
                aligned("copy_grid_4", copy_grid_4, 64, 1, 0);
                aligned("copy_grid_8", copy_grid_8, 32, 0, 0);
                aligned("copy_grid_8w", copy_grid_8w, 64, 1, 0);
                aligned("copy_grid_16", copy_grid_16, 32, 0, 0);
                // Words shifted along lines that start anywhere: across, and (read and written
                // along the runs, lines of two lengths) alongside.
                for (int store : {store_q, load_q}) {
                    if (store == load_q && !load_q) continue;
                    auto shifted = [&](const char* name, auto kernel, unsigned side) {
                        bad += check(name, kernel, side, 0, 0, rows, count, load_q, store, batches, true);
                        runs++;
                    };
                    shifted("copy_grid_1s", copy_grid_1s, 128);
                    shifted("copy_grid_2s", copy_grid_2s, 128);
                    shifted("copy_grid_4s", copy_grid_4s, 64);
                    shifted("copy_grid_8s", copy_grid_8s, 64);
                    if (store != load_q) {
                        bad += check("copy_grid_1t", copy_grid_1t, 128, 0, 0, rows, count, load_q, store, batches, true);
                        bad += check("copy_grid_2t", copy_grid_2t, 64, 0, 0, rows, count, load_q, store, batches, true);
                        runs += 2;
                    }
                }
            }
    // Across in whole destination sectors: grids with inner tiles (bands with lines before them
    // and after, a line's 128 bytes with more after) besides the edges.
    const unsigned long long large[][2] = {{600, 700}, {1100, 300}};
    for (auto& shape : large)
        for (int load_q = 0; load_q < 2; load_q++)
            for (unsigned long long batches : {1ull, 2ull}) {
                for (unsigned long long strip : {0ull, 2ull}) {
                    bad += check("copy_grid_1t", copy_grid_1t, 128, 0, 0, shape[0], shape[1], load_q, !load_q, batches, true, strip);
                    bad += check("copy_grid_2t", copy_grid_2t, 64, 0, 0, shape[0], shape[1], load_q, !load_q, batches, true, strip);
                    runs += 2;
                }
            }
    // Three-axis reversals, their grids swept apart and folded either way (few lines, short
    // lines, bands and tiles across grids), in strips too; 4-byte elements folded only.
    const AcrossKernel<unsigned char> bytes[3] = {copy_grid_1t, copy_grid_1tr, copy_grid_1tc};
    const AcrossKernel<unsigned short> halves[3] = {copy_grid_2t, copy_grid_2tr, copy_grid_2tc};
    const AcrossKernel<unsigned int> words[3] = {nullptr, copy_grid_4tr, copy_grid_4tc};
    const unsigned long long cubes[][3] = {{37, 5, 301}, {301, 7, 37}, {130, 5, 131}, {131, 4, 300}, {3, 40, 5}};
    for (auto& c : cubes)
        for (int load_q = 0; load_q < 2; load_q++)
            for (int fold = 0; fold < 3; fold++)
                for (unsigned long long strip : {0ull, 3ull}) {
                    bad += check_reversal<unsigned char>("copy_grid_1t", bytes, c[0], c[1], c[2], load_q, fold, strip);
                    bad += check_reversal<unsigned short>("copy_grid_2t", halves, c[0], c[1], c[2], load_q, fold, strip);
                    runs += 2;
                    if (fold) {
                        bad += check_reversal<unsigned int>("copy_grid_4t", words, c[0], c[1], c[2], load_q, fold, strip);
                        runs++;
                    }
                }
    // Folded, lines that start on words (their lengths whole words: the host's `wide`).
    for (int load_q = 0; load_q < 2; load_q++)
        for (int fold = 1; fold < 3; fold++) {
            bad += check_reversal<unsigned char>("copy_grid_1t", bytes, 8, 6, 132, load_q, fold, 2, 0);
            bad += check_reversal<unsigned short>("copy_grid_2t", halves, 8, 6, 132, load_q, fold, 2, 0);
            bad += check_reversal<unsigned int>("copy_grid_4t", words, 8, 6, 132, load_q, fold, 2, 0);
            runs += 3;
        }
    // Layout changes of four and five axes: grids nested in levels, both ways, element by
    // element and (where lines are whole words) in words, levels taken into the rows and a run's
    // elements or not.
    // Two or three levels taken into the rows ({2, 2, 3, ...}: rows of 2, 4 and 12; {2, 2, 2, 2,
    // 40}: rows of 2 to 16) or a run's elements ({40, 3, 2, 2, 2, 2} to F order: 2 to 16);
    // folded lines of whole words from levels that are not ({6, 2, 3, 2, 6}: lines of 12 of
    // runs of 6, in words of 4 bytes; {6, 22, 2, 22, 6}: 132 x 132, whole tiles of bytes in
    // 4 x 4 blocks and the rest). Three axes, a grid of one level, its short end axis folded
    // with the middle one (the host's `folded_tiles`: {2, 9, 70}, {70, 9, 3}, {5, 32, 40}).
    const std::vector<std::vector<unsigned long long>> deep = {
        {5, 3, 4, 70},   {8, 2, 3, 3, 12},  {131, 2, 3, 9}, {2, 2, 3, 5, 7}, {6, 2, 3, 2, 6},
        {4, 3, 5, 2, 2}, {6, 22, 2, 22, 6}, {2, 2, 2, 2, 40}, {40, 3, 2, 2, 2, 2}, {2, 9, 70},
        {70, 9, 3},      {5, 32, 40}};
    for (auto& shape : deep)
        for (bool to_c : {false, true}) {
            auto nested = [&](const char* name, const auto& kernels, unsigned side, int wide) {
                const auto starts = wide ? std::pair{4ull, 8ull} : std::pair{3ull, 5ull};
                for (bool fold : {false, true}) {
                    const int b = check_nested(name, kernels, side, wide, shape, to_c, fold, starts);
                    if (b >= 0) bad += b, runs++;
                }
            };
#define NESTED(B, E)                                                                                 \
    std::array<NestedKernel<E>, 4> {                                                                 \
        copy_nested_##B, copy_nested_folded_##B, copy_nested_folded2_##B, copy_nested_folded3_##B    \
    }
            nested("copy_nested_1", NESTED(1, unsigned char), 32, 0);
            nested("copy_nested_2", NESTED(2, unsigned short), 32, 0);
            nested("copy_nested_4", NESTED(4, unsigned int), 32, 0);
            nested("copy_nested_8", NESTED(8, unsigned long long), 32, 0);
            nested("copy_nested_16", NESTED(16, uint4), 32, 0);
            nested("copy_nested_1", NESTED(1, unsigned char), 128, 1);
            nested("copy_nested_2", NESTED(2, unsigned short), 128, 1);
            nested("copy_nested_4", NESTED(4, unsigned int), 64, 1);
            nested("copy_nested_8", NESTED(8, unsigned long long), 64, 1);
#undef NESTED
        }
    // A short axis packed on one side: 2 to 63 elements, stretches whole and cut short, batches;
    // lines and stretches on 16-byte words and off them.
    for (unsigned long long r : {2ull, 3ull, 7ull, 16ull, 33ull, 60ull, 63ull})
        for (unsigned long long n : {5ull, 2500ull})
            for (unsigned long long batches : {1ull, 2ull})
                for (int mode : {0, 1}) {
                    bad += check_narrow_all(r, n, batches, mode, r);
                    runs += 7;
                }
    // Packed lines with gaps between them (an exchange's slab of columns), gaps left as they were.
    for (unsigned long long r : {3ull, 7ull, 33ull})
        for (unsigned long long step : {r + 1, 2 * r})
            for (unsigned long long n : {5ull, 2500ull})
                for (int mode : {0, 1}) {
                    bad += check_narrow_all(r, n, 2, mode, step);
                    runs += 7;
                }
    // Two short axes folded into one: groups of r lines packed one after another, packing and
    // unpacking (r x groups up to 15, for the 16-byte kernel's tiles).
    for (auto [r, groups] : {std::pair{2ull, 2ull}, std::pair{3ull, 5ull}, std::pair{4ull, 3ull}, std::pair{5ull, 3ull}})
        for (unsigned long long n : {5ull, 2500ull})
            for (int mode : {0, 1}) {
                bad += check_narrow_folded(r, groups, n, mode);
                runs += 7;
            }
    // Both sides packed: rows of r from lines `step` apart to lines `other` apart (an exchange's
    // pack of a few columns), gaps on either side or both.
    for (unsigned long long r : {2ull, 3ull, 20ull})
        for (auto [step, other] : {std::pair{2 * r, r}, std::pair{r, r + 1}, std::pair{r + 1, 2 * r}})
            for (unsigned long long n : {5ull, 2500ull}) {
                bad += check_narrow_all(r, n, 2, 2, step, other);
                runs += 7;
            }
    // Runs contiguous on both sides, a group of threads a run: runs shorter than a word, a few
    // words and many, each side at every place in a word, groups taking several runs.
    for (int lanes_log : {4, 5, 6}) {
        for (unsigned long long count : {1ull, 5ull, 16ull, 31ull, 300ull, 1500ull})
            bad += check_rows<unsigned char>(count, 40, 2, lanes_log, 2);
        for (unsigned long long count : {3ull, 701ull}) bad += check_rows<unsigned short>(count, 24, 1, lanes_log, 1);
        for (unsigned long long count : {7ull, 333ull}) bad += check_rows<unsigned int>(count, 20, 2, lanes_log, 3);
        bad += check_rows<unsigned long long>(150, 9, 1, lanes_log, 1);
        bad += check_rows<uint4>(40, 9, 2, lanes_log, 4);
        runs += 10;
    }
    // Few rows with gaps between grids: folded lines whole and cut at a tile's edge, runs
    // shorter than a tile and longer, every element size; blocks looping over tiles.
    for (auto [rows, batches, gap] : {std::tuple{4ull, 40ull, 3ull}, std::tuple{3ull, 23ull, 4ull}, std::tuple{1ull, 70ull, 1ull}})
        for (unsigned long long count : {5ull, 70ull}) {
            const bool fewer = rows == 3;
            bad += check_gapped(copy_gapped_1, rows, batches, gap, count, fewer) +
                   check_gapped(copy_gapped_2, rows, batches, gap, count, fewer) +
                   check_gapped(copy_gapped_4, rows, batches, gap, count, fewer) +
                   check_gapped(copy_gapped_8, rows, batches, gap, count, fewer) +
                   check_gapped(copy_gapped_16, rows, batches, gap, count, fewer);
            runs += 5;
        }
    // Two short axes, whole grids a tile: each way round, the shortest, a tile's last grids cut
    // short, a grid a tile, blocks looping.
    for (auto [nx, ny] : {std::pair{16u, 3u}, std::pair{3u, 16u}, std::pair{2u, 2u}, std::pair{31u, 5u}})
        for (auto [m, per] : {std::pair{130ull, 7u}, std::pair{5ull, 1u}, std::pair{64ull, 16u}}) {
            const unsigned blocks = (unsigned)std::max(1ull, (m + per - 1) / per / 3);
            bad += check_ends(copy_ends_1, nx, ny, m, per, blocks) + check_ends(copy_ends_2, nx, ny, m, per, blocks) +
                   check_ends(copy_ends_4, nx, ny, m, per, blocks) + check_ends(copy_ends_8, nx, ny, m, per, blocks) +
                   check_ends(copy_ends_16, nx, ny, m, per, blocks);
            runs += 5;
        }
    // A table of runs, contiguous and strided, a warp or a block a run, in one or two chunks.
    for (unsigned long long elem : {1ull, 2ull, 4ull, 8ull, 16ull})
        for (auto [lanes_log, chunks] : {std::pair{5, 1u}, std::pair{8, 2u}}) {
            bad += check_runs(elem, lanes_log, chunks);
            runs++;
        }
    std::printf("%d grid copies, %d elements misplaced\n", runs, bad);
    return bad != 0;
}
